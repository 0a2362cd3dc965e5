package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// Tests of the session at scale and of the call's side of it, in virtual
// time.

func registerAt(env *testsuite.TestWorkflowEnvironment, at time.Duration, n int, tool string, timeout time.Duration) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", tool, i)
	}
	env.RegisterDelayedCallback(func() {
		for _, id := range ids {
			env.SignalWorkflow(SignalRegister, Registration{CallID: id, Tool: tool, StickyKey: tool, At: env.Now(), RequestedAt: env.Now(), Timeout: timeout})
		}
	}, at)
	return ids
}

func approveForSession(tool, by string) StickyDecision {
	return StickyDecision{Key: tool, Tool: tool, FromCall: "c0", Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: by, Channel: "cli"}}
}

func TestOneStickyDecisionReleasesHundredsOfWaitingCallsOnceEach(t *testing.T) {
	env, sent := sessionEnv(t)
	ids := registerAt(env, time.Minute, 600, "write", 24*time.Hour)
	signalAt(env, 2*time.Minute, SignalSticky, approveForSession("write", "alice"))
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateEnd, "end", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Error(err) }, OnComplete: func(any, error) {}},
			EndRequest{By: "alice", Groups: []string{"*"}})
	}, 3*time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1"})

	require.NoError(t, env.GetWorkflowError())
	for _, id := range ids {
		got := sent.to(id)
		require.Len(t, got, 2, id)
		require.Nil(t, got[0].Decision, "%s: parked first", id)
		require.Equal(t, policy.ApprovedForSession, got[1].Decision.Kind, "%s: then released", id)
	}
	sent.mu.Lock()
	defer sent.mu.Unlock()
	require.Positive(t, sent.batches, "answers go out in batches from an activity, not one signal each from the workflow")
	require.LessOrEqual(t, sent.batches, 2*(600/maxBatch+1))
}

func TestCallsABatchCouldNotReachAreForgotten(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger{})
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	env.RegisterActivity(&activities.Activities{})
	var a *activities.Activities
	var batch []activities.Signal
	env.OnActivity(a.SendSignals, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SignalsInput) ([]string, error) {
		batch = in.Signals
		return []string{in.Signals[0].WorkflowID, in.Signals[1].WorkflowID}, nil // ended meanwhile
	})
	// A run continued with 20 parked answers still to send.
	state := SessionState{Profiles: []CallProfile{{Tool: "write", Key: "write", Timeout: time.Hour}}}
	for i := range 20 {
		id := fmt.Sprintf("w%02d", i)
		state.Calls = append(state.Calls, WaitingCall{CallID: id, RequestedAt: env.Now().UnixMilli()})
		state.Outbox = append(state.Outbox, Delivery{CallID: id, Decision: DeliverAskPerson})
	}
	var view SessionView
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QuerySession)
		require.NoError(t, err)
		require.NoError(t, v.Get(&view))
	}, time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: 2 * time.Hour, State: state})

	require.NoError(t, env.GetWorkflowError())
	require.Len(t, batch, 20, "one batch from one activity")
	require.Equal(t, CallWorkflowID("w00"), batch[0].WorkflowID)
	require.Equal(t, SignalSessionDecision, batch[0].Name)
	require.JSONEq(t, `{}`, string(batch[0].Arg), "ask a person")
	require.Equal(t, 18, view.WaitingCount, "the two calls that no longer run are forgotten")
}

func TestACallRegisteringAfterAStickyDecisionIsNeverParked(t *testing.T) {
	env, sent := sessionEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalSticky, approveForSession("write", "alice"))
		env.SignalWorkflow(SignalRegister, Registration{CallID: "c1", Tool: "write", StickyKey: "write", RequestedAt: env.Now(), Timeout: time.Hour})
	}, time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	got := sent.to("c1")
	require.Len(t, got, 1, "never told to ask a person")
	require.Equal(t, policy.ApprovedForSession, got[0].Decision.Kind)
}

