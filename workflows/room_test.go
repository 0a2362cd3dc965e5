package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// Tests of one WaitingRoom alone, in virtual time: the session's news and
// the calls' registrations are signals the test sends; what the room tells
// each call is captured.

// told records what a room told each call.
type told struct {
	mu      sync.Mutex
	got     map[string][]SessionDecision
	batches int
	// gone are calls that no longer run: a signal to them fails.
	gone map[string]bool
}

func (t *told) add(workflowID string, d SessionDecision) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone[workflowID] {
		return false
	}
	t.got[workflowID] = append(t.got[workflowID], d)
	return true
}

func (t *told) to(callID string) []SessionDecision {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.got[CallWorkflowID(callID)]
}

// roomEnv runs room 0 of session s1; the test sends the session's news.
func roomEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *told) {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger{})
	env := ts.NewTestWorkflowEnvironment()
	useDoors(env, true)
	env.RegisterWorkflowWithOptions(WaitingRoom, workflow.RegisterOptions{Name: RoomWorkflowType})
	env.RegisterActivity(&activities.Activities{})
	got := &told{got: map[string][]SessionDecision{}, gone: map[string]bool{}}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).Return(
		func(_, workflowID, _, name string, arg any) error {
			if name != SignalSessionDecision {
				return fmt.Errorf("unexpected signal %s to %s", name, workflowID)
			}
			if !got.add(workflowID, arg.(SessionDecision)) {
				return errors.New("workflow execution already completed")
			}
			return nil
		})
	var a *activities.Activities
	env.OnActivity(a.SendSignals, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SignalsInput) ([]string, error) {
		var gone []string
		for _, s := range in.Signals {
			var d SessionDecision
			if err := json.Unmarshal(s.Arg, &d); err != nil {
				return nil, err
			}
			if !got.add(s.WorkflowID, d) {
				gone = append(gone, s.WorkflowID)
			}
		}
		got.mu.Lock()
		defer got.mu.Unlock()
		got.batches++
		return gone, nil
	})
	return env, got
}

func signalAt(env *testsuite.TestWorkflowEnvironment, at time.Duration, name string, arg any) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(name, arg) }, at)
}

// registerAt registers n calls of tool at a virtual time, each waiting for
// timeout, and returns their IDs.
func registerAt(env *testsuite.TestWorkflowEnvironment, at time.Duration, n int, tool string, timeout time.Duration) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d-%d", tool, at/time.Second, i)
	}
	env.RegisterDelayedCallback(func() {
		for _, id := range ids {
			env.SignalWorkflow(SignalRegister, Registration{CallID: id, Tool: tool, StickyKey: tool, Requester: "agent-1",
				RequestedAt: env.Now(), Timeout: timeout})
		}
	}, at)
	return ids
}

// newsWith is the session's news at revision rev with sticky decisions.
func newsWith(rev int64, sticky ...activities.KeyedDecision) activities.SessionNews {
	return activities.SessionNews{Revision: rev, Sticky: sticky}
}

func approvedForSession(key, by string, since int64) activities.KeyedDecision {
	return activities.KeyedDecision{Key: key, Since: since, Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: by, Channel: "session"}}
}

func census(t *testing.T, env *testsuite.TestWorkflowEnvironment, at time.Duration) *activities.Census {
	var c activities.Census
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryCensus, env.Now())
		require.NoError(t, err)
		require.NoError(t, v.Get(&c))
	}, at)
	return &c
}

