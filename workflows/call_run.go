package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// Running an approved call: the session's quota, the before-call checks,
// the tool (an activity, or the agent's own run and report), the output
// middleware and the after-call checks.

// useEditedArgs switches the call to arguments an approver edited. An edit
// taken through the decide update or signal was checked when it was made;
// one from the coded handler (or a run from before that check) is checked
// now: the person has seen them, so "ask" counts as approved, unless it
// needs more than one approval; a refusal or a problem stops the call.
func (c *callRun) useEditedArgs(ctx workflow.Context) (Result, bool) {
	c.originalArgs = c.state.Call.Args
	c.state.Call.Args = c.state.Decision.EditedArgs
	c.note = fmt.Sprintf("%s edited the arguments before approving: %s became %s",
		c.state.Decision.DecidedBy, compact(c.originalArgs), compact(c.state.Call.Args))
	if c.editEval != nil {
		c.eval = *c.editEval
		return Result{}, false
	}
	if err := c.evaluate(ctx, c.state.Call, false); err != nil {
		return c.finish(ctx, StatusError, err.Error(), nil), true
	}
	switch {
	case c.eval.Problem != "":
		return c.finish(ctx, StatusError, "edited arguments refused: "+c.eval.Problem, nil), true
	case c.eval.Denied:
		return c.finish(ctx, StatusDenied, "edited arguments refused by policy: "+c.eval.Reason, nil), true
	case c.eval.Ask != nil && c.eval.Ask.Approvals > 1 && c.version(ctx, versionEditRuleGoverns, 1) >= 1:
		return c.finish(ctx, StatusDenied, fmt.Sprintf("edited arguments refused: they fall under rule %s, which needs %d approvals from distinct people, and %s's edit counts as none",
			c.eval.Ask.Rule, c.eval.Ask.Approvals, c.state.Decision.DecidedBy), nil), true
	}
	return Result{}, false
}

// execute runs BeforeCall, the tool, the output middleware and AfterCall.
func (c *callRun) execute(ctx workflow.Context) (Result, error) {
	c.state.Status = StatusRunning
	if c.state.Request != nil {
		c.upsertStatus(ctx, StatusRunning) // visible as soon as the decision lets it run
	}
	call := c.state.Call
	if c.eval.Quota != nil {
		refusal, err := c.takeQuota(ctx)
		if err != nil {
			return Result{}, err
		}
		if refusal != "" {
			return c.finish(ctx, StatusError, refusal, nil), nil
		}
	}

	before, err := c.beforeCall(ctx, call)
	if err != nil {
		return Result{}, err
	}
	if before.Refusal != "" {
		return c.finish(ctx, StatusError, "refused before the call: "+before.Refusal, nil), nil
	}

	var output json.RawMessage
	var checked *activities.CheckedOutput // the checks ran with the tool
	var unsure string                     // the agent ran the tool but cannot tell how it went
	if call.Execution == policy.ExecutionAgent {
		if c.noReport {
			c.note = joinNotes(c.note, "the agent runs the tool itself and does not report how it went")
			return c.finish(ctx, StatusOK, "", nil), nil
		}
		c.trace.run.Start = workflow.Now(ctx)
		err = c.awaitReport(ctx, &output)
		c.trace.run.End = workflow.Now(ctx)
		if c.voided != "" {
			c.note = joinNotes(c.note, "the approval ("+describeDecision(c.state.Decision)+") was voided before the agent took it")
			c.state.Decision = &policy.Decision{Kind: policy.DeniedWithReason, Reason: c.voided,
				DecidedBy: "session", Channel: "session", DecidedAt: workflow.Now(ctx)}
			return c.finish(ctx, StatusDenied, c.voided, nil), nil
		}
		if err != nil && c.endsAtClaim {
			c.noReport = true
			c.note = joinNotes(c.note, "the agent runs the tool itself and does not report how it went")
			return c.finish(ctx, StatusOK, "", nil), nil
		}
		if refusal := c.reportRefused(ctx, err, output); refusal != "" {
			return c.finish(ctx, StatusUnknown, refusal, nil), nil
		}
		if why, ok := agentUnsure(err, &output); ok {
			// It ran: the after-call checks and redaction still hold for
			// what it printed.
			unsure = why
			err = nil
		}
	} else {
		c.trace.run.Start = workflow.Now(ctx)
		checked, err = c.runTool(ctx, call, &output)
		c.trace.run.End = workflow.Now(ctx)
	}
	if err != nil {
		return c.toolFailed(ctx, err), nil
	}
	if checked != nil && checked.Refused != "" {
		return c.finish(ctx, StatusError, "refused before the call: "+checked.Refused, nil), nil
	}

	after, err := c.afterCall(ctx, call, output, checked)
	if err != nil {
		return Result{}, err
	}
	if after.Refusal != "" {
		r := c.finish(ctx, StatusError, "refused after the call: "+after.Refusal, nil)
		r.Redactions = after.Redactions
		return r, nil
	}
	status, reason := StatusOK, ""
	if unsure != "" {
		status, reason = StatusUnknown, "the agent ran the tool but cannot tell whether it succeeded: "+unsure
	}
	r := c.finish(ctx, status, reason, after.Output)
	r.Redactions = after.Redactions
	return r, nil
}