func TestALongFanOutContinuesAsNewWithItsOutbox(t *testing.T) {
	env, sent := sessionEnv(t)
	ids := registerAt(env, time.Minute, 400, "write", 24*time.Hour)
	signalAt(env, 2*time.Minute, SignalSticky, approveForSession("write", "alice"))
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", ContinueAsNewAfter: 401})

	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	var next SessionInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	released := 0
	for _, id := range ids {
		if got := sent.to(id); len(got) == 2 {
			released++
		}
	}
	require.Less(t, released, len(ids), "the run stopped between batches")
	require.Len(t, next.State.Outbox, len(ids)-released, "the rest is owed in the outbox")
	state, err := json.Marshal(next.State)
	require.NoError(t, err)
	require.Less(t, len(state), 100*len(ids), "a few dozen bytes per call cross the boundary")

	env2, sent2 := sessionEnv(t)
	next.ContinueAsNewAfter = 0
	next.IdleTimeout = time.Hour
	env2.ExecuteWorkflow(ToolgateSession, next)
	require.NoError(t, env2.GetWorkflowError())
	for _, id := range ids {
		all := append(sent.to(id), sent2.to(id)...)
		require.Len(t, all, 2, id)
		require.Equal(t, policy.ApprovedForSession, all[1].Decision.Kind, id)
	}
}

func TestEndAndAStickyFanOutTogetherAnswerEveryCallOnce(t *testing.T) {
	env, sent := sessionEnv(t)
	ids := registerAt(env, time.Minute, 300, "write", 24*time.Hour)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalSticky, approveForSession("write", "alice"))
		env.UpdateWorkflow(UpdateEnd, "end", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Error(err) }, OnComplete: func(any, error) {}},
			EndRequest{By: "bob", Groups: []string{"*"}})
	}, 2*time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1"})

	require.NoError(t, env.GetWorkflowError())
	for _, id := range ids {
		got := sent.to(id)
		require.Len(t, got, 2, "%s: parked, then one final answer", id)
		require.NotNil(t, got[1].Decision)
	}
}

func TestAWaitingCallThatNeverSaysItEndedIsForgottenAtItsDeadline(t *testing.T) {
	env, _ := sessionEnv(t)
	registerAt(env, time.Minute, 3, "write", time.Hour)
	var before, after SessionView
	query := func(into *SessionView) func() {
		return func() {
			v, err := env.QueryWorkflow(QuerySession)
			require.NoError(t, err)
			require.NoError(t, v.Get(into))
		}
	}
	env.RegisterDelayedCallback(query(&before), 30*time.Minute)
	env.RegisterDelayedCallback(query(&after), 63*time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: 2 * time.Hour})

	require.NoError(t, env.GetWorkflowError(), "with nothing waiting the session goes idle and ends")
	require.Equal(t, 3, before.WaitingCount)
	require.Zero(t, after.WaitingCount, "terminated calls do not leak")
	require.Less(t, env.Now().Sub(time.Now()), 5*time.Hour)
}

func TestAFreshRunAsksTheCallsVisibilityListsToRegisterAgain(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger{})
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	var a *activities.Activities
	var query string
	env.OnActivity(a.ListWorkflowIDs, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListInput) ([]string, error) {
		query = in.Query
		return []string{CallWorkflowID("orphan-1"), CallWorkflowID("orphan-2")}, nil
	})
	var mu sync.Mutex // the environment calls mocks from its own goroutines
	var asked []string
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", SignalReregister, mock.Anything).Return(
		func(_, workflowID, _, _ string, _ any) error {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, workflowID)
			return nil
		})
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s'1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []string{CallWorkflowID("orphan-1"), CallWorkflowID("orphan-2")}, asked, "each asked once; a batch goes out together")
	require.Contains(t, query, `ToolgateSession = 's\'1'`, "the session is quoted")
	require.True(t, strings.Contains(query, "ToolgateStatus = 'pending'"))
}

// silentSession makes every signal to the session succeed without an
// answer, like a session that is slow or broken; it returns the names of
// the signals the session got.
func (s *CallSuite) silentSession() *[]string {
	var mu sync.Mutex // the environment calls mocks from its own goroutines
	var got []string
	s.env.OnSignalExternalWorkflow(mock.Anything, SessionWorkflowID("s1"), "", mock.Anything, mock.Anything).Return(
		func(_, _, _, name string, _ any) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, name)
			return nil
		})
	return &got
}

