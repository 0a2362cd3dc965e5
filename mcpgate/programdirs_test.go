package mcpgate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// file makes path (and its directories) under root, executable.
func file(t *testing.T, root, path string) string {
	t.Helper()
	f := filepath.Join(root, path)
	require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o755))
	require.NoError(t, os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755))
	return f
}

func TestProgramDirIsThePackageOfTheProgramFile(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	home := filepath.Join(root, "home", "u")
	file(t, root, "srv/tool/package.json")
	file(t, root, "srv/gotool/go.mod")
	for _, c := range []struct{ file, want string }{
		{"npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "npm/node_modules"},
		{"npm/node_modules/a/node_modules/b/index.js", "npm/node_modules"},
		{"srv/tool/dist/index.js", "srv/tool"},
		{"srv/gotool/cmd/server/server", "srv/gotool"},
		{"bin/server", "bin"},
		{"home/u/go/bin/server", "home/u/go/bin"},
	} {
		got, err := programDir(file(t, root, c.file), home)
		require.NoError(t, err, c.file)
		assert.Equal(t, filepath.Join(root, c.want), got, c.file)
	}

	file(t, home, "package.json") // the search stops below the home
	got, err := programDir(file(t, home, "tools/server.js"), home)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(home, "tools"), got)

	_, err = programDir(file(t, home, "server"), home)
	assert.ErrorContains(t, err, "lies directly in "+home+", which no sandbox opens")
	_, err = programDir("/server", home)
	assert.ErrorContains(t, err, "lies directly in /")
}

func TestProgramDirsAreTheCommandsArgumentsAndModulePaths(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	bin := filepath.Dir(file(t, root, "bin/mcp-server"))
	script := file(t, root, "npm/node_modules/pkg/index.js")
	modules := filepath.Join(root, "modules")
	require.NoError(t, os.Mkdir(modules, 0o755))
	workspace := filepath.Join(root, "workspace")
	inWorkspace := file(t, root, "workspace/script.js")

	s := UpstreamServer{Command: "mcp-server", Args: []string{script, inWorkspace, "--flag", root, "/etc/hostname"},
		Env: map[string]string{"NODE_PATH": modules + ":relative"}, Roots: []string{workspace}}
	dirs, err := programDirs(s, []string{"PATH=/usr/bin:" + bin})
	require.NoError(t, err)
	assert.Equal(t, []string{bin, filepath.Join(root, "npm/node_modules"), modules}, dirs,
		"the command's directory, the script's package, NODE_PATH; not a file in a root, a directory argument or a system file")

	s = UpstreamServer{Command: "sh", Args: []string{"-c", "true"}}
	dirs, err = programDirs(s, []string{"PATH=/usr/bin:/bin"})
	require.NoError(t, err)
	assert.Empty(t, dirs, "a system program needs nothing more")

	s = UpstreamServer{Command: "no-such-mcp-server"}
	_, err = programDirs(s, []string{"PATH=/usr/bin"})
	assert.ErrorContains(t, err, `command "no-such-mcp-server": not found in the PATH of its environment`)
}

func TestTheSandboxKeyIsForStdioServers(t *testing.T) {
	cfg, err := ParseUpstreams([]byte(`{"mcpServers": {
		"fs": {"command": "node", "args": ["/opt/fs/index.js", "/srv/ws"],
		       "toolgate": {"sandbox": {"write": ["${WS}"], "read": ["/opt/cache/"], "network": false}}},
		"open": {"command": "srv", "toolgate": {"sandbox": {"network": true}}},
		"plain": {"command": "srv"}
	}}`), env(map[string]string{"WS": "/srv/ws"}))
	require.NoError(t, err)
	byName := map[string]UpstreamServer{}
	for _, s := range cfg.Servers {
		byName[s.Name] = s
	}
	assert.Equal(t, UpstreamSandbox{Write: []string{"/srv/ws"}, Read: []string{"/opt/cache"}, NoNetwork: true}, byName["fs"].Sandbox)
	assert.Equal(t, UpstreamSandbox{}, byName["open"].Sandbox)
	assert.Equal(t, UpstreamSandbox{}, byName["plain"].Sandbox, "the default: roots, system, program, TMPDIR, network")

	for servers, want := range map[string]string{
		`"x": {"command": "srv", "toolgate": {"sandbox": {"write": ["ws"]}}}`:                    `server "x": toolgate.sandbox.write[0]: "ws" must be an absolute directory`,
		`"x": {"command": "srv", "toolgate": {"sandbox": {"raed": ["/opt"]}}}`:                   `server "x": toolgate: must be an object, e.g. {"timeout": "10m"} (json: unknown field "raed")`,
		`"x": {"url": "https://h/mcp", "toolgate": {"sandbox": {"network": false}}}`:             `server "x": toolgate.sandbox: is for stdio servers`,
		`"x": {"command": "srv", "toolgate": {"sandbox": {"read": ["/opt/${NOPE}"]}}}`:           `server "x": toolgate.sandbox.read[0]: ${NOPE} is not set`,
		`"x": {"command": "srv", "toolgate": {"sandbox": {"network": "off"}}}`:                   `server "x": toolgate: must be an object`,
		`"x": {"command": "srv", "toolgate": {"roots": ["/srv/ws"], "sandbox": {"write": [1]}}}`: `server "x": toolgate: must be an object`,
	} {
		_, err := ParseUpstreams([]byte(`{"mcpServers":{`+servers+`}}`), env(nil))
		assert.ErrorContains(t, err, want, servers)
	}
}
