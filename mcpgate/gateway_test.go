package mcpgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// fakeAgent is toolgate as the gateway sees it: decide says what becomes
// of each submitted call (nil: it waits until resolve).
type fakeAgent struct {
	tools  []tool.Descriptor
	decide func(req tgclient.CallRequest) *workflows.Result

	// user: the calls' rule lets the acting user decide (user: true);
	// evaluating: the first Status calls of each call see the policy
	// still checking it.
	user       bool
	evaluating int

	mu        sync.Mutex
	calls     map[string]*fakeCall
	submitted []tgclient.CallRequest
	cancelled []string
	byUser    []policy.Decision
}

type fakeCall struct {
	req    tgclient.CallRequest
	result *workflows.Result
	done   chan struct{}
	looks  int
}

var _ tgclient.Agent = (*fakeAgent)(nil)

// newFake is toolgate with the tools echo and github__create_issue.
func newFake(decide func(tgclient.CallRequest) *workflows.Result) *fakeAgent {
	return &fakeAgent{decide: decide, calls: map[string]*fakeCall{}, tools: []tool.Descriptor{echo, gh}}
}

func (f *fakeAgent) Submit(_ context.Context, req tgclient.CallRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &fakeCall{req: req, done: make(chan struct{})}
	f.calls[req.CallID] = c
	f.submitted = append(f.submitted, req)
	if r := f.decide(req); r != nil {
		f.finish(c, *r)
	}
	return req.CallID, nil
}

// finish completes c with r, filling in the call's identity.
func (f *fakeAgent) finish(c *fakeCall, r workflows.Result) {
	r.CallID, r.Session, r.Tool, r.Requester = c.req.CallID, c.req.Session, c.req.Tool, c.req.Requester
	c.result = &r
	close(c.done)
}

func (f *fakeAgent) resolve(callID string, r workflows.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finish(f.calls[callID], r)
}

func (f *fakeAgent) call(id string) (*fakeCall, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.calls[id]
	if !ok {
		return nil, fmt.Errorf("call %s: %w", id, tgclient.ErrUnknownCall)
	}
	return c, nil
}

func (f *fakeAgent) Wait(ctx context.Context, id string) (workflows.Result, error) {
	c, err := f.call(id)
	if err != nil {
		return workflows.Result{}, err
	}
	select {
	case <-c.done:
		return *c.result, nil
	case <-ctx.Done():
		return workflows.Result{}, context.DeadlineExceeded
	}
}

func (f *fakeAgent) WaitDecided(ctx context.Context, id string) (tgclient.Status, error) {
	return tgclient.Status{}, errors.New("not used")
}

func (f *fakeAgent) Status(_ context.Context, id string) (tgclient.Status, error) {
	c, err := f.call(id)
	if err != nil {
		return tgclient.Status{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.result != nil {
		r := *c.result
		return tgclient.Status{Result: &r}, nil
	}
	call := policy.Call{ID: id, Session: c.req.Session, Tool: c.req.Tool, Args: c.req.Args, Requester: c.req.Requester, ActingUser: c.req.ActingUser}
	if c.looks++; c.looks <= f.evaluating {
		return tgclient.Status{State: &workflows.CallState{Call: call, Status: workflows.StatusEvaluating}}, nil
	}
	return tgclient.Status{State: &workflows.CallState{
		Call:   call,
		Status: workflows.StatusPending,
		Request: &policy.ApprovalRequest{Message: "create an issue in acme/app", Groups: []string{"ops"}, User: f.user,
			Preview: &policy.Preview{Kind: policy.PreviewText, Text: "a new issue in acme/app", ComputedBy: policy.ComputedByToolgate}},
		Deadline: time.Date(2030, 1, 2, 15, 4, 0, 0, time.UTC),
	}}, nil
}

// DecideAsUser decides a waiting call as the workflow does: only its
// acting user, only when its rule says so.
func (f *fakeAgent) DecideAsUser(_ context.Context, id, user string, d policy.Decision) (policy.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.waitingLocked(id)
	switch {
	case err != nil:
		return policy.Decision{}, err
	case !f.user || user == "" || user != c.req.ActingUser:
		return policy.Decision{}, &tgclient.RefusedError{Type: workflows.ErrTypeNotAuthorized, Message: user + " may not decide call " + id}
	}
	d.DecidedBy, d.Channel, d.User = user, policy.ChannelClient, true
	f.byUser = append(f.byUser, d)
	r := workflows.Result{Status: workflows.StatusOK, Output: c.req.Args, Decision: d.Kind.String(), DecidedBy: user, Channel: d.Channel}
	if !d.Kind.Approves() {
		r = workflows.Result{Status: workflows.StatusDenied, Reason: d.Reason, Decision: d.Kind.String(), DecidedBy: user, Channel: d.Channel}
	}
	f.finish(c, r)
	return d, nil
}

// waitingLocked is call id while it waits, else the workflow's refusal.
func (f *fakeAgent) waitingLocked(id string) (*fakeCall, error) {
	c, ok := f.calls[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("call %s: %w", id, tgclient.ErrUnknownCall)
	case c.result != nil:
		return nil, &tgclient.AlreadyDecidedError{CallID: id, Message: "call " + id + " was already decided"}
	}
	return c, nil
}

func (f *fakeAgent) userDecisions() []policy.Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]policy.Decision(nil), f.byUser...)
}