// beforeCall runs the before-call checks, unless the evaluation already
// did (an auto-approved call's, Evaluation.BeforeCall) or the tool's
// activity will (checksWithTool): no local activity then, and the
// recorded evaluation makes replay take the same path.
func (c *callRun) beforeCall(ctx workflow.Context, call policy.Call) (activities.HookOutcome, error) {
	if b := c.eval.BeforeCall; b != nil {
		return *b, nil
	}
	if c.checksWithTool(call) {
		return activities.HookOutcome{}, nil
	}
	var before activities.HookOutcome
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	if err := workflow.ExecuteLocalActivity(lctx, a.BeforeCall, call).Get(ctx, &before); err != nil {
		return before, fmt.Errorf("before-call hook: %w", err)
	}
	return before, nil
}

// checksWithTool reports whether the tool's activity runs the call's
// checks (RunToolChecked): a tool toolgate runs, in a call evaluated by a
// release that does so.
func (c *callRun) checksWithTool(call policy.Call) bool {
	return c.eval.ChecksWithTool && call.Execution != policy.ExecutionAgent
}

// afterCall runs the output middleware and the after-call checks on the
// tool's output, unless its activity already did (checked).
func (c *callRun) afterCall(ctx workflow.Context, call policy.Call, output json.RawMessage, checked *activities.CheckedOutput) (activities.AfterCallOutcome, error) {
	if checked != nil {
		return checked.After, nil
	}
	var after activities.AfterCallOutcome
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	in := activities.AfterCallInput{Call: call, Output: output}
	if err := workflow.ExecuteLocalActivity(lctx, a.AfterCall, in).Get(ctx, &after); err != nil {
		return after, fmt.Errorf("after-call hook: %w", err)
	}
	return after, nil
}

// agentUnsure recognises the report of a tool that ran without the agent
// knowing whether it succeeded; the report's output goes to output.
func agentUnsure(err error, output *json.RawMessage) (string, bool) {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != activities.ErrTypeAgentUnsure {
		return "", false
	}
	if appErr.HasDetails() {
		_ = appErr.Details(output)
	}
	if len(*output) == 0 {
		*output = json.RawMessage("null") // it ran and printed nothing
	}
	return appErr.Message(), true
}

// awaitReport is the tool step of an agent-executed call: the call shows
// status approved, and an activity waits for the agent's report, which
// completes it (asynchronous completion by workflow ID and
// ReportActivityID). One attempt: Temporal cannot retry the agent's run.
// Meanwhile the agent may claim the approval (UpdateClaim); a claim that
// says no report follows stops the wait.
func (c *callRun) awaitReport(ctx workflow.Context, output *json.RawMessage) error {
	c.state.Status = StatusApproved
	c.upsertStatus(ctx, StatusApproved)
	opts := workflow.ActivityOptions{
		ActivityID:          ReportActivityID,
		StartToCloseTimeout: c.eval.ReportTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	}
	actx, stop := workflow.WithCancel(workflow.WithActivityOptions(ctx, opts))
	c.awaitingReport, c.stopAwaitingReport = true, stop
	defer func() { c.awaitingReport = false }()
	return workflow.ExecuteActivity(actx, a.AwaitReport, c.state.Call).Get(ctx, output)
}

