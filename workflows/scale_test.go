package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
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

func TestASessionFindsItsWaitingCallsThroughVisibility(t *testing.T) {
	// A fresh run (say, after an operator terminated the last one) knows
	// no call; it finds them when it has something to tell.
	env, sent := sessionEnv(t)
	var memo map[string]any
	env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) { memo = args.Get(0).(map[string]any) }).Return(nil)
	approved := policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "cli"}
	signalAt(env, time.Minute, SignalSticky, StickyDecision{Key: "wri'te", Tool: "write", FromCall: "c0", Decision: approved})
	var shownBeforeRelease map[string]any
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == "ReleaseWaiting" {
			shownBeforeRelease = maps.Clone(memo)
		}
	})
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s'1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	releases := sent.released()
	require.Len(t, releases, 1, "one activity hands the decision to every waiting call")
	r := releases[0]
	require.Equal(t, SignalSessionDecision, r.Name)
	require.Contains(t, r.Query, `ToolgateSession = 's\'1'`, "the session is quoted")
	require.Contains(t, r.Query, `ToolgateStickyKey = 'wri\'te'`, "only calls of the decision's key")
	require.Contains(t, r.Query, "ToolgateStatus = 'pending'")
	var sd SessionDecision
	require.NoError(t, json.Unmarshal(r.Arg, &sd))
	require.Equal(t, "wri'te", sd.Key)
	require.Equal(t, policy.ApprovedForSession, sd.Decision.Kind)
	require.Equal(t, "bob", sd.Decision.DecidedBy)
	require.Equal(t, "session", sd.Decision.Channel)
	require.Contains(t, shownBeforeRelease[MemoSticky], "wri'te", "the memo shows the decision before the calls are listed, for the calls that park meanwhile")
}

func TestEndingASessionDeniesTheCallsVisibilityFindsWaiting(t *testing.T) {
	var checked activities.CheckWaitingInput
	env, sent := sessionEnv(t, func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity("CheckWaiting", mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.CheckWaitingInput) (string, error) {
			checked = in
			if slices.Contains(in.Approver.Groups, "ops") {
				return "", nil
			}
			return "waiting call toolgate/call/c9: not in its groups", nil
		})
		env.OnActivity("ReleaseWaiting", mock.Anything, mock.Anything).Return(3, nil)
	})
	var refused error
	var denied int
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateEnd, "end-1", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(error) {},
			OnComplete: func(_ any, err error) { refused = err }}, EndRequest{By: "fin1", Groups: []string{"finance"}})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateEnd, "end-2", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Errorf("end refused: %v", err) },
			OnComplete: func(n any, err error) { require.NoError(t, err); denied = n.(int) }}, EndRequest{By: "ops1", Groups: []string{"ops"}})
	}, 2*time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.ErrorContains(t, refused, "fin1 may not end session s1: waiting call toolgate/call/c9: not in its groups")
	require.Equal(t, "ops1", checked.Approver.Name)
	require.Contains(t, checked.Query, "ToolgateStatus = 'pending'")
	require.NotContains(t, checked.Query, "ToolgateStickyKey", "every waiting call of the session")
	require.Equal(t, 3, denied, "the calls the release told")
	require.Empty(t, sent.released(), "only the accepted end released (mocked above)")
}

func TestAnIdleSessionStaysWhileCallsWaitInIt(t *testing.T) {
	listings := 0
	env, _ := sessionEnv(t, func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity("ListWorkflowIDs", mock.Anything, mock.Anything).Return(func(context.Context, activities.ListInput) ([]string, error) {
			listings++
			if listings < 3 {
				return []string{CallWorkflowID("c1")}, nil // still waiting
			}
			return nil, nil
		})
	})
	start := env.Now()
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, 3, listings)
	require.Equal(t, 3*time.Hour, env.Now().Sub(start).Round(time.Minute), "it ended at the first idle hour with no call waiting")
}

// silentSession makes every signal to the session succeed without an
// answer, and the session's word reach a waiting call only after two hours,
// like a session or a visibility that is slow or broken; it returns the
// names of the signals the session got.
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
	s.env.OnActivity("AwaitListed", mock.Anything, mock.Anything).After(2*time.Hour).Return(activities.SessionWord{}, nil)
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
	decideAt(s.env, 10*time.Minute, "c1", decision(policy.Approved, "alice"))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusPending, early.Status, "an approver may decide while the call waits for its session")
	s.Empty(early.Notices, "nobody is notified while the session may still answer")
	s.Equal(StatusOK, r.Status)
	s.Require().Len(r.Notices, 1)
	s.Equal(sessionAnswerTimeout, r.Notices[0].At.Sub(r.RequestedAt), "a person is notified a minute in")
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
	s.Empty(*told, "the session never knew the call: nothing to tell it")
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