func (s *CallSuite) TestASilentSessionDelaysAPersonByAMinuteAtMost() {
	s.silentSession()
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Timeout: time.Hour}
	var early CallState
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflowByID(CallWorkflowID("c1"), QueryCall)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(&early))
	}, 30*time.Second)
	// A decision signalled while the call still waits for its session
	// waits for the call instead of being dropped.
	s.env.RegisterDelayedCallback(func() {
		s.NoError(s.env.SignalWorkflowByID(CallWorkflowID("c1"), SignalDecide, DecideRequest{CallID: "c1", Decision: decision(policy.Approved, "alice")}))
	}, 45*time.Second)
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusEvaluating, early.Status, "still waiting for the session")
	s.Equal(StatusOK, r.Status)
	s.Equal("alice", r.DecidedBy, "the early decision was kept, not dropped")
	s.Equal(sessionAnswerTimeout, r.DecidedAt.Sub(r.RequestedAt), "it applied as soon as the call asked a person, a minute in")
}

func (s *CallSuite) TestACancelledWaitingCallEndsDeniedAndTellsItsSession() {
	told := s.silentSession()
	s.env.RegisterDelayedCallback(func() { s.env.CancelWorkflow() }, 2*time.Hour)
	s.env.SetStartWorkflowOptions(startOptions("c1"))
	s.env.ExecuteWorkflow(ToolCallWorkflow, call("c1", "write", `{"path":"a","content":"x"}`))

	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError(), "a cancelled call still returns its Result")
	var r Result
	s.Require().NoError(s.env.GetWorkflowResult(&r))
	s.Equal(StatusDenied, r.Status)
	s.Equal("cancelled by an operator (a Temporal cancel request)", r.Reason)
	s.Equal(ChannelCancel, r.Channel)
	s.Zero(s.runs.total())
	s.Equal([]string{SignalRegister, SignalDone}, *told, "the session forgets the call")
}

func (s *CallSuite) TestTheRequesterOrAnApproverOfItsGroupsMayCancelAWaitingCall() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}}
	cancelAt := func(at time.Duration, callID string, req CancelRequest) *updateOutcome {
		o := &updateOutcome{}
		s.env.RegisterDelayedCallback(func() {
			updateSeq++
			_ = s.env.UpdateWorkflowByID(CallWorkflowID(callID), UpdateCancel, fmt.Sprint("cancel-", updateSeq), &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { o.rejected = err }, OnComplete: func(_ any, err error) { o.applied = err == nil },
			}, req)
		}, at)
		return o
	}
	stranger := cancelAt(time.Hour, "c1", CancelRequest{CallID: "c1", By: "fin1", Groups: []string{"finance"}})
	own := cancelAt(2*time.Hour, "c1", CancelRequest{CallID: "c1", By: "agent-1"})
	approver := cancelAt(2*time.Hour, "c2", CancelRequest{CallID: "c2", By: "ops1", Groups: []string{"ops"}})
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
	}})

	s.Require().Error(stranger.rejected)
	s.Contains(stranger.rejected.Error(), "fin1 may not cancel call c1")
	s.True(own.applied)
	s.True(approver.applied)
	s.Equal("cancelled by agent-1", rs[0].Reason)
	s.Equal("cancelled by ops1", rs[1].Reason)
	s.Equal(StatusDenied, rs[1].Status)
	s.Equal(2*time.Hour, rs[0].FinishedAt.Sub(s.start), "it ends at once")
}

func (s *CallSuite) TestAResultStaysUnderThePayloadLimit() {
	big := strings.Repeat("x", 500<<10)
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"fill":"` + big + `"}`)
	decideAt(s.env, time.Hour, "c1", d)
	s.policy.ask["large"] = policy.ApprovalRequest{Message: "large?"}
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "large", `{"fill":"y`+big+`"}`)}})

	r := rs[0]
	s.Equal(StatusOK, r.Status)
	s.Zero(len(r.OriginalArgs), "the agent's arguments are left out")
	s.True(strings.HasSuffix(r.Note, "(the original arguments are left out of this result for size; the call's history has them)"))
	s.Less(len(r.Args)+len(r.Output), 2<<20)
}

func (s *CallSuite) TestEditedArgumentsOverTheLimitAreRefused() {
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"path":"b","content":"` + strings.Repeat("x", policy.MaxArgsBytes) + `"}`)
	o := decideAt(s.env, time.Hour, "c1", d)
	decideAt(s.env, 2*time.Hour, "c1", decision(policy.Denied, "alice"))
	s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Require().Error(o.rejected)
	s.Contains(o.rejected.Error(), "over the 524288-byte limit")
}
