package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/mcpgate/mcptest"
	"github.com/toolgate/toolgate/workflows"
)

// mcpStdio starts `toolgate mcp` as an MCP client does (a subprocess on
// stdio, here over Temporal) and returns the client's session.
func (d *devEnv) mcpStdio(args ...string) *mcp.ClientSession {
	d.t.Helper()
	cmd := exec.Command(binary, append([]string{"mcp"}, args...)...)
	cmd.Env = append(append(os.Environ(), d.operatorEnv()...), "TOOLGATE_API=", "TOOLGATE_TOKEN=")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration-agent", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(d.t, err, "toolgate mcp:\n%s", stderr)
	d.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpHTTP connects to the dev listener's /mcp with a bearer token.
func (d *devEnv) mcpHTTP(token, query string) (*mcp.ClientSession, error) {
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + d.httpAddr + "/mcp" + query, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport(token)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration-agent", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err == nil {
		d.t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func mcpCall(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	return res
}

func mcpText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// pendingCallID checks that res is the "still waiting" answer and returns
// the call ID it names.
func pendingCallID(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.False(t, res.IsError, "still waiting is not an error: %s", mcpText(res))
	id, _ := res.Meta[mcpgate.MetaCallID].(string)
	require.NotEmpty(t, id, "the result names the call: %s", mcpText(res))
	assert.Equal(t, string(workflows.StatusPending), res.Meta[mcpgate.MetaStatus])
	assert.Contains(t, mcpText(res), id)
	assert.Contains(t, mcpText(res), `toolgate_wait with {"call_id": "`+id+`"}`)
	return id
}

func TestMCPGatewayStdio(t *testing.T) {
	d := newDev(t)
	cs := d.mcpStdio("--wait", "2s", "--session", "mcp-stdio-test", "--requester", "claude-code")

	t.Run("tools/list", func(t *testing.T) {
		res, err := cs.ListTools(context.Background(), nil)
		require.NoError(t, err)
		tools := map[string]*mcp.Tool{}
		for _, tl := range res.Tools {
			tools[tl.Name] = tl
		}
		for _, name := range []string{"echo", "read_file", "write_file", mcpgate.WaitTool, mcpgate.StatusTool} {
			assert.Contains(t, tools, name)
		}
		wf := tools["write_file"]
		require.NotNil(t, wf)
		assert.NotEmpty(t, wf.Description)
		assert.Contains(t, mustMarshal(t, wf.InputSchema), `"path"`, "the tool's own schema")
	})

	t.Run("allowed call returns the output", func(t *testing.T) {
		res := mcpCall(t, cs, "echo", map[string]any{"hello": "world"})
		require.False(t, res.IsError, mcpText(res))
		assert.Contains(t, mcpText(res), `"hello"`)
		assert.Contains(t, mustMarshal(t, res.StructuredContent), `"world"`)
	})

	t.Run("ask, approve by CLI, toolgate_wait returns the result", func(t *testing.T) {
		id := pendingCallID(t, mcpCall(t, cs, "write_file", map[string]any{"path": "approved.txt", "content": "hi"}))
		c := d.in(t).client()
		st, err := c.Status(context.Background(), id)
		require.NoError(t, err)
		require.NotNil(t, st.State)
		assert.Equal(t, "mcp-stdio-test", st.State.Call.Session, "--session pins the session")
		assert.Equal(t, "claude-code", st.State.Call.Requester)

		r := d.in(t).cli("approve", id, "--by", "alice")
		require.Equal(t, 0, r.code, r.stderr)
		res := mcpCall(t, cs, mcpgate.WaitTool, map[string]any{"call_id": id})
		require.False(t, res.IsError, mcpText(res))
		assert.Contains(t, mcpText(res), "approved by alice")
		data, err := os.ReadFile(filepath.Join(d.workspace, "approved.txt"))
		require.NoError(t, err)
		assert.Equal(t, "hi", string(data))
	})

	t.Run("deny with reason is an error result with the reason", func(t *testing.T) {
		id := pendingCallID(t, mcpCall(t, cs, "write_file", map[string]any{"path": "denied.txt", "content": "no"}))
		r := d.in(t).cli("deny", id, "--by", "bob", "--reason", "not on a Friday")
		require.Equal(t, 0, r.code, r.stderr)
		res := mcpCall(t, cs, mcpgate.WaitTool, map[string]any{"call_id": id})
		assert.True(t, res.IsError)
		assert.Contains(t, mcpText(res), "not on a Friday")
		assert.NoFileExists(t, filepath.Join(d.workspace, "denied.txt"))
		// toolgate_status says the same, without waiting.
		res = mcpCall(t, cs, mcpgate.StatusTool, map[string]any{"call_id": id})
		assert.True(t, res.IsError)
		assert.Contains(t, mcpText(res), "not on a Friday")
	})

	t.Run("edited arguments are the ones that run", func(t *testing.T) {
		id := pendingCallID(t, mcpCall(t, cs, "write_file", map[string]any{"path": "draft.txt", "content": "draft"}))
		r := d.in(t).cli("approve", id, "--by", "alice", "--args", `{"path":"final.txt","content":"edited"}`)
		require.Equal(t, 0, r.code, r.stderr)
		res := mcpCall(t, cs, mcpgate.WaitTool, map[string]any{"call_id": id})
		require.False(t, res.IsError, mcpText(res))
		assert.Contains(t, mcpText(res), "final.txt", "the model is told the arguments changed")
		data, err := os.ReadFile(filepath.Join(d.workspace, "final.txt"))
		require.NoError(t, err)
		assert.Equal(t, "edited", string(data))
		assert.NoFileExists(t, filepath.Join(d.workspace, "draft.txt"))
	})

	t.Run("another requester's call is refused", func(t *testing.T) {
		other := d.in(t).mcpStdio("--wait", "1s", "--requester", "someone-else")
		id := pendingCallID(t, mcpCall(t, cs, "write_file", map[string]any{"path": "mine.txt", "content": "x"}))
		res := mcpCall(t, other, mcpgate.WaitTool, map[string]any{"call_id": id})
		assert.True(t, res.IsError)
		assert.Equal(t, "toolgate knows no call "+id+" of yours", mcpText(res))
	})
}

func TestMCPGatewayHTTP(t *testing.T) {
	d := newDev(t)
	agentToken, approverToken := d.devTokens()

	resp, err := http.Post("http://"+d.httpAddr+"/mcp", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no token")
	_, err = d.mcpHTTP(approverToken, "")
	require.Error(t, err, "an approver token is not an agent token")

	cs, err := d.mcpHTTP(agentToken, "?session=http-pinned")
	require.NoError(t, err)
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	names := []string{}
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	assert.Contains(t, names, "echo")
	assert.Contains(t, names, mcpgate.WaitTool)

	res := mcpCall(t, cs, "echo", map[string]any{"via": "http"})
	require.False(t, res.IsError, mcpText(res))
	id, _ := res.Meta[mcpgate.MetaCallID].(string)
	r, err := d.client().Wait(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, "dev-agent", r.Requester, "the token names the requester")
	assert.Equal(t, "http-pinned", r.Session)

	// A call that needs a person: the tools/call waits (up to 50s) and
	// returns the result once an approver decides.
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "via-http.txt", "content": "ok"}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	c := d.client()
	var pendingID string
	require.Eventually(t, func() bool {
		page, err := c.Pending(context.Background(), tgclient.ListFilter{Session: "http-pinned"}, tgclient.PageRequest{})
		if err != nil || len(page.Calls) == 0 {
			return false
		}
		pendingID = page.Calls[0].CallID
		return true
	}, 30*time.Second, 100*time.Millisecond)
	out := d.cli("approve", pendingID, "--by", "alice")
	require.Equal(t, 0, out.code, out.stderr)
	select {
	case res := <-done:
		require.False(t, res.IsError, mcpText(res))
		assert.Contains(t, mcpText(res), "approved by alice")
	case <-time.After(40 * time.Second):
		t.Fatal("the waiting tools/call did not return after the approval")
	}
	data, err := os.ReadFile(filepath.Join(d.workspace, "via-http.txt"))
	require.NoError(t, err)
	assert.Equal(t, "ok", string(data))

	t.Run("toolgate mcp over the HTTP API", func(t *testing.T) {
		api := d.in(t).mcpStdio("--wait", "1s", "--api", "http://"+d.httpAddr, "--token", agentToken)
		res := mcpCall(t, api, "echo", map[string]any{"via": "api"})
		require.False(t, res.IsError, mcpText(res))
		id := pendingCallID(t, mcpCall(t, api, "write_file", map[string]any{"path": "via-api.txt", "content": "api"}))
		st, err := d.in(t).client().Status(context.Background(), id)
		require.NoError(t, err)
		assert.Equal(t, "dev-agent", st.State.Call.Requester, "the token names the requester")
		out := d.in(t).cli("approve", id, "--by", "alice")
		require.Equal(t, 0, out.code, out.stderr)
		res = mcpCall(t, api, mcpgate.WaitTool, map[string]any{"call_id": id})
		require.False(t, res.IsError, mcpText(res))
		data, err := os.ReadFile(filepath.Join(d.workspace, "via-api.txt"))
		require.NoError(t, err)
		assert.Equal(t, "api", string(data))
		res = mcpCall(t, api, mcpgate.StatusTool, map[string]any{"call_id": "call-0000000000000000"})
		assert.True(t, res.IsError)
		assert.Equal(t, "toolgate knows no call call-0000000000000000 of yours", mcpText(res))
	})
}

// TestMCPGatewayKill9 kills toolgate while an MCP call waits for a person:
// after the restart the call is still there, is decided, and runs once.
func TestMCPGatewayKill9(t *testing.T) {
	d := newDev(t)
	cs := d.mcpStdio("--wait", "2s")
	id := pendingCallID(t, mcpCall(t, cs, "write_file", map[string]any{"path": "once.txt", "content": "x", "append": true}))

	d.dev.kill()
	d.startDev()
	d.waitPending(d.client(), id)
	r := d.cli("approve", id, "--by", "alice")
	require.Equal(t, 0, r.code, r.stderr)

	// The same `toolgate mcp` (its Temporal client reconnected) fetches it.
	var res *mcp.CallToolResult
	require.Eventually(t, func() bool {
		res = mcpCall(t, cs, mcpgate.WaitTool, map[string]any{"call_id": id})
		return !res.IsError && res.Meta[mcpgate.MetaStatus] == string(workflows.StatusOK)
	}, 60*time.Second, time.Second, "last answer: %v", res)
	data, err := os.ReadFile(filepath.Join(d.workspace, "once.txt"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(data), "appended once: the tool ran once")
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// gatewayPolicy allows read-only tools, except a lookup of "secret",
// which asks a person (so an approver can edit its arguments); the rest
// asks.
const gatewayPolicy = `default: ask
rules:
  - name: secret-lookups
    tool: "*__lookup"
    when: args.key == "secret"
    action: ask
    message: 'look up the secret?'
    groups: [ops]
  - name: reads
    tool: "*"
    when: annotations.readOnlyHint == true
    action: allow
`

// newDevWithUpstreams is newDevWithMCP with gatewayPolicy; restart starts
// it again on the same data after a kill.
func newDevWithUpstreams(t *testing.T) (d *devEnv, restart func()) {
	self, err := os.Executable()
	require.NoError(t, err)
	srv := mcptest.NewServer()
	web := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(web.Close)
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"local": map[string]any{"command": self, "env": map[string]string{mcptest.EnvStdio: "1"}},
		"web":   map[string]any{"type": "http", "url": web.URL},
	}})
	require.NoError(t, err)
	d = &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	mcpFile, policyFile := filepath.Join(d.dataDir, ".mcp.json"), filepath.Join(d.dataDir, "policy.yaml")
	require.NoError(t, os.WriteFile(mcpFile, cfg, 0o600))
	require.NoError(t, os.WriteFile(policyFile, []byte(gatewayPolicy), 0o600))
	restart = func() {
		d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", strconv.Itoa(d.port),
			"--http", d.httpAddr, "--mcp", mcpFile, "--policy", policyFile)
	}
	restart()
	return d, restart
}