func (f *fakeAgent) Report(context.Context, string, string, tgclient.Report) error {
	return errors.New("not used")
}

// Cancel denies a waiting call, as the workflow does; a decided one is
// refused as already decided.
func (f *fakeAgent) CancelOwn(_ context.Context, id, requester string) (policy.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.waitingLocked(id)
	if err != nil {
		return policy.Decision{}, err
	}
	f.cancelled = append(f.cancelled, id)
	d := policy.Decision{Kind: policy.DeniedWithReason, Reason: "cancelled by " + requester, DecidedBy: requester, Channel: workflows.ChannelCancel}
	f.finish(c, workflows.Result{Status: workflows.StatusDenied, Reason: d.Reason, Decision: d.Kind.String(), DecidedBy: requester, Channel: d.Channel})
	return d, nil
}

// Claim: the gateway's calls are run by toolgate, never claimed.
func (f *fakeAgent) Claim(context.Context, string, string, tgclient.Claim) error {
	return errors.New("not used")
}

func (f *fakeAgent) Tools(context.Context) ([]tool.Descriptor, error) { return f.tools, nil }

// submissions are the calls submitted so far.
func (f *fakeAgent) submissions() []tgclient.CallRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]tgclient.CallRequest(nil), f.submitted...)
}

func (f *fakeAgent) lastSubmitted() tgclient.CallRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.submitted[len(f.submitted)-1]
}

// connect runs the gateway's server for conn in memory and returns a
// client session on it.
func connect(t *testing.T, g *mcpgate.Gateway, conn mcpgate.Conn, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := g.Server(conn).Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		require.True(t, ok, "content %T is not text", c)
		parts = append(parts, tc.Text)
	}
	return strings.Join(parts, "\n")
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	return res
}

// upstreamOutput is what the upstream side records for an MCP tool: the
// upstream's CallToolResult.
const upstreamOutput = `{"content":[{"type":"text","text":"issue #7 created"}],"structuredContent":{"number":7}}`

