package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// sentDecisions records what the session told each call.
type sentDecisions struct {
	mu  sync.Mutex
	got map[string][]SessionDecision
	// batches counts the batches sent by the SendSignals activity.
	batches int
	// releases are the ReleaseWaiting activities: what the session tells
	// the calls that visibility finds waiting.
	releases []activities.ReleaseInput
}

func (s *sentDecisions) released() []activities.ReleaseInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.releases)
}

func (s *sentDecisions) add(workflowID string, d SessionDecision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[workflowID] = append(s.got[workflowID], d)
}

func (s *sentDecisions) to(callID string) []SessionDecision {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[CallWorkflowID(callID)]
}

// sessionEnv runs ToolgateSession alone; signals to calls are captured.
// mocks registers a test's own activity mocks first: the first registered
// mock of an activity answers.
func sessionEnv(t *testing.T, mocks ...func(*testsuite.TestWorkflowEnvironment)) (*testsuite.TestWorkflowEnvironment, *sentDecisions) {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger{})
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	env.RegisterActivity(&activities.Activities{}) // no client: the rebuild lists nothing
	sent := &sentDecisions{got: map[string][]SessionDecision{}}
	for _, m := range mocks {
		m(env)
	}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", SignalSessionDecision, mock.Anything).Return(
		func(_, workflowID, _, _ string, arg any) error {
			sent.add(workflowID, arg.(SessionDecision))
			return nil
		})
	// Batches over maxInlineSignals go out from the SendSignals activity.
	var a *activities.Activities
	env.OnActivity(a.SendSignals, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SignalsInput) ([]string, error) {
		for _, s := range in.Signals {
			if s.Name != SignalSessionDecision {
				return nil, fmt.Errorf("unexpected signal %s to %s", s.Name, s.WorkflowID)
			}
			var d SessionDecision
			if err := json.Unmarshal(s.Arg, &d); err != nil {
				return nil, err
			}
			sent.add(s.WorkflowID, d)
		}
		sent.mu.Lock()
		defer sent.mu.Unlock()
		sent.batches++
		return nil, nil
	})
	// No visibility in the environment: no call is found waiting.
	env.OnActivity("ReleaseWaiting", mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ReleaseInput) (int, error) {
		sent.mu.Lock()
		defer sent.mu.Unlock()
		sent.releases = append(sent.releases, in)
		return 0, nil
	})
	env.OnActivity("CheckWaiting", mock.Anything, mock.Anything).Return("", nil)
	env.OnActivity("ListWorkflowIDs", mock.Anything, mock.Anything).Return([]string(nil), nil)
	return env, sent
}

func signalAt(env *testsuite.TestWorkflowEnvironment, at time.Duration, name string, arg any) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(name, arg) }, at)
}

func register(callID, tool string) Registration {
	return Registration{CallID: callID, Tool: tool, StickyKey: tool}
}

