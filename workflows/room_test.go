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

// roomKind is how a room runs and how calls register with it: as this
// release starts rooms and sends registrations (a worker's batch, the
// timer kept), and as rooms recorded before ran.
type roomKind struct {
	name    string
	current bool
}

var roomKinds = []roomKind{{"now", true}, {"recorded before", false}}

// eachRoomKind runs a room test for each kind.
func eachRoomKind(t *testing.T, test func(*testing.T, roomKind)) {
	for _, k := range roomKinds {
		t.Run(k.name, func(t *testing.T) { test(t, k) })
	}
}

// roomTest is a room's test environment, with its kind.
type roomTest struct {
	*testsuite.TestWorkflowEnvironment
	kind roomKind
}

// runRoom runs the room with in, as its kind starts it.
func (env *roomTest) runRoom(in RoomInput) {
	if env.kind.current {
		in.Revision = RoomRevision
	}
	env.ExecuteWorkflow(WaitingRoom, in)
}

// register sends the room a call's registration, as its kind does.
func (env *roomTest) register(reg Registration) {
	if env.kind.current {
		env.SignalWorkflow(SignalRegisterAll, []Registration{reg})
		return
	}
	env.SignalWorkflow(SignalRegister, reg)
}

// roomEnv runs room 0 of session s1; the test sends the session's news.
func roomEnv(t *testing.T, k roomKind) (*roomTest, *told) {
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
	return &roomTest{TestWorkflowEnvironment: env, kind: k}, got
}

// signaller is a test environment that takes signals.
type signaller interface {
	RegisterDelayedCallback(callback func(), delayDuration time.Duration)
	SignalWorkflow(name string, input any)
}

func signalAt(env signaller, at time.Duration, name string, arg any) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(name, arg) }, at)
}

// registerAt registers n calls of tool at a virtual time, each waiting for
// timeout, and returns their IDs.
func registerAt(env *roomTest, at time.Duration, n int, tool string, timeout time.Duration) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d-%d", tool, at/time.Second, i)
	}
	env.RegisterDelayedCallback(func() {
		for _, id := range ids {
			env.register(Registration{CallID: id, Tool: tool, StickyKey: tool, Requester: "agent-1",
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

func census(t *testing.T, env *roomTest, at time.Duration) *activities.Census {
	var c activities.Census
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryCensus, env.Now())
		require.NoError(t, err)
		require.NoError(t, v.Get(&c))
	}, at)
	return &c
}

func TestARoomHandsTheSessionsDecisionToEveryWaitingCallOnce(t *testing.T) {
	eachRoomKind(t, testARoomHandsTheSessionsDecisionToEveryWaitingCallOnce)
}

func testARoomHandsTheSessionsDecisionToEveryWaitingCallOnce(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	writes := registerAt(env, time.Minute, 600, "write", time.Hour)
	shells := registerAt(env, time.Minute, 1, "shell", time.Hour)
	before := census(t, env, 90*time.Second)
	signalAt(env, 2*time.Minute, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	later := registerAt(env, 3*time.Minute, 1, "write", time.Hour)
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})

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
	eachRoomKind(t, testARevokeStopsAReleaseBeforeItsNextBatch)
}

func testARevokeStopsAReleaseBeforeItsNextBatch(t *testing.T, k roomKind) {
	revoked := newsWith(3)
	var releasing, sentRevoke bool
	env, got := roomEnv(t, k)
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
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.True(t, sentRevoke)
	handed := 0
	for _, id := range writes {
		handed += len(got.to(id))
	}
	require.Equal(t, maxBatch, handed, "only the batch in flight when the revoke came got the decision")
}

func TestTheEndDeniesEveryWaitingCall(t *testing.T) {
	eachRoomKind(t, testTheEndDeniesEveryWaitingCall)
}

func testTheEndDeniesEveryWaitingCall(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	signalAt(env, time.Second, SignalNews, newsWith(1, approvedForSession("shell", "bob", 1)))
	waiting := registerAt(env, time.Minute, 3, "write", time.Hour)
	end := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by root", DecidedBy: "root", DeciderGroups: []string{"*"}, Channel: "session"}
	signalAt(env, 2*time.Minute, SignalNews, activities.SessionNews{Revision: 2, End: end})
	later := registerAt(env, 3*time.Minute, 1, "shell", time.Hour)
	after := census(t, env, 4*time.Minute)
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})

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
	eachRoomKind(t, testTheEndReachesOnlyTheCallsItsEnderMayActOn)
}

