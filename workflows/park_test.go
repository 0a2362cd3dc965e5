package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// A call that parks reads its session's memo once listings show it
// waiting: what the session decided while the call was evaluated (too
// late for the evaluation, too early for the session's listing) reaches it
// there.

// sessionSays makes AwaitListed answer word; it returns the inputs it got.
func (s *CallSuite) sessionSays(word activities.SessionWord) *[]activities.ListedInput {
	var got []activities.ListedInput
	s.env.OnActivity("AwaitListed", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ListedInput) (activities.SessionWord, error) {
			got = append(got, in)
			return word, nil
		})
	return &got
}

func (s *CallSuite) TestAStickyDecisionTheSessionShowsReachesACallThatJustParked() {
	sticky := &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "session", Comment: "sticky decision taken on call c0"}
	listed := s.sessionSays(activities.SessionWord{Sticky: sticky})
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Equal("bob", r.DecidedBy)
	s.Equal("session", r.Channel)
	s.Empty(r.Notices, "nobody is asked for a call the session already covers")
	s.Equal(1, s.runs.count("c1"))
	s.Require().Len(*listed, 1)
	in := (*listed)[0]
	s.Equal("write", in.Key)
	s.Equal(SessionWorkflowID("s1"), in.Session.WorkflowID)
	s.Equal(MemoEnded, in.Session.Ended)
	s.Contains(in.Listed, "WorkflowId = 'toolgate/call/c1'")
	s.Contains(in.Listed, "RunId = '", "this run: AwaitListed waits until listings show it waiting")
}

// endedBy is the denial a session's end carries.
func endedBy(by string, groups ...string) *policy.Decision {
	return &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by " + by, DecidedBy: by, DeciderGroups: groups, Channel: "session"}
}

func (s *CallSuite) TestASessionThatEndedDeniesACallThatJustParked() {
	s.sessionSays(activities.SessionWord{End: endedBy("ops1", "ops")})
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusDenied, r.Status)
	s.Equal("the session was ended by ops1", r.Reason)
	s.Equal("ops1", r.DecidedBy)
	s.Empty(r.Notices)
	s.Zero(s.runs.total())
}

func (s *CallSuite) TestASessionsEndDeniesOnlyCallsItsEnderMayActOn() {
	// The call began to wait while ops1 ended the session, too late for
	// the end's check of the waiting calls: it asks finance.
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"finance"}, Timeout: time.Hour}
	s.sessionSays(activities.SessionWord{End: endedBy("ops1", "ops")})
	// The same end, handed out by the session's release.
	s.env.RegisterDelayedCallback(func() {
		s.NoError(s.env.SignalWorkflowByID(CallWorkflowID("c1"), SignalSessionDecision, SessionDecision{Decision: endedBy("ops1", "ops"), Ended: true}))
	}, 5*time.Minute)
	decideAt(s.env, 10*time.Minute, "c1", approverIn(policy.Approved, "fin1", "finance"))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Equal("fin1", r.DecidedBy, "ops1 may not act on a finance call, so its end did not deny it")
	s.Len(r.Notices, 1, "and a person of its groups was asked")
}

func (s *CallSuite) TestTheSessionsWordIsHeldToTheAuthorsGroupsAndRequester() {
	// The memo shows a sticky decision that this call's author may not
	// take: ops1 is not in finance, and agent-1 requested the call.
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"finance"}, Timeout: time.Hour}
	for _, author := range []policy.Decision{
		{Kind: policy.ApprovedForSession, DecidedBy: "ops1", DeciderGroups: []string{"ops"}, Channel: "session"},
		{Kind: policy.ApprovedForSession, DecidedBy: "agent-1", DeciderGroups: []string{"*"}, Channel: "session"},
	} {
		s.SetupTest()
		s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"finance"}, Timeout: time.Hour}
		s.sessionSays(activities.SessionWord{Sticky: &author})
		decideAt(s.env, 10*time.Minute, "c1", approverIn(policy.Denied, "fin1", "finance"))
		r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

		s.Equal(StatusDenied, r.Status, author.DecidedBy)
		s.Equal("fin1", r.DecidedBy, "%s's decision does not cover the call: a person of its groups decides", author.DecidedBy)
		s.Len(r.Notices, 1, "and was asked")
	}
}

