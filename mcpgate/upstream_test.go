package mcpgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/mcpgate/mcptest"
	"github.com/toolgate/toolgate/sandbox"
	"github.com/toolgate/toolgate/tool"
)

// TestMain: the test binary plays toolgate's for the stdio servers'
// sandbox (sandbox.Command starts it to confine itself), and doubles as
// a stdio MCP server (mcptest), served only once confined.
func TestMain(m *testing.M) {
	sandbox.Enter()
	mcptest.ServeStdioIfAsked()
	os.Exit(m.Run())
}

func stdioServer(t *testing.T) mcpgate.UpstreamServer {
	self, err := os.Executable()
	require.NoError(t, err)
	return mcpgate.UpstreamServer{Name: "local", Type: mcpgate.TypeStdio, Command: self,
		Env: map[string]string{mcptest.EnvStdio: "1"}, Timeout: time.Minute}
}

// httpServer serves mcptest over streamable HTTP, for requests that carry
// the header X-Key: k1.
func httpServer(t *testing.T) mcpgate.UpstreamServer {
	srv := mcptest.NewServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") != "k1" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return mcpgate.UpstreamServer{Name: "web", Type: mcpgate.TypeHTTP, URL: ts.URL, Headers: map[string]string{"X-Key": "k1"}, Timeout: 2 * time.Minute}
}

// start connects to the servers, seen for the first time, and returns the
// tools the registry offers.
func start(t *testing.T, servers ...mcpgate.UpstreamServer) (*mcpgate.Upstreams, map[string]tool.Tool) {
	t.Helper()
	return startWith(t, mcpgate.UpstreamOptions{}, servers...)
}

// startWith is start with options o.
func startWith(t *testing.T, o mcpgate.UpstreamOptions, servers ...mcpgate.UpstreamServer) (*mcpgate.Upstreams, map[string]tool.Tool) {
	t.Helper()
	ups, reg := startPinned(t, newMemPins(), o, servers...)
	byName := map[string]tool.Tool{}
	for _, name := range reg.Names() {
		tt, ok := reg.Lookup(name)
		require.True(t, ok)
		if name != "definition_change" {
			byName[name] = tt
		}
	}
	return ups, byName
}

// startPinned connects to the servers, registers their tools in a new
// registry and checks them against pins.
func startPinned(t *testing.T, pins mcpgate.Pins, o mcpgate.UpstreamOptions, servers ...mcpgate.UpstreamServer) (*mcpgate.Upstreams, *tool.Registry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ups, err := mcpgate.StartUpstreams(ctx, &mcpgate.UpstreamConfig{Servers: servers}, o)
	require.NoError(t, err)
	t.Cleanup(ups.Close)
	reg := tool.NewRegistry()
	require.NoError(t, ups.Register(reg, pins))
	ups.Pin(ctx)
	return ups, reg
}

func run(t *testing.T, tt tool.Tool, args string) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tt.Run(ctx, tool.Input{CallID: "c1", Session: "s1", Args: json.RawMessage(args)})
}

