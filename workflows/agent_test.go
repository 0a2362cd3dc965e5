package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// agentCall is an agent-executed call of a tool toolgate does not know.
func agentCall(id, toolName, args string) CallInput {
	in := call(id, toolName, args)
	in.Call.Execution = policy.ExecutionAgent
	return in
}

// reportActivityIDs records the activity IDs of the report steps started.
func (s *CallSuite) reportActivityIDs() *[]string {
	var ids []string
	s.temporal.alsoOnStart = func(info *activity.Info, _ converter.EncodedValues) {
		if info.ActivityType.Name == "AwaitReport" {
			ids = append(ids, info.ActivityID)
		}
	}
	return &ids
}

// runAsked runs one call that asks a person, beside its session.
func (s *CallSuite) runAsked(in CallInput) Result {
	return s.runSession(harnessInput{Calls: []CallInput{in}})[0]
}

// stateAt queries the call at a virtual time.
func (s *CallSuite) stateAt(after time.Duration, callID string) *CallState {
	st := &CallState{}
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflowByID(CallWorkflowID(callID), QueryCall)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(st))
	}, after)
	return st
}

func (s *CallSuite) TestAgentExecutedCallIsApprovedThenCompletedByTheReport() {
	s.policy.ask["deploy"] = policy.ApprovalRequest{Message: "deploy?", Rule: "ask-deploy"}
	ids := s.reportActivityIDs()
	var reported policy.Call
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(30 * time.Minute).Return(
		func(_ context.Context, c policy.Call) (json.RawMessage, error) {
			reported = c
			return json.RawMessage(`{"deployed":true,"token":"sk-live-123"}`), nil
		})
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	approved := s.stateAt(time.Hour+time.Minute, "c1")

	r := s.runAsked(agentCall("c1", "deploy", `{"env":"prod"}`))

	s.Equal(StatusApproved, approved.Status, "the decision shows at once, before the report")
	s.JSONEq(`{"env":"prod"}`, string(approved.Call.Args))
	s.Equal("alice", approved.Decision.DecidedBy)
	s.Equal([]string{ReportActivityID}, *ids, "the report completes a step with a fixed activity ID")
	s.Equal("c1", reported.ID)
	s.Equal(StatusOK, r.Status)
	s.Equal(policy.ExecutionAgent, r.Execution)
	s.JSONEq(`{"deployed":true,"token":"[REDACTED]"}`, string(r.Output), "output middleware runs on the reported output")
	s.Equal(1, r.Redactions)
	s.Equal("alice", r.DecidedBy)
	s.Equal("You ran deploy and toolgate recorded its output, approved by alice.", r.ModelMessage)
	s.Zero(s.runs.total(), "toolgate runs nothing itself")
}

// noReport makes the report step time out as Temporal does when no
// report came within its start-to-close timeout.
func (s *CallSuite) noReport() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(nil,
		temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil))
}

func (s *CallSuite) TestAgentExecutedCallNeedsNoRegisteredTool() {
	s.noReport()
	r := s.runOne(agentCall("c1", "Bash", `{"command":"ls"}`))
	s.Equal(StatusUnknown, r.Status, "allowed at once, then no report within the default hour")
	s.Equal("the agent did not say whether it ran the tool: no report within 1h0m0s", r.Reason)
	s.Equal("policy", r.DecidedBy)
	s.False(r.InvalidRequest)
	s.Equal("Bash may or may not have run: the agent did not say whether it ran the tool: no report within 1h0m0s.", r.ModelMessage)
}

func (s *CallSuite) TestAgentReportedErrorEndsTheCallWithIt() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(nil,
		temporal.NewNonRetryableApplicationError("exit status 1: permission denied", activities.ErrTypeAgentReported, nil))
	r := s.runOne(agentCall("c1", "Bash", `{"command":"ls /root"}`))

	s.Equal(StatusError, r.Status)
	s.Equal("the agent reported that the tool failed: exit status 1: permission denied", r.Reason)
	s.Equal("Bash failed (allowed by the policy): the agent reported that the tool failed: exit status 1: permission denied.", r.ModelMessage)
}

