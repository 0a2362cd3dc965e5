package mcpgate_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The person at the client decides a call whose rule says `user: true`,
// through the Go SDK client's elicitation handler.

// asker is a client's elicitation handler that answers with answer and
// keeps what it was asked.
type asker struct {
	mu     sync.Mutex
	asked  []*mcp.ElicitParams
	answer func(ctx context.Context) (*mcp.ElicitResult, error)
}

func (a *asker) handle(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	a.mu.Lock()
	a.asked = append(a.asked, req.Params)
	a.mu.Unlock()
	return a.answer(ctx)
}

func (a *asker) questions() []*mcp.ElicitParams {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*mcp.ElicitParams(nil), a.asked...)
}

func answering(content map[string]any) *asker {
	return &asker{answer: func(context.Context) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: content}, nil
	}}
}

func userGateway(user bool) (*fakeAgent, *mcpgate.Gateway) {
	f := newFake(func(tgclient.CallRequest) *workflows.Result { return nil })
	f.user, f.evaluating = user, 2
	l, _ := zap.NewDevelopment()
	return f, mcpgate.NewGateway(f, mcpgate.Options{Wait: 2 * time.Second, ProgressInterval: time.Hour, Logger: l})
}

var alice = mcpgate.Conn{Requester: "claude", Session: "s1", ActingUser: "alice"}

// connectHTTP connects a client to the gateway's /mcp as the agent claude,
// whose token's owner is alice. /mcp speaks the revisions before
// 2026-07-28, where the gateway sends elicitation/create itself.
func connectHTTP(t *testing.T, g *mcpgate.Gateway, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(g.HTTPHandler(func(token string) (string, string, bool, bool) {
		return "claude", "alice", token == "agent-token", token == "agent-token"
	}))
	t.Cleanup(srv.Close)
	tr := &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: &bearer{token: "agent-token"}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts).Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// Both ways of asking: the form as a tools/call's input request (2026-07-28,
// in memory here) and elicitation/create while the call waits (over HTTP).
func TestTheUserApprovesInTheClient(t *testing.T) {
	for name, connectAs := range map[string]func(*testing.T, *mcpgate.Gateway, *mcp.ClientOptions) *mcp.ClientSession{
		"input request (2026-07-28)": func(t *testing.T, g *mcpgate.Gateway, o *mcp.ClientOptions) *mcp.ClientSession {
			return connect(t, g, alice, o)
		},
		"elicitation/create (2025-11-25)": connectHTTP,
	} {
		t.Run(name, func(t *testing.T) {
			f, g := userGateway(true)
			a := answering(map[string]any{"decision": "approve"})
			cs := connectAs(t, g, &mcp.ClientOptions{ElicitationHandler: a.handle})

			res := callTool(t, cs, "github__create_issue", map[string]any{"repo": "acme/app", "title": "x"})

			assert.False(t, res.IsError, text(t, res))
			require.Len(t, a.questions(), 1, "asked once the policy had checked the call")
			q := a.questions()[0]
			call := f.lastSubmitted()
			assert.Equal(t, "alice", call.ActingUser, "the call names the person at the client")
			assert.Contains(t, q.Message, "claude asks to run github__create_issue (call "+call.CallID+")")
			assert.Contains(t, q.Message, "create an issue in acme/app")
			assert.Contains(t, q.Message, "Preview:\na new issue in acme/app")
			assert.Contains(t, q.Message, "Approvers of ops are asked too")
			require.Len(t, f.userDecisions(), 1)
			d := f.userDecisions()[0]
			assert.Equal(t, policy.Approved, d.Kind)
			assert.Equal(t, "alice", d.DecidedBy)
			assert.Equal(t, policy.ChannelClient, d.Channel)
			assert.Len(t, f.submissions(), 1, "the answer's retry went on with the same call")
		})
	}
}

