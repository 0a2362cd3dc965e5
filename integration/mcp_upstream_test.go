package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/mcpgate/mcptest"
	"github.com/toolgate/toolgate/tool"
)

// The test binary doubles as a stdio MCP server: toolgate dev starts it
// (with mcptest.EnvStdio set) for the "local" upstream. init runs before
// TestMain, so the child serves MCP and never builds or tests anything.
func init() { mcptest.ServeStdioIfAsked() }

// newDevWithMCP starts toolgate dev with an MCP servers file that names a
// stdio upstream (this test binary) and an HTTP one (served here), in the
// format of Claude Code's .mcp.json, with ${VAR}s from the environment;
// flags are more of dev's.
func newDevWithMCP(t *testing.T, flags ...string) *devEnv {
	self, err := os.Executable()
	require.NoError(t, err)
	srv := mcptest.NewServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") != "k1" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(web.Close)

	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"local": map[string]any{"command": self, "env": map[string]string{mcptest.EnvStdio: "${MCPTEST_STDIO_FLAG}"}},
		"web":   map[string]any{"type": "http", "url": web.URL, "headers": map[string]string{"X-Key": "${MCPTEST_KEY}"}},
	}})
	require.NoError(t, err)
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	file := filepath.Join(d.dataDir, ".mcp.json")
	require.NoError(t, os.WriteFile(file, cfg, 0o600))
	t.Setenv("MCPTEST_STDIO_FLAG", "1")
	t.Setenv("MCPTEST_KEY", "k1")
	d.dev = start(t, devReady, append([]string{"dev", "--data-dir", d.dataDir,
		"--temporal-port", strconv.Itoa(d.port), "--http", d.httpAddr, "--mcp", file}, flags...)...)
	return d
}

func TestMCPUpstreamToolsAreListedWithSchemaAndAnnotations(t *testing.T) {
	d := newDevWithMCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ds, err := d.client().Tools(ctx)
	require.NoError(t, err)
	byName := map[string]tool.Descriptor{}
	for _, desc := range ds {
		byName[desc.Name] = desc
	}
	for _, server := range []string{"local", "web"} {
		for _, name := range []string{mcptest.Lookup, mcptest.Fail, mcptest.Erase, mcptest.Crash} {
			assert.Contains(t, byName, server+"__"+name)
		}
	}
	assert.Contains(t, byName, "echo", "beside the built-in tools")
	lookup := byName["web__lookup"]
	assert.Equal(t, "Look a key up.\nAnswers with its value.", lookup.Description)
	assert.JSONEq(t, mcptest.LookupSchema, string(lookup.Schema))
	assert.Equal(t, true, lookup.Annotations["readOnlyHint"])
	assert.Equal(t, true, byName["local__erase"].Annotations["destructiveHint"])

	// The same through the API, in the shape a model takes.
	agent, _ := d.devTokens()
	status, body := getJSON(t, "http://"+d.httpAddr+"/v1/tools?format=anthropic", agent)
	require.Equal(t, http.StatusOK, status, "%v", body)
	var found map[string]any
	for _, item := range body["tools"].([]any) {
		if m := item.(map[string]any); m["name"] == "local__lookup" {
			found = m
		}
	}
	require.NotNil(t, found, "local__lookup is listed: %v", body)
	assert.Equal(t, []any{"key"}, found["input_schema"].(map[string]any)["required"])
}

func TestMCPUpstreamCalls(t *testing.T) {
	d := newDevWithMCP(t)
	lookup := func(t *testing.T, toolName string) mcptest.LookupResult {
		out := d.in(t).callJSON(0, "--session", "mcp1", toolName, `{"key":"k"}`)
		require.Equal(t, "ok", out["status"], "%v", out)
		raw, err := json.Marshal(out["output"])
		require.NoError(t, err)
		var res struct {
			Content           []map[string]any     `json:"content"`
			StructuredContent mcptest.LookupResult `json:"structuredContent"`
		}
		require.NoError(t, json.Unmarshal(raw, &res), "%s", raw)
		assert.Equal(t, []map[string]any{{"type": "text", "text": "value of k"}}, res.Content, "the upstream's result as it gave it")
		return res.StructuredContent
	}

	t.Run("a read-only tool runs without asking and returns the upstream result", func(t *testing.T) {
		assert.Equal(t, "value of k", lookup(t, "web__lookup").Value)
		assert.Equal(t, "value of k", lookup(t, "local__lookup").Value)
	})

	t.Run("a destructive tool asks a person", func(t *testing.T) {
		r := d.in(t).cli("call", "--session", "mcp1", "--wait", "1s", "--json", "web__erase", `{}`)
		assert.Equal(t, 5, r.code, "still waiting: %s %s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, `"pending"`)
	})

	t.Run("an upstream error result is the call's error", func(t *testing.T) {
		out := d.in(t).callJSON(4, "--session", "mcp1", "web__fail", `{"key":"gone"}`)
		assert.Equal(t, "error", out["status"])
		assert.Contains(t, out["reason"], "no such key: gone")
	})

	t.Run("arguments the upstream's schema refuses never reach it", func(t *testing.T) {
		r := d.in(t).cli("call", "--session", "mcp1", "local__lookup", `{"key":7}`)
		assert.Equal(t, 2, r.code, "%s %s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout+r.stderr, "/key")
	})

	t.Run("a stdio upstream that dies mid-call ends the call unknown and is restarted", func(t *testing.T) {
		before := lookup(t, "local__lookup").PID
		out := d.in(t).callJSON(6, "--session", "mcp1", "local__crash", `{}`)
		assert.Equal(t, "unknown", out["status"])
		assert.Contains(t, out["reason"], `MCP server "local" went away while the call ran`)
		after := lookup(t, "local__lookup").PID
		assert.NotEqual(t, before, after, "the next call ran on a restarted server")
	})

	t.Run("a worker refuses an MCP servers file with a mistake, naming it", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.json")
		require.NoError(t, os.WriteFile(bad, []byte(`{"mcpServers":{"gh":{"type":"http","url":"https://x/mcp","headers":{"Authorization":"Bearer ${MCPTEST_UNSET_TOKEN}"}}}}`), 0o600))
		r := d.in(t).cli("worker", "--mcp", bad, "--metrics", "", "--workspace", t.TempDir(), "--doors", d.doorsFile())
		assert.Equal(t, 2, r.code, "%s %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, `server "gh": headers.Authorization: ${MCPTEST_UNSET_TOKEN} is not set in the environment`)
	})

	t.Run("the worker stops cleanly, its upstreams with it", func(t *testing.T) {
		d.dev.stop()
	})
}
