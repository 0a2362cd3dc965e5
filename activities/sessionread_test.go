package activities

import (
	"context"
	"encoding/json"
	"fmt"
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
		resp, _, err := s.read(context.Background(), "toolgate/session/s1", time.Now(), g.describe)
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

// The calls of one batch of registrations need a describe sent after the
// batch landed, not after each of them arrived: those that arrive while
// such a describe is in flight share it, and only a caller that needs a
// later one waits for the next.
func TestCallsOfOneBatchShareADescribeSentAfterItLanded(t *testing.T) {
	var s sessionReads
	g := &gatedDescribe{release: make(chan struct{})}
	read := func(notBefore time.Time) (int64, time.Time) {
		resp, sent, err := s.read(context.Background(), "toolgate/session/s1", notBefore, g.describe)
		require.NoError(t, err)
		return resp.GetWorkflowExecutionInfo().GetHistoryLength(), sent
	}

	landed := time.Now()
	type answer struct {
		n    int64
		sent time.Time
	}
	batch := make([]answer, 50)
	var wg sync.WaitGroup
	wg.Go(func() { batch[0].n, batch[0].sent = read(landed) })
	require.Eventually(t, func() bool { return g.sent.Load() == 1 }, 5*time.Second, time.Millisecond)
	for i := 1; i < len(batch); i++ {
		wg.Go(func() { batch[i].n, batch[i].sent = read(landed) })
	}
	// A caller whose registration landed after that describe was sent.
	time.Sleep(10 * time.Millisecond)
	after := make(chan int64)
	go func() {
		n, _ := read(time.Now())
		after <- n
	}()
	time.Sleep(50 * time.Millisecond)
	assert.EqualValues(t, 1, g.sent.Load(), "one describe in flight at a time")
	g.release <- struct{}{}
	wg.Wait()
	for i, a := range batch {
		assert.EqualValues(t, 1, a.n, "caller %d of the batch shares the describe in flight", i)
		assert.False(t, a.sent.Before(landed), "caller %d: its describe was sent after its batch landed", i)
	}
	g.release <- struct{}{}
	assert.EqualValues(t, 2, <-after, "a caller that landed later waits for a describe sent after it")
	assert.EqualValues(t, 2, g.sent.Load(), "51 callers, 2 describes")
}

func TestASessionIsRememberedBriefly(t *testing.T) {
	var s sessionReads
	now := time.Now()
	_, ok := s.known("toolgate/session/s1", now)
	assert.False(t, ok)
	s.saw("toolgate/session/s1", knownSession{Owner: "agent-a", Quiet: true, At: now})
	k, ok := s.known("toolgate/session/s1", now.Add(knownTTL-time.Second))
	assert.True(t, ok)
	assert.Equal(t, knownSession{Owner: "agent-a", Quiet: true, At: now}, k)
	_, ok = s.known("toolgate/session/s1", now.Add(knownTTL+time.Second))
	assert.False(t, ok, "read again after the TTL")

	s.saw("toolgate/session/s1", knownSession{Owner: "agent-a", Quiet: true, At: now.Add(-time.Second)})
	k, _ = s.known("toolgate/session/s1", now)
	assert.Equal(t, now, k.At, "a read sent earlier that lands later does not replace a later one")
	s.saw("toolgate/session/s1", knownSession{Owner: "agent-a", At: now.Add(time.Second)})
	k, _ = s.known("toolgate/session/s1", now.Add(time.Second))
	assert.False(t, k.Quiet, "a later read that showed a decision replaces it")

	s.saw("toolgate/session/s2", knownSession{At: now})
	_, ok = s.known("toolgate/session/s2", now)
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
// agent's call is refused all the same. A call that asks a person in a
// session that showed no sticky decision and no end moments ago does not
// either: nothing decides it before it joins its waiting room, which
// reads the session afresh. It does read the session when one showed a
// sticky decision or its end (which may decide it at once), and when a
// coded handler could decide it before it joins.
func TestACallTakesTheSessionReadMomentsAgoWhenNothingElseCanDecideIt(t *testing.T) {
	quiet := memoOf(t, SessionNews{}, "agent-a")
	srv := &countingSession{sessionServer: &sessionServer{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, memo: quiet}}
	a := &Activities{Client: srv, Policy: askButEcho{}, Tools: previewTools()}
	n := 0
	evaluate := func(tool, requester string) Evaluation {
		var ev Evaluation
		n++
		in := EvaluateInput{Call: policy.Call{ID: fmt.Sprintf("c%d", n), Tool: tool, Args: json.RawMessage(`{}`), Requester: requester, Session: "s1"}, Session: "toolgate/session/s1"}
		require.NoError(t, run(t, a, a.Evaluate, in, &ev))
		return ev
	}

	assert.Equal(t, "agent-a", evaluate("echo", "agent-a").SessionOwner)
	assert.EqualValues(t, 1, srv.describes.Load())
	assert.Equal(t, "agent-a", evaluate("echo", "agent-b").SessionOwner, "the owner it read: agent-b's call is refused")
	assert.EqualValues(t, 1, srv.describes.Load(), "no second describe for an auto-approved call")
	ev := evaluate("shell", "agent-b")
	assert.Equal(t, "agent-a", ev.SessionOwner, "an asking call is refused into another's session all the same")
	assert.EqualValues(t, 1, srv.describes.Load(), "a quiet session is not described again for a call that asks")

	// The session decides: the next describe shows it, and from then on
	// every asking call reads the session itself.
	approved := policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "session"}
	srv.memo = memoOf(t, SessionNews{Revision: 1, Sticky: []KeyedDecision{{Key: "other", Since: 1, Decision: approved}}}, "agent-a")
	a.reads = sessionReads{} // a worker past knownTTL
	evaluate("shell", "agent-a")
	assert.EqualValues(t, 2, srv.describes.Load())
	evaluate("shell", "agent-a")
	assert.EqualValues(t, 3, srv.describes.Load(), "a session that showed a sticky decision is read for each asking call")
	evaluate("echo", "agent-a")
	assert.EqualValues(t, 3, srv.describes.Load(), "an auto-approved call still takes the owner")

	ended := policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by root", DecidedBy: "root"}
	srv.memo = memoOf(t, SessionNews{Revision: 2, End: &ended}, "agent-a")
	a.reads = sessionReads{}
	require.True(t, evaluate("shell", "agent-a").SessionEnded)
	require.True(t, evaluate("shell", "agent-a").SessionEnded, "an ended session is read, and seen ended, for each asking call")
	assert.EqualValues(t, 5, srv.describes.Load())

	srv.memo = quiet
	a.reads = sessionReads{}
	a.Handler = policy.ApprovalHandlerFunc(func(context.Context, policy.Call, policy.ApprovalRequest) (*policy.Decision, error) {
		return &policy.Decision{Kind: policy.Approved, DecidedBy: "handler"}, nil
	})
	evaluate("shell", "agent-a")
	evaluate("shell", "agent-a")
	assert.EqualValues(t, 7, srv.describes.Load(), "a coded handler may decide before the call joins its room: the session is read for it")
}
