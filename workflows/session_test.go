package workflows

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// Tests of ToolgateSession alone, in virtual time: calls' signals are sent
// by the test; what the session sends its rooms and calls is captured.

// published records what a session sent.
type published struct {
	mu sync.Mutex
	// news are the SessionNews sent, by room.
	news map[int][]activities.SessionNews
	// quotas are the quota answers, by call.
	quotas map[string][]QuotaAnswer
	// memo is the news last shown in the memo.
	memo []activities.SessionNews
}

func (p *published) toRoom(room int) []activities.SessionNews {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.news[room]
}

// sessionEnv runs session s1 alone. census answers the waiting rooms'
// census when the session ends.
func sessionEnv(t *testing.T, census activities.Census) (*testsuite.TestWorkflowEnvironment, *published) {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger{})
	env := ts.NewTestWorkflowEnvironment()
	useDoors(env, true)
	env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	env.RegisterActivity(&activities.Activities{})
	p := &published{news: map[int][]activities.SessionNews{}, quotas: map[string][]QuotaAnswer{}}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).Return(
		func(_, workflowID, _, name string, arg any) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch name {
			case SignalNews:
				for room := range Rooms {
					if workflowID == RoomWorkflowID("s1", room) {
						p.news[room] = append(p.news[room], arg.(activities.SessionNews))
						return nil
					}
				}
			case SignalQuotaAnswer:
				id := strings.TrimPrefix(workflowID, CallWorkflowID(""))
				p.quotas[id] = append(p.quotas[id], arg.(QuotaAnswer))
				return nil
			}
			return fmt.Errorf("unexpected signal %s to %s", name, workflowID)
		})
	env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) {
		if n, ok := args.Get(0).(map[string]any)[activities.MemoNews]; ok {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.memo = append(p.memo, n.(activities.SessionNews))
		}
	}).Return(nil)
	env.OnActivity("TakeCensus", mock.Anything, mock.Anything).Return(census, nil)
	return env, p
}

func stickyBy(kind policy.DecisionKind, key, by string, groups ...string) StickyDecision {
	return StickyDecision{Key: key, Tool: key, FromCall: "c-" + by, Groups: groups,
		Decision: policy.Decision{Kind: kind, DecidedBy: by, DeciderGroups: groups, Channel: "cli"}}
}

// update sends an update at a virtual time and records how it went.
func update(env *testsuite.TestWorkflowEnvironment, at time.Duration, name string, arg any) *updateOutcome {
	o := &updateOutcome{}
	env.RegisterDelayedCallback(func() {
		updateSeq++
		env.UpdateWorkflow(name, fmt.Sprint(name, "-", updateSeq), &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { o.rejected = err },
			OnComplete: func(_ any, err error) { o.applied, o.failed = err == nil, err },
		}, arg)
	}, at)
	return o
}

func TestASessionSendsEveryChangeToItsRoomsAndShowsItInItsMemo(t *testing.T) {
	env, p := sessionEnv(t, activities.Census{})
	signalAt(env, time.Minute, SignalSticky, stickyBy(policy.ApprovedForSession, "write", "alice"))
	revoke := update(env, 2*time.Minute, UpdateRevoke, RevokeRequest{Key: "write", By: "alice", Groups: []string{"*"}})
	signalAt(env, 4*time.Minute, SignalQuota, QuotaRequest{CallID: "q1", Tool: "shell", Quota: policy.Quota{Name: "shell", Max: 1, Per: time.Hour}})
	signalAt(env, 4*time.Minute, SignalQuota, QuotaRequest{CallID: "q2", Tool: "shell", Quota: policy.Quota{Name: "shell", Max: 1, Per: time.Hour}})
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", Owner: "agent-1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.True(t, revoke.applied)
	for room := range Rooms {
		news := p.toRoom(room)
		require.Len(t, news, 2, "room %d", room)
		require.Len(t, news[0].Sticky, 1)
		require.Equal(t, "write", news[0].Sticky[0].Key)
		require.Equal(t, "session", news[0].Sticky[0].Decision.Channel, "as a call applies it")
		require.Empty(t, news[1].Sticky, "the revoke")
		require.Greater(t, news[1].Revision, news[0].Revision)
	}
	require.Len(t, p.memo, 3, "at the start, at the decision, at the revoke")
	require.Empty(t, p.memo[0].Sticky, "shown even when empty")
	require.Equal(t, p.toRoom(0)[1], p.memo[2], "the memo shows what the rooms got")
	require.Equal(t, []QuotaAnswer{{}}, p.quotas["q1"])
	require.Contains(t, p.quotas["q2"][0].Refusal, "quota shell: at most 1 shell calls per 1h0m0s")
}