func TestSessionContinuesAsNewWithoutLosingAnything(t *testing.T) {
	// First run: a sticky decision and three waiting calls, the last two
	// registering in the same instant the limit is reached.
	env, sent := sessionEnv(t)
	signalAt(env, time.Minute, SignalSticky, StickyDecision{Key: "deploy", Tool: "deploy", FromCall: "c0",
		Decision: policy.Decision{Kind: policy.DeniedAlways, DecidedBy: "alice", Channel: "cli", Reason: "no deploys today"}})
	signalAt(env, 2*time.Minute, SignalRegister, register("c1", "write"))
	signalAt(env, 3*time.Minute, SignalRegister, register("c2", "write"))
	signalAt(env, 3*time.Minute, SignalRegister, register("c3", "shell"))
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", ContinueAsNewAfter: 3})

	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "expected continue-as-new, got %v", env.GetWorkflowError())
	var next SessionInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.Equal(t, "s1", next.Session)
	require.Len(t, next.State.Sticky, 1)
	require.Equal(t, "deploy", next.State.Sticky[0].Key)
	var waiting []string
	for _, w := range next.State.Calls {
		waiting = append(waiting, w.CallID)
	}
	require.Equal(t, []string{"c1", "c2", "c3"}, waiting, "every waiting call, including the one in flight, crosses the boundary")
	// Each was told to ask a person, or is owed that answer in the outbox
	// that crosses the boundary with the state.
	owed := map[string]bool{}
	for _, d := range next.State.Outbox {
		require.Equal(t, DeliverAskPerson, d.Decision)
		owed[d.CallID] = true
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if owed[id] {
			require.Empty(t, sent.to(id), "%s is owed its answer, not told twice", id)
		} else {
			require.Equal(t, []SessionDecision{{}}, sent.to(id), "%s was told to ask a person", id)
		}
	}

	// Second run: a sticky decision arrives after the boundary and reaches
	// the calls that waited before it.
	env2, sent2 := sessionEnv(t)
	next.ContinueAsNewAfter = 0
	signalAt(env2, time.Minute, SignalSticky, StickyDecision{Key: "write", Tool: "write", FromCall: "c1",
		Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "inbox"}})
	signalAt(env2, 2*time.Minute, SignalRegister, register("c4", "write"))
	signalAt(env2, 2*time.Minute, SignalRegister, register("c5", "deploy"))
	var view SessionView
	env2.RegisterDelayedCallback(func() {
		v, err := env2.QueryWorkflow(QuerySession)
		require.NoError(t, err)
		require.NoError(t, v.Get(&view))
		env2.UpdateWorkflow(UpdateEnd, "end-1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("end refused: %v", err) }, OnComplete: func(any, error) {},
		}, "carol")
	}, 3*time.Minute)
	env2.ExecuteWorkflow(ToolgateSession, next)

	require.True(t, env2.IsWorkflowCompleted())
	require.NoError(t, env2.GetWorkflowError())
	require.Empty(t, sent2.to("c1"), "the deciding call is not told its own decision")
	c2 := sent2.to("c2")
	require.Len(t, c2, 1)
	require.Equal(t, policy.ApprovedForSession, c2[0].Decision.Kind)
	require.Equal(t, "bob", c2[0].Decision.DecidedBy)
	require.Equal(t, "session", c2[0].Decision.Channel)
	c4 := sent2.to("c4")
	require.Len(t, c4, 1)
	require.Equal(t, policy.ApprovedForSession, c4[0].Decision.Kind, "a later call gets the sticky decision at once")
	c5 := sent2.to("c5")
	require.Len(t, c5, 1)
	require.Equal(t, policy.DeniedAlways, c5[0].Decision.Kind, "the sticky decision from the first run still holds")
	require.Equal(t, "no deploys today", c5[0].Decision.Reason)

	require.Len(t, view.Sticky, 2)
	require.Len(t, view.Waiting, 1)
	require.Equal(t, "c3", view.Waiting[0].CallID)
	c3 := sent2.to("c3")
	if owed["c3"] {
		require.Equal(t, SessionDecision{}, c3[0], "the answer owed from the first run comes first")
		c3 = c3[1:]
	}
	require.Len(t, c3, 1, "ending the session denies the call still waiting")
	require.Equal(t, "the session was ended by carol", c3[0].Decision.Reason)
}

func TestSessionRevokeOfUnknownStickyIsRefused(t *testing.T) {
	env, _ := sessionEnv(t)
	var refused error
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateRevoke, "r1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { refused = err }, OnComplete: func(any, error) {},
		}, RevokeRequest{Key: "write", By: "alice"})
	}, time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError(), "an idle session ends cleanly")
	require.Error(t, refused)
	require.Contains(t, refused.Error(), `session s1 has no sticky decision for "write"`)
}

func TestSessionShowsItsStickyDecisionsInItsMemo(t *testing.T) {
	env, _ := sessionEnv(t)
	var mu sync.Mutex // the environment calls mocks from its own goroutines
	var shown []map[string]*policy.Decision
	env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) {
		mu.Lock()
		defer mu.Unlock()
		shown = append(shown, args.Get(0).(map[string]any)[MemoSticky].(map[string]*policy.Decision))
	}).Return(nil)
	signalAt(env, time.Minute, SignalSticky, approveForSession("write", "alice"))
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateRevoke, "revoke", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Error(err) }, OnComplete: func(any, error) {}},
			RevokeRequest{Key: "write", By: "alice", Groups: []string{"*"}})
	}, 2*time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, shown, 3, "at the start, at the decision, at the revoke")
	require.Empty(t, shown[0], "shown even when empty, so a reader tells none from not shown")
	require.Equal(t, policy.ApprovedForSession, shown[1]["write"].Kind)
	require.Equal(t, "session", shown[1]["write"].Channel, "as a call applies it")
	require.Empty(t, shown[2], "a revoked decision is gone from the memo")
}