func testTheEndReachesOnlyTheCallsItsEnderMayActOn(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	register := func(id string, groups ...string) {
		reg := Registration{CallID: id, Tool: "write", StickyKey: "write", Requester: "agent-1",
			Groups: groups, RequestedAt: env.Now().Add(time.Minute), Timeout: time.Hour}
		env.RegisterDelayedCallback(func() { env.register(reg) }, time.Minute)
	}
	register("ops-call", "ops")
	register("finance-call", "finance")
	end := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by ops1", DecidedBy: "ops1", DeciderGroups: []string{"ops"}, Channel: "session"}
	signalAt(env, 2*time.Minute, SignalNews, activities.SessionNews{Revision: 2, End: end})
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Len(t, got.to("ops-call"), 1)
	require.True(t, got.to("ops-call")[0].Ended)
	require.Empty(t, got.to("finance-call"), "ops1 may not act on finance's call: it waits for a person")
}

func TestARegistrationAndADecisionThatArriveTogetherMeet(t *testing.T) {
	eachRoomKind(t, testARegistrationAndADecisionThatArriveTogetherMeet)
}

func testARegistrationAndADecisionThatArriveTogetherMeet(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	sent := false
	// While the room sends a release, a call registers and then the
	// session replaces the decision: the room takes both in one batch, and
	// drains the news first.
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == "SendSignals" && !sent {
			sent = true
			env.register(Registration{CallID: "c-new", Tool: "write", StickyKey: "write", Requester: "agent-1",
				RequestedAt: env.Now(), Timeout: time.Hour})
			env.SignalWorkflow(SignalNews, newsWith(3, approvedForSession("write", "carol", 3)))
		}
	})
	registerAt(env, time.Minute, 20, "write", time.Hour)
	signalAt(env, 2*time.Minute, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.True(t, sent)
	require.Len(t, got.to("c-new"), 1, "the call that registered beside the news got it")
	require.Equal(t, "carol", got.to("c-new")[0].Decision.DecidedBy)
}

func TestAnOlderCopyOfTheNewsIsIgnored(t *testing.T) {
	eachRoomKind(t, testAnOlderCopyOfTheNewsIsIgnored)
}

func testAnOlderCopyOfTheNewsIsIgnored(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	signalAt(env, time.Second, SignalNews, newsWith(5))
	ids := registerAt(env, time.Minute, 1, "write", time.Hour)
	signalAt(env, 2*time.Minute, SignalNews, newsWith(4, approvedForSession("write", "bob", 4)))
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Empty(t, got.to(ids[0]), "revision 4 came after revision 5: overtaken")
}

func TestCallsThatLeftOrNoLongerRunAreNotToldAgain(t *testing.T) {
	eachRoomKind(t, testCallsThatLeftOrNoLongerRunAreNotToldAgain)
}

