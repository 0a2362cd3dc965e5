package activities

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/toolgate/toolgate/policy"
)

// gatedDescribe answers describes one at a time, each when the test
// releases it, numbered in the order they were sent.
type gatedDescribe struct {
	sent    atomic.Int64
	release chan struct{}
}

func (g *gatedDescribe) describe(ctx context.Context, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	n := g.sent.Add(1)
	<-g.release
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{HistoryLength: n}}, nil
}

// Callers that arrive together share one describe; none is handed one that
// was already sent when it arrived.
func TestReadsOfABusySessionAreSharedAndNeverOlderThanTheCaller(t *testing.T) {
	var s sessionReads
	g := &gatedDescribe{release: make(chan struct{})}
	read := func() int64 {
		resp, err := s.read(context.Background(), "toolgate/session/s1", g.describe)
		require.NoError(t, err)
		return resp.GetWorkflowExecutionInfo().GetHistoryLength()
	}

	first := make(chan int64)
	go func() { first <- read() }()
	require.Eventually(t, func() bool { return g.sent.Load() == 1 }, 5*time.Second, time.Millisecond, "the first caller's describe is sent")

	// 50 callers arrive while it is in flight: they wait for one more.
	var later sync.WaitGroup
	got := make([]int64, 50)
	for i := range got {
		later.Go(func() { got[i] = read() })
	}
	time.Sleep(50 * time.Millisecond)
	assert.EqualValues(t, 1, g.sent.Load(), "one describe in flight at a time")
	g.release <- struct{}{}
	assert.EqualValues(t, 1, <-first)
	g.release <- struct{}{}
	later.Wait()
	for i, n := range got {
		assert.EqualValues(t, 2, n, "caller %d: the describe sent after it arrived, not the one in flight", i)
	}
	assert.EqualValues(t, 2, g.sent.Load(), "51 callers, 2 describes")

	go func() { g.release <- struct{}{} }()
	assert.EqualValues(t, 3, read(), "a caller alone gets a describe of its own")
}

func TestAnOwnerIsRememberedBriefly(t *testing.T) {
	var s sessionReads
	now := time.Now()
	_, ok := s.ownerFor("toolgate/session/s1", now)
	assert.False(t, ok)
	s.sawOwner("toolgate/session/s1", "agent-a", now)
	owner, ok := s.ownerFor("toolgate/session/s1", now.Add(ownerTTL-time.Second))
	assert.True(t, ok)
	assert.Equal(t, "agent-a", owner)
	_, ok = s.ownerFor("toolgate/session/s1", now.Add(ownerTTL+time.Second))
	assert.False(t, ok, "read again after the TTL")
	s.sawOwner("toolgate/session/s2", "", now)
	_, ok = s.ownerFor("toolgate/session/s2", now)
	assert.False(t, ok, "no owner is not remembered")
}

// countingSession counts the describes of a sessionServer.
type countingSession struct {
	*sessionServer
	describes atomic.Int64
}

func (c *countingSession) DescribeWorkflowExecution(ctx context.Context, id, run string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.describes.Add(1)
	return c.sessionServer.DescribeWorkflowExecution(ctx, id, run)
}

// An auto-approved call needs only the session's owner, which a call read
// moments ago: it does not describe the session again, and another
// agent's call is refused all the same. A call that asks a person always
// reads the session (its sticky decisions, its end).
func TestAnAutoApprovedCallTakesTheOwnerReadMomentsAgo(t *testing.T) {
	srv := &countingSession{sessionServer: &sessionServer{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, memo: memoOf(t, SessionNews{}, "agent-a")}}
	a := &Activities{Client: srv, Policy: askButEcho{}, Tools: previewTools()}
	evaluate := func(tool, requester string) Evaluation {
		var ev Evaluation
		in := EvaluateInput{Call: policy.Call{ID: "c-" + tool, Tool: tool, Args: json.RawMessage(`{}`), Requester: requester, Session: "s1"}, Session: "toolgate/session/s1"}
		require.NoError(t, run(t, a, a.Evaluate, in, &ev))
		return ev
	}

	assert.Equal(t, "agent-a", evaluate("echo", "agent-a").SessionOwner)
	assert.EqualValues(t, 1, srv.describes.Load())
	assert.Equal(t, "agent-a", evaluate("echo", "agent-b").SessionOwner, "the owner it read: agent-b's call is refused")
	assert.EqualValues(t, 1, srv.describes.Load(), "no second describe for an auto-approved call")
	evaluate("shell", "agent-a")
	assert.EqualValues(t, 2, srv.describes.Load(), "a call that asks reads the session")
}