func TestARoomHandsTheSessionsDecisionToEveryWaitingCallOnce(t *testing.T) {
	env, got := roomEnv(t)
	writes := registerAt(env, time.Minute, 600, "write", time.Hour)
	shells := registerAt(env, time.Minute, 1, "shell", time.Hour)
	before := census(t, env, 90*time.Second)
	signalAt(env, 2*time.Minute, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	later := registerAt(env, 3*time.Minute, 1, "write", time.Hour)
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError(), "the room closes once nobody waits and it was idle")
	require.Equal(t, 601, before.Waiting)
	for _, id := range writes {
		answers := got.to(id)
		require.Len(t, answers, 1, id)
		require.Equal(t, policy.ApprovedForSession, answers[0].Decision.Kind, id)
		require.Equal(t, "bob", answers[0].Decision.DecidedBy)
		require.Equal(t, "write", answers[0].Key)
	}
	require.Empty(t, got.to(shells[0]), "another key's call keeps waiting")
	require.Len(t, got.to(later[0]), 1, "a call that waits after the decision gets it too (it also read it when it joined)")
	require.GreaterOrEqual(t, got.batches, 3, "600 answers go out in batches of at most 250")
}

func TestARevokeStopsAReleaseBeforeItsNextBatch(t *testing.T) {
	revoked := newsWith(3)
	var releasing, sentRevoke bool
	env, got := roomEnv(t)
	// The revoke reaches the room while its first batch of the release is
	// being sent.
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == "SendSignals" && releasing && !sentRevoke {
			sentRevoke = true
			env.SignalWorkflow(SignalNews, revoked)
		}
	})
	writes := registerAt(env, time.Minute, 600, "write", time.Hour)
	env.RegisterDelayedCallback(func() {
		releasing = true
		env.SignalWorkflow(SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	}, 2*time.Minute)
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.True(t, sentRevoke)
	handed := 0
	for _, id := range writes {
		handed += len(got.to(id))
	}
	require.Equal(t, maxBatch, handed, "only the batch in flight when the revoke came got the decision")
}

func TestTheEndDeniesEveryWaitingCall(t *testing.T) {
	env, got := roomEnv(t)
	signalAt(env, time.Second, SignalNews, newsWith(1, approvedForSession("shell", "bob", 1)))
	waiting := registerAt(env, time.Minute, 3, "write", time.Hour)
	end := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by root", DecidedBy: "root", DeciderGroups: []string{"*"}, Channel: "session"}
	signalAt(env, 2*time.Minute, SignalNews, activities.SessionNews{Revision: 2, End: end})
	later := registerAt(env, 3*time.Minute, 1, "shell", time.Hour)
	after := census(t, env, 4*time.Minute)
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	for _, id := range waiting {
		answers := got.to(id)
		require.Len(t, answers, 1)
		require.True(t, answers[0].Ended)
		require.Equal(t, "the session was ended by root", answers[0].Decision.Reason)
	}
	require.Len(t, got.to(later[0]), 1, "a call that waits after the end is denied too (it also read it when it joined)")
	require.True(t, got.to(later[0])[0].Ended)
	require.Zero(t, after.Waiting, "nobody waits in an ended session's room")
}

func TestTheEndReachesOnlyTheCallsItsEnderMayActOn(t *testing.T) {
	env, got := roomEnv(t)
	register := func(id string, groups ...string) {
		signalAt(env, time.Minute, SignalRegister, Registration{CallID: id, Tool: "write", StickyKey: "write", Requester: "agent-1",
			Groups: groups, RequestedAt: env.Now().Add(time.Minute), Timeout: time.Hour})
	}
	register("ops-call", "ops")
	register("finance-call", "finance")
	end := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by ops1", DecidedBy: "ops1", DeciderGroups: []string{"ops"}, Channel: "session"}
	signalAt(env, 2*time.Minute, SignalNews, activities.SessionNews{Revision: 2, End: end})
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Len(t, got.to("ops-call"), 1)
	require.True(t, got.to("ops-call")[0].Ended)
	require.Empty(t, got.to("finance-call"), "ops1 may not act on finance's call: it waits for a person")
}