func TestAStickyDecisionReplacesAnotherOnlyIfItsAuthorMayRevokeIt(t *testing.T) {
	env, p := sessionEnv(t, activities.Census{})
	signalAt(env, time.Minute, SignalSticky, stickyBy(policy.DeniedAlways, "shell", "fin1", "finance"))
	signalAt(env, 2*time.Minute, SignalSticky, stickyBy(policy.ApprovedForSession, "shell", "ops1", "ops"))
	signalAt(env, 4*time.Minute, SignalSticky, stickyBy(policy.ApprovedForSession, "shell", "root", "*"))
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	news := p.toRoom(0)
	require.Len(t, news, 3, "fin1's, root's, and the idle close: ops1's was not recorded")
	require.Equal(t, "fin1", news[0].Sticky[0].Decision.DecidedBy)
	require.Equal(t, "root", news[1].Sticky[0].Decision.DecidedBy, "an admin may replace it")
	require.Empty(t, news[2].Sticky, "an idle session forgets its sticky decisions, and tells its rooms")
}

func TestEndingASessionNeedsTheGroupsOfEveryCallWaitingInIt(t *testing.T) {
	census := activities.Census{Waiting: 3, Groups: [][]string{{"ops"}, {"finance"}}}
	env, p := sessionEnv(t, census)
	byOps := update(env, time.Minute, UpdateEnd, EndRequest{By: "ops1", Groups: []string{"ops"}})
	byAdmin := update(env, 2*time.Minute, UpdateEnd, EndRequest{By: "root", Groups: []string{"*"}})
	again := update(env, 3*time.Minute, UpdateEnd, EndRequest{By: "root", Groups: []string{"*"}})
	signalAt(env, 4*time.Minute, SignalSticky, stickyBy(policy.ApprovedForSession, "write", "alice"))
	signalAt(env, 5*time.Minute, SignalQuota, QuotaRequest{CallID: "q1", Tool: "shell", Quota: policy.Quota{Name: "shell", Max: 5, Per: time.Hour}})
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.ErrorContains(t, byOps.failed, "ops1 may not end session s1: a waiting call is asked of [finance]")
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(byOps.failed, &appErr))
	require.Equal(t, ErrTypeNotAuthorized, appErr.Type())
	require.True(t, byAdmin.applied)
	require.ErrorContains(t, again.rejected, "session s1 has already ended")
	news := p.toRoom(0)
	require.Len(t, news, 1, "the end; the sticky decision after it is not recorded")
	require.Equal(t, "the session was ended by root", news[0].End.Reason)
	require.Equal(t, "root", news[0].End.DecidedBy)
	require.Equal(t, "the session has ended", p.quotas["q1"][0].Refusal)
}

func TestEndingASessionReportsTheCallsWaitingInItsRooms(t *testing.T) {
	env, _ := sessionEnv(t, activities.Census{Waiting: 42, Groups: [][]string{{"ops"}}})
	var denied int
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateEnd, "end", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Error(err) },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				denied = v.(int)
			}}, EndRequest{By: "ops1", Groups: []string{"ops"}})
	}, time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, 42, denied)
}

func TestSessionContinuesAsNewWithoutLosingAnything(t *testing.T) {
	env, _ := sessionEnv(t, activities.Census{})
	signalAt(env, time.Minute, SignalSticky, stickyBy(policy.DeniedAlways, "deploy", "alice"))
	signalAt(env, 2*time.Minute, SignalQuota, QuotaRequest{CallID: "q1", Tool: "shell", Quota: policy.Quota{Name: "shell", Max: 5, Per: time.Hour}})
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", Owner: "agent-1", ContinueAsNewAfter: 2})

	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "expected continue-as-new, got %v", env.GetWorkflowError())
	var next SessionInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.Equal(t, "agent-1", next.Owner)
	require.Len(t, next.State.Sticky, 1)
	require.Equal(t, "deploy", next.State.Sticky[0].Key)
	require.NotZero(t, next.State.Revision)
	require.Len(t, next.State.Quotas, 1)
	require.Len(t, next.State.Quotas[0].Times, 1)
}

func TestSessionRevokeOfUnknownStickyIsRefused(t *testing.T) {
	env, _ := sessionEnv(t, activities.Census{})
	revoke := update(env, time.Minute, UpdateRevoke, RevokeRequest{Key: "write", By: "alice"})
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError(), "an idle session ends cleanly")
	require.ErrorContains(t, revoke.rejected, `session s1 has no sticky decision for "write"`)
}

func TestCallsSpreadOverEveryRoom(t *testing.T) {
	count := make([]int, Rooms)
	for i := range 10_000 {
		count[RoomOf(fmt.Sprintf("call-%d", i))]++
	}
	for room, n := range count {
		require.InDelta(t, 10_000/Rooms, n, 150, "room %d holds its share", room)
	}
}
