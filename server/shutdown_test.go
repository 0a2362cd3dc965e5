package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// waitingTemporal stands in for a Temporal frontend with one call, c1,
// that waits for a person for ever: a wait for its Result lasts until the
// waiter gives up. polls receives a value each time a wait begins.
type waitingTemporal struct {
	client.Client // nil: methods not written here panic
	polls         chan struct{}
}

func (f *waitingTemporal) state() workflows.CallState {
	return workflows.CallState{
		Call:   policy.Call{ID: "c1", Session: "s1", Tool: "shell", Requester: "agent-1", Args: json.RawMessage(`{"cmd":"ls"}`)},
		Status: workflows.StatusPending,
	}
}

func (f *waitingTemporal) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return &waitingRun{f: f}, nil
}

func (f *waitingTemporal) GetWorkflow(context.Context, string, string) client.WorkflowRun {
	return &waitingRun{f: f}
}

func (f *waitingTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if strings.HasPrefix(id, workflows.SessionWorkflowID("")) {
		return ownedSession("agent-1"), nil
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
	}}, nil
}

func (f *waitingTemporal) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return jsonValue{f.state()}, nil
}

func (f *waitingTemporal) GetWorkflowHistory(ctx context.Context, _, _ string, longPoll bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	if !longPoll { // a door reads the call it signs for
		input, err := converter.GetDefaultDataConverter().ToPayloads(workflows.CallInput{Call: f.state().Call})
		if err != nil {
			panic(err)
		}
		return &oneEvent{&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
			WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: input},
		}}}
	}
	return &waitingHistory{ctx: ctx, f: f}
}

// waitingHistory is the history of a call that never moves: its long poll
// lasts until the waiter gives up.
type waitingHistory struct {
	ctx context.Context
	f   *waitingTemporal
}

func (h *waitingHistory) HasNext() bool { return true }

func (h *waitingHistory) Next() (*historypb.HistoryEvent, error) {
	h.f.polls <- struct{}{}
	<-h.ctx.Done()
	return nil, h.ctx.Err()
}

// waitingRun is the run of a call that never ends.
type waitingRun struct {
	client.WorkflowRun // nil: methods not written here panic
	f                  *waitingTemporal
}

func (r *waitingRun) GetRunID() string { return "run-1" }

func (r *waitingRun) Get(ctx context.Context, _ any) error {
	r.f.polls <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// jsonValue is a query answer.
type jsonValue struct{ v any }

func (v jsonValue) HasValue() bool { return true }

func (v jsonValue) Get(ptr any) error {
	b, err := json.Marshal(v.v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, ptr)
}

// TestShutdownEndsLongPolls: a server shutting down does not wait out the
// long polls of agents; each gets the waiting call (202), as when its wait
// runs out, and Shutdown returns at once.
func TestShutdownEndsLongPolls(t *testing.T) {
	temporal := &waitingTemporal{polls: make(chan struct{}, 2)}
	hs := NewHTTPServer(New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	type answer struct {
		status int
		body   string
		err    error
	}
	polls := []struct{ method, path, body string }{
		{"GET", "/v1/calls/c1?wait=5m", ""},
		{"POST", "/v1/calls?wait=5m", `{"call_id":"c1","session":"s1","tool":"shell","args":{"cmd":"ls"}}`},
	}
	answers := make([]answer, len(polls))
	var wg sync.WaitGroup
	for i, p := range polls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(p.method, base+p.path, strings.NewReader(p.body))
			if err != nil {
				answers[i].err = err
				return
			}
			req.Header.Set("Authorization", "Bearer agent-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers[i] = answer{resp.StatusCode, string(b), err}
		}()
	}
	for range polls {
		select {
		case <-temporal.polls:
		case <-time.After(10 * time.Second):
			t.Fatal("the long polls did not start")
		}
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, hs.Shutdown(ctx), "Shutdown waited for the polls")
	wg.Wait()
	assert.Less(t, time.Since(start), 5*time.Second, "Shutdown and the polls' answers took too long")
	assert.True(t, errors.Is(<-served, http.ErrServerClosed))

	for i, a := range answers {
		require.NoError(t, a.err, "%s %s", polls[i].method, polls[i].path)
		assert.Equal(t, http.StatusAccepted, a.status, "%s %s: %s", polls[i].method, polls[i].path, a.body)
		var w tgclient.Waiting
		require.NoError(t, json.Unmarshal([]byte(a.body), &w), a.body)
		assert.Equal(t, "c1", w.CallID)
		assert.Equal(t, workflows.StatusPending, w.Status)
	}
}

// TestLongPollWithoutShutdown: the wait still runs its full length when
// the server is not shutting down, and New's handler works without
// NewHTTPServer.
func TestLongPollWithoutShutdown(t *testing.T) {
	temporal := &waitingTemporal{polls: make(chan struct{}, 1)}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	start := time.Now()
	rec := apiCall(h, "agent-token", "GET", "/v1/calls/c1?wait=300ms", "")
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	assert.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
}
