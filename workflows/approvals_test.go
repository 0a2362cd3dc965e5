package workflows

import (
	"time"

	"github.com/toolgate/toolgate/policy"
)

func approver(by string, groups ...string) policy.Decision {
	d := decision(policy.Approved, by)
	d.DeciderGroups = groups
	return d
}

func (s *CallSuite) TestAFourEyesCallRunsOnceTwoPeopleApproved() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "pay?", Approvals: 2, Timeout: 4 * time.Hour}
	first := decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	again := decideAt(s.env, 90*time.Minute, "c1", decision(policy.Approved, "alice"))
	requester := decideAt(s.env, 100*time.Minute, "c1", decision(policy.Approved, "agent-1"))
	sticky := decideAt(s.env, 110*time.Minute, "c1", decision(policy.ApprovedForSession, "carol"))
	edited := decision(policy.ApprovedWithEdits, "carol")
	edited.EditedArgs = []byte(`{"path":"b","content":"x"}`)
	edit := decideAt(s.env, 115*time.Minute, "c1", edited)
	var mid CallState
	ranEarly := -1
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflowByID(CallWorkflowID("c1"), QueryCall)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(&mid))
		ranEarly = s.runs.count("c1")
	}, 2*time.Hour)
	second := decideAt(s.env, 3*time.Hour, "c1", decision(policy.Approved, "bob"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.True(first.applied, "counted: %v %v", first.rejected, first.failed)
	s.Equal(ErrTypeNotAnotherApproval, errorType(again.rejected), "the same person twice is one approval")
	s.Equal(ErrTypeSelfApproval, errorType(requester.rejected))
	s.Equal(ErrTypeInvalidDecision, errorType(sticky.rejected), "no sticky decision for a four-eyes call")
	s.Equal(ErrTypeInvalidDecision, errorType(edit.rejected), "nor an edit the first approver never saw")
	s.Equal(StatusPending, mid.Status, "one approval of two: it still waits")
	s.Require().NotNil(mid.Approvals)
	s.Equal(2, mid.Approvals.Needed)
	s.Len(mid.Approvals.Given, 1)
	s.Equal("alice", mid.Approvals.Given[0].By)
	s.Equal(0, ranEarly, "nothing ran on one approval")

	s.True(second.applied)
	r := rs[0]
	s.Equal(StatusOK, r.Status)
	s.Equal(1, s.runs.count("c1"))
	s.Equal("bob", r.DecidedBy)
	s.Contains(r.Comment, "approved by alice, bob")
	s.Require().NotNil(r.Approvals)
	s.Len(r.Approvals.Given, 2)
	s.WithinDuration(s.start.Add(time.Hour), r.Approvals.Given[0].At, time.Second, "each approval with when")
	s.Equal("cli", r.Approvals.Given[1].Channel, "and through which channel")
}

func (s *CallSuite) TestOneDenialDeniesAFourEyesCall() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "pay?", Approvals: 2}
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	decideAt(s.env, 2*time.Hour, "c1", policy.Decision{Kind: policy.DeniedWithReason, Reason: "wrong account", DecidedBy: "bob", Channel: "cli"})
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusDenied, rs[0].Status)
	s.Equal("wrong account", rs[0].Reason)
	s.Equal(0, s.runs.count("c1"))
}

func (s *CallSuite) TestFourEyesFromDistinctGroups() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "pay?", Groups: []string{"finance", "risk"}, Approvals: 2, DistinctGroups: true}
	decideAt(s.env, time.Hour, "c1", approver("alice", "finance"))
	sameGroup := decideAt(s.env, 2*time.Hour, "c1", approver("carol", "finance"))
	decideAt(s.env, 3*time.Hour, "c1", approver("dave", "risk"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(ErrTypeNotAnotherApproval, errorType(sameGroup.rejected), "finance is counted already")
	s.Equal(StatusOK, rs[0].Status)
	s.Require().NotNil(rs[0].Approvals)
	s.Equal("finance", rs[0].Approvals.Given[0].Group)
	s.Equal("risk", rs[0].Approvals.Given[1].Group)
}

func (s *CallSuite) TestASessionsStickyApprovalNeverSatisfiesFourEyes() {
	s.policy.askFor = func(c policy.Call) (policy.ApprovalRequest, bool) {
		req := policy.ApprovalRequest{Message: "write?", StickyKey: "write", Timeout: 4 * time.Hour}
		if c.ID == "big" {
			req.Approvals = 2
		}
		return req, c.Tool == "write"
	}
	decideAt(s.env, time.Hour, "small", decision(policy.ApprovedForSession, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("small", "write", `{"path":"a","content":"x"}`),
		call("big", "write", `{"path":"b","content":"x"}`),
	}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal(StatusTimedOut, rs[1].Status, "the four-eyes call kept waiting for two people")
	s.Equal(0, s.runs.count("big"))
}
