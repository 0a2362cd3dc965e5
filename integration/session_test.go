package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkclient "go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The session at scale, and what operators do to calls and sessions, on
// the embedded server. `toolgate bench` runs the same path with 10,000
// calls (docs/benchmarks.md).

// parkShellCalls submits n shell calls in one session, each appending its
// ID to runs.txt when it runs, and waits until the session holds them all.
func parkShellCalls(t *testing.T, d *devEnv, c *tgclient.Client, session string, n int) []string {
	ids := make([]string, n)
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(16)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", session, i)
		g.Go(func() error {
			args := fmt.Sprintf(`{"command":"echo %s >> runs.txt"}`, ids[i])
			_, err := c.Submit(ctx, tgclient.CallRequest{CallID: ids[i], Session: session, Tool: "shell", Args: json.RawMessage(args), Requester: "agent-1"})
			return err
		})
	}
	require.NoError(t, g.Wait())
	require.Eventually(t, func() bool {
		v, err := c.Session(context.Background(), session)
		return err == nil && v.WaitingCount == n
	}, 2*time.Minute, 200*time.Millisecond, "the session holds every waiting call")
	return ids
}

func TestOneSessionReleasesHundredsOfWaitingCallsWithOneDecision(t *testing.T) {
	d := newDev(t)
	c := d.client()
	const n = 300
	ids := parkShellCalls(t, d, c, "many", n)

	ctx := context.Background()
	d.waitPending(c, ids[0])
	_, err := c.Decide(ctx, ids[0], policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "cli"})
	require.NoError(t, err)
	for _, id := range ids {
		r, err := c.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, workflows.StatusOK, r.Status, "%s: %s", id, r.Reason)
	}

	data, err := os.ReadFile(filepath.Join(d.workspace, "runs.txt"))
	require.NoError(t, err)
	ran := strings.Fields(string(data))
	sort.Strings(ran)
	want := append([]string(nil), ids...)
	sort.Strings(want)
	assert.Equal(t, want, ran, "every call ran exactly once")

	v, err := c.Session(ctx, "many")
	require.NoError(t, err)
	assert.Zero(t, v.WaitingCount)
	require.Len(t, v.Sticky, 1, "the sticky decision is kept")
	assert.Equal(t, "alice", v.Sticky[0].Decision.DecidedBy)
}