func (s *CallSuite) TestAgentReportRunsAfterCallChecks() {
	s.policy.after = func(_ policy.Call, out json.RawMessage) error {
		if string(out) == `{"rows":100000}` {
			return errors.New("too many rows for one answer")
		}
		return nil
	}
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(json.RawMessage(`{"rows":100000}`), nil)
	r := s.runOne(agentCall("c1", "sql", `{"q":"select"}`))

	s.Equal(StatusError, r.Status)
	s.Equal("refused after the call: too many rows for one answer", r.Reason)
}

func (s *CallSuite) TestAgentExecutedCallWithoutReportEndsAtTheDecision() {
	s.policy.ask["deploy"] = policy.ApprovalRequest{Message: "deploy?"}
	ids := s.reportActivityIDs()
	decideAt(s.env, time.Minute, "c1", decision(policy.Approved, "alice"))
	in := agentCall("c1", "deploy", `{}`)
	in.NoReport = true

	r := s.runAsked(in)

	s.Equal(StatusOK, r.Status)
	s.Empty(*ids, "nothing waits for a report")
	s.Contains(r.Note, "the agent runs the tool itself")
	s.Equal("deploy is approved: run it yourself with the approved arguments, approved by alice.", r.ModelMessage)
}

func (s *CallSuite) TestDeniedAgentExecutedCallIsFinalWithTheReason() {
	s.policy.ask["deploy"] = policy.ApprovalRequest{Message: "deploy?"}
	ids := s.reportActivityIDs()
	d := decision(policy.DeniedWithReason, "alice")
	d.Reason = "not during the freeze"
	decideAt(s.env, time.Minute, "c1", d)

	r := s.runAsked(agentCall("c1", "deploy", `{}`))

	s.Equal(StatusDenied, r.Status)
	s.Equal("not during the freeze", r.Reason)
	s.Empty(*ids)
	s.Equal("deploy was not run: denied by alice: not during the freeze.", r.ModelMessage)
}