// validateClaim lets the call's requester take an approved call's
// approval once, while the call waits for its run; the same run may claim
// again, as it did the first time.
func (c *callRun) validateClaim(ctx workflow.Context, req ClaimRequest) error {
	if err := c.checkClaim(req); err != nil {
		return err
	}
	return c.checkClaimStatement(ctx, req)
}

// checkClaimStatement holds a claim (or a first answer's request) to its
// statement, which names the run when the door knew it.
func (c *callRun) checkClaimStatement(ctx workflow.Context, req ClaimRequest) error {
	want := callWant(ctx, req.Statement, policy.ClaimStatement(c.submitted(), req.Run), true) //workflowcheck:ignore
	return checkNow(ctx, c.doors, "claim", c.state.Call.ID, req.Statement, want)
}

func (c *callRun) checkClaim(req ClaimRequest) error {
	id := c.state.Call.ID
	switch {
	case req.CallID != id:
		return temporal.NewApplicationError(fmt.Sprintf("claim names call %q but this is call %q", req.CallID, id), ErrTypeInvalidDecision)
	case strings.TrimSpace(req.Run) == "" || len(req.Run) > MaxRunBytes:
		return temporal.NewApplicationError(fmt.Sprintf("claim of call %s: run must name the run, in 1 to %d bytes, not only spaces", id, MaxRunBytes), ErrTypeInvalidDecision)
	case req.By != c.state.Call.Requester:
		return temporal.NewApplicationError("only the agent that requested call "+id+" may take its approval", ErrTypeNotAuthorized)
	case c.claiming != "":
		return temporal.NewApplicationError(fmt.Sprintf("the approval of call %s is being taken by run %s; ask again in a moment", id, c.claiming), ErrTypeUnavailable)
	case c.state.Claim != nil && c.state.Claim.Run == req.Run && req.NoReport != c.endsAtClaim:
		said := "a report follows: report how it went"
		if c.endsAtClaim {
			said = "it would not report"
		}
		return temporal.NewApplicationError(fmt.Sprintf("run %s took the approval of call %s saying %s; claim it again as it did", req.Run, id, said), ErrTypeInvalidDecision)
	case c.state.Claim != nil && c.state.Claim.Run == req.Run:
		return nil
	case c.state.Claim != nil:
		return temporal.NewApplicationError(fmt.Sprintf("the approval of call %s was already taken by run %s: an approval runs the tool once", id, c.state.Claim.Run), ErrTypeAlreadyClaimed)
	case !c.awaitingReport:
		return temporal.NewApplicationError(fmt.Sprintf("call %s is not approved and waiting for its run (status %s)", id, c.state.Status), ErrTypeNotWaiting)
	}
	return nil
}

// claim takes the approval for req.Run, once the session shows it still
// holds: an approval that its session's end or a revoke voided is refused,
// and the call ends denied.
func (c *callRun) claim(ctx workflow.Context, req ClaimRequest) error {
	if c.state.Claim != nil {
		return nil // the same run again
	}
	if c.version(ctx, versionClaimChecksSession, 1) >= 1 {
		c.claiming = req.Run
		why, err := c.approvalVoided(ctx)
		c.claiming = ""
		if err != nil {
			return temporal.NewApplicationError("the approval of call "+c.state.Call.ID+" could not be taken: "+err.Error()+"; try again", ErrTypeUnavailable)
		}
		if why != "" {
			c.voided = why
			c.stopAwaitingReport()
			return temporal.NewApplicationError("the approval of call "+c.state.Call.ID+" is void: "+why, ErrTypeApprovalVoided)
		}
		if !c.awaitingReport {
			return temporal.NewApplicationError(fmt.Sprintf("call %s stopped waiting for its run while it was claimed (status %s)", c.state.Call.ID, c.state.Status), ErrTypeNotWaiting)
		}
	}
	c.state.Claim = &Claim{Run: req.Run, At: workflow.Now(ctx)}
	if req.NoReport {
		c.endsAtClaim = true
		c.stopAwaitingReport()
	}
	return nil
}

// validateFirstAnswer lets only the call's requester ask for the first
// answer of its agent-executed call; a toolgate-executed call's answer is
// its Result.
func (c *callRun) validateFirstAnswer(ctx workflow.Context, req ClaimRequest) error {
	if err := c.checkFirstAnswer(req); err != nil {
		return err
	}
	return c.checkClaimStatement(ctx, req)
}

