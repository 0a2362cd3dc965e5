package workflows

import (
	"context"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// Calls hearing their session through the waiting rooms, with the real
// ToolgateSession and WaitingRooms in virtual time: every decision the
// session takes reaches every call it covers, whenever the call begins to
// wait.

func (s *CallSuite) TestADecisionTakenWhileACallIsEvaluatingReachesIt() {
	// c2 starts in the same instant as the approve-for-session on c1, c3
	// right after; none of them may ask a person.
	decideAt(s.env, time.Hour, "c1", decision(policy.ApprovedForSession, "alice"))
	rs := s.runSession(harnessInput{Gap: time.Hour, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
		call("c3", "write", `{"path":"c","content":"x"}`),
	}})

	for _, r := range rs[1:] {
		s.Equal(StatusOK, r.Status, r.CallID)
		s.Equal("session", r.Channel, r.CallID)
		s.Equal("alice", r.DecidedBy, r.CallID)
		s.Empty(r.Notices, "%s: nobody was asked", r.CallID)
	}
}

func (s *CallSuite) TestADenyAlwaysTakenWhileACallIsEvaluatingWinsOverApproveOnTimeout() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Timeout: 2 * time.Hour, OnTimeout: policy.TimeoutApprove}
	d := decision(policy.DeniedAlways, "alice")
	d.Reason = "no writes in this session"
	decideAt(s.env, time.Hour, "c1", d)
	rs := s.runSession(harnessInput{Gap: time.Hour, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
	}})

	s.Equal(StatusDenied, rs[1].Status, "never approved at its timeout")
	s.Equal("no writes in this session", rs[1].Reason)
	s.Zero(s.runs.total())
}

func (s *CallSuite) TestACallAfterTheSessionEndedIsDeniedWithoutAskingAnyone() {
	end := sessionUpdate(s.env, time.Hour, UpdateEnd, EndRequest{By: "root", Groups: []string{"*"}})
	rs := s.runSession(harnessInput{Gap: 2 * time.Hour, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
	}})

	s.NoError(*end)
	s.Equal(StatusDenied, rs[0].Status)
	s.Equal("the session was ended by root", rs[0].Reason)
	s.Equal(StatusDenied, rs[1].Status)
	s.Equal("the session has ended", rs[1].Reason)
	s.Empty(rs[1].Notices, "no person is asked after the end")
}

func (s *CallSuite) TestAStickyDecisionOnAnAgentRunToolNeverCoversTheServerRunOne() {
	agentWrite := call("c1", "write", `{"path":"a","content":"x"}`)
	agentWrite.Call.Execution = policy.ExecutionAgent
	agentWrite.NoReport = true
	decideAt(s.env, time.Hour, "c1", decision(policy.ApprovedForSession, "alice"))
	decideAt(s.env, 3*time.Hour, "c2", decision(policy.Denied, "bob"))
	rs := s.runSession(harnessInput{Gap: 2 * time.Hour, Calls: []CallInput{
		agentWrite,
		call("c2", "write", `{"path":".git/hooks/pre-commit","content":"x"}`),
	}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal(StatusDenied, rs[1].Status, "toolgate's own write asked a person")
	s.Equal("bob", rs[1].DecidedBy)
	s.Len(rs[1].Notices, 1)
	s.Zero(s.runs.total())
}

func (s *CallSuite) TestACallIntoAnotherAgentsSessionIsDenied() {
	// The client refuses such a call before it starts (403); a call
	// started some other way is denied by the workflow.
	var acts *activities.Activities
	real := newActivities(s.policy, s.runs, s.hooks)
	s.env.OnActivity(acts.Evaluate, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.EvaluateInput) (activities.Evaluation, error) {
		ev, err := real.Evaluate(ctx, in)
		ev.SessionOwner = "agent-a"
		return ev, err
	})
	r := s.runOne(call("c1", "echo", `{"text":"hi"}`))

	s.Equal(StatusDenied, r.Status)
	s.Equal("the session belongs to another agent", r.Reason)
	s.Zero(s.runs.total())
}