func TestCancellingAWaitingCall(t *testing.T) {
	dir := t.TempDir()
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", writeTokensFile(t, dir))
	as := func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}

	t.Run("by its requester with the CLI", func(t *testing.T) {
		d := d.in(t)
		d.callJSON(5, "--session", "cx", "--id", "cx1", "--wait", "300ms", "shell", `{"command":"true"}`)
		r := d.cli("cancel", "cx1", "--by", "cli-agent", "--own")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "cancelled by cli-agent")
		out := d.callJSON(3, "--session", "cx", "--id", "cx1", "shell", `{"command":"true"}`)
		assert.Equal(t, "denied", out["status"])
		assert.Equal(t, "cancelled by cli-agent", out["reason"])
		r = d.cli("cancel", "cx1", "--by", "cli-agent", "--own")
		assert.Equal(t, 1, r.code, "a finished call cannot be cancelled")
	})

	t.Run("over the API: an agent its own calls only", func(t *testing.T) {
		agent := as("agent-1")
		r := agent.do("POST", "/v1/calls?wait=100ms", map[string]any{"session": "cy", "tool": "shell", "call_id": "cy1", "args": map[string]any{"command": "true"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/cy1", nil).body["status"] == "pending" }, 30*time.Second, 20*time.Millisecond)
		r = as("root").do("POST", "/v1/calls/cy1/cancel", nil) // an admin may
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "cancelled by root", agent.do("GET", "/v1/calls/cy1?wait=30s", nil).body["reason"])

		r = agent.do("POST", "/v1/calls?wait=100ms", map[string]any{"session": "cy", "tool": "shell", "call_id": "cy2", "args": map[string]any{"command": "true"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/cy2", nil).body["status"] == "pending" }, 30*time.Second, 20*time.Millisecond)
		r = agent.do("POST", "/v1/calls/cy2/cancel", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "cancelled by agent-1", agent.do("GET", "/v1/calls/cy2?wait=30s", nil).body["reason"])

		r = agent.do("POST", "/v1/calls/cy2/cancel", nil)
		assert.Equal(t, http.StatusConflict, r.status, "its own finished call no longer waits: %s", r.raw)
		assert.Equal(t, "already_decided", r.errorCode())
		// Another agent learns nothing: its finished call answers as a call
		// that does not exist.
		other := as("agent-2").do("POST", "/v1/calls/cy2/cancel", nil)
		none := as("agent-2").do("POST", "/v1/calls/cy-never/cancel", nil)
		assert.Equal(t, http.StatusNotFound, other.status, other.raw)
		assert.Equal(t, none.status, other.status)
		assert.Equal(t, none.errorCode(), other.errorCode())
	})

	t.Run("through Temporal's own cancel", func(t *testing.T) {
		d := d.in(t)
		c := d.client()
		d.callJSON(5, "--session", "cz", "--id", "cz1", "--wait", "300ms", "shell", `{"command":"true"}`)
		d.waitPending(c, "cz1")
		require.NoError(t, c.Temporal().CancelWorkflow(context.Background(), workflows.CallWorkflowID("cz1"), ""))
		r, err := c.Wait(context.Background(), "cz1")
		require.NoError(t, err, "the call ends with a Result")
		assert.Equal(t, workflows.StatusDenied, r.Status)
		assert.Equal(t, "cancelled by an operator (a Temporal cancel request)", r.Reason)
		require.Eventually(t, func() bool {
			v, err := c.Session(context.Background(), "cz")
			return err == nil && v.WaitingCount == 0
		}, 30*time.Second, 50*time.Millisecond, "the session forgot the call")
	})

	t.Run("a call started without toolgate's client lists like any other", func(t *testing.T) {
		d := d.in(t)
		c := d.client()
		in := workflows.CallInput{Call: policy.Call{ID: "raw1", Session: "raw", Tool: "shell", Args: json.RawMessage(`{"command":"true"}`), Requester: "script"}}
		// An operator's script, signing with the door key.
		submission, err := d.door().Sign(policy.SubmissionStatement(in.Call))
		require.NoError(t, err)
		in.Submission = submission
		_, err = c.Temporal().ExecuteWorkflow(context.Background(), sdkclient.StartWorkflowOptions{ID: workflows.CallWorkflowID("raw1"), TaskQueue: workflows.TaskQueue},
			workflows.ToolCallWorkflowType, in)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			calls, _ := as("root").do("GET", "/v1/pending?session=raw", nil).body["calls"].([]any)
			return len(calls) == 1 && calls[0].(map[string]any)["tool"] == "shell"
		}, 30*time.Second, 100*time.Millisecond, "it set its own session, tool and requester")
	})

	t.Run("a terminated call is gone, not an internal error", func(t *testing.T) {
		d := d.in(t)
		c := d.client()
		d.callJSON(5, "--session", "ct", "--id", "ct1", "--wait", "300ms", "shell", `{"command":"true"}`)
		d.waitPending(c, "ct1")
		require.NoError(t, c.Temporal().TerminateWorkflow(context.Background(), workflows.CallWorkflowID("ct1"), "", "operator test"))
		r := as("root").do("GET", "/v1/calls/ct1", nil)
		assert.Equal(t, http.StatusGone, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "an operator terminated it")
	})
}

func TestATerminatedSessionsWaitingCallsAreFoundAgain(t *testing.T) {
	d := newDev(t)
	c := d.client()
	ctx := context.Background()
	ids := parkShellCalls(t, d, c, "orphans", 3)
	// A sticky decision of another tool starts the session workflow.
	_, err := c.Submit(ctx, tgclient.CallRequest{CallID: "orphans-w1", Session: "orphans", Tool: "write_file", Args: json.RawMessage(`{"path":"a.txt","content":"x"}`), Requester: "agent-1"})
	require.NoError(t, err)
	d.waitPending(c, "orphans-w1")
	_, err = c.Decide(ctx, "orphans-w1", policy.Decision{Kind: policy.DeniedAlways, DecidedBy: "alice", Channel: "cli"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := c.Session(ctx, "orphans")
		return err == nil && len(v.Sticky) == 1
	}, time.Minute, 50*time.Millisecond)
	require.NoError(t, c.Temporal().TerminateWorkflow(ctx, workflows.SessionWorkflowID("orphans"), "", "operator test"))

	// The calls never depended on the session's run: they still wait, and
	// a new approve-for-session (a fresh run) finds them.
	v, err := c.Session(ctx, "orphans")
	require.NoError(t, err)
	assert.Equal(t, 3, v.WaitingCount, "the calls still wait")
	assert.Empty(t, v.Sticky, "the terminated run's sticky decisions are lost (docs/production.md)")
	_, err = c.Submit(ctx, tgclient.CallRequest{CallID: "orphans-new", Session: "orphans", Tool: "shell", Args: json.RawMessage(`{"command":"echo orphans-new >> runs.txt"}`), Requester: "agent-1"})
	require.NoError(t, err)
	d.waitPending(c, "orphans-new")

	_, err = c.Decide(ctx, "orphans-new", policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "cli"})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, id := range append(ids, "orphans-new") {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Wait(ctx, id)
			assert.NoError(t, err)
			assert.Equal(t, workflows.StatusOK, r.Status, id)
		}()
	}
	wg.Wait()
}