func (c *callRun) checkFirstAnswer(req ClaimRequest) error {
	id := c.state.Call.ID
	switch {
	case req.CallID != id:
		return temporal.NewApplicationError(fmt.Sprintf("request names call %q but this is call %q", req.CallID, id), ErrTypeInvalidDecision)
	case req.By != c.state.Call.Requester:
		return temporal.NewApplicationError("only the agent that requested call "+id+" may ask for its answer", ErrTypeNotAuthorized)
	case c.state.Call.Execution != policy.ExecutionAgent:
		return temporal.NewApplicationError("call "+id+" is run by toolgate: wait for its result", ErrTypeInvalidDecision)
	case req.Run != "" && (strings.TrimSpace(req.Run) == "" || len(req.Run) > MaxRunBytes):
		return temporal.NewApplicationError(fmt.Sprintf("request for call %s: run must name the run, in 1 to %d bytes, not only spaces", id, MaxRunBytes), ErrTypeInvalidDecision)
	}
	return nil
}

// firstAnswer waits until the call is settled (ended, asking a person, or
// approved and waiting for its run) and then takes the approval for
// req.Run, through the same checks as UpdateClaim. A call the policy
// decides settles in its first workflow task, so the agent that starts it
// with this update has the decision and the claim in one round trip. A
// refused claim is part of the answer: the agent still learns where the
// call stands.
func (c *callRun) firstAnswer(ctx workflow.Context, req ClaimRequest) (FirstAnswer, error) {
	settled := func() bool {
		return c.state.Result != nil || c.state.Status == StatusPending || c.awaitingReport
	}
	if err := workflow.Await(ctx, settled); err != nil {
		return FirstAnswer{}, err
	}
	if req.Run == "" || !c.awaitingReport {
		return FirstAnswer{State: c.state}, nil
	}
	err := c.checkClaim(req) // its statement was checked by the validator
	if err == nil {
		err = c.claim(ctx, req)
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return FirstAnswer{State: c.state, ClaimRefused: &Refusal{Type: appErr.Type(), Message: appErr.Message()}}, nil
	}
	return FirstAnswer{State: c.state, Claimed: err == nil}, err
}

// approvalVoided reads the call's session and says why its approval no
// longer holds: the session has ended, or the sticky decision that
// approved the call was revoked or replaced. "" when it holds. The
// session's decisions apply where the policy asks a person, so an approval
// by the policy itself holds, and costs no read.
func (c *callRun) approvalVoided(ctx workflow.Context) (string, error) {
	if c.state.Request == nil {
		return "", nil
	}
	d := c.state.Decision
	var word activities.SessionWord
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	in := activities.ReadSessionInput{Session: SessionWorkflowID(c.state.Call.Session), Key: c.state.Request.StickyKeyFor(c.state.Call)}
	if err := workflow.ExecuteLocalActivity(lctx, a.ReadSession, in).Get(ctx, &word); err != nil {
		return "", err
	}
	switch {
	case word.End != nil:
		return word.End.Reason + " before the agent took the approval", nil
	case d != nil && d.Kind == policy.ApprovedForSession && !c.stillSticky(word.Sticky):
		return "the approval for the session by " + d.DecidedBy + " was revoked before the agent took it", nil
	}
	return "", nil
}

// stillSticky reports whether the session's sticky decision of the call's
// key is still the one that approved the call: the call's own (taken on
// it), or the one the session handed it.
func (c *callRun) stillSticky(now *policy.Decision) bool {
	d := c.state.Decision
	want := d.Comment
	if d.Channel != "session" {
		want = stickyComment(*d, c.state.Call.ID)
	}
	return now != nil && now.Kind == d.Kind && now.DecidedBy == d.DecidedBy && now.Comment == want
}