var gh = tool.Descriptor{
	Name:        "github__create_issue",
	Description: "Create an issue",
	Schema:      json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`),
	Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": false, "title": "Create issue"},
}

var echo = tool.Descriptor{Name: "echo", Description: "Echo the arguments", Annotations: map[string]any{"readOnlyHint": true}}

func TestToolsList(t *testing.T) {
	f := newFake(nil)
	f.tools = []tool.Descriptor{echo, gh}
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	require.Len(t, byName, 4, "echo, github__create_issue, toolgate_wait, toolgate_status")
	require.Contains(t, byName, mcpgate.WaitTool)
	require.Contains(t, byName, mcpgate.StatusTool)

	g := byName["github__create_issue"]
	require.NotNil(t, g)
	assert.Equal(t, "Create an issue", g.Description)
	assert.JSONEq(t, string(gh.Schema), mustJSON(t, g.InputSchema))
	require.NotNil(t, g.Annotations)
	assert.False(t, g.Annotations.ReadOnlyHint)
	require.NotNil(t, g.Annotations.DestructiveHint)
	assert.False(t, *g.Annotations.DestructiveHint)
	assert.Equal(t, "Create issue", g.Annotations.Title)

	e := byName["echo"]
	assert.JSONEq(t, `{"type":"object"}`, mustJSON(t, e.InputSchema), "a tool without a schema takes any object")
	assert.True(t, e.Annotations.ReadOnlyHint)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestCallAutoApprovedUpstreamResultAsIs(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result {
		return &workflows.Result{Status: workflows.StatusOK, Output: json.RawMessage(upstreamOutput), DecidedBy: "policy", ModelMessage: "toolgate ran github__create_issue, allowed by the policy."}
	})
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	res := callTool(t, cs, "github__create_issue", map[string]any{"title": "bug"})
	assert.False(t, res.IsError)
	assert.Equal(t, "issue #7 created", text(t, res), "the upstream's content, nothing added")
	assert.JSONEq(t, `{"number":7}`, mustJSON(t, res.StructuredContent))

	req := f.lastSubmitted()
	assert.Equal(t, "github__create_issue", req.Tool)
	assert.Equal(t, "s1", req.Session)
	assert.Equal(t, "agent-1", req.Requester)
	assert.JSONEq(t, `{"title":"bug"}`, string(req.Args))
	assert.Equal(t, req.CallID, res.Meta[mcpgate.MetaCallID])
}

func TestCallBuiltinOutputAsTextAndStructured(t *testing.T) {
	f := newFake(func(req tgclient.CallRequest) *workflows.Result {
		return &workflows.Result{Status: workflows.StatusOK, Output: req.Args, DecidedBy: "policy"}
	})
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	res := callTool(t, cs, "echo", map[string]any{"hello": "world"})
	assert.False(t, res.IsError)
	assert.JSONEq(t, `{"hello":"world"}`, text(t, res))
	assert.JSONEq(t, `{"hello":"world"}`, mustJSON(t, res.StructuredContent))

	// No arguments at all is an empty object.
	callTool(t, cs, "echo", nil)
	assert.JSONEq(t, `{}`, string(f.lastSubmitted().Args))
}

func TestCallDeniedIsErrorWithReason(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result {
		return &workflows.Result{Status: workflows.StatusDenied, Reason: "no pushes on Fridays", DecidedBy: "alice",
			ModelMessage: "github__create_issue was not run: denied by alice: no pushes on Fridays."}
	})
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	res := callTool(t, cs, "github__create_issue", map[string]any{"title": "x"})
	assert.True(t, res.IsError)
	assert.Equal(t, "github__create_issue was not run: denied by alice: no pushes on Fridays.", text(t, res))
}

func TestCallErrorAndUnknownAreErrors(t *testing.T) {
	for _, tc := range []struct {
		status workflows.Status
		output string
		want   string
	}{
		{workflows.StatusError, "", "echo failed: disk full."},
		{workflows.StatusUnknown, "", "echo may or may not have run: the worker died."},
		{workflows.StatusTimedOut, "", "echo was not run: nobody decided within 1h."},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			reason := map[workflows.Status]string{workflows.StatusError: "disk full", workflows.StatusUnknown: "the worker died", workflows.StatusTimedOut: "nobody decided within 1h"}[tc.status]
			f := newFake(func(tgclient.CallRequest) *workflows.Result {
				return &workflows.Result{Status: tc.status, Reason: reason}
			})
			cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
			res := callTool(t, cs, "echo", map[string]any{})
			assert.True(t, res.IsError)
			assert.Equal(t, tc.want, text(t, res), "built from the reason when the Result has no model message")
		})
	}
}

func TestCallUpstreamToolErrorKeepsItsContent(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result {
		return &workflows.Result{Status: workflows.StatusError, Reason: "the upstream tool failed",
			Output: json.RawMessage(`{"content":[{"type":"text","text":"repo not found"}],"isError":true}`), ModelMessage: "github__create_issue failed: the upstream tool failed."}
	})
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	res := callTool(t, cs, "github__create_issue", map[string]any{"title": "x"})
	assert.True(t, res.IsError)
	assert.Equal(t, "repo not found\ntoolgate: github__create_issue failed: the upstream tool failed.", text(t, res))
}

func TestCallRefusedArgumentsIsError(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { t.Fatal("a refused call was submitted"); return nil })
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	res := callTool(t, cs, "echo", []int{1, 2})
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "must be a JSON object, not an array")
}

func TestPendingThenToolgateWait(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	g := mcpgate.NewGateway(f, mcpgate.Options{Wait: 200 * time.Millisecond})
	cs := connect(t, g, mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)

	res := callTool(t, cs, "github__create_issue", map[string]any{"title": "bug"})
	callID := f.lastSubmitted().CallID
	assert.False(t, res.IsError, "still waiting is not an error: %s", text(t, res))
	msg := text(t, res)
	assert.Contains(t, msg, callID)
	assert.Contains(t, msg, "an approver of group ops", "says who was asked")
	assert.Contains(t, msg, "create an issue in acme/app")
	assert.Contains(t, msg, "The approver sees what it will change (text):\na new issue in acme/app\n")
	assert.Contains(t, msg, fmt.Sprintf(`toolgate_wait with {"call_id": %q}`, callID))
	var w mcpgate.Waiting
	require.NoError(t, json.Unmarshal([]byte(mustJSON(t, res.StructuredContent)), &w))
	assert.Equal(t, callID, w.CallID)
	assert.Equal(t, workflows.StatusPending, w.Status)
	assert.Equal(t, []string{"ops"}, w.Groups)

	// Still undecided: toolgate_wait answers the same way after its wait,
	// and toolgate_status at once.
	start := time.Now()
	res = callTool(t, cs, mcpgate.WaitTool, map[string]any{"call_id": callID})
	assert.False(t, res.IsError)
	assert.Contains(t, text(t, res), "waiting for an approver of group ops")
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	res = callTool(t, cs, mcpgate.StatusTool, map[string]any{"call_id": callID})
	assert.False(t, res.IsError)
	assert.Contains(t, text(t, res), callID)

	// Decided while toolgate_wait waits: it returns the upstream's result.
	go func() {
		time.Sleep(50 * time.Millisecond)
		f.resolve(callID, workflows.Result{Status: workflows.StatusOK, Output: json.RawMessage(upstreamOutput), DecidedBy: "alice",
			ModelMessage: "toolgate ran github__create_issue, approved by alice."})
	}()
	res = callTool(t, cs, mcpgate.WaitTool, map[string]any{"call_id": callID})
	assert.False(t, res.IsError)
	assert.Equal(t, "issue #7 created\ntoolgate ran github__create_issue, approved by alice.", text(t, res), "toolgate says it once")
	assert.JSONEq(t, `{"number":7}`, mustJSON(t, res.StructuredContent))

	// toolgate_status of a finished call is its result too.
	res = callTool(t, cs, mcpgate.StatusTool, map[string]any{"call_id": callID})
	assert.Contains(t, text(t, res), "issue #7 created")
}

func TestToolgateWaitDeniedLater(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{Wait: 50 * time.Millisecond}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	callTool(t, cs, "github__create_issue", map[string]any{"title": "bug"})
	callID := f.lastSubmitted().CallID
	f.resolve(callID, workflows.Result{Status: workflows.StatusDenied, Reason: "duplicate", ModelMessage: "github__create_issue was not run: denied by bob: duplicate."})
	res := callTool(t, cs, mcpgate.WaitTool, map[string]any{"call_id": callID})
	assert.True(t, res.IsError)
	assert.Equal(t, "github__create_issue was not run: denied by bob: duplicate.", text(t, res))
}

func TestToolgateWaitRefusesOthersAndUnknownCallsAlike(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	g := mcpgate.NewGateway(f, mcpgate.Options{Wait: 50 * time.Millisecond})
	mine := connect(t, g, mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	other := connect(t, g, mcpgate.Conn{Requester: "agent-2", Session: "s2"}, nil)
	callTool(t, mine, "echo", map[string]any{"secret": "x"})
	callID := f.lastSubmitted().CallID

	for _, tool := range []string{mcpgate.WaitTool, mcpgate.StatusTool} {
		res := callTool(t, other, tool, map[string]any{"call_id": callID})
		assert.True(t, res.IsError)
		assert.Equal(t, fmt.Sprintf("toolgate knows no call %s of yours", callID), text(t, res))
		assert.NotContains(t, text(t, res), "secret")
		res = callTool(t, other, tool, map[string]any{"call_id": "call-nope"})
		assert.Equal(t, "toolgate knows no call call-nope of yours", text(t, res), "the same answer as for another's call")
	}
	res := callTool(t, mine, mcpgate.WaitTool, map[string]any{})
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "call_id is required")
	res = callTool(t, mine, mcpgate.WaitTool, map[string]any{"call_id": "../x"})
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "call_id must be")
}

func TestProgressWhileWaiting(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	g := mcpgate.NewGateway(f, mcpgate.Options{Wait: 400 * time.Millisecond, ProgressInterval: 50 * time.Millisecond})
	var (
		mu       sync.Mutex
		progress []*mcp.ProgressNotificationParams
	)
	cs := connect(t, g, mcpgate.Conn{Requester: "agent-1", Session: "s1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, req.Params)
		},
	})
	params := &mcp.CallToolParams{Name: "github__create_issue", Arguments: map[string]any{"title": "bug"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	require.NoError(t, err)
	assert.False(t, res.IsError)
	callID := f.lastSubmitted().CallID
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(progress), 3, "a notification every 50ms over 400ms")
	assert.Less(t, progress[0].Progress, 0.05, "the first goes out at once, naming the call")
	for i, p := range progress {
		assert.Equal(t, "tok-1", p.ProgressToken)
		assert.Contains(t, p.Message, "toolgate call "+callID+" is waiting for an approver of ops", "says what the call is doing")
		if i > 0 {
			assert.Greater(t, p.Progress, progress[i-1].Progress, "progress increases")
		}
	}

	// Without a progress token, none are sent (the first call's last ones
	// may still arrive: all carry its token).
	mu.Unlock()
	callTool(t, cs, "github__create_issue", map[string]any{"title": "bug"})
	mu.Lock()
	for _, p := range progress {
		assert.Equal(t, "tok-1", p.ProgressToken)
	}
}

func TestSessions(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return &workflows.Result{Status: workflows.StatusOK} })
	g := mcpgate.NewGateway(f, mcpgate.Options{})
	a, b := g.StdioConn(), g.StdioConn()
	assert.NotEqual(t, a.Session, b.Session, "one session per connection")
	assert.True(t, strings.HasPrefix(a.Session, "mcp-"))
	assert.Equal(t, mcpgate.DefaultRequester, a.Requester)
	require.NoError(t, tgclient.ValidateID("session", a.Session))

	pinned := mcpgate.NewGateway(f, mcpgate.Options{Session: "my-work", Requester: "claude"})
	assert.Equal(t, mcpgate.Conn{Requester: "claude", Session: "my-work"}, pinned.StdioConn())
}

func TestHTTPNeedsAnAgentToken(t *testing.T) {
	f := newFake(func(req tgclient.CallRequest) *workflows.Result {
		return &workflows.Result{Status: workflows.StatusOK, Output: req.Args}
	})
	f.tools = []tool.Descriptor{echo}
	g := mcpgate.NewGateway(f, mcpgate.Options{})
	srv := httptest.NewServer(g.HTTPHandler(func(token string) (string, string, bool, bool) {
		switch token {
		case "agent-token":
			return "ci-bot", "", true, true
		case "approver-token":
			return "alice", "", true, false
		}
		return "", "", false, false
	}))
	defer srv.Close()

	post := func(token, origin, sessionID, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", token)
			if !strings.Contains(token, " ") {
				req.Header.Set("Authorization", "Bearer "+token)
			}
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if sessionID != "" {
			req.Header.Set("Mcp-Session-Id", sessionID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	resp := post("", "", "", list)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, `Bearer realm="toolgate"`, resp.Header.Get("WWW-Authenticate"))
	resp = post("wrong", "", "", list)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
	assert.Equal(t, http.StatusForbidden, post("approver-token", "", "", list).StatusCode, "a valid token of the wrong role")
	assert.Equal(t, http.StatusForbidden, post("agent-token", "https://evil.example", "", list).StatusCode, "another site's page (DNS rebinding)")
	assert.Equal(t, http.StatusBadRequest, post("agent-token", "", "", list).StatusCode, "no session and not an initialize")
	assert.Equal(t, http.StatusBadRequest, post("bearer agent-token", "", "", list).StatusCode, "the scheme is case-insensitive: past the token check")
	assert.NotEqual(t, http.StatusForbidden, post("agent-token", "http://localhost:3000", "", list).StatusCode, "a local page passes the Origin check")

	_, err := httpClient(t, srv.URL, "wrong")
	require.Error(t, err)

	cs, err := httpClient(t, srv.URL+"?session=pinned-1", "agent-token")
	require.NoError(t, err)
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	assert.Len(t, tools.Tools, 3)
	res := callTool(t, cs, "echo", map[string]any{"a": 1})
	assert.JSONEq(t, `{"a":1}`, text(t, res))
	req := f.lastSubmitted()
	assert.Equal(t, "ci-bot", req.Requester, "the token names the requester")
	assert.Equal(t, "pinned-1", req.Session)

	// Without ?session= each MCP connection gets a session of its own, and
	// the token's calls are still its own.
	var sessions []string
	for range 2 {
		cs, err := httpClient(t, srv.URL, "agent-token")
		require.NoError(t, err)
		callTool(t, cs, "echo", map[string]any{})
		callTool(t, cs, "echo", map[string]any{})
		s := f.lastSubmitted().Session
		f.mu.Lock()
		assert.Equal(t, s, f.submitted[len(f.submitted)-2].Session, "one session per connection")
		f.mu.Unlock()
		sessions = append(sessions, s)
		cs.Close()
	}
	assert.NotEqual(t, sessions[0], sessions[1])
}

// bearer adds a token to every request.
type bearer struct {
	token string
	calls atomic.Int32
	// base carries the requests; nil is http.DefaultTransport.
	base http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	b.calls.Add(1)
	if b.base != nil {
		return b.base.RoundTrip(r)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func httpClient(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: &bearer{token: token}}, MaxRetries: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx, tr, nil)
}

func TestAnUnknownToolIsTheSpecsErrorAndNoCall(t *testing.T) {
	f := newFake(nil)
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nope", Arguments: map[string]any{}})
	var rpcErr *jsonrpc.Error
	require.ErrorAs(t, err, &rpcErr)
	assert.Equal(t, int64(jsonrpc.CodeInvalidParams), rpcErr.Code)
	assert.Equal(t, `unknown tool "nope"`, rpcErr.Message, "no list of every tool in the text")
	assert.Empty(t, f.submitted, "no call ID minted, nothing submitted")

	// A tool that appears later (an upstream came up) is called once the
	// client lists again, as it does on notifications/tools/list_changed.
	f.mu.Lock()
	f.tools = append(f.tools, tool.Descriptor{Name: "late"})
	f.mu.Unlock()
	_, err = cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	f.decide = func(tgclient.CallRequest) *workflows.Result {
		return &workflows.Result{Status: workflows.StatusOK, Output: json.RawMessage(`{}`)}
	}
	callTool(t, cs, "late", map[string]any{})
	assert.Len(t, f.submitted, 1)
}

// A client that gave up (its timeout) and asks again, or asks twice at
// once, gets the one call: nobody is asked twice, the tool runs once.
func TestAnIdenticalCallJoinsTheOneWaiting(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	g := mcpgate.NewGateway(f, mcpgate.Options{Wait: 100 * time.Millisecond})
	cs := connect(t, g, mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)

	first := callTool(t, cs, "github__create_issue", map[string]any{"title": "bug", "body": "x"})
	require.Len(t, f.submissions(), 1)
	callID := f.submissions()[0].CallID
	assert.Contains(t, text(t, first), callID, "still waiting, naming the call")

	retry := callTool(t, cs, "github__create_issue", map[string]any{"body": "x", "title": "bug"})
	assert.Contains(t, text(t, retry), callID, "the retry is the same call")
	assert.Len(t, f.submissions(), 1, "nothing new submitted")

	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "github__create_issue", Arguments: map[string]any{"title": "bug", "body": "x"}})
			assert.NoError(t, err)
			results[i] = res
		}()
	}
	time.Sleep(30 * time.Millisecond)
	f.resolve(callID, workflows.Result{Status: workflows.StatusOK, Output: json.RawMessage(upstreamOutput)})
	wg.Wait()
	for _, res := range results {
		assert.Equal(t, "issue #7 created", text(t, res), "both get the one run's result")
	}
	assert.Len(t, f.submissions(), 1)

	// Seen to its end: the next identical call is a new call.
	callTool(t, cs, "github__create_issue", map[string]any{"title": "bug", "body": "x"})
	assert.Len(t, f.submissions(), 2)
	// Other arguments are another call.
	callTool(t, cs, "github__create_issue", map[string]any{"title": "other"})
	assert.Len(t, f.submissions(), 3)
}

// A request the client cancels (notifications/cancelled, as clients do at
// their timeout) cancels its waiting call, so an approval cannot run it
// behind the agent's back; a decided call goes on.
func TestACancelledRequestCancelsItsCall(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	g := mcpgate.NewGateway(f, mcpgate.Options{Wait: 10 * time.Second})
	cs := connect(t, g, mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "github__create_issue", Arguments: map[string]any{"title": "bug"}})
	require.Error(t, err, "the client gave up")
	require.Len(t, f.submissions(), 1)
	callID := f.submissions()[0].CallID
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.cancelled) == 1
	}, 5*time.Second, 10*time.Millisecond, "the call is cancelled")
	st, err := f.Status(context.Background(), callID)
	require.NoError(t, err)
	require.NotNil(t, st.Result)
	assert.Equal(t, workflows.StatusDenied, st.Result.Status)
	assert.Equal(t, "cancelled by agent-1", st.Result.Reason)

	// The retry is a new call, asked afresh.
	f.mu.Lock()
	f.decide = func(tgclient.CallRequest) *workflows.Result {
		return &workflows.Result{Status: workflows.StatusOK, Output: json.RawMessage(upstreamOutput)}
	}
	f.mu.Unlock()
	res := callTool(t, cs, "github__create_issue", map[string]any{"title": "bug"})
	assert.Equal(t, "issue #7 created", text(t, res))
	assert.Len(t, f.submissions(), 2)
}

// An upstream tool's title and output schema reach the client; a call of
// such a tool that still waits is an error result, since a client checks
// a successful result's structuredContent against the output schema.
func TestTitlesAndOutputSchemasPassThrough(t *testing.T) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	withOutput := tool.Descriptor{Name: "everything__add", Title: "Add numbers", Description: "Adds",
		Schema:       json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"sum":{"type":"number"}},"required":["sum"]}`)}
	f.tools = []tool.Descriptor{withOutput, echo}
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{Wait: 50 * time.Millisecond}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	var listed *mcp.Tool
	for _, tl := range res.Tools {
		if tl.Name == "everything__add" {
			listed = tl
		}
	}
	require.NotNil(t, listed)
	assert.Equal(t, "Add numbers", listed.Title)
	assert.JSONEq(t, `{"type":"object","properties":{"sum":{"type":"number"}},"required":["sum"]}`, mustJSON(t, listed.OutputSchema))

	waiting := callTool(t, cs, "everything__add", map[string]any{"a": 1, "b": 2})
	assert.True(t, waiting.IsError, "no output to check against the schema yet")
	assert.Nil(t, waiting.StructuredContent)
	assert.Contains(t, text(t, waiting), "toolgate_wait")

	plain := callTool(t, cs, "echo", map[string]any{"x": 1})
	assert.False(t, plain.IsError, "a tool without an output schema still waits as before")
	assert.NotNil(t, plain.StructuredContent)
}

func TestToolgateWaitChecksItsArguments(t *testing.T) {
	f := newFake(nil)
	cs := connect(t, mcpgate.NewGateway(f, mcpgate.Options{}), mcpgate.Conn{Requester: "agent-1", Session: "s1"}, nil)
	for args, want := range map[string]string{
		`{"call_id": 42}`:                     `call_id must be a string, not 42`,
		`{}`:                                  `call_id is required`,
		`{"call_id": "call-1", "wait": true}`: `unknown argument "wait": toolgate_wait takes only call_id`,
	} {
		res := callTool(t, cs, mcpgate.WaitTool, json.RawMessage(args))
		assert.True(t, res.IsError, args)
		assert.Contains(t, text(t, res), want, args)
		assert.Equal(t, mcpgate.MetaRefused, res.Meta[mcpgate.MetaStatus], "a refusal says so in _meta too")
	}
}
