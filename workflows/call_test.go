package workflows

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

type CallSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env     *testsuite.TestWorkflowEnvironment
	policy  *testPolicy
	runs    *runLog
	hooks   *hookLog
	channel *fakeChannel
	start   time.Time
	// temporal answers the activities that need a Temporal client.
	temporal *fakeTemporal
	// ledger is the decision ledger every call writes to.
	ledger *testLedger
	// acts are the activities the calls run (a test may add to them).
	acts *activities.Activities
}

func TestCallSuite(t *testing.T) { suite.Run(t, new(CallSuite)) }

func (s *CallSuite) SetupTest() {
	s.SetLogger(quietLogger{})
	s.env = s.NewTestWorkflowEnvironment()
	useDoors(s.env, true)
	s.policy = &testPolicy{
		ask:  map[string]policy.ApprovalRequest{"write": {Message: "write a file?", Rule: "ask-write"}},
		deny: map[string]string{},
	}
	s.runs = &runLog{runs: map[string]int{}}
	s.hooks = &hookLog{}
	s.channel = &fakeChannel{}
	acts := newActivities(s.policy, s.runs, s.hooks, s.channel)
	s.ledger = newTestLedger(s.T())
	acts.Ledger = s.ledger
	s.acts = acts
	s.env.RegisterActivity(acts)
	s.env.RegisterWorkflow(ToolCallWorkflow)
	s.env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	s.env.RegisterWorkflow(NoticesWorkflow)
	s.env.RegisterWorkflowWithOptions(WaitingRoom, workflow.RegisterOptions{Name: RoomWorkflowType})
	s.env.RegisterWorkflow(harnessWorkflow)
	s.temporal = newFakeTemporal(s.env)
	s.start = s.env.Now()
}

// fakeTemporalInstalled installs the fake Temporal client's activities in
// the test's environment (a test may have made a new one), after the
// test's own mocks.
func (s *CallSuite) fakeTemporalInstalled() {
	if s.temporal.env != s.env {
		s.temporal = newFakeTemporal(s.env)
	}
	s.temporal.install()
}

// runOne runs a single call as the top-level workflow, with no session.
func (s *CallSuite) runOne(in CallInput) Result {
	s.fakeTemporalInstalled()
	s.env.SetStartWorkflowOptions(startOptions(in.Call.ID))
	s.env.ExecuteWorkflow(ToolCallWorkflow, in)
	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError())
	var r Result
	s.Require().NoError(s.env.GetWorkflowResult(&r))
	return r
}

// runSession runs calls in one session with the real ToolgateSession and
// WaitingRooms.
func (s *CallSuite) runSession(in harnessInput) []Result {
	in.Session = "s1"
	s.fakeTemporalInstalled()
	s.env.ExecuteWorkflow(harnessWorkflow, in)
	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError())
	var rs []Result
	s.Require().NoError(s.env.GetWorkflowResult(&rs))
	return rs
}

func (s *CallSuite) TestAutoApprovedCallRunsTheToolOnce() {
	r := s.runOne(call("c1", "echo", `{"text":"hi"}`))

	s.Equal(StatusOK, r.Status)
	s.JSONEq(`{"text":"hi"}`, string(r.Output))
	s.Equal("approved", r.Decision)
	s.Equal("policy", r.DecidedBy)
	s.Equal("test/1", r.PolicyVersion)
	s.Equal(1, s.runs.count("c1"))
	starts, ends := s.hooks.calls()
	s.Equal([]string{"c1"}, starts)
	s.Equal([]string{"c1"}, ends)
}

func (s *CallSuite) TestPolicyDenialReturnsReasonWithoutRunningOrHooks() {
	s.policy.deny["write"] = "writes are frozen during the release"
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusDenied, r.Status)
	s.Equal("writes are frozen during the release", r.Reason)
	s.Equal("policy", r.DecidedBy)
	s.Equal("deny-write", r.Rule)
	s.Zero(s.runs.total())
	starts, ends := s.hooks.calls()
	s.Empty(starts, "lifecycle hook must not see denied calls")
	s.Empty(ends)
}

func (s *CallSuite) TestUnknownToolIsAnErrorResultBeforeAnyoneIsAsked() {
	r := s.runOne(call("c1", "rm_rf", `{}`))

	s.Equal(StatusError, r.Status)
	s.Contains(r.Reason, `unknown tool "rm_rf"`)
	s.Contains(r.Reason, "echo", "the reason lists the known tools")
	s.True(r.InvalidRequest)
	s.Empty(r.DecidedBy)
	s.Zero(s.runs.total())
}

