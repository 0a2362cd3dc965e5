package workflows

import (
	"time"

	"github.com/toolgate/toolgate/policy"
)

// The person running the agent decides a call in the agent's own client
// only when its rule says `user: true`, and only as the call's acting user.

func userDecision(kind policy.DecisionKind, by string) policy.Decision {
	return policy.Decision{Kind: kind, DecidedBy: by, Channel: policy.ChannelClient, User: true}
}

func userCall(id, args string) CallInput {
	in := call(id, "write", args)
	in.Call.ActingUser = "alice"
	return in
}

func (s *CallSuite) TestTheActingUserDecidesWhenTheRuleLetsThem() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}, User: true}
	decided := decideAt(s.env, time.Minute, "c1", userDecision(policy.Approved, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{userCall("c1", `{"path":"a","content":"x"}`)}})

	s.True(decided.applied, "%v %v", decided.rejected, decided.failed)
	s.Equal(StatusOK, rs[0].Status)
	s.Equal("alice", rs[0].DecidedBy)
	s.Equal(policy.ChannelClient, rs[0].Channel)
	s.Equal(1, s.runs.count("c1"))
}

func (s *CallSuite) TestAUserDecisionNeedsTheRuleAndTheActingUser() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", User: true}
	s.policy.askFor = func(c policy.Call) (policy.ApprovalRequest, bool) {
		if c.ID == "c2" {
			return policy.ApprovalRequest{Message: "write?"}, true // remote approvers only
		}
		return policy.ApprovalRequest{}, false
	}
	other := decideAt(s.env, time.Minute, "c1", userDecision(policy.Approved, "mallory"))
	unflagged := decideAt(s.env, 2*time.Minute, "c1", policy.Decision{Kind: policy.Approved, DecidedBy: "alice", Channel: policy.ChannelClient})
	notAllowed := decideAt(s.env, 3*time.Minute, "c2", userDecision(policy.Approved, "alice"))
	decideAt(s.env, time.Hour, "c1", decision(policy.Denied, "bob"))
	decideAt(s.env, time.Hour, "c2", decision(policy.Approved, "bob"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		userCall("c1", `{"path":"a","content":"x"}`),
		userCall("c2", `{"path":"b","content":"x"}`),
	}})

	s.Equal(ErrTypeNotAuthorized, errorType(other.rejected), "only the call's acting user decides in the client")
	s.Contains(other.rejected.Error(), "the person running its agent is alice")
	s.Equal(ErrTypeInvalidDecision, errorType(unflagged.rejected), "channel client is the user's, and only theirs")
	s.Equal(ErrTypeNotAuthorized, errorType(notAllowed.rejected), "no user: true, no user decision")
	s.Contains(notAllowed.rejected.Error(), "user: true")
	s.Equal(StatusDenied, rs[0].Status, "a remote approver still decides, first decision wins")
	s.Equal("bob", rs[0].DecidedBy)
	s.Equal(StatusOK, rs[1].Status)
	s.Equal("bob", rs[1].DecidedBy)
}

// A user's approval for the session covers later calls whose rule lets
// that user decide, never one that asks remote approvers only.
func (s *CallSuite) TestAUsersStickyApprovalCoversOnlyCallsTheUserMayDecide() {
	s.policy.askFor = func(c policy.Call) (policy.ApprovalRequest, bool) {
		return policy.ApprovalRequest{Message: "write?", User: c.ID != "c3"}, true
	}
	decideAt(s.env, time.Minute, "c1", userDecision(policy.ApprovedForSession, "alice"))
	decideAt(s.env, time.Hour, "c3", decision(policy.Denied, "bob"))
	rs := s.runSession(harnessInput{Sequential: true, Calls: []CallInput{
		userCall("c1", `{"path":"a","content":"x"}`),
		userCall("c2", `{"path":"b","content":"x"}`),
		userCall("c3", `{"path":"c","content":"x"}`),
	}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal(StatusOK, rs[1].Status)
	s.Equal("alice", rs[1].DecidedBy)
	s.Equal("session", rs[1].Channel)
	s.Equal(StatusDenied, rs[2].Status, "the user's sticky approval does not reach a remote-only rule")
	s.Equal("bob", rs[2].DecidedBy)
	s.Equal(0, s.runs.count("c3"))
}

func (s *CallSuite) TestTheActingUserNeverCountsTowardFourEyes() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "pay?", Approvals: 2}
	asUser := decideAt(s.env, time.Minute, "c1", userDecision(policy.Approved, "alice"))
	asApprover := decideAt(s.env, 2*time.Minute, "c1", decision(policy.Approved, "alice"))
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "bob"))
	decideAt(s.env, 2*time.Hour, "c1", decision(policy.Approved, "carol"))
	rs := s.runSession(harnessInput{Calls: []CallInput{userCall("c1", `{"path":"a","content":"x"}`)}})

	s.Equal(ErrTypeNotAuthorized, errorType(asUser.rejected))
	s.Equal(ErrTypeSelfApproval, errorType(asApprover.rejected), "not with an approver's token either")
	s.Equal(StatusOK, rs[0].Status)
	s.Require().NotNil(rs[0].Approvals)
	s.Equal([]string{"bob", "carol"}, []string{rs[0].Approvals.Given[0].By, rs[0].Approvals.Given[1].By})
}

// The same through the waiting room, for calls that wait at once: the
// user's approval for the session releases the one whose rule lets that
// user decide, and leaves the remote-only one to its approvers.
func (s *CallSuite) TestAUsersStickyApprovalReleasesOnlyWaitingCallsTheUserMayDecide() {
	s.policy.askFor = func(c policy.Call) (policy.ApprovalRequest, bool) {
		return policy.ApprovalRequest{Message: "write?", User: c.ID != "c3"}, true
	}
	decideAt(s.env, time.Hour, "c2", userDecision(policy.ApprovedForSession, "alice"))
	decideAt(s.env, 2*time.Hour, "c3", decision(policy.Denied, "bob"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		userCall("c1", `{"path":"a","content":"x"}`),
		userCall("c2", `{"path":"b","content":"x"}`),
		userCall("c3", `{"path":"c","content":"x"}`),
	}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal("alice", rs[0].DecidedBy)
	s.Equal("session", rs[0].Channel)
	s.Equal(time.Hour, rs[0].DecidedAt.Sub(s.start), "released when the user decided")
	s.Equal(policy.ChannelClient, rs[1].Channel)
	s.Equal(StatusDenied, rs[2].Status, "still waiting for its approvers until bob denied it")
	s.Equal("bob", rs[2].DecidedBy)
}
