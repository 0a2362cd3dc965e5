package workflows

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// The tests below hold every path that decides a call to one rule: a
// decision decides only a call its author could decide directly (groups
// at that moment, escalation included; never their own call).

// groupsByPath asks [finance] for writes under fin/ and [ops] for the rest.
func groupsByPath(call policy.Call) (policy.ApprovalRequest, bool) {
	if call.Tool != "write" {
		return policy.ApprovalRequest{}, false
	}
	var args struct{ Path string }
	_ = json.Unmarshal(call.Args, &args)
	if strings.HasPrefix(args.Path, "fin") {
		return policy.ApprovalRequest{Message: "finance write?", Groups: []string{"finance"}}, true
	}
	return policy.ApprovalRequest{Message: "ops write?", Groups: []string{"ops"}}, true
}

// approverIn is a person's decision with the groups their token gives.
func approverIn(kind policy.DecisionKind, by string, groups ...string) policy.Decision {
	d := decision(kind, by)
	d.DeciderGroups = groups
	return d
}

func callBy(id, requester, args string) CallInput {
	c := call(id, "write", args)
	c.Call.Requester = requester
	return c
}

func (s *CallSuite) TestStickyDecisionDecidesOnlyCallsOfItsAuthorsGroups() {
	s.policy.askFor = groupsByPath
	// c1 (ops) and c2 (finance) wait; fin1 approves c2 for the session.
	decideAt(s.env, 3*time.Hour, "c2", approverIn(policy.ApprovedForSession, "fin1", "finance"))
	decideAt(s.env, 5*time.Hour, "c1", approverIn(policy.Approved, "ops1", "ops"))
	decideAt(s.env, 5*time.Hour, "c3", approverIn(policy.Denied, "ops1", "ops"))
	rs := s.runSession(harnessInput{Gap: 2 * time.Hour, Calls: []CallInput{
		call("c1", "write", `{"path":"ops/a","content":"x"}`),
		call("c2", "write", `{"path":"fin/b","content":"x"}`),
		call("c3", "write", `{"path":"ops/c","content":"x"}`), // registers at 4h, after the sticky decision
		call("c4", "write", `{"path":"fin/d","content":"x"}`), // 6h: covered
	}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal("ops1", rs[0].DecidedBy, "the ops call waited for an ops approver")
	s.Equal(5*time.Hour, rs[0].DecidedAt.Sub(s.start))
	s.Equal("fin1", rs[1].DecidedBy)
	s.Equal(StatusDenied, rs[2].Status, "a later ops call is not approved by finance's sticky decision")
	s.Equal("ops1", rs[2].DecidedBy)
	s.Equal(StatusOK, rs[3].Status)
	s.Equal("fin1", rs[3].DecidedBy)
	s.Equal("session", rs[3].Channel)
	s.Zero(s.runs.count("c3"))
}

func (s *CallSuite) TestStickyDecisionNeverApprovesItsAuthorsOwnCalls() {
	decideAt(s.env, 3*time.Hour, "w2", approverIn(policy.ApprovedForSession, "admin1", "*"))
	decideAt(s.env, 5*time.Hour, "w1", approverIn(policy.Denied, "bob", "*"))
	decideAt(s.env, 5*time.Hour, "w3", approverIn(policy.Denied, "bob", "*"))
	rs := s.runSession(harnessInput{Gap: 2 * time.Hour, Calls: []CallInput{
		callBy("w1", "admin1", `{"path":"a","content":"x"}`),
		callBy("w2", "agent-1", `{"path":"b","content":"x"}`),
		callBy("w3", "admin1", `{"path":"c","content":"x"}`), // 4h, after the sticky decision
		callBy("w4", "agent-1", `{"path":"d","content":"x"}`),
	}})

	s.Equal(StatusDenied, rs[0].Status, "admin1's own waiting call is not approved through the session")
	s.Equal("bob", rs[0].DecidedBy)
	s.Equal(StatusOK, rs[1].Status)
	s.Equal(StatusDenied, rs[2].Status, "nor a later one")
	s.Equal("bob", rs[2].DecidedBy)
	s.Equal(StatusOK, rs[3].Status)
	s.Equal("admin1", rs[3].DecidedBy)
	s.Zero(s.runs.count("w1") + s.runs.count("w3"))
}

func (s *CallSuite) TestStickyDecisionFoundAtEvaluationIsHeldToTheSameRule() {
	sticky := &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "fin1", DeciderGroups: []string{"finance"}, Channel: "session"}
	var a *activities.Activities
	s.env.OnActivity(a.Evaluate, mock.Anything, mock.Anything).Return(activities.Evaluation{
		Ask: &policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}}, Sticky: sticky, PolicyVersion: "test/1",
		ToolOptions: tool.Options{Timeout: time.Minute, Retry: tool.RetryPolicy{MaxAttempts: 1}},
	}, nil)
	decideAt(s.env, time.Hour, "c1", approverIn(policy.Denied, "ops1", "ops"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusDenied, rs[0].Status, "finance's sticky decision does not decide an ops call")
	s.Equal("ops1", rs[0].DecidedBy)
	s.Zero(s.runs.count("c1"))
}

