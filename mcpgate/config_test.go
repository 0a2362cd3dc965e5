package mcpgate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// A Claude Code .mcp.json, with the fields other clients add.
const claudeConfig = `{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "${HOME}/projects"],
      "env": {"DEBUG": "${DEBUG:-0}"}
    },
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/",
      "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
      "toolgate": {"timeout": "90s"}
    },
    "legacy.sse": {"type": "sse", "url": "http://127.0.0.1:8080/sse"},
    "old-one": {"command": "old-server", "disabled": true, "autoApprove": ["x"]},
    "explicit-stdio": {"type": "stdio", "command": "/usr/local/bin/server", "alwaysAllow": []}
  },
  "globalShortcut": "Ctrl+Space"
}`

func TestParseUpstreamsReadsAClaudeConfig(t *testing.T) {
	cfg, err := ParseUpstreams([]byte(claudeConfig), env(map[string]string{"HOME": "/home/ada", "GITHUB_TOKEN": "ghp_123"}))
	require.NoError(t, err)
	require.Len(t, cfg.Servers, 4, "the disabled server is left out")
	byName := map[string]UpstreamServer{}
	var names []string
	for _, s := range cfg.Servers {
		byName[s.Name] = s
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"explicit-stdio", "filesystem", "github", "legacy.sse"}, names, "sorted by name")

	fs := byName["filesystem"]
	assert.Equal(t, TypeStdio, fs.Type, "a command without a type is a stdio server")
	assert.Equal(t, "npx", fs.Command)
	assert.Equal(t, []string{"-y", "@modelcontextprotocol/server-filesystem", "/home/ada/projects"}, fs.Args)
	assert.Equal(t, map[string]string{"DEBUG": "0"}, fs.Env, "${VAR:-default} takes the default when VAR is unset")
	assert.Equal(t, DefaultUpstreamTimeout, fs.Timeout)

	gh := byName["github"]
	assert.Equal(t, TypeHTTP, gh.Type)
	assert.Equal(t, "https://api.githubcopilot.com/mcp/", gh.URL)
	assert.Equal(t, map[string]string{"Authorization": "Bearer ghp_123"}, gh.Headers)
	assert.Equal(t, 90*time.Second, gh.Timeout)

	assert.Equal(t, TypeSSE, byName["legacy.sse"].Type)
	assert.Equal(t, TypeStdio, byName["explicit-stdio"].Type)
}

func TestParseUpstreamsInfersHTTPFromAURL(t *testing.T) {
	cfg, err := ParseUpstreams([]byte(`{"mcpServers":{"web":{"url":"http://127.0.0.1:9000/mcp"}}}`), env(nil))
	require.NoError(t, err)
	assert.Equal(t, TypeHTTP, cfg.Servers[0].Type)
}

func TestParseUpstreamsExpandsFromTheEnvironmentVariablesInEveryField(t *testing.T) {
	cfg, err := ParseUpstreams([]byte(`{"mcpServers":{
	  "a": {"command": "${BIN}", "args": ["--dir=${DIR}", "${MISSING:-fallback}", "$PLAIN", "${EMPTY:-used}"], "env": {"TOKEN": "${TOKEN}"}},
	  "b": {"url": "https://${HOST}/mcp", "headers": {"X-Key": "${TOKEN}"}}}}`),
		env(map[string]string{"BIN": "/opt/srv", "DIR": "/data", "TOKEN": "s3cret", "HOST": "mcp.example.com", "EMPTY": ""}))
	require.NoError(t, err)
	a, b := cfg.Servers[0], cfg.Servers[1]
	assert.Equal(t, "/opt/srv", a.Command)
	assert.Equal(t, []string{"--dir=/data", "fallback", "$PLAIN", "used"}, a.Args, "only ${...} is expanded")
	assert.Equal(t, "s3cret", a.Env["TOKEN"])
	assert.Equal(t, "https://mcp.example.com/mcp", b.URL)
	assert.Equal(t, "s3cret", b.Headers["X-Key"])
}