func (s *CallSuite) TestASessionReleaseOfAnotherKeyLeavesTheCallWaiting() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Timeout: time.Hour}
	other := SessionDecision{Key: "shell", Decision: &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "session"}}
	s.env.RegisterDelayedCallback(func() {
		s.NoError(s.env.SignalWorkflowByID(CallWorkflowID("c1"), SignalSessionDecision, other))
	}, 5*time.Minute)
	same := other
	same.Key = "write"
	s.env.RegisterDelayedCallback(func() {
		s.NoError(s.env.SignalWorkflowByID(CallWorkflowID("c1"), SignalSessionDecision, same))
	}, 20*time.Minute)
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Equal("bob", r.DecidedBy)
	s.Equal(20*time.Minute, r.DecidedAt.Sub(r.RequestedAt), "the release of shell did not decide a write")
}

func TestAStickyDecisionReplacesAnotherOnlyIfItsAuthorMayRevokeIt(t *testing.T) {
	env, _ := sessionEnv(t)
	finance := StickyDecision{Key: "shell", Tool: "shell", FromCall: "c1", Groups: []string{"finance"},
		Decision: policy.Decision{Kind: policy.DeniedAlways, DecidedBy: "fin1", DeciderGroups: []string{"finance"}, Channel: "cli"}}
	ops := StickyDecision{Key: "shell", Tool: "shell", FromCall: "c2", Groups: []string{"ops"},
		Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "ops1", DeciderGroups: []string{"ops"}, Channel: "cli"}}
	admin := StickyDecision{Key: "shell", Tool: "shell", FromCall: "c3", Groups: []string{"ops"},
		Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "root", DeciderGroups: []string{"*"}, Channel: "cli"}}
	signalAt(env, time.Minute, SignalSticky, finance)
	signalAt(env, 2*time.Minute, SignalSticky, ops)
	var afterOps, afterAdmin *policy.Decision
	query := func(into **policy.Decision) func() {
		return func() {
			v, err := env.QueryWorkflow(QuerySticky, "shell")
			require.NoError(t, err)
			require.NoError(t, v.Get(into))
		}
	}
	env.RegisterDelayedCallback(query(&afterOps), 3*time.Minute)
	signalAt(env, 4*time.Minute, SignalSticky, admin)
	env.RegisterDelayedCallback(query(&afterAdmin), 5*time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, "fin1", afterOps.DecidedBy, "ops1 may not revoke finance's deny-always, so may not replace it")
	require.Equal(t, policy.DeniedAlways, afterOps.Kind)
	require.Equal(t, "root", afterAdmin.DecidedBy, "an admin may")
}

func TestEndingASessionNeedsTheGroupsOfTheCallsRegisteredInIt(t *testing.T) {
	// A call of the first protocol registered with groups [ops].
	env, sent := sessionEnv(t)
	reg := register("c1", "write")
	reg.Groups, reg.Requester, reg.Timeout = []string{"ops"}, "agent-1", time.Hour
	signalAt(env, time.Minute, SignalRegister, reg)
	var refused error
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateEnd, "end-1", &testsuite.TestUpdateCallback{OnAccept: func() {},
			OnReject: func(err error) { refused = err }, OnComplete: func(any, error) {}}, EndRequest{By: "fin1", Groups: []string{"finance"}})
	}, 2*time.Minute)
	env.ExecuteWorkflow(ToolgateSession, SessionInput{Session: "s1", IdleTimeout: time.Hour})

	require.NoError(t, env.GetWorkflowError())
	require.ErrorContains(t, refused, "fin1 may not end session s1: waiting call c1")
	for _, d := range sent.to("c1") {
		require.Nil(t, d.Decision, "c1 was told only to ask a person, never denied")
	}
}

// shownGroups records the ToolgateGroups and ToolgateStickyKey values a
// call shows to listings, in order.
func (s *CallSuite) shownGroups() (groups *[][]string, keys *[]string) {
	groups, keys = &[][]string{}, &[]string{}
	s.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if g, ok := sa.GetKeywordList(AttrGroups); ok {
			*groups = append(*groups, g)
		}
		if k, ok := sa.GetKeyword(AttrStickyKey); ok {
			*keys = append(*keys, k)
		}
	}).Return(nil)
	return groups, keys
}

func (s *CallSuite) TestListingsShowTheEscalationGroupsOnceACallEscalates() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}, Timeout: 4 * time.Hour,
		EscalateAfter: 90 * time.Minute, EscalateTo: []string{"leads"}}
	groups, keys := s.shownGroups()
	decideAt(s.env, 2*time.Hour, "c1", approverIn(policy.Approved, "carol", "leads"))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Equal([][]string{{"ops"}, {"ops", "leads"}}, *groups, "pending and approver lists filter by these: the escalation group sees the call")
	s.Equal([]string{"write"}, *keys, "its session finds it by its sticky key")
}
