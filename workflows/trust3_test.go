package workflows

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/toolgate/toolgate/policy"
)

// Paths around the gate that a review found in 1.0 (issue 34), each walked
// here as an attacker would.

// payRules asks one approval of ops for a small write and two for a large
// one ("pay" stands for a payment: the content is the amount).
func payRules(call policy.Call) (policy.ApprovalRequest, bool) {
	var a struct{ Content string }
	_ = json.Unmarshal(call.Args, &a)
	if len(a.Content) >= 3 {
		return policy.ApprovalRequest{Message: "pay a lot?", Rule: "big-pay", Groups: []string{"ops"}, Approvals: 2}, true
	}
	return policy.ApprovalRequest{Message: "pay?", Rule: "pay", Groups: []string{"ops"}}, true
}

func (s *CallSuite) TestAnEditIntoAFourEyesRuleIsRefusedAndTheCallStillWaits() {
	s.policy.askFor = payRules
	edited := approverIn(policy.ApprovedWithEdits, "ops1", "ops")
	edited.EditedArgs = json.RawMessage(`{"path":"pay","content":"5000"}`)
	edit := decideAt(s.env, time.Hour, "c1", edited)
	plain := decideAt(s.env, 2*time.Hour, "c1", approverIn(policy.Approved, "ops1", "ops"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"pay","content":"50"}`)}})

	s.Require().Error(edit.failed, "one approver's edit must not run arguments that need two")
	s.Equal(ErrTypeInvalidEdit, errorType(edit.failed))
	s.Contains(edit.failed.Error(), "rule big-pay, which needs 2 approvals")
	s.True(plain.applied, "the call kept waiting: %v %v", plain.rejected, plain.failed)
	s.Equal(StatusOK, rs[0].Status)
	s.JSONEq(`{"path":"pay","content":"50"}`, string(rs[0].Args), "what ran is what was asked and approved")
	s.Equal(1, s.runs.count("c1"))
}

// A coded handler's edit is held to the same rule: the edited arguments
// need two people, and a handler is none of them.
func (s *CallSuite) TestAHandlersEditIntoAFourEyesRuleDoesNotRun() {
	s.policy.askFor = payRules
	env := s.NewTestWorkflowEnvironment()
	useDoors(env, true)
	acts := newActivities(s.policy, s.runs, s.hooks)
	acts.Handler = policy.ApprovalHandlerFunc(func(context.Context, policy.Call, policy.ApprovalRequest) (*policy.Decision, error) {
		return &policy.Decision{Kind: policy.ApprovedWithEdits, DecidedBy: "pay-bot", EditedArgs: json.RawMessage(`{"path":"pay","content":"5000"}`)}, nil
	})
	env.RegisterActivity(acts)
	env.RegisterWorkflow(ToolCallWorkflow)
	s.env = env
	r := s.runOne(call("c1", "write", `{"path":"pay","content":"50"}`))

	s.Equal(StatusDenied, r.Status)
	s.Contains(r.Reason, "rule big-pay, which needs 2 approvals")
	s.Zero(s.runs.total())
}

// The kill switch: an approval the agent has not yet taken is void once
// its session ends; the claim is refused and the call ends denied, its
// approval named.
func (s *CallSuite) TestTheSessionsEndVoidsAnApprovalNotYetClaimed() {
	s.policy.ask["Bash"] = policy.ApprovalRequest{Message: "run it?", Rule: "ask-bash"}
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(10*time.Hour).Return(json.RawMessage(`{"ok":true}`), nil)
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	end := sessionUpdate(s.env, 2*time.Hour, UpdateEnd, EndRequest{By: "root", Groups: []string{"*"}})
	late := updateAt(s.env, 3*time.Hour, "c1", UpdateClaim, claim("toolu_new", false))

	r := s.runAsked(agentCall("c1", "Bash", `{"command":"rm -rf build"}`))

	s.NoError(*end)
	s.Require().Error(late.failed, "a claim after the end is refused")
	s.Equal(ErrTypeApprovalVoided, errorType(late.failed))
	s.Contains(late.failed.Error(), "the session was ended by root before the agent took the approval")
	s.Equal(StatusDenied, r.Status)
	s.Equal("the session was ended by root before the agent took the approval", r.Reason)
	s.Contains(r.Note, "the approval (approved by alice via cli at")
	s.Nil(r.Claim, "nobody took it")
	s.Equal(3*time.Hour, r.FinishedAt.Sub(s.start), "it ended at the refused claim, not at the report's deadline")
}

// A revoke of the sticky decision that approved a call voids the approval
// too, whether the call took the decision itself or was handed it; a call
// claimed before the revoke keeps its run.
func (s *CallSuite) TestARevokeVoidsTheApprovalsItGaveThatAreNotYetClaimed() {
	s.policy.ask["Bash"] = policy.ApprovalRequest{Message: "run it?", Rule: "ask-bash"}
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(10*time.Hour).Return(json.RawMessage(`{"ok":true}`), nil)
	decideAt(s.env, time.Hour, "c1", decision(policy.ApprovedForSession, "alice"))
	claimedFirst := updateAt(s.env, 90*time.Minute, "c3", UpdateClaim, ClaimRequest{CallID: "c3", By: "agent-1", Run: "toolu_3"})
	revoke := sessionUpdate(s.env, 2*time.Hour, UpdateRevoke, RevokeRequest{Key: policy.AgentStickyPrefix + "Bash", By: "alice"})
	own := updateAt(s.env, 3*time.Hour, "c1", UpdateClaim, claim("toolu_1", false))
	handed := updateAt(s.env, 3*time.Hour, "c2", UpdateClaim, ClaimRequest{CallID: "c2", By: "agent-1", Run: "toolu_2"})

	rs := s.runSession(harnessInput{Calls: []CallInput{
		agentCall("c1", "Bash", `{"command":"make a"}`),
		agentCall("c2", "Bash", `{"command":"make b"}`),
		agentCall("c3", "Bash", `{"command":"make c"}`),
	}})

	s.NoError(*revoke)
	s.True(claimedFirst.applied, "%v %v", claimedFirst.rejected, claimedFirst.failed)
	for i, o := range []*updateOutcome{own, handed} {
		s.Require().Error(o.failed, "call %d", i+1)
		s.Equal(ErrTypeApprovalVoided, errorType(o.failed))
		s.Contains(o.failed.Error(), "the approval for the session by alice was revoked before the agent took it")
		s.Equal(StatusDenied, rs[i].Status)
	}
	s.Equal(StatusOK, rs[2].Status, "taken before the revoke: its run goes on and is reported")
}

// A claim names a run; spaces are no name. The same run claiming again
// must claim as it did: a run that said a report follows cannot end the
// call by claiming again without one.
func (s *CallSuite) TestAClaimNamesARunAndKeepsToWhatItSaid() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Hour).Return(json.RawMessage(`{"ok":true}`), nil)
	blank := updateAt(s.env, time.Minute, "c1", UpdateClaim, claim(" \t", false))
	first := updateAt(s.env, 2*time.Minute, "c1", UpdateClaim, claim("toolu_1", false))
	changed := updateAt(s.env, 3*time.Minute, "c1", UpdateClaim, claim("toolu_1", true))

	r := s.runOne(agentCall("c1", "Bash", `{"command":"ls"}`))

	s.Equal(ErrTypeInvalidDecision, errorType(blank.rejected))
	s.Contains(blank.rejected.Error(), "not only spaces")
	s.True(first.applied)
	s.Equal(ErrTypeInvalidDecision, errorType(changed.rejected))
	s.Contains(changed.rejected.Error(), "a report follows: report how it went")
	s.Equal(StatusOK, r.Status)
	s.JSONEq(`{"ok":true}`, string(r.Output), "the call waited for the report the run promised")
}

// A bulk decision asks each call first: the check refuses what the decide
// update would refuse (four eyes here), and changes nothing.
func (s *CallSuite) TestCheckingADecisionRefusesWhatDecidingWouldAndChangesNothing() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "pay?", Approvals: 2}
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	var again, other, forSession DecisionCheck
	var after CallState
	s.env.RegisterDelayedCallback(func() {
		check := func(d policy.Decision) (out DecisionCheck) {
			v, err := s.env.QueryWorkflowByID(CallWorkflowID("c1"), QueryCheckDecision, DecideRequest{CallID: "c1", Decision: d})
			s.Require().NoError(err)
			s.Require().NoError(v.Get(&out))
			return out
		}
		again = check(decision(policy.Approved, "alice"))
		other = check(decision(policy.Approved, "bob"))
		forSession = check(decision(policy.ApprovedForSession, "bob"))
		v, err := s.env.QueryWorkflowByID(CallWorkflowID("c1"), QueryCall)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(&after))
	}, 2*time.Hour)
	decideAt(s.env, 3*time.Hour, "c1", decision(policy.Denied, "bob"))
	s.runAsked(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(ErrTypeNotAnotherApproval, again.RefusalType)
	s.Contains(again.Refusal, "alice already approved call c1")
	s.Equal(DecisionCheck{}, other, "another person's approval would count")
	s.Equal(ErrTypeInvalidDecision, forSession.RefusalType)
	s.Equal(StatusPending, after.Status, "checking decided nothing")
	s.Len(after.Approvals.Given, 1)
}

// The session's end voids what people approved; a call the policy itself
// approves holds, as the end denies only calls that would ask a person.
func (s *CallSuite) TestAnApprovalByThePolicyIsNotVoidedByTheEnd() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Hour).Return(json.RawMessage(`{"ok":true}`), nil)
	end := sessionUpdate(s.env, time.Minute, UpdateEnd, EndRequest{By: "root", Groups: []string{"*"}})
	claimed := updateAt(s.env, 2*time.Minute, "c1", UpdateClaim, claim("toolu_1", false))

	rs := s.runSession(harnessInput{Calls: []CallInput{agentCall("c1", "Bash", `{"command":"ls"}`)}})

	s.NoError(*end)
	s.True(claimed.applied, "%v %v", claimed.rejected, claimed.failed)
	s.Equal(StatusOK, rs[0].Status)
}