func TestParseUpstreamsErrorsNameTheServerAndTheField(t *testing.T) {
	cases := []struct {
		name, servers, want string
	}{
		{"unset variable", `"gh": {"url": "https://x/mcp", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}}`,
			`server "gh": headers.Authorization: ${GH_TOKEN} is not set in the environment`},
		{"unset variable in args", `"fs": {"command": "srv", "args": ["${ROOT}"]}`,
			`server "fs": args[0]: ${ROOT} is not set in the environment`},
		{"neither command nor url", `"empty": {"env": {}}`,
			`server "empty": needs "command" (a stdio server) or "url" (an HTTP server)`},
		{"unknown type", `"x": {"type": "websocket", "url": "ws://x"}`,
			`server "x": type: "websocket" is not a server type; use "stdio", "http" or "sse"`},
		{"stdio without command", `"x": {"type": "stdio", "args": ["a"]}`,
			`server "x": command: is required for a stdio server`},
		{"http without url", `"x": {"type": "http"}`,
			`server "x": url: is required for an http server`},
		{"bad url", `"x": {"type": "http", "url": "ftp://host/mcp"}`,
			`server "x": url: must be an http:// or https:// URL`},
		{"url on stdio", `"x": {"command": "srv", "url": "http://h/mcp"}`,
			`server "x": url: is for HTTP servers; a stdio server takes command, args and env`},
		{"command on http", `"x": {"type": "http", "url": "http://h/mcp", "command": "srv"}`,
			`server "x": command: is for stdio servers; an http server takes url and headers`},
		{"args not strings", `"x": {"command": "srv", "args": ["a", 1]}`,
			`server "x": args: must be an array of strings`},
		{"env not strings", `"x": {"command": "srv", "env": {"N": 1}}`,
			`server "x": env: must be an object of strings`},
		{"bad timeout", `"x": {"command": "srv", "toolgate": {"timeout": "soon"}}`,
			`server "x": toolgate.timeout: "soon" is not a positive duration such as "90s" or "10m"`},
		{"unknown toolgate field", `"x": {"command": "srv", "toolgate": {"timout": "1m"}}`,
			`server "x": toolgate: must be an object, e.g. {"timeout": "10m"}`},
		{"double underscore", `"my__server": {"command": "srv"}`,
			`server "my__server": the name may not contain "__" or end with "_"`},
		{"trailing underscore", `"srv_": {"command": "srv"}`,
			`server "srv_": the name may not contain "__" or end with "_"`},
		{"bad characters", `"my server": {"command": "srv"}`,
			`server "my server": the name must be 1-64 letters, digits, _ - or ., starting with a letter or digit`},
		{"not an object", `"x": "srv"`, `server "x": must be an object`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseUpstreams([]byte(`{"mcpServers":{`+c.servers+`}}`), env(nil))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestParseUpstreamsReportsEveryProblemAtOnce(t *testing.T) {
	_, err := ParseUpstreams([]byte(`{"mcpServers":{
	  "a": {"type": "http"},
	  "b": {"command": "srv", "env": {"K": "${NOPE}"}},
	  "ok": {"command": "srv"}}}`), env(nil))
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	assert.Equal(t, []string{
		`server "a": url: is required for an http server`,
		`server "b": env.K: ${NOPE} is not set in the environment`,
	}, lines)
}

func TestParseUpstreamsRefusesAFileWithoutServers(t *testing.T) {
	for input, want := range map[string]string{
		`not json`:               "not a JSON object",
		`{"servers": {}}`:        `no "mcpServers" object`,
		`{"mcpServers": [1, 2]}`: `"mcpServers" must be an object`,
	} {
		_, err := ParseUpstreams([]byte(input), env(nil))
		require.Error(t, err, input)
		assert.Contains(t, err.Error(), want, input)
	}
}

func TestLoadUpstreamsNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".mcp.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"mcpServers":{"x":{"type":"http"}}}`), 0o600))
	_, err := LoadUpstreams(path, env(nil))
	require.Error(t, err)
	assert.Equal(t, "MCP servers file "+path+`: server "x": url: is required for an http server`, err.Error())

	_, err = LoadUpstreams(filepath.Join(t.TempDir(), "missing.json"), env(nil))
	assert.ErrorContains(t, err, "missing.json")
}

func TestRootsAreOfferedOnlyWhenAServerAsks(t *testing.T) {
	cfg, err := ParseUpstreams([]byte(`{"mcpServers": {
		"notes": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/u/notes"]},
		"work": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"], "toolgate": {"roots": ["${WS}", "/srv/data/"]}}
	}}`), env(map[string]string{"WS": "/home/u/repo"}))
	require.NoError(t, err)
	byName := map[string]UpstreamServer{}
	for _, s := range cfg.Servers {
		byName[s.Name] = s
	}
	assert.Empty(t, byName["notes"].Roots, "no roots: the server keeps its own directories (roots would replace them)")
	assert.Equal(t, []string{"/home/u/repo", "/srv/data"}, byName["work"].Roots)

	_, err = ParseUpstreams([]byte(`{"mcpServers": {"work": {"command": "x", "toolgate": {"roots": ["relative/dir"]}}}}`), env(nil))
	assert.ErrorContains(t, err, `toolgate.roots[0]: "relative/dir" must be an absolute directory`)
}