func (s *CallSuite) TestDecisionsAreCheckedInsideTheWorkflow() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}}
	otherGroup := decideAt(s.env, time.Hour, "c1", approverIn(policy.Approved, "fin1", "finance"))
	noGroups := decideAt(s.env, time.Hour, "c1", approverIn(policy.Approved, "carol"))
	reserved := decideAt(s.env, time.Hour, "c1", policy.Decision{Kind: policy.Approved, DecidedBy: "ops1", DeciderGroups: []string{"ops"}, Channel: "session"})
	spaced := decideAt(s.env, time.Hour, "c1", approverIn(policy.Approved, "agent-1 ", "ops"))
	backdated := approverIn(policy.Approved, "ops1", "ops")
	backdated.DecidedAt = s.start.Add(-time.Hour)
	ok := decideAt(s.env, 2*time.Hour, "c1", backdated)
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Require().Error(otherGroup.rejected)
	s.Contains(otherGroup.rejected.Error(), "fin1 may not decide call c1: it is asked of ops; their groups: finance")
	s.Require().Error(noGroups.rejected)
	s.Contains(noGroups.rejected.Error(), "their groups: none")
	s.Require().Error(reserved.rejected)
	s.Contains(reserved.rejected.Error(), `channel "session" is reserved`)
	s.Require().Error(spaced.rejected)
	s.Contains(spaced.rejected.Error(), "leading or trailing spaces")
	s.True(ok.applied)
	s.Equal(StatusOK, rs[0].Status)
	s.Equal("ops1", rs[0].DecidedBy)
	s.Equal(2*time.Hour, rs[0].DecidedAt.Sub(s.start), "decided_at is the workflow's clock, not the request's")
}

func (s *CallSuite) TestSignalledDecisionIsHeldToTheGroups() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}}
	signal := func(at time.Duration, d policy.Decision) {
		s.env.RegisterDelayedCallback(func() {
			s.NoError(s.env.SignalWorkflowByID(CallWorkflowID("c1"), SignalDecide, DecideRequest{CallID: "c1", Decision: d}))
		}, at)
	}
	signal(time.Hour, approverIn(policy.Approved, "fin1", "finance"))
	signal(2*time.Hour, approverIn(policy.Denied, "ops1", "ops"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusDenied, rs[0].Status, "the finance approval by signal was ignored")
	s.Equal("ops1", rs[0].DecidedBy)
}