func (s *CallSuite) TestSchemaInvalidArgumentsNameTheField() {
	r := s.runOne(call("c1", "write", `{"path":3,"content":"x"}`))

	s.Equal(StatusError, r.Status)
	s.Contains(r.Reason, "/path")
	s.True(r.InvalidRequest)
	s.Contains(r.Reason, "string")
	s.Zero(s.runs.total())
}

func (s *CallSuite) TestAskThenApproved() {
	o := decideAt(s.env, 2*time.Hour, "c1", decision(policy.Approved, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.True(o.applied)
	r := rs[0]
	s.Equal(StatusOK, r.Status)
	s.Equal("approved", r.Decision)
	s.Equal("alice", r.DecidedBy)
	s.Equal("cli", r.Channel)
	s.Equal("ask-write", r.Rule)
	s.Equal(2*time.Hour, r.DecidedAt.Sub(s.start))
	s.Equal(1, s.runs.count("c1"))
}

func (s *CallSuite) TestApprovedForSessionLetsTheNextCallRunWithoutAsking() {
	decideAt(s.env, time.Hour, "c1", decision(policy.ApprovedForSession, "alice"))
	rs := s.runSession(harnessInput{Sequential: true, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"y"}`),
	}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal(StatusOK, rs[1].Status)
	s.Equal("approved_for_session", rs[1].Decision)
	s.Equal("alice", rs[1].DecidedBy)
	s.Equal("session", rs[1].Channel)
	s.Contains(rs[1].Comment, "on call c1")
	s.Equal(rs[0].FinishedAt, rs[1].FinishedAt, "the second call waited for nobody")
	s.Equal(1, s.runs.count("c1"))
	s.Equal(1, s.runs.count("c2"))
}

func (s *CallSuite) TestDeniedWithReasonReachesTheResultVerbatim() {
	d := decision(policy.DeniedWithReason, "alice")
	d.Reason = "use the staging bucket, not prod"
	decideAt(s.env, time.Hour, "c1", d)
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusDenied, rs[0].Status)
	s.Equal("use the staging bucket, not prod", rs[0].Reason)
	s.Equal("denied_with_reason", rs[0].Decision)
	s.Zero(s.runs.total())
	starts, _ := s.hooks.calls()
	s.Empty(starts)
}

func (s *CallSuite) TestDeniedAlwaysDeniesLaterCallsAtOnce() {
	decideAt(s.env, time.Hour, "c1", decision(policy.DeniedAlways, "alice"))
	rs := s.runSession(harnessInput{Sequential: true, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"y"}`),
		call("c3", "echo", `{}`), // another tool is not affected
	}})

	s.Equal(StatusDenied, rs[0].Status)
	s.Equal(StatusDenied, rs[1].Status)
	s.Equal("denied_always", rs[1].Decision)
	s.Equal("session", rs[1].Channel)
	s.Contains(rs[1].Reason, "rest of the session")
	s.Equal(rs[0].FinishedAt, rs[1].FinishedAt)
	s.Equal(StatusOK, rs[2].Status)
	s.Equal(1, s.runs.total())
}

func (s *CallSuite) TestApprovedWithEditedArgumentsRunsTheEditedCall() {
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"path":"notes/b.txt","content":"x"}`)
	decideAt(s.env, time.Hour, "c1", d)
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"/etc/a","content":"x"}`)}})

	r := rs[0]
	s.Equal(StatusOK, r.Status)
	s.JSONEq(`{"path":"notes/b.txt","content":"x"}`, string(r.Args))
	s.JSONEq(`{"path":"/etc/a","content":"x"}`, string(r.OriginalArgs))
	s.JSONEq(`{"written":true,"args":{"path":"notes/b.txt","content":"x"}}`, string(r.Output))
	s.Contains(r.Note, "alice edited the arguments")
	s.Contains(r.Note, "notes/b.txt")
	s.Require().NotNil(r.Preview)
	s.Equal("+++ b/notes/b.txt\n+x", r.Preview.Text, "the preview of what ran")
	s.Require().NotNil(r.PreviewShown)
	s.Equal("+++ b//etc/a\n+x", r.PreviewShown.Text, "and the one the approver was shown")
}