// toolFailed ends a call whose tool step failed: unknown when the tool may
// have had its effect, else error.
func (c *callRun) toolFailed(ctx workflow.Context, err error) Result {
	const checkFirst = ". Do not assume either; check its effects before asking to run it again"
	agent := c.state.Call.Execution == policy.ExecutionAgent
	var appErr *temporal.ApplicationError
	isApp := errors.As(err, &appErr)
	switch {
	case ctx.Err() != nil:
		return c.finish(ctx, StatusUnknown, "the call was cancelled while the tool ran: it may or may not have run"+checkFirst, nil)
	case agent && isApp && appErr.Type() == activities.ErrTypeAgentReported:
		return c.finish(ctx, StatusError, "the agent reported that the tool failed: "+appErr.Message(), nil)
	case agent:
		var timeoutErr *temporal.TimeoutError
		if errors.As(err, &timeoutErr) {
			return c.finish(ctx, StatusUnknown, fmt.Sprintf("the agent did not say whether it ran the tool: no report within %s", c.eval.ReportTimeout), nil)
		}
		return c.finish(ctx, StatusUnknown, "the agent's report was lost ("+rootCause(err)+"): the tool may or may not have run"+checkFirst, nil)
	case isApp && appErr.Type() == activities.ErrTypeOutcomeUnknown:
		return c.finish(ctx, StatusUnknown, "the tool may or may not have run: "+appErr.Message()+checkFirst, nil)
	}
	if lost, ok := lostAttempt(err); ok && !c.eval.ToolOptions.Idempotent {
		return c.finish(ctx, StatusUnknown, "the tool may or may not have run: "+lost+checkFirst, nil)
	}
	return c.finish(ctx, StatusError, "tool failed: "+rootCause(err), nil)
}

// lostAttemptRetries is how many attempts a tool that is not idempotent
// gets: RunTool's start mark lets an attempt lost before the tool began be
// retried, and ends the call unknown once an attempt that began is lost.
const lostAttemptRetries = 3

func toolActivityOptions(ev activities.Evaluation) workflow.ActivityOptions {
	o := ev.ToolOptions
	if !o.Idempotent {
		o.Retry.MaxAttempts = lostAttemptRetries
	}
	return workflow.ActivityOptions{
		StartToCloseTimeout: o.Timeout,
		HeartbeatTimeout:    o.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    o.Retry.InitialInterval,
			BackoffCoefficient: 2,
			MaximumInterval:    o.Retry.MaxInterval,
			MaximumAttempts:    o.Retry.MaxAttempts,
		},
	}
}

// quotaAnswerTimeout bounds the wait for the session's count; the session
// answers at once unless it is broken.
const quotaAnswerTimeout = time.Minute

// takeQuota asks the session to count this run under the tool's quota and
// returns the refusal, or "" when the call may run.
func (c *callRun) takeQuota(ctx workflow.Context) (string, error) {
	q := *c.eval.Quota
	start := activities.SignalWithStartInput{
		WorkflowID: SessionWorkflowID(c.state.Call.Session), WorkflowType: SessionWorkflowType,
		SignalName: SignalQuota, Signal: QuotaRequest{CallID: c.state.Call.ID, Tool: c.state.Call.Tool, Quota: q},
		StartInput: SessionInput{Session: c.state.Call.Session, Owner: c.state.Call.Requester},
		Memo:       map[string]any{activities.MemoOwner: c.state.Call.Requester},
	}
	if err := c.signalOrStart(ctx, start); err != nil {
		return "", fmt.Errorf("ask the session for quota %s: %w", q.Name, err)
	}
	answers := workflow.GetSignalChannel(ctx, SignalQuotaAnswer)
	if ok, err := awaitWithTimeout(ctx, quotaAnswerTimeout, func() bool { return answers.Len() > 0 }); err != nil || !ok {
		return "quota " + q.Name + " could not be checked: the session did not answer", err
	}
	var ans QuotaAnswer
	answers.ReceiveAsync(&ans)
	return ans.Refusal, nil
}

// lostAttempt says how an attempt was lost when Temporal stopped waiting
// for it (no heartbeat: the worker died; past its start-to-close timeout)
// rather than hearing the tool fail: the tool may have had its effect.
func lostAttempt(err error) (string, bool) {
	var timeoutErr *temporal.TimeoutError
	if !errors.As(err, &timeoutErr) {
		return "", false
	}
	switch timeoutErr.TimeoutType() {
	case enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return "its worker stopped answering while it ran (heartbeat timeout)", true
	case enumspb.TIMEOUT_TYPE_START_TO_CLOSE:
		return "it did not finish within its timeout", true
	}
	return "", false
}

// rootCause unwraps Temporal's activity error to the tool's own message.
func rootCause(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return "timed out (" + timeoutErr.TimeoutType().String() + ")"
	}
	return err.Error()
}