func (s *CallSuite) TestEscalationGroupsMayDecideFromTheEscalationOn() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"},
		EscalateAfter: 2 * time.Hour, EscalateTo: []string{"sec"}}
	early := decideAt(s.env, time.Hour, "c1", approverIn(policy.ApprovedForSession, "sec1", "sec"))
	decideAt(s.env, 3*time.Hour, "c1", approverIn(policy.ApprovedForSession, "sec1", "sec"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`), // escalated too at 3h: the sticky decision covers it
	}})

	s.Require().Error(early.rejected, "before the escalation sec may not decide")
	s.Equal(StatusOK, rs[0].Status)
	s.Equal("sec1", rs[0].DecidedBy)
	s.Equal(StatusOK, rs[1].Status)
	s.Equal("session", rs[1].Channel)
}

func (s *CallSuite) TestEditedArgumentsAreCheckedWhenTheDecisionIsMade() {
	s.policy.askFor = groupsByPath
	badSchema := approverIn(policy.ApprovedWithEdits, "fin1", "finance")
	badSchema.EditedArgs = json.RawMessage(`{"path":"fin/a"}`)
	otherGroup := approverIn(policy.ApprovedWithEdits, "fin1", "finance")
	otherGroup.EditedArgs = json.RawMessage(`{"path":"ops/a","content":"x"}`)
	good := approverIn(policy.ApprovedWithEdits, "fin1", "finance")
	good.EditedArgs = json.RawMessage(`{"path":"fin/b","content":"y"}`)
	o1 := decideAt(s.env, time.Hour, "c1", badSchema)
	o2 := decideAt(s.env, 2*time.Hour, "c1", otherGroup)
	o3 := decideAt(s.env, 3*time.Hour, "c1", good)
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"fin/a","content":"x"}`)}})

	s.Require().Error(o1.failed, "an edit the schema refuses is refused to the approver")
	s.Contains(o1.failed.Error(), "edited arguments refused")
	s.Require().Error(o2.failed, "an edit that moves the call to another group's rule is refused")
	s.Contains(o2.failed.Error(), "with them the call is asked of [ops]")
	s.True(o3.applied)
	s.Equal(StatusOK, rs[0].Status, "the call kept waiting for a valid decision")
	s.JSONEq(`{"path":"fin/b","content":"y"}`, string(rs[0].Args))
	s.Equal(3*time.Hour, rs[0].DecidedAt.Sub(s.start))
}

// sessionUpdate sends an update to session s1 at a virtual time and
// returns where its error will be.
func sessionUpdate(env *testsuite.TestWorkflowEnvironment, at time.Duration, name string, arg any) *error {
	var err error
	env.RegisterDelayedCallback(func() {
		updateSeq++
		_ = env.UpdateWorkflowByID(SessionWorkflowID("s1"), name, name+string(rune('a'+updateSeq%26)), &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(e error) { err = e }, OnComplete: func(_ any, e error) { err = e },
		}, arg)
	}, at)
	return &err
}

func (s *CallSuite) TestEndingOrRevokingNeedsTheGroupsOfWhatItTouches() {
	s.policy.askFor = groupsByPath
	decideAt(s.env, time.Hour, "c1", approverIn(policy.DeniedAlways, "ops1", "ops"))
	revokeByFinance := sessionUpdate(s.env, 2*time.Hour, UpdateRevoke, RevokeRequest{Key: "write", By: "fin1", Groups: []string{"finance"}})
	endByFinance := sessionUpdate(s.env, 2*time.Hour, UpdateEnd, EndRequest{By: "fin1", Groups: []string{"finance"}})
	endByAdmin := sessionUpdate(s.env, 3*time.Hour, UpdateEnd, EndRequest{By: "admin1", Groups: []string{"*"}})
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"ops/a","content":"x"}`),
		call("c2", "write", `{"path":"fin/b","content":"x"}`), // denied by the sticky decision? no: ops1 may not decide finance calls
	}})

	s.Require().Error(*revokeByFinance)
	s.Contains((*revokeByFinance).Error(), "fin1 may not revoke")
	s.Require().Error(*endByFinance)
	s.Contains((*endByFinance).Error(), "fin1 may not end session s1")
	s.NoError(*endByAdmin)
	s.Equal("ops1", rs[0].DecidedBy)
	s.Equal(StatusDenied, rs[1].Status)
	s.Equal("the session was ended by admin1", rs[1].Reason)
}