func TestUpstreamToolsAreNamedAndDescribedAsTheServerSays(t *testing.T) {
	_, tools := start(t, stdioServer(t), httpServer(t))
	for _, server := range []string{"local", "web"} {
		for _, name := range []string{mcptest.Lookup, mcptest.Fail, mcptest.Erase, mcptest.Crash} {
			assert.Contains(t, tools, server+"__"+name)
		}
	}
	assert.Len(t, tools, 8)

	lookup := tools["local__lookup"]
	assert.Equal(t, "Look a key up.\nAnswers with its value.", lookup.Description)
	assert.JSONEq(t, mcptest.LookupSchema, string(lookup.Schema))
	assert.Equal(t, map[string]any{"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false, "title": "Look up"}, lookup.Annotations)
	assert.True(t, lookup.Options.Idempotent, "idempotentHint makes the tool idempotent")
	assert.Equal(t, time.Minute, lookup.Options.Timeout, "the server's timeout")
	assert.Equal(t, mcpgate.UpstreamHeartbeatTimeout, lookup.Options.HeartbeatTimeout)

	erase := tools["web__erase"]
	assert.Equal(t, true, erase.Annotations["destructiveHint"])
	assert.False(t, erase.Options.Idempotent, "no idempotentHint: not idempotent")
	assert.Equal(t, 2*time.Minute, erase.Options.Timeout)
	assert.False(t, tools["local__crash"].Options.Idempotent, "read-only alone does not make a tool idempotent")

	reg := tool.NewRegistry()
	for _, tt := range tools {
		require.NoError(t, reg.Register(tt), "%s registers with its schema", tt.Name)
	}
	var problem *tool.ArgumentError
	require.ErrorAs(t, reg.Validate("web__lookup", json.RawMessage(`{"key":7}`)), &problem, "the upstream's schema checks arguments")
}

func TestUpstreamCallReturnsTheToolResult(t *testing.T) {
	_, tools := start(t, stdioServer(t), httpServer(t))
	for _, name := range []string{"local__lookup", "web__lookup"} {
		out, err := run(t, tools[name], `{"key":"k"}`)
		require.NoError(t, err, name)
		var res struct {
			Content           []map[string]any     `json:"content"`
			StructuredContent mcptest.LookupResult `json:"structuredContent"`
		}
		require.NoError(t, json.Unmarshal(out, &res), "%s", out)
		assert.Equal(t, []map[string]any{{"type": "text", "text": "value of k"}}, res.Content, name)
		assert.Equal(t, "value of k", res.StructuredContent.Value, name)
		assert.NotContains(t, string(out), "isError")
	}
}

func TestSSEUpstream(t *testing.T) {
	srv := mcptest.NewServer()
	ts := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	_, tools := start(t, mcpgate.UpstreamServer{Name: "old", Type: mcpgate.TypeSSE, URL: ts.URL, Timeout: time.Minute})
	out, err := run(t, tools["old__lookup"], `{"key":"k"}`)
	require.NoError(t, err)
	assert.Contains(t, string(out), `"value of k"`)
}

func TestHTTPUpstreamThatForgotTheSessionGetsTheCallOnANewOne(t *testing.T) {
	var current atomic.Pointer[mcp.StreamableHTTPHandler]
	fresh := func() {
		current.Store(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcptest.NewServer() }, nil))
	}
	fresh()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { current.Load().ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	_, tools := start(t, mcpgate.UpstreamServer{Name: "web", Type: mcpgate.TypeHTTP, URL: ts.URL, Timeout: time.Minute})
	_, err := run(t, tools["web__lookup"], `{"key":"k"}`)
	require.NoError(t, err)

	fresh() // the server restarted: it knows no sessions
	out, err := run(t, tools["web__lookup"], `{"key":"again"}`)
	require.NoError(t, err, "a call the server refused unrun is sent once more, on a new session")
	assert.Contains(t, string(out), `"value of again"`)
}

func TestUpstreamErrorResultFailsTheCallWithItsText(t *testing.T) {
	_, tools := start(t, httpServer(t))
	_, err := run(t, tools["web__fail"], `{"key":"nope"}`)
	var permanent *tool.PermanentError
	require.ErrorAs(t, err, &permanent, "the tool ran and said no: never retried")
	assert.Equal(t, "no such key: nope", err.Error())
}

func TestStdioUpstreamThatDiesMidCallIsUnknownAndRestarted(t *testing.T) {
	_, tools := start(t, stdioServer(t))
	pid := func() int {
		out, err := run(t, tools["local__lookup"], `{"key":"k"}`)
		require.NoError(t, err)
		var res struct{ StructuredContent mcptest.LookupResult }
		require.NoError(t, json.Unmarshal(out, &res))
		return res.StructuredContent.PID
	}
	before := pid()

	_, err := run(t, tools["local__crash"], `{}`)
	var unknown *tool.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown, "the call reached the server, which died: it may have run")
	assert.Contains(t, err.Error(), `MCP server "local" went away while the call ran`)

	after := pid()
	assert.NotEqual(t, before, after, "the next call runs on a new process")
}

func TestStartUpstreamsNamesTheServerItCannotReach(t *testing.T) {
	bad := mcpgate.UpstreamServer{Name: "ghost", Type: mcpgate.TypeStdio, Command: "/nonexistent/mcp-server", Timeout: time.Minute}
	_, err := mcpgate.StartUpstreams(context.Background(), &mcpgate.UpstreamConfig{Servers: []mcpgate.UpstreamServer{stdioServer(t), bad}}, mcpgate.UpstreamOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `MCP server "ghost"`)

	web := httpServer(t)
	web.Headers = nil // the server refuses requests without its key
	_, err = mcpgate.StartUpstreams(context.Background(), &mcpgate.UpstreamConfig{Servers: []mcpgate.UpstreamServer{web}}, mcpgate.UpstreamOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `MCP server "web"`)
}

func TestUpstreamCallsFailOnceClosed(t *testing.T) {
	ups, tools := start(t, stdioServer(t))
	ups.Close()
	_, err := run(t, tools["local__lookup"], `{"key":"k"}`)
	require.Error(t, err)
	assert.False(t, errors.As(err, new(*tool.OutcomeUnknownError)), "it never reached the server")
	assert.Contains(t, err.Error(), "the worker is stopping")
}

func TestAnUpstreamsProgressBecomesTheToolsProgress(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "jobs", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "migrate", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			token := req.Params.GetProgressToken()
			if token == nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no progress token"}}}, nil
			}
			for i := 1; i <= 2; i++ {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(i), Total: 2, Message: "table " + strconv.Itoa(i)}); err != nil {
					return nil, err
				}
				time.Sleep(100 * time.Millisecond) // a long step: the client hears it before the result
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "migrated"}}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	_, tools := start(t, mcpgate.UpstreamServer{Name: "jobs", Type: mcpgate.TypeHTTP, URL: ts.URL, Timeout: time.Minute})

	var mu sync.Mutex
	var seen []tool.Progress
	ctx := tool.WithProgress(context.Background(), func(p tool.Progress) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, p)
	})
	out, err := tools["jobs__migrate"].Run(ctx, tool.Input{CallID: "c1", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	assert.Contains(t, string(out), "migrated")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2
	}, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []tool.Progress{{Progress: 1, Total: 2, Message: "table 1"}, {Progress: 2, Total: 2, Message: "table 2"}}, seen)
}