func TestTheUserDeniesInTheClientWithAReason(t *testing.T) {
	f, g := userGateway(true)
	a := answering(map[string]any{"decision": "deny", "reason": "wrong repository"})
	cs := connect(t, g, alice, &mcp.ClientOptions{ElicitationHandler: a.handle})

	res := callTool(t, cs, "github__create_issue", map[string]any{"repo": "acme/app", "title": "x"})

	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "wrong repository")
	require.Len(t, f.userDecisions(), 1)
	assert.Equal(t, policy.DeniedWithReason, f.userDecisions()[0].Kind)
}

func TestTheUserApprovesForTheSessionOrDeclines(t *testing.T) {
	f, g := userGateway(true)
	cs := connect(t, g, alice, &mcp.ClientOptions{ElicitationHandler: answering(map[string]any{"decision": "approve_for_session"}).handle})
	res := callTool(t, cs, "github__create_issue", map[string]any{"repo": "acme/app", "title": "x"})
	assert.False(t, res.IsError, text(t, res))

	declining := &asker{answer: func(context.Context) (*mcp.ElicitResult, error) { return &mcp.ElicitResult{Action: "decline"}, nil }}
	cs = connect(t, g, alice, &mcp.ClientOptions{ElicitationHandler: declining.handle})
	res = callTool(t, cs, "github__create_issue", map[string]any{"repo": "acme/app", "title": "y"})
	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "the user declined it in the client")

	ds := f.userDecisions()
	require.Len(t, ds, 2)
	assert.Equal(t, policy.ApprovedForSession, ds[0].Kind)
	assert.Equal(t, policy.DeniedWithReason, ds[1].Kind)
}

// A rule without `user: true`, a client without elicitation, or a
// connection with no known person: nobody is asked in the client, and the
// call waits for the remote approvers.
func TestNobodyIsAskedInTheClientUnlessAllowedAndPossible(t *testing.T) {
	for name, tc := range map[string]struct {
		user    bool
		conn    mcpgate.Conn
		elicits bool
	}{
		"the rule is remote-only":           {user: false, conn: alice, elicits: true},
		"the client does not elicit":        {user: true, conn: alice, elicits: false},
		"no person is known for the client": {user: true, conn: mcpgate.Conn{Requester: "claude", Session: "s1"}, elicits: true},
	} {
		t.Run(name, func(t *testing.T) {
			f, g := userGateway(tc.user)
			a := answering(map[string]any{"decision": "approve"})
			opts := &mcp.ClientOptions{}
			if tc.elicits {
				opts.ElicitationHandler = a.handle
			}
			cs := connect(t, g, tc.conn, opts)

			res := callTool(t, cs, "github__create_issue", map[string]any{"repo": "acme/app", "title": "x"})

			assert.Contains(t, text(t, res), "waiting", "still waiting for an approver")
			if tc.conn.ActingUser == "" {
				assert.Empty(t, f.userDecisions(), "the question, if any, was not the user's to answer")
				return
			}
			assert.Empty(t, a.questions())
			assert.Empty(t, f.userDecisions())
		})
	}
}