func (s *CallSuite) TestEditedArgumentsThePolicyRefusesAreRefusedToTheApprover() {
	s.policy.refuse = func(c policy.Call) string {
		var a struct{ Path string }
		_ = json.Unmarshal(c.Args, &a)
		if a.Path == "/etc/passwd" {
			return "/etc/passwd is protected"
		}
		return ""
	}
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"path":"/etc/passwd","content":"x"}`)
	refused := decideAt(s.env, time.Hour, "c1", d)
	bad := decision(policy.ApprovedWithEdits, "alice")
	bad.EditedArgs = json.RawMessage(`{"path":"ok.txt"}`) // fails the schema
	invalid := decideAt(s.env, time.Hour, "c2", bad)
	decideAt(s.env, 2*time.Hour, "c1", decision(policy.Denied, "alice"))
	decideAt(s.env, 2*time.Hour, "c2", decision(policy.Denied, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a.txt","content":"x"}`),
		call("c2", "write", `{"path":"b.txt","content":"x"}`),
	}})

	s.Require().Error(refused.failed)
	s.Contains(refused.failed.Error(), "edited arguments refused: the policy denies them: /etc/passwd is protected; the call still waits")
	s.Require().Error(invalid.failed)
	s.Contains(invalid.failed.Error(), "content")
	for i, r := range rs {
		s.Equal(StatusDenied, r.Status, "call %d kept waiting and was then denied", i+1)
		s.Equal(2*time.Hour, r.DecidedAt.Sub(s.start))
	}
	s.Zero(s.runs.total())
}

func (s *CallSuite) TestNobodyAnswersIn24HoursTimesOut() {
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	r := rs[0]
	s.Equal(StatusTimedOut, r.Status)
	s.Equal("no approver answered within 24h0m0s; the call was denied", r.Reason)
	s.Equal("timeout", r.DecidedBy)
	s.Equal(24*time.Hour, r.FinishedAt.Sub(r.RequestedAt), "the deadline counts from the request")
	s.Zero(s.runs.total())
}

func (s *CallSuite) TestTimeoutActionApproveRunsTheTool() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "low risk", Timeout: 10 * time.Minute, OnTimeout: policy.TimeoutApprove}
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal("timeout", rs[0].DecidedBy)
	s.Equal(10*time.Minute, rs[0].DecidedAt.Sub(rs[0].RequestedAt))
	s.Equal(1, s.runs.count("c1"))
}

func (s *CallSuite) TestDecisionAfterTheTimeoutIsRefused() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "quick", Timeout: time.Hour}
	s.policy.ask["echo"] = policy.ApprovalRequest{Message: "slow", Timeout: 48 * time.Hour}
	late := decideAt(s.env, 2*time.Hour, "c1", decision(policy.Approved, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "echo", `{}`), // keeps the test running past c1's deadline
	}})

	s.True(late.sent)
	s.Error(late.rejected)
	s.False(late.applied)
	s.Equal(StatusTimedOut, rs[0].Status)
	s.Zero(s.runs.count("c1"))
}