func (s *CallSuite) TestEditedArgumentsAreTheOnesTheAgentRuns() {
	s.policy.ask["deploy"] = policy.ApprovalRequest{Message: "deploy?"}
	var ran json.RawMessage
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"env":"staging"}`)
	decideAt(s.env, time.Minute, "c1", d)
	approved := s.stateAt(2*time.Minute, "c1")
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Hour).Return(
		func(_ context.Context, c policy.Call) (json.RawMessage, error) {
			ran = c.Args
			return json.RawMessage(`"done"`), nil
		})

	r := s.runAsked(agentCall("c1", "deploy", `{"env":"prod"}`))

	s.JSONEq(`{"env":"staging"}`, string(approved.Call.Args), "the approved call shows the edited arguments")
	s.JSONEq(`{"env":"staging"}`, string(ran))
	s.Equal(StatusOK, r.Status)
	s.JSONEq(`{"env":"prod"}`, string(r.OriginalArgs))
	s.Contains(r.ModelMessage, `alice changed the arguments to {"env":"staging"}`)
}

// agentToolPolicy declares a schema and a report timeout for "deploy".
type agentToolPolicy struct{ *testPolicy }

func (agentToolPolicy) CheckAgentArgs(toolName string, args json.RawMessage) error {
	if toolName == "deploy" && string(args) != `{"env":"prod"}` {
		return errors.New(`invalid arguments for tool "deploy": /env: want "prod"`)
	}
	return nil
}

func (agentToolPolicy) ReportTimeout(policy.Call) time.Duration { return 2 * time.Hour }

func (s *CallSuite) TestPolicyDeclaredSchemaAndReportTimeoutApplyToAgentTools() {
	s.env = s.NewTestWorkflowEnvironment()
	useDoors(s.env, true)
	s.env.RegisterActivity(newActivities(agentToolPolicy{s.policy}, s.runs, s.hooks))
	s.env.RegisterWorkflow(ToolCallWorkflow)

	r := s.runOne(agentCall("c1", "deploy", `{"env":"dev"}`))
	s.Equal(StatusError, r.Status)
	s.True(r.InvalidRequest)
	s.Equal(`invalid arguments for tool "deploy": /env: want "prod"`, r.Reason)
	s.Equal(`deploy was not run: invalid arguments for tool "deploy": /env: want "prod".`, r.ModelMessage)

	s.env = s.NewTestWorkflowEnvironment()
	useDoors(s.env, true)
	s.env.RegisterActivity(newActivities(agentToolPolicy{s.policy}, s.runs, s.hooks))
	s.env.RegisterWorkflow(ToolCallWorkflow)
	s.noReport()
	r = s.runOne(agentCall("c2", "deploy", `{"env":"prod"}`))
	s.Equal(StatusUnknown, r.Status)
	s.Equal("the agent did not say whether it ran the tool: no report within 2h0m0s", r.Reason)
}

func (s *CallSuite) TestAgentCannotClaimAnnotationsOrAnUnknownExecution() {
	var seen policy.Call
	s.policy.refuse = func(c policy.Call) string { seen = c; return "" }
	in := agentCall("c1", "Read", `{}`)
	in.Call.Annotations = map[string]any{"readOnlyHint": true}
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(json.RawMessage(`"x"`), nil)
	s.runOne(in)
	s.Nil(seen.Annotations, "hints come from toolgate's registry, never from the agent")

	s.env = s.NewTestWorkflowEnvironment()
	useDoors(s.env, true)
	s.env.RegisterActivity(newActivities(s.policy, s.runs, s.hooks))
	s.env.RegisterWorkflow(ToolCallWorkflow)
	in = call("c2", "echo", `{}`)
	in.Call.Execution = "worker"
	r := s.runOne(in)
	s.Equal(StatusError, r.Status)
	s.Contains(r.Reason, `unknown execution "worker"`)
}

func (s *CallSuite) TestAToolThatMayHaveRunEndsUnknown() {
	s.env.OnActivity(a.RunToolChecked, mock.Anything, mock.Anything).Return(activities.CheckedOutput{},
		temporal.NewNonRetryableApplicationError(tool.OutcomeUnknown(errors.New("the upstream server died mid-call")).Error(), activities.ErrTypeOutcomeUnknown, nil))
	r := s.runOne(call("c1", "echo", `{}`))
	s.Equal(StatusUnknown, r.Status)
	s.Contains(r.Reason, "the tool may or may not have run: the upstream server died mid-call")
}

// claim is the hook's claim of call c1's approval for one run.
func claim(run string, noReport bool) ClaimRequest {
	return ClaimRequest{CallID: "c1", By: "agent-1", Run: run, NoReport: noReport}
}

func (s *CallSuite) TestAnApprovalIsClaimedByOneRunOnly() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Hour).Return(json.RawMessage(`{"ok":true}`), nil)
	first := updateAt(s.env, time.Minute, "c1", UpdateClaim, claim("toolu_1", false))
	again := updateAt(s.env, 2*time.Minute, "c1", UpdateClaim, claim("toolu_1", false))
	replay := updateAt(s.env, 3*time.Minute, "c1", UpdateClaim, claim("toolu_2", false))
	other := updateAt(s.env, 4*time.Minute, "c1", UpdateClaim, ClaimRequest{CallID: "c1", By: "agent-2", Run: "toolu_3"})
	noRun := updateAt(s.env, 5*time.Minute, "c1", UpdateClaim, ClaimRequest{CallID: "c1", By: "agent-1"})
	claimed := s.stateAt(10*time.Minute, "c1")

	r := s.runOne(agentCall("c1", "Bash", `{"command":"ls"}`))

	s.True(first.applied, "the first run takes the approval")
	s.True(again.applied, "the same run claiming again is answered like the first claim")
	s.Require().Error(replay.rejected, "another run may not use the same approval")
	s.Contains(replay.rejected.Error(), "the approval of call c1 was already taken by run toolu_1: an approval runs the tool once")
	s.Equal(ErrTypeAlreadyClaimed, errorType(replay.rejected))
	s.Require().Error(other.rejected, "only the call's requester may take its approval")
	s.Equal(ErrTypeNotAuthorized, errorType(other.rejected))
	s.Require().Error(noRun.rejected)
	s.Contains(noRun.rejected.Error(), "run must name the run")
	s.Require().NotNil(claimed.Claim)
	s.Equal("toolu_1", claimed.Claim.Run)
	s.Equal(StatusOK, r.Status, "the report completes the claimed call as before")
	s.JSONEq(`{"ok":true}`, string(r.Output))
}

func (s *CallSuite) TestAClaimThatSaysNoReportFollowsEndsTheCall() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Hour).Return(json.RawMessage(`{"late":true}`), nil)
	c := updateAt(s.env, time.Minute, "c1", UpdateClaim, claim("toolu_1", true))

	r := s.runOne(agentCall("c1", "Bash", `{"command":"ls"}`))

	s.True(c.applied)
	s.Equal(StatusOK, r.Status)
	s.Empty(r.Output, "no report was waited for")
	s.Equal("the agent runs the tool itself and does not report how it went", r.Note)
	s.Equal(time.Minute, r.FinishedAt.Sub(r.RequestedAt).Round(time.Second), "the call ended at the claim, not at the report timeout")
}

func (s *CallSuite) TestACallIsClaimedOnlyOnceApproved() {
	s.policy.ask["deploy"] = policy.ApprovalRequest{Message: "deploy?", Rule: "ask-deploy"}
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Minute).Return(json.RawMessage(`{}`), nil)
	early := updateAt(s.env, time.Minute, "c1", UpdateClaim, claim("toolu_1", false))
	decideAt(s.env, time.Hour, "c1", decision(policy.Denied, "alice"))

	r := s.runAsked(agentCall("c1", "deploy", `{}`))

	s.Require().Error(early.rejected, "a call waiting for a person has no approval to take")
	s.Contains(early.rejected.Error(), "call c1 is not approved and waiting for its run (status pending)")
	s.Equal(ErrTypeNotWaiting, errorType(early.rejected))
	s.Equal(StatusDenied, r.Status)
}

// errorType is the type of the ApplicationError err carries, if any.
func errorType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

func (s *CallSuite) TestAReportThatCannotTellHowTheToolWentEndsUnknownWithTheOutput() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(nil,
		temporal.NewNonRetryableApplicationError("Codex reports a command's output without its exit status", activities.ErrTypeAgentUnsure, nil,
			json.RawMessage(`"deployed with token sk-live-123\n"`)))
	r := s.runOne(agentCall("c1", "Bash", `{"command":"make deploy"}`))

	s.Equal(StatusUnknown, r.Status)
	s.Equal("the agent ran the tool but cannot tell whether it succeeded: Codex reports a command's output without its exit status", r.Reason)
	s.JSONEq(`"deployed with token [REDACTED]\n"`, string(r.Output), "the output is kept, after redaction")
	s.Equal("You ran Bash and toolgate recorded its output, allowed by the policy; the agent ran the tool but cannot tell whether it succeeded: Codex reports a command's output without its exit status.", r.ModelMessage)
}

func (s *CallSuite) TestAnUnknownOutcomeWithoutOutputIsStillARun() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(nil,
		temporal.NewNonRetryableApplicationError("no exit status", activities.ErrTypeAgentUnsure, nil))
	r := s.runOne(agentCall("c1", "Bash", `{"command":"true"}`))

	s.Equal(StatusUnknown, r.Status)
	s.JSONEq(`null`, string(r.Output), "it ran and printed nothing")
	s.Contains(r.ModelMessage, "You ran Bash", "not 'may or may not have run': the agent says it ran")
}

// firstAnswer is the update an agent starts its call with; its answer,
// once the handler returned.
func (o *updateOutcome) firstAnswer() FirstAnswer {
	a, _ := o.result.(FirstAnswer)
	return a
}

func (s *CallSuite) TestTheFirstAnswerDecidesAndClaimsAnAutoApprovedCall() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Hour).Return(json.RawMessage(`{"ok":true}`), nil)
	first := updateAt(s.env, 0, "c1", UpdateFirstAnswer, claim("toolu_1", false))
	replay := updateAt(s.env, time.Minute, "c1", UpdateClaim, claim("toolu_2", false))

	r := s.runOne(agentCall("c1", "Bash", `{"command":"ls"}`))

	s.Require().True(first.applied, "rejected %v, failed %v", first.rejected, first.failed)
	ans := first.firstAnswer()
	s.True(ans.Claimed)
	s.Nil(ans.ClaimRefused)
	s.Equal(StatusApproved, ans.State.Status, "the answer is the call waiting for its run")
	s.Equal("policy", ans.State.Decision.DecidedBy)
	s.Require().NotNil(ans.State.Claim)
	s.Equal("toolu_1", ans.State.Claim.Run)
	s.Require().Error(replay.rejected, "the approval the first answer took runs the tool once")
	s.Equal(ErrTypeAlreadyClaimed, errorType(replay.rejected))
	s.Equal(StatusOK, r.Status)
	s.Require().NotNil(r.Claim)
	s.Equal("toolu_1", r.Claim.Run)
}

func (s *CallSuite) TestTheFirstAnswerOfADeniedCallIsItsResult() {
	s.policy.deny["Bash"] = "no shell in this repository"
	first := updateAt(s.env, 0, "c1", UpdateFirstAnswer, claim("toolu_1", false))

	r := s.runOne(agentCall("c1", "Bash", `{"command":"ls"}`))

	s.Require().True(first.applied, "rejected %v, failed %v", first.rejected, first.failed)
	ans := first.firstAnswer()
	s.Require().NotNil(ans.State.Result, "a denied call answers with its Result")
	s.Equal(StatusDenied, ans.State.Result.Status)
	s.Equal("no shell in this repository", ans.State.Result.Reason)
	s.False(ans.Claimed)
	s.Nil(ans.ClaimRefused, "a denial is not a refused claim")
	s.Equal(r.ModelMessage, ans.State.Result.ModelMessage)
}

func (s *CallSuite) TestTheFirstAnswerOfACallThatAsksIsThePendingCall() {
	s.policy.ask["deploy"] = policy.ApprovalRequest{Message: "deploy?", Rule: "ask-deploy"}
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Minute).Return(json.RawMessage(`{}`), nil)
	first := updateAt(s.env, time.Second, "c1", UpdateFirstAnswer, claim("toolu_1", false))
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	late := updateAt(s.env, time.Hour+time.Second, "c1", UpdateClaim, claim("toolu_1", false))

	r := s.runAsked(agentCall("c1", "deploy", `{}`))

	s.Require().True(first.applied, "rejected %v, failed %v", first.rejected, first.failed)
	ans := first.firstAnswer()
	s.Equal(StatusPending, ans.State.Status, "the answer comes while a person is asked, not when they answer")
	s.Require().NotNil(ans.State.Request)
	s.Equal("ask-deploy", ans.State.Request.Rule)
	s.False(ans.Claimed, "nothing is approved yet")
	s.True(late.applied, "the approval, once given, is claimed as always")
	s.Equal(StatusOK, r.Status)
}

func (s *CallSuite) TestOnlyTheRequesterGetsAFirstAnswerOfAnAgentExecutedCall() {
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Hour).Return(json.RawMessage(`{}`), nil)
	s.env.OnActivity(a.RunToolChecked, mock.Anything, mock.Anything).After(time.Hour).Return(activities.CheckedOutput{After: activities.AfterCallOutcome{Output: json.RawMessage(`{}`)}}, nil)
	other := updateAt(s.env, time.Second, "c1", UpdateFirstAnswer, ClaimRequest{CallID: "c1", By: "agent-2", Run: "toolu_1"})
	own := updateAt(s.env, 2*time.Second, "c2", UpdateFirstAnswer, ClaimRequest{CallID: "c2", By: "agent-1", Run: "toolu_1"})
	blank := updateAt(s.env, 3*time.Second, "c1", UpdateFirstAnswer, ClaimRequest{CallID: "c1", By: "agent-1", Run: "  "})
	claimOther := updateAt(s.env, 4*time.Second, "c1", UpdateClaim, ClaimRequest{CallID: "c1", By: "agent-2", Run: "toolu_1"})

	s.runSession(harnessInput{Calls: []CallInput{agentCall("c1", "Bash", `{"command":"ls"}`), call("c2", "echo", `{}`)}})

	s.Require().Error(other.rejected, "another agent may not take the approval through the first answer")
	s.Equal(ErrTypeNotAuthorized, errorType(other.rejected))
	s.Require().Error(own.rejected, "a call toolgate runs has no approval to take")
	s.Contains(own.rejected.Error(), "is run by toolgate")
	s.Require().Error(blank.rejected)
	s.Contains(blank.rejected.Error(), "run must name the run")
	s.Require().Error(claimOther.rejected)
	s.Equal(ErrTypeNotAuthorized, errorType(claimOther.rejected), "the approval is still there for its own agent, not taken")
}