func TestARegistrationAndADecisionThatArriveTogetherMeet(t *testing.T) {
	env, got := roomEnv(t)
	sent := false
	// While the room sends a release, a call registers and then the
	// session replaces the decision: the room takes both in one batch, and
	// drains the news first.
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == "SendSignals" && !sent {
			sent = true
			env.SignalWorkflow(SignalRegister, Registration{CallID: "c-new", Tool: "write", StickyKey: "write", Requester: "agent-1",
				RequestedAt: env.Now(), Timeout: time.Hour})
			env.SignalWorkflow(SignalNews, newsWith(3, approvedForSession("write", "carol", 3)))
		}
	})
	registerAt(env, time.Minute, 20, "write", time.Hour)
	signalAt(env, 2*time.Minute, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.True(t, sent)
	require.Len(t, got.to("c-new"), 1, "the call that registered beside the news got it")
	require.Equal(t, "carol", got.to("c-new")[0].Decision.DecidedBy)
}

func TestAnOlderCopyOfTheNewsIsIgnored(t *testing.T) {
	env, got := roomEnv(t)
	signalAt(env, time.Second, SignalNews, newsWith(5))
	ids := registerAt(env, time.Minute, 1, "write", time.Hour)
	signalAt(env, 2*time.Minute, SignalNews, newsWith(4, approvedForSession("write", "bob", 4)))
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Empty(t, got.to(ids[0]), "revision 4 came after revision 5: overtaken")
}

func TestCallsThatLeftOrNoLongerRunAreNotToldAgain(t *testing.T) {
	env, got := roomEnv(t)
	ids := registerAt(env, time.Minute, 3, "write", time.Hour)
	signalAt(env, 90*time.Second, SignalDone, ids[0])
	env.RegisterDelayedCallback(func() {
		got.mu.Lock()
		got.gone[CallWorkflowID(ids[1])] = true // terminated
		got.mu.Unlock()
		env.SignalWorkflow(SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	}, 2*time.Minute)
	signalAt(env, 3*time.Minute, SignalNews, newsWith(3, approvedForSession("write", "carol", 3)))
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Empty(t, got.to(ids[0]), "a call that left is not told")
	require.Empty(t, got.to(ids[1]), "a call that no longer runs is forgotten")
	require.Len(t, got.to(ids[2]), 1, "a call handed a decision leaves the room: the replacement is not sent")
}

func TestAWaitingCallThatNeverSaysItEndedIsForgottenAtItsDeadline(t *testing.T) {
	env, got := roomEnv(t)
	ids := registerAt(env, time.Minute, 1, "write", time.Hour)
	signalAt(env, 3*time.Hour, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	start := env.Now()
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", IdleTimeout: 4 * time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Empty(t, got.to(ids[0]), "dropped at its deadline, before the decision came")
	require.Equal(t, time.Minute+time.Hour+pruneGrace, env.Now().Sub(start).Round(time.Minute),
		"the room closes once its last call is dropped, at its deadline and a grace period")
}

func TestARoomContinuesAsNewWithItsCalls(t *testing.T) {
	env, got := roomEnv(t)
	ids := registerAt(env, time.Minute, 3, "write", time.Hour)
	env.ExecuteWorkflow(WaitingRoom, RoomInput{Session: "s1", ContinueAsNewAfter: 3})

	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "expected continue-as-new, got %v", env.GetWorkflowError())
	var next RoomInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	var waiting []string
	for _, w := range next.State.Calls {
		waiting = append(waiting, w.CallID)
	}
	require.Equal(t, ids, waiting, "every waiting call crosses the boundary")
	require.NotNil(t, next.State.News)

	// The next run hands the session's decision to all of them.
	env2, got2 := roomEnv(t)
	next.ContinueAsNewAfter = 0
	next.IdleTimeout = time.Minute
	signalAt(env2, time.Minute, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	env2.ExecuteWorkflow(WaitingRoom, next)
	require.NoError(t, env2.GetWorkflowError())
	for _, id := range ids {
		require.Empty(t, got.to(id))
		require.Len(t, got2.to(id), 1, id)
		require.Equal(t, policy.ApprovedForSession, got2.to(id)[0].Decision.Kind, id)
	}
}