func (s *CallSuite) TestSecondDecisionIsRefusedAndTheFirstStands() {
	s.policy.before = func(policy.Call) error { time.Sleep(50 * time.Millisecond); return nil }
	first := decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	second := decideAt(s.env, time.Hour, "c1", decision(policy.Denied, "bob"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.True(first.applied)
	s.Require().Error(second.rejected)
	s.Contains(second.rejected.Error(), "already decided: approved by alice via cli")
	s.Equal(StatusOK, rs[0].Status)
	s.Equal("alice", rs[0].DecidedBy)
	s.Equal(1, s.runs.count("c1"))
}

func (s *CallSuite) TestDecisionForAnotherOrUnknownCallIsRefused() {
	var wrong, unknown error
	s.env.RegisterDelayedCallback(func() {
		_ = s.env.UpdateWorkflowByID(CallWorkflowID("c1"), UpdateDecide, "wrong", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { wrong = err }, OnComplete: func(any, error) {},
		}, DecideRequest{CallID: "c9", Decision: decision(policy.Approved, "alice")})
		unknown = s.env.UpdateWorkflowByID(CallWorkflowID("c9"), UpdateDecide, "unknown", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, DecideRequest{CallID: "c9", Decision: decision(policy.Approved, "alice")})
	}, time.Hour)
	decideAt(s.env, 2*time.Hour, "c1", decision(policy.Denied, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Require().Error(wrong)
	s.Contains(wrong.Error(), `decision names call "c9" but this is call "c1"`)
	s.Require().Error(unknown)
	s.Equal(StatusDenied, rs[0].Status, "the misaddressed approval was not applied")
}

func (s *CallSuite) TestMalformedDecisionsAndSelfApprovalAreRefused() {
	noID := decideAt(s.env, time.Hour, "c1", policy.Decision{Kind: policy.Approved, Channel: "cli"})
	noReason := decideAt(s.env, time.Hour, "c1", decision(policy.DeniedWithReason, "alice"))
	self := decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "agent-1"))
	decideAt(s.env, 2*time.Hour, "c1", decision(policy.Denied, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Require().Error(noID.rejected)
	s.Contains(noID.rejected.Error(), "no approver identity")
	s.Require().Error(noReason.rejected)
	s.Contains(noReason.rejected.Error(), "needs a reason")
	s.Require().Error(self.rejected)
	s.Contains(self.rejected.Error(), "agent-1 requested call c1 and cannot decide it")
	s.Equal(StatusDenied, rs[0].Status)
	s.Equal("alice", rs[0].DecidedBy)
}

func (s *CallSuite) TestSignalDecidesAndInvalidSignalIsIgnored() {
	s.env.RegisterDelayedCallback(func() {
		s.NoError(s.env.SignalWorkflowByID(CallWorkflowID("c1"), SignalDecide,
			DecideRequest{CallID: "c1", Decision: policy.Decision{Kind: policy.Approved}})) // no approver: ignored
	}, time.Hour)
	s.env.RegisterDelayedCallback(func() {
		s.NoError(s.env.SignalWorkflowByID(CallWorkflowID("c1"), SignalDecide,
			DecideRequest{CallID: "c1", Decision: policy.Decision{Kind: policy.Approved, DecidedBy: "ops-bot", Channel: "signal"}}))
	}, 3*time.Hour)
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal("ops-bot", rs[0].DecidedBy)
	s.Equal(3*time.Hour, rs[0].DecidedAt.Sub(s.start))
}

func (s *CallSuite) TestPendingCallStateIsQueryable() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write a.txt?", Timeout: 2 * time.Hour, Groups: []string{"ops"}}
	var state CallState
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflowByID(CallWorkflowID("c1"), QueryCall)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(&state))
	}, time.Hour)
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusPending, state.Status)
	s.Equal("write a.txt?", state.Request.Message)
	s.Equal([]string{"ops"}, state.Request.Groups)
	s.Require().NotNil(state.Request.Preview, "the person sees what the call will change")
	s.Equal(policy.Preview{Kind: policy.PreviewDiff, Text: "+++ b/a\n+x", ComputedBy: policy.ComputedByToolgate}, *state.Request.Preview)
	s.Equal(state.Request.Preview, rs[0].Preview)
	s.Nil(rs[0].PreviewShown, "no edit: what was shown is what ran")
	s.WithinDuration(s.start, state.WaitingSince, 0)
	s.Equal(2*time.Hour, state.Deadline.Sub(rs[0].RequestedAt), "the deadline counts from the request")
}

func (s *CallSuite) TestOneApprovedForSessionResolvesEveryWaitingCallOfTheTool() {
	decideAt(s.env, time.Hour, "c2", decision(policy.ApprovedForSession, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
		call("c3", "write", `{"path":"c","content":"x"}`),
	}})

	for i, r := range rs {
		s.Equal(StatusOK, r.Status, "call %d", i+1)
		s.Equal("alice", r.DecidedBy)
		s.Equal(time.Hour, r.DecidedAt.Sub(s.start))
	}
	s.Equal("cli", rs[1].Channel)
	s.Equal("session", rs[0].Channel)
	s.Equal("session", rs[2].Channel)
	for _, id := range []string{"c1", "c2", "c3"} {
		s.Equal(1, s.runs.count(id), id)
	}
}