func TestMCPGatewayUpstreams(t *testing.T) {
	d, restart := newDevWithUpstreams(t)
	agentToken, _ := d.devTokens()
	stdio := d.mcpStdio("--wait", "2s")
	web, err := d.mcpHTTP(agentToken, "")
	require.NoError(t, err)

	for name, cs := range map[string]*mcp.ClientSession{"stdio": stdio, "http": web} {
		t.Run(name+": tools/list shows the upstream tools with schema and annotations", func(t *testing.T) {
			res, err := cs.ListTools(context.Background(), nil)
			require.NoError(t, err)
			tools := map[string]*mcp.Tool{}
			for _, tl := range res.Tools {
				tools[tl.Name] = tl
			}
			for _, server := range []string{"local", "web"} {
				for _, name := range []string{mcptest.Lookup, mcptest.Fail, mcptest.Erase, mcptest.Crash} {
					assert.Contains(t, tools, server+"__"+name)
				}
			}
			assert.Contains(t, tools, "echo")
			assert.Contains(t, tools, mcpgate.WaitTool)
			lookup := tools["web__lookup"]
			require.NotNil(t, lookup)
			assert.Equal(t, "Look a key up.\nAnswers with its value.", lookup.Description)
			assert.JSONEq(t, mcptest.LookupSchema, mustMarshal(t, lookup.InputSchema))
			require.NotNil(t, lookup.Annotations)
			assert.True(t, lookup.Annotations.ReadOnlyHint)
			assert.True(t, lookup.Annotations.IdempotentHint)
			assert.Equal(t, "Look up", lookup.Annotations.Title)
			erase := tools["local__erase"]
			require.NotNil(t, erase.Annotations)
			require.NotNil(t, erase.Annotations.DestructiveHint)
			assert.True(t, *erase.Annotations.DestructiveHint)
		})

		t.Run(name+": an allowed read-only call returns the upstream result as is", func(t *testing.T) {
			res := mcpCall(t, cs, "web__lookup", map[string]any{"key": "k"})
			require.False(t, res.IsError, mcpText(res))
			assert.Equal(t, "value of k", mcpText(res), "the upstream's content, nothing added")
			var lr mcptest.LookupResult
			require.NoError(t, json.Unmarshal([]byte(mustMarshal(t, res.StructuredContent)), &lr))
			assert.Equal(t, mcptest.LookupResult{Key: "k", Value: "value of k", PID: lr.PID}, lr)
		})
	}

	t.Run("ask, approve by CLI, the upstream's result", func(t *testing.T) {
		id := pendingCallID(t, mcpCall(t, stdio, "local__erase", map[string]any{}))
		r := d.in(t).cli("approve", id, "--by", "alice")
		require.Equal(t, 0, r.code, r.stderr)
		res := mcpCall(t, stdio, mcpgate.WaitTool, map[string]any{"call_id": id})
		require.False(t, res.IsError, mcpText(res))
		assert.Contains(t, mcpText(res), "erased")
	})

	t.Run("deny with reason is an error result with the reason", func(t *testing.T) {
		id := pendingCallID(t, mcpCall(t, stdio, "web__erase", map[string]any{}))
		r := d.in(t).cli("deny", id, "--by", "bob", "--reason", "keep everything")
		require.Equal(t, 0, r.code, r.stderr)
		res := mcpCall(t, stdio, mcpgate.WaitTool, map[string]any{"call_id": id})
		assert.True(t, res.IsError)
		assert.Contains(t, mcpText(res), "keep everything")
	})

	t.Run("edited arguments reach the upstream", func(t *testing.T) {
		res := mcpCall(t, stdio, "local__lookup", map[string]any{"key": "secret"})
		id := pendingCallID(t, res)
		assert.Contains(t, mcpText(res), "an approver of group ops", "says who was asked")
		assert.Contains(t, mcpText(res), "look up the secret?")
		r := d.in(t).cli("approve", id, "--by", "alice", "--groups", "ops", "--args", `{"key":"public"}`)
		require.Equal(t, 0, r.code, r.stderr)
		res = mcpCall(t, stdio, mcpgate.WaitTool, map[string]any{"call_id": id})
		require.False(t, res.IsError, mcpText(res))
		var lr mcptest.LookupResult
		require.NoError(t, json.Unmarshal([]byte(mustMarshal(t, res.StructuredContent)), &lr))
		assert.Equal(t, "public", lr.Key, "the upstream ran with the approver's arguments")
	})

	t.Run("an upstream error is an error result", func(t *testing.T) {
		res := mcpCall(t, web, "web__fail", map[string]any{"key": "gone"})
		assert.True(t, res.IsError)
		assert.Contains(t, mcpText(res), "no such key: gone")
	})

	t.Run("an upstream that crashes is restarted", func(t *testing.T) {
		pid := func() int {
			res := mcpCall(t, stdio, "local__lookup", map[string]any{"key": "k"})
			require.False(t, res.IsError, mcpText(res))
			var lr mcptest.LookupResult
			require.NoError(t, json.Unmarshal([]byte(mustMarshal(t, res.StructuredContent)), &lr))
			return lr.PID
		}
		before := pid()
		res := mcpCall(t, stdio, "local__crash", map[string]any{})
		assert.True(t, res.IsError)
		assert.Contains(t, mcpText(res), "may or may not have run")
		assert.NotEqual(t, before, pid(), "a new upstream process answers")
	})

	t.Run("kill -9 while a call waits: decided after the restart, the upstream runs it", func(t *testing.T) {
		id := pendingCallID(t, mcpCall(t, stdio, "local__erase", map[string]any{}))
		d.dev.kill()
		restart()
		d.in(t).waitPending(d.in(t).client(), id)
		r := d.in(t).cli("approve", id, "--by", "alice")
		require.Equal(t, 0, r.code, r.stderr)
		var res *mcp.CallToolResult
		require.Eventually(t, func() bool {
			res = mcpCall(t, stdio, mcpgate.WaitTool, map[string]any{"call_id": id})
			return res.Meta[mcpgate.MetaStatus] == string(workflows.StatusOK)
		}, 60*time.Second, time.Second, "last answer: %v", res)
		assert.Contains(t, mcpText(res), "erased")
	})
}