func testCallsThatLeftOrNoLongerRunAreNotToldAgain(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	ids := registerAt(env, time.Minute, 3, "write", time.Hour)
	signalAt(env, 90*time.Second, SignalDone, ids[0])
	env.RegisterDelayedCallback(func() {
		got.mu.Lock()
		got.gone[CallWorkflowID(ids[1])] = true // terminated
		got.mu.Unlock()
		env.SignalWorkflow(SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	}, 2*time.Minute)
	signalAt(env, 3*time.Minute, SignalNews, newsWith(3, approvedForSession("write", "carol", 3)))
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Empty(t, got.to(ids[0]), "a call that left is not told")
	require.Empty(t, got.to(ids[1]), "a call that no longer runs is forgotten")
	require.Len(t, got.to(ids[2]), 1, "a call handed a decision leaves the room: the replacement is not sent")
}

func TestAWaitingCallThatNeverSaysItEndedIsForgottenAtItsDeadline(t *testing.T) {
	eachRoomKind(t, testAWaitingCallThatNeverSaysItEndedIsForgottenAtItsDeadline)
}

func testAWaitingCallThatNeverSaysItEndedIsForgottenAtItsDeadline(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	ids := registerAt(env, time.Minute, 1, "write", time.Hour)
	signalAt(env, 3*time.Hour, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
	start := env.Now()
	env.runRoom(RoomInput{Session: "s1", IdleTimeout: 4 * time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Empty(t, got.to(ids[0]), "dropped at its deadline, before the decision came")
	require.Equal(t, time.Minute+time.Hour+pruneGrace, env.Now().Sub(start).Round(time.Minute),
		"the room closes once its last call is dropped, at its deadline and a grace period")
}

func TestARoomContinuesAsNewWithItsCalls(t *testing.T) {
	eachRoomKind(t, testARoomContinuesAsNewWithItsCalls)
}

func testARoomContinuesAsNewWithItsCalls(t *testing.T, k roomKind) {
	env, got := roomEnv(t, k)
	ids := registerAt(env, time.Minute, 3, "write", time.Hour)
	env.runRoom(RoomInput{Session: "s1", ContinueAsNewAfter: 3})

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
	env2, got2 := roomEnv(t, k)
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

// A room keeps the timer of its earliest deadline while calls come: each
// message used to cancel it and start another (two events and a timer
// task each, in every task of a busy room).
func TestARoomKeepsItsTimerWhileItsEarliestDeadlineStays(t *testing.T) {
	timers := map[string][2]int{} // kind → started, cancelled, after 20 registrations
	for _, k := range roomKinds {
		env, _ := roomEnv(t, k)
		var started, cancelled int
		env.SetOnTimerScheduledListener(func(string, time.Duration) { started++ })
		env.SetOnTimerCanceledListener(func(string) { cancelled++ })
		for i := range 20 {
			registerAt(env, time.Duration(i+1)*time.Minute, 1, "write", 2*time.Hour)
		}
		env.RegisterDelayedCallback(func() { timers[k.name] = [2]int{started, cancelled} }, 30*time.Minute)
		env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})
		require.NoError(t, env.GetWorkflowError())
	}
	// The room's first timer (an idle period ahead) is also its earliest
	// deadline until it fires: it is kept.
	require.Equal(t, [2]int{1, 0}, timers["now"], "one timer for twenty messages")
	require.Equal(t, [2]int{21, 20}, timers["recorded before"], "a timer per message, each cancelled by the next")
}

// A call that registered and left before the room's next task (its
// session's news decided it at once) is not counted as waiting: the room
// takes registrations before leaves. A room recorded before took the
// leave first and kept the call until its deadline.
func TestACallThatRegisteredAndLeftAtOnceIsNotCountedAsWaiting(t *testing.T) {
	waiting := map[string]int{}
	for _, k := range roomKinds {
		env, _ := roomEnv(t, k)
		sent := false
		// While the room sends a release, a call of another tool
		// registers and leaves: the room takes both in one batch.
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			if info.ActivityType.Name == "SendSignals" && !sent {
				sent = true
				env.register(Registration{CallID: "c-shell", Tool: "shell", StickyKey: "shell", Requester: "agent-1", RequestedAt: env.Now(), Timeout: time.Hour})
				env.SignalWorkflow(SignalDone, "c-shell")
			}
		})
		registerAt(env, time.Minute, 20, "write", time.Hour)
		signalAt(env, 2*time.Minute, SignalNews, newsWith(2, approvedForSession("write", "bob", 2)))
		after := census(t, env, 3*time.Minute)
		env.runRoom(RoomInput{Session: "s1", IdleTimeout: time.Hour})
		require.NoError(t, env.GetWorkflowError())
		require.True(t, sent)
		waiting[k.name] = after.Waiting
	}
	require.Equal(t, map[string]int{"now": 0, "recorded before": 1}, waiting)
}