func (s *CallSuite) TestRevokedStickyDecisionAsksAgain() {
	decideAt(s.env, time.Hour, "c1", decision(policy.ApprovedForSession, "alice"))
	var revokeErr error
	s.env.RegisterDelayedCallback(func() {
		revokeErr = s.env.UpdateWorkflowByID(SessionWorkflowID("s1"), UpdateRevoke, "revoke", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { revokeErr = err }, OnComplete: func(any, error) {},
		}, RevokeRequest{Key: "write", By: "alice"})
	}, 4*time.Hour)
	decideAt(s.env, 6*time.Hour, "c3", decision(policy.Denied, "bob"))
	rs := s.runSession(harnessInput{Sequential: true, Gap: 2 * time.Hour, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`), // asks; approved for session at 1h
		call("c2", "write", `{"path":"b","content":"x"}`), // 3h: sticky applies
		call("c3", "write", `{"path":"c","content":"x"}`), // 5h: after the revoke at 4h, asks again
	}})

	s.NoError(revokeErr)
	s.Equal("session", rs[1].Channel)
	s.Equal(StatusOK, rs[1].Status)
	s.Equal(StatusDenied, rs[2].Status)
	s.Equal("bob", rs[2].DecidedBy)
	s.Equal("cli", rs[2].Channel)
}

func (s *CallSuite) TestBeforeCallErrorCancelsTheCall() {
	s.policy.before = func(policy.Call) error { return errorString("quota of 20 echo calls an hour reached") }
	r := s.runOne(call("c1", "echo", `{}`))

	s.Equal(StatusError, r.Status)
	s.Equal("refused before the call: quota of 20 echo calls an hour reached", r.Reason)
	s.Zero(s.runs.total())
	starts, _ := s.hooks.calls()
	s.Empty(starts)
}

// A call's before-call checks run once, and never in a local activity of
// their own when something else runs anyway: an auto-approved call's
// evaluation, or the tool's activity (RunToolChecked) for a call that
// asked or took a quota; the tool does not run when they refuse. Only an
// asked call the agent runs itself (no tool activity) runs BeforeCall; a
// denied call's checks never run.
func (s *CallSuite) TestBeforeCallChecksRunOnceWithTheStepThatRunsAnyway() {
	var checked map[string]int
	reset := func(refuse string) *int {
		s.SetupTest()
		checked = map[string]int{}
		s.policy.before = func(call policy.Call) error {
			checked[call.ID]++
			if refuse != "" {
				return errorString(refuse)
			}
			return nil
		}
		return countScheduled(s, s.acts.BeforeCall)
	}

	n := reset("")
	s.Equal(StatusOK, s.runOne(call("auto", "echo", `{}`)).Status)
	s.Zero(*n, "an auto-approved call's evaluation ran them")
	s.Equal(1, checked["auto"])

	n = reset("the change window is closed")
	r := s.runOne(call("refused", "echo", `{}`))
	s.Equal(StatusError, r.Status)
	s.Equal("refused before the call: the change window is closed", r.Reason, "the evaluation's refusal stops the call")
	s.Zero(*n)
	s.Zero(s.runs.total(), "a refused call does not run")

	n = reset("")
	decideAt(s.env, time.Hour, "asked", decision(policy.Approved, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("asked", "write", `{"path":"a","content":"x"}`)}})
	s.Equal(StatusOK, rs[0].Status)
	s.Zero(*n, "an asked call's tool activity runs them")
	s.Equal(1, checked["asked"])

	n = reset("the change window is closed")
	decideAt(s.env, time.Hour, "asked-refused", decision(policy.Approved, "alice"))
	rs = s.runSession(harnessInput{Calls: []CallInput{call("asked-refused", "write", `{"path":"a","content":"x"}`)}})
	s.Equal(StatusError, rs[0].Status)
	s.Equal("refused before the call: the change window is closed", rs[0].Reason)
	s.Zero(*n)
	s.Zero(s.runs.total(), "the tool's activity refused before the tool")
	starts, _ := s.hooks.calls()
	s.Empty(starts, "no lifecycle hook saw a tool start")

	n = reset("")
	s.policy.quotas = map[string]policy.Quota{"echo": {Name: "echo-per-hour", Max: 2, Per: time.Hour}}
	s.Equal(StatusOK, s.runSession(harnessInput{Calls: []CallInput{call("quota", "echo", `{}`)}})[0].Status)
	s.Zero(*n, "a call with a quota takes it, then its tool activity runs the checks")
	s.Equal(1, checked["quota"])

	n = reset("")
	s.policy.ask["deploy"] = policy.ApprovalRequest{Message: "deploy?"}
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(json.RawMessage(`{}`), nil)
	decideAt(s.env, time.Hour, "agent", decision(policy.Approved, "alice"))
	rs = s.runSession(harnessInput{Calls: []CallInput{agentCall("agent", "deploy", `{}`)}})
	s.Equal(StatusOK, rs[0].Status, rs[0].Reason)
	s.Equal(1, *n, "an asked call the agent runs has no tool activity: BeforeCall runs them")
	s.Equal(1, checked["agent"])

	reset("")
	s.policy.deny["echo"] = "no echo today"
	s.Equal(StatusDenied, s.runOne(call("denied", "echo", `{}`)).Status)
	s.Zero(checked["denied"], "a denied call's checks never run")
}

func (s *CallSuite) TestAfterCallErrorReplacesTheResult() {
	s.policy.after = func(_ policy.Call, out json.RawMessage) error { return errorString("output mentions a customer name") }
	r := s.runOne(call("c1", "echo", `{"name":"Jane"}`))

	s.Equal(StatusError, r.Status)
	s.Equal("refused after the call: output mentions a customer name", r.Reason)
	s.Empty(r.Output)
	s.Equal(1, s.runs.count("c1"))
}

func (s *CallSuite) TestOutputMiddlewareRedactsBeforeAfterCallAndTheModel() {
	var seen string
	s.policy.after = func(_ policy.Call, out json.RawMessage) error { seen = string(out); return nil }
	r := s.runOne(call("c1", "leak", `{}`))

	s.Equal(StatusOK, r.Status)
	s.JSONEq(`{"env":"TOKEN=[REDACTED]"}`, string(r.Output))
	s.Equal(1, r.Redactions)
	s.NotContains(seen, "sk-live-123", "AfterCall sees the redacted output")
}

func (s *CallSuite) TestToolFailureIsAnErrorResultAfterRetries() {
	r := s.runOne(call("c1", "broken", `{}`))

	s.Equal(StatusError, r.Status)
	s.Contains(r.Reason, "disk full")
	s.Equal(2, s.runs.count("c1"), "the tool's retry policy allows two attempts")
	_, ends := s.hooks.calls()
	s.Len(ends, 2, "each attempt is observed")
}

func (s *CallSuite) TestALostAttemptOfANonIdempotentToolIsUnknownAndNotRetried() {
	r := s.runOne(call("c1", "slow", `{}`))

	s.Equal(StatusUnknown, r.Status)
	s.Contains(r.Reason, "the tool may or may not have run: it did not finish within its timeout")
	s.Contains(r.Reason, "Do not assume either")
	s.Equal(1, s.runs.count("c1"), "a tool that is not idempotent gets one attempt")
	s.True(r.Status.Final())
}

func (s *CallSuite) TestALostAttemptOfAnIdempotentToolIsAnError() {
	// (The test environment does not retry timeouts; the server does, and
	// the integration tests check that a non-idempotent tool is not.)
	r := s.runOne(call("c1", "slowRead", `{}`))

	s.Equal(StatusError, r.Status, "running it again was safe, so the outcome is known")
	s.Contains(r.Reason, "tool failed: timed out")
}

type errorString string

func (e errorString) Error() string { return string(e) }

func (s *CallSuite) TestStickyDecisionFoundAtEvaluationSkipsTheSession() {
	sticky := &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "session", Comment: "sticky decision taken on call c0"}
	sticky.Statement = signedSticky(nil, "s1", StickyDecision{Key: "write", Tool: "write", FromCall: "c0",
		Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "inbox"}})
	var a *activities.Activities
	s.env.OnActivity(a.Evaluate, mock.Anything, mock.Anything).Return(activities.Evaluation{
		Ask: &policy.ApprovalRequest{Message: "write?"}, Sticky: sticky, PolicyVersion: "test/1",
		ToolOptions: tool.Options{Timeout: time.Minute, Retry: tool.RetryPolicy{MaxAttempts: 1}},
	}, nil)
	// No session exists and no signal is mocked: registering or telling the
	// session would fail the test.
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Equal("approved_for_session", r.Decision)
	s.Equal("alice", r.DecidedBy)
	s.Equal("session", r.Channel)
	s.Equal(1, s.runs.count("c1"))
}

func (s *CallSuite) TestAStickyDecisionWithoutAValidStatementDecidesNothing() {
	forged := policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "session", Comment: "sticky decision taken on call c0"}
	otherKey := forged
	otherKey.Statement = signedSticky(nil, "s1", StickyDecision{Key: "shell", Tool: "shell", FromCall: "c0",
		Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "inbox"}})
	for _, sticky := range []policy.Decision{forged, otherKey} {
		s.SetupTest()
		var a *activities.Activities
		s.env.OnActivity(a.Evaluate, mock.Anything, mock.Anything).Return(activities.Evaluation{
			Ask: &policy.ApprovalRequest{Message: "write?", Timeout: time.Hour}, Sticky: &sticky, PolicyVersion: "test/1",
			ToolOptions: tool.Options{Timeout: time.Minute, Retry: tool.RetryPolicy{MaxAttempts: 1}},
		}, nil)
		rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

		s.Equal(StatusTimedOut, rs[0].Status, "the session's memo showed a sticky decision no door signed for this key: the call waited for a person")
		s.Zero(s.runs.count("c1"))
	}
}

func (s *CallSuite) TestQuotaIsCountedBySessionOverASlidingWindow() {
	s.policy.quotas = map[string]policy.Quota{"echo": {Name: "echo-per-hour", Max: 2, Per: time.Hour}}
	rs := s.runSession(harnessInput{Sequential: true, Gap: 25 * time.Minute, Calls: []CallInput{
		call("c1", "echo", `{}`), // 0m
		call("c2", "echo", `{}`), // 25m
		call("c3", "echo", `{}`), // 50m: two runs in the last hour
		call("c4", "echo", `{}`), // 75m: c1 left the window
	}})

	s.Equal(StatusOK, rs[0].Status)
	s.Equal(StatusOK, rs[1].Status)
	s.Equal(StatusError, rs[2].Status)
	s.Contains(rs[2].Reason, "quota echo-per-hour: at most 2 echo calls per 1h0m0s in this session; the next one is allowed after")
	s.Equal(StatusOK, rs[3].Status, rs[3].Reason)
	s.Zero(s.runs.count("c3"), "a refused call does not run")
	s.Equal(3, s.runs.total())
}

func (s *CallSuite) TestRemindersAndEscalationUntilADecision() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}, Timeout: 4 * time.Hour,
		RemindAfter: time.Hour, EscalateAfter: 90 * time.Minute, EscalateTo: []string{"leads"}}
	var groupsAfterEscalation []string
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflowByID(CallWorkflowID("c1"), QueryCall)
		s.Require().NoError(err)
		var st CallState
		s.Require().NoError(v.Get(&st))
		groupsAfterEscalation = st.Request.Groups
	}, 100*time.Minute)
	decideAt(s.env, 150*time.Minute, "c1", approverIn(policy.Approved, "carol", "leads"))
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Equal(StatusOK, rs[0].Status)
	var kinds []string
	var at []time.Duration
	for _, n := range rs[0].Notices {
		kinds = append(kinds, string(n.Kind))
		at = append(at, n.At.Sub(s.start))
	}
	s.Equal([]string{"waiting", "reminder", "escalation", "reminder"}, kinds)
	// Reminders count from the wait; the escalation, like the deadline,
	// from the request.
	escalation := rs[0].RequestedAt.Add(90 * time.Minute).Sub(s.start)
	s.Equal([]time.Duration{0, time.Hour, escalation, 2 * time.Hour}, at, "reminders every hour; escalation once; none after the decision")
	s.Equal([]string{"ops", "leads"}, groupsAfterEscalation, "the escalation groups may decide too")

	s.Require().Len(s.channel.notices, 4)
	s.Equal([]string{"leads"}, s.channel.notices[2].Groups)
	s.Equal(4, s.channel.notices[3].Seq)
	// The channel hears the decision (with every receipt) and the execution.
	s.Require().Len(s.channel.outcomes, 2)
	s.Equal(activities.EventDecided, s.channel.outcomes[0].Event)
	s.Equal("carol", s.channel.outcomes[0].DecidedBy)
	s.Len(s.channel.receipts[0], 4)
	s.Equal(activities.EventExecuted, s.channel.outcomes[1].Event)
	s.Equal("ok", s.channel.outcomes[1].Status)
}

func (s *CallSuite) TestTimeoutIsAnnouncedAndAutoApprovedCallsNotifyNobody() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Timeout: time.Hour}
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "echo", `{}`),
	}})

	s.Equal(StatusTimedOut, rs[0].Status)
	s.Equal(StatusOK, rs[1].Status)
	s.Require().Len(s.channel.notices, 1, "only the call that waited was announced")
	s.Equal("c1", s.channel.notices[0].Call.ID)
	s.Require().Len(s.channel.outcomes, 1)
	s.Equal(activities.EventTimedOut, s.channel.outcomes[0].Event)
	s.Contains(s.channel.outcomes[0].Reason, "no approver answered within 1h0m0s")
}

func (s *CallSuite) TestCodedHandlerDecidesOrDefersToAPerson() {
	env := s.NewTestWorkflowEnvironment()
	useDoors(env, true)
	acts := newActivities(s.policy, s.runs, s.hooks)
	acts.Handler = policy.ApprovalHandlerFunc(func(_ context.Context, c policy.Call, _ policy.ApprovalRequest) (*policy.Decision, error) {
		if strings.Contains(string(c.Args), "tmp/") {
			return &policy.Decision{Kind: policy.Approved, DecidedBy: "tmp-writer-bot"}, nil
		}
		return nil, nil // a person decides
	})
	env.RegisterActivity(acts)
	env.RegisterWorkflow(ToolCallWorkflow)
	env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	env.RegisterWorkflowWithOptions(WaitingRoom, workflow.RegisterOptions{Name: RoomWorkflowType})
	env.RegisterWorkflow(NoticesWorkflow)
	env.RegisterWorkflow(harnessWorkflow)
	decideAt(env, time.Hour, "c2", decision(policy.Denied, "alice"))
	in := harnessInput{Session: "s1", Calls: []CallInput{
		call("c1", "write", `{"path":"tmp/a","content":"x"}`),
		call("c2", "write", `{"path":"src/a","content":"x"}`),
	}}
	newFakeTemporal(env).install()
	env.ExecuteWorkflow(harnessWorkflow, in)
	s.Require().NoError(env.GetWorkflowError())
	var rs []Result
	s.Require().NoError(env.GetWorkflowResult(&rs))

	s.Equal(StatusOK, rs[0].Status)
	s.Equal("tmp-writer-bot", rs[0].DecidedBy)
	s.Equal("handler", rs[0].Channel)
	s.Empty(rs[0].Notices, "nobody was notified for a call the handler decided")
	s.Equal(StatusDenied, rs[1].Status)
	s.Equal("alice", rs[1].DecidedBy)
}

// downChannel refuses every notice and outcome, like a Slack that is down.
type downChannel struct{ fakeChannel }

func (d *downChannel) Notify(context.Context, activities.Notice) (activities.Receipt, error) {
	return activities.Receipt{}, errorString("slack.com: connection refused")
}

func (d *downChannel) Resolve(context.Context, activities.Outcome, []activities.Receipt) error {
	return errorString("slack.com: connection refused")
}

// callCompleted is when the calls of a harness completed, with their
// Results.
type callCompleted struct {
	Results []Result
	At      time.Time
}

// completedAtWorkflow runs harnessWorkflow and notes when its calls'
// workflows completed, in virtual time.
func completedAtWorkflow(ctx workflow.Context, in harnessInput) (callCompleted, error) {
	var out callCompleted
	err := workflow.ExecuteChildWorkflow(ctx, harnessWorkflow, in).Get(ctx, &out.Results)
	out.At = workflow.Now(ctx)
	return out, err
}

func TestADeadChannelNeverHoldsBackTheResult(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger{})
	env := ts.NewTestWorkflowEnvironment()
	useDoors(env, true)
	p := &testPolicy{ask: map[string]policy.ApprovalRequest{"write": {Message: "write?"}}}
	env.RegisterActivity(newActivities(p, &runLog{runs: map[string]int{}}, &hookLog{}, &downChannel{}))
	env.RegisterWorkflow(ToolCallWorkflow)
	env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	env.RegisterWorkflowWithOptions(WaitingRoom, workflow.RegisterOptions{Name: RoomWorkflowType})
	env.RegisterWorkflow(NoticesWorkflow)
	env.RegisterWorkflow(harnessWorkflow)
	env.RegisterWorkflow(completedAtWorkflow)
	decideAt(env, time.Hour, "c1", decision(policy.Approved, "alice"))
	in := harnessInput{Session: "s1", Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}}
	newFakeTemporal(env).install()
	env.ExecuteWorkflow(completedAtWorkflow, in)

	require.NoError(t, env.GetWorkflowError())
	var done callCompleted
	require.NoError(t, env.GetWorkflowResult(&done))
	require.Equal(t, StatusOK, done.Results[0].Status)
	require.Equal(t, done.Results[0].DecidedAt, done.At, "the call's workflow completed as soon as the tool ran, while the channel is still retried")
}

func (s *CallSuite) TestOutcomeEventsSayWhoDecidedAndWhatComesNext() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Timeout: 3 * time.Hour}
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	denied := decision(policy.DeniedWithReason, "bob")
	denied.Reason = "not today"
	decideAt(s.env, time.Hour, "c2", denied)
	s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
		call("c3", "write", `{"path":"c","content":"x"}`), // nobody answers
	}})

	byCall := map[string][]activities.Outcome{}
	for _, o := range s.channel.outcomes {
		byCall[o.Call.ID] = append(byCall[o.Call.ID], o)
	}
	s.Require().Len(byCall["c1"], 2)
	decided, executed := byCall["c1"][0], byCall["c1"][1]
	s.Equal(activities.Outcome{Event: activities.EventDecided, Call: decided.Call, Status: "running", Decision: "approved", DecidedBy: "alice", Channel: "cli", At: decided.At}, decided)
	s.Equal(activities.EventExecuted, executed.Event)
	s.Equal("ok", executed.Status)
	s.Equal("alice", executed.DecidedBy)

	s.Require().Len(byCall["c2"], 1, "a denied call is not executed")
	s.Equal("denied", byCall["c2"][0].Status)
	s.Equal("denied_with_reason", byCall["c2"][0].Decision)
	s.Equal("not today", byCall["c2"][0].Reason)

	s.Require().Len(byCall["c3"], 1)
	timedOut := byCall["c3"][0]
	s.Equal(activities.EventTimedOut, timedOut.Event)
	s.Equal("timed_out", timedOut.Status)
	s.Equal("timed_out", timedOut.Decision)
	s.Equal("timeout", timedOut.DecidedBy)
	s.Equal("timeout", timedOut.Channel)
	s.Contains(timedOut.Reason, "no approver answered within 3h0m0s")
}