// A dismissed question leaves the call waiting; the next wait on it asks
// again.
func TestADismissedQuestionIsAskedAgainByTheNextWait(t *testing.T) {
	f, g := userGateway(true)
	var answers sync.Mutex
	n := 0
	a := &asker{answer: func(context.Context) (*mcp.ElicitResult, error) {
		answers.Lock()
		defer answers.Unlock()
		if n++; n == 1 {
			return &mcp.ElicitResult{Action: "cancel"}, nil
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
	}}
	cs := connect(t, g, alice, &mcp.ClientOptions{ElicitationHandler: a.handle})

	res := callTool(t, cs, "github__create_issue", map[string]any{"repo": "acme/app", "title": "x"})
	require.Contains(t, text(t, res), "waiting")
	callID := f.lastSubmitted().CallID

	res = callTool(t, cs, mcpgate.WaitTool, map[string]any{"call_id": callID})
	assert.False(t, res.IsError, text(t, res))
	assert.Len(t, a.questions(), 2)
	require.Len(t, f.userDecisions(), 1)
	assert.Equal(t, policy.Approved, f.userDecisions()[0].Kind)
}

// A call decided elsewhere while the client's question is open ends with
// that decision; the question is withdrawn (notifications/cancelled, as
// far as it reaches the client), and an answer that comes later is not
// applied: the first decision wins.
func TestADecisionElsewhereWinsOverTheOpenQuestion(t *testing.T) {
	f, g := userGateway(true)
	asked := make(chan struct{})
	a := &asker{answer: func(ctx context.Context) (*mcp.ElicitResult, error) {
		close(asked)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
	}}
	cs := connectHTTP(t, g, &mcp.ClientOptions{ElicitationHandler: a.handle})
	go func() {
		<-asked
		f.resolve(f.lastSubmitted().CallID, workflows.Result{Status: workflows.StatusDenied, Reason: "not today", DecidedBy: "bob", Channel: "inbox"})
	}()

	res := callTool(t, cs, "github__create_issue", map[string]any{"repo": "acme/app", "title": "x"})

	assert.True(t, res.IsError)
	assert.Contains(t, text(t, res), "not today")
	time.Sleep(1500 * time.Millisecond) // the client's late answer, if it were sent
	assert.Empty(t, f.userDecisions())
}

// cuttable is an HTTP client whose connections can all be cut at once, as
// a network that drops: no request ends cleanly, no notification is sent.
type cuttable struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func (c *cuttable) client(token string) *http.Client {
	dialer := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.cut {
			return nil, errors.New("the network is down")
		}
		conn, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			c.conns = append(c.conns, conn)
		}
		return conn, err
	}}
	return &http.Client{Transport: &bearer{token: token, base: tr}}
}

func (c *cuttable) cutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// A client whose connection drops while its user is asked loses the
// question, not the call: a client that comes back to the same session
// and asks the same call joins it, and is asked again.
func TestAClientThatDropsIsAskedAgainWhenItComesBack(t *testing.T) {
	f, g := userGateway(true)
	g = mcpgate.NewGateway(f, mcpgate.Options{Wait: 10 * time.Second, ProgressInterval: time.Hour})
	srv := httptest.NewServer(g.HTTPHandler(func(token string) (string, string, bool, bool) {
		return "claude", "alice", token == "agent-token", token == "agent-token"
	}))
	t.Cleanup(srv.Close)
	connectVia := func(hc *http.Client, a *asker) *mcp.ClientSession {
		tr := &mcp.StreamableClientTransport{Endpoint: srv.URL + "?session=my-repo", HTTPClient: hc, MaxRetries: -1}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: a.handle}).Connect(context.Background(), tr, nil)
		require.NoError(t, err)
		return cs
	}
	args := map[string]any{"repo": "acme/app", "title": "x"}

	asked := make(chan struct{})
	first := &asker{answer: func(ctx context.Context) (*mcp.ElicitResult, error) {
		close(asked)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	network := &cuttable{}
	dropped := connectVia(network.client("agent-token"), first)
	go func() {
		_, _ = dropped.CallTool(context.Background(), &mcp.CallToolParams{Name: "github__create_issue", Arguments: args})
	}()
	<-asked
	network.cutAll()

	again := answering(map[string]any{"decision": "approve"})
	back := connectVia((&cuttable{}).client("agent-token"), again)
	defer back.Close()
	res := callTool(t, back, "github__create_issue", args)

	assert.False(t, res.IsError, text(t, res))
	require.Len(t, f.submissions(), 1, "the same call: no second one was asked for")
	assert.Equal(t, "my-repo", f.submissions()[0].Session)
	require.Len(t, again.questions(), 1, "asked again")
	require.Len(t, f.userDecisions(), 1)
	assert.Equal(t, policy.Approved, f.userDecisions()[0].Kind)
	assert.Empty(t, f.cancelled, "the drop cancelled nothing")
}
