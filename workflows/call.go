package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/calltrace"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// a is only used to name activity methods; workflow code never calls it.
var a *activities.Activities

// localOptions bound the short steps (policy, hooks, handler). They are
// retried by Temporal if the worker dies; their errors as data (a refusal)
// are results, not failures.
var localOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
}

// notifyOptions retry notifications for a while: a channel being down must
// not lose the notification, and never blocks the wait for a decision.
var notifyOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: time.Minute, MaximumAttempts: 20},
}

// ToolCallWorkflow judges one tool call, asks a person when the policy says
// so, runs the tool and returns a Result. It fails only on infrastructure
// errors: every outcome for the agent, denials included, is a Result.
//
// The life of a call is in four files: this one (judging and finishing),
// call_decide.go (the decisions a person sends), call_wait.go (waiting for
// a person, in the session's waiting room) and call_run.go (running the
// tool).
func ToolCallWorkflow(ctx workflow.Context, in CallInput) (Result, error) {
	c := newCallRun(ctx, in)
	c.showIdentity(ctx)
	if err := c.registerHandlers(ctx); err != nil {
		return Result{}, err
	}
	r, err := c.run(ctx)
	if ctx.Err() != nil {
		// Cancelled through Temporal (`temporal workflow cancel`): the
		// call still ends with a Result, and tells its room.
		ctx, _ = workflow.NewDisconnectedContext(ctx)
		if err != nil || !r.Status.Final() {
			r, err = c.cancelled(ctx, "an operator (a Temporal cancel request)"), nil
		}
	}
	if err == nil {
		// Logged whatever happens next: a cancel no longer stops it.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		traced := c.startTrace(dctx, r) // beside the ledger's append
		if lerr := c.logFinished(dctx, r); lerr != nil {
			return Result{}, lerr
		}
		c.awaitTrace(dctx, traced)
		c.state.Result = &r // shown once it is in the ledger
	}
	c.awaitTold(ctx)
	c.handOverNotices(ctx)
	c.leaveRoom(ctx)
	c.awaitLeft(ctx)
	return r, err
}

// cancelled ends a call that was cancelled before its tool ran: a denial.
func (c *callRun) cancelled(ctx workflow.Context, by string) Result {
	if c.state.Decision == nil {
		c.apply(ctx, policy.Decision{Kind: policy.DeniedWithReason, Reason: "cancelled by " + by, DecidedBy: by, Channel: ChannelCancel})
	}
	return c.finish(ctx, StatusDenied, denialReason(c.state.Decision), nil)
}

// callRun is the state of one call. Handlers read and write it; the main
// flow in run moves it forward.
type callRun struct {
	state       CallState
	requestedAt time.Time
	eval        activities.Evaluation
	// judged: eval holds the policy's evaluation (a reserved tool's call
	// is refused before any).
	judged bool
	// stickyKey is the key of the sticky decisions that may decide the
	// call, once it asks.
	stickyKey string
	// joined: the call registered with its waiting room; left is its
	// leave on the way there.
	joined bool
	left   workflow.Future
	// room is the waiting room that took the call (the join records it).
	room int
	// told are the sticky decisions on their way to the session.
	told []workflow.Future
	// notices carries messages to the call's NoticesWorkflow, once one is
	// started; noticesBusy is set while they are being delivered.
	notices     workflow.Channel
	noticesBusy bool
	// originalArgs and note are set when an approver edited the arguments.
	originalArgs json.RawMessage
	note         string
	// checking names what of a decision is being checked (edited
	// arguments by the policy, a passkey assertion); other decisions
	// wait. editEval is the policy's verdict on edited arguments accepted
	// at decision time.
	checking string
	editEval *activities.Evaluation
	// noReport: an agent-executed call that ends at its decision.
	noReport bool
	// agentPreview is what the agent says its call will change.
	agentPreview *policy.Preview
	// awaitingReport is set while an agent-executed call waits for its
	// run; stopAwaitingReport ends that wait, and endsAtClaim says a claim
	// ended it (UpdateClaim with NoReport).
	awaitingReport     bool
	stopAwaitingReport workflow.CancelFunc
	endsAtClaim        bool
	// claiming names the run whose claim is being checked against the
	// session; voided says why the approval no longer holds.
	claiming string
	voided   string
	// logged is what the call has written to the ledger.
	logged callLog
	// submission is the door's statement that the requester asked for it.
	submission *statement.Signed
	// doors are the doors whose statements it trusts.
	doors *statement.Doors
	// baseline: whether the call began at versionBaseline, once asked.
	baseline struct{ checked, on bool }
	// trace is what the call keeps for its spans (call_trace.go).
	trace callTrace
}

// showIdentity sets the call's identifying search attributes when whoever
// started it did not (e.g. `temporal workflow start`), so listings find it.
func (c *callRun) showIdentity(ctx workflow.Context) {
	sa := workflow.GetTypedSearchAttributes(ctx)
	if _, ok := sa.GetKeyword(AttrSession); ok {
		return
	}
	call := c.state.Call
	err := workflow.UpsertTypedSearchAttributes(ctx, AttrSession.ValueSet(call.Session), AttrTool.ValueSet(call.Tool),
		AttrRequester.ValueSet(call.Requester), AttrRequestedAt.ValueSet(c.requestedAt))
	if err != nil {
		workflow.GetLogger(ctx).Warn("Could not set the call's search attributes", "callID", call.ID, "error", err)
	}
}

func newCallRun(ctx workflow.Context, in CallInput) *callRun {
	return &callRun{
		state:        CallState{Call: in.Call, Status: StatusEvaluating, Run: workflow.GetInfo(ctx).WorkflowExecution.RunID},
		requestedAt:  workflow.GetInfo(ctx).WorkflowStartTime,
		noReport:     in.NoReport && in.Call.Execution == policy.ExecutionAgent,
		agentPreview: in.Preview,
		submission:   in.Submission,
		doors:        doorsOf(ctx),
		trace:        callTrace{parent: callerSpan(ctx)},
	}
}

func (c *callRun) run(ctx workflow.Context) (Result, error) {
	call := c.state.Call
	if why := c.reservedDenial(ctx); why != "" {
		c.apply(ctx, policy.Decision{Kind: policy.DeniedWithReason, Reason: why, DecidedBy: policy.ToolgateRequester, Channel: "policy"})
		return c.finish(ctx, StatusDenied, why, nil), nil
	}
	if err := c.evaluate(ctx, call, true); err != nil {
		return Result{}, err
	}
	switch {
	case c.eval.Unsubmitted != "":
		// Nobody a door authenticated asked for it: nothing is judged,
		// asked or run.
		r := c.finish(ctx, StatusError, c.eval.Unsubmitted, nil)
		r.InvalidRequest = true
		return r, nil
	case c.eval.Problem != "":
		r := c.finish(ctx, StatusError, c.eval.Problem, nil)
		r.InvalidRequest = c.eval.InvalidRequest
		return r, nil
	case c.eval.SessionOwner != "" && c.eval.SessionOwner != call.Requester:
		// The client refuses such a call before it starts; this holds for
		// calls started some other way.
		c.apply(ctx, policy.Decision{Kind: policy.DeniedWithReason, Reason: notYourSession, DecidedBy: "session", Channel: "session"})
		return c.finish(ctx, StatusDenied, notYourSession, nil), nil
	case c.eval.Denied:
		d := policy.Decision{Kind: policy.DeniedWithReason, Reason: c.eval.Reason, DecidedBy: "policy", Channel: "policy"}
		c.apply(ctx, d)
		return c.finish(ctx, StatusDenied, c.eval.Reason, nil), nil
	case c.eval.Ask == nil:
		c.apply(ctx, policy.Decision{Kind: policy.Approved, DecidedBy: "policy", Channel: "policy"})
	default:
		if err := c.logSubmitted(ctx); err != nil { // before anyone is asked
			return Result{}, err
		}
		if err := c.askForDecision(ctx, *c.eval.Ask); err != nil {
			return Result{}, err
		}
		if c.state.Status == StatusTimedOut {
			return c.finish(ctx, StatusTimedOut, c.timeoutReason(), nil), nil
		}
		if !c.state.Decision.Kind.Approves() {
			return c.finish(ctx, StatusDenied, denialReason(c.state.Decision), nil), nil
		}
		if c.state.Decision.Kind == policy.ApprovedWithEdits {
			if r, stop := c.useEditedArgs(ctx); stop {
				return r, nil
			}
		}
	}
	if err := c.logDecided(ctx); err != nil { // the tool runs only once its approval is logged
		return Result{}, err
	}
	r, err := c.execute(ctx)
	if err == nil {
		c.announce(ctx, activities.Outcome{Event: activities.EventExecuted, Status: string(r.Status), At: r.FinishedAt, Reason: r.Reason})
	}
	return r, err
}

// notYourSession is the denial of a call into another agent's session: it
// says nothing about what the session holds.
const notYourSession = "the session belongs to another agent"

func (c *callRun) evaluate(ctx workflow.Context, call policy.Call, lookupSession bool) error {
	in := activities.EvaluateInput{Call: call}
	if lookupSession { // the call as the agent asked: its preview holds
		in.Session = SessionWorkflowID(call.Session)
		in.AgentPreview = c.agentPreview
		// Its submission is checked, unless toolgate started it itself.
		in.CheckSubmission = !startedByPins(ctx, call)
		in.Submission, in.StartedAt = c.submission, c.requestedAt
	}
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	began := workflow.Now(ctx)
	if err := workflow.ExecuteLocalActivity(lctx, a.Evaluate, in).Get(ctx, &c.eval); err != nil {
		return fmt.Errorf("evaluate policy: %w", err)
	}
	if lookupSession { // the call's own evaluation (not an edit's)
		c.trace.on, c.trace.verdict = c.eval.Trace, c.eval.Verdict()
		c.trace.policy = calltrace.Step{Start: began, End: workflow.Now(ctx)} // a local activity's end moves workflow time
	}
	if !c.judged && lookupSession {
		if v := c.eval.Verdict(); v != "" {
			workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"verdict": v, "rule": c.eval.Rule, "tool": call.Tool}).
				Counter(MetricVerdicts).Inc(1)
		}
	}
	c.judged = true
	return nil
}

// finish records the outcome and builds the Result.
func (c *callRun) finish(ctx workflow.Context, status Status, reason string, output json.RawMessage) Result {
	call := c.state.Call
	r := Result{
		CallID: call.ID, Session: call.Session, Tool: call.Tool, Requester: call.Requester,
		Status: status, Execution: call.Execution, Output: output, Reason: reason, Note: c.note,
		Args: call.Args, OriginalArgs: c.originalArgs, Notices: c.state.Notices,
		Rule: c.eval.Rule, PolicyVersion: c.eval.PolicyVersion, Claim: c.state.Claim,
		RequestedAt: c.requestedAt, FinishedAt: workflow.Now(ctx),
	}
	if d := c.state.Decision; d != nil {
		r.Decision, r.DecidedBy, r.Channel, r.DecidedAt, r.Comment = d.Kind.String(), d.DecidedBy, d.Channel, d.DecidedAt, d.Comment
		r.Identity = d.Identity
	}
	r.Preview, r.Approvals = c.eval.Preview, c.state.Approvals
	if c.originalArgs != nil && c.state.Request != nil {
		r.PreviewShown = c.state.Request.Preview
	}
	if status == StatusTimedOut {
		r.Decision, r.DecidedBy, r.Channel = "timed_out", "timeout", "timeout"
	}
	if len(r.Args)+len(r.OriginalArgs)+len(r.Output) > maxResultBytes {
		// Edited arguments, the agent's and the output could pass
		// Temporal's 2 MiB payload limit together; the agent's own
		// arguments stay in the call's history.
		r.OriginalArgs = nil
		r.Note += " (the original arguments are left out of this result for size; the call's history has them)"
	}
	r.ModelMessage = modelMessage(r, c.noReport, c.originalArgs != nil)
	c.state.Status = status
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"tool": call.Tool, "status": string(status)}).
		Counter(MetricCallsFinished).Inc(1)
	c.upsertStatus(ctx, status, AttrDecidedBy.ValueSet(r.DecidedBy), AttrChannel.ValueSet(r.Channel))
	return r
}

// maxResultBytes bounds a Result's arguments and output together, under
// Temporal's 2 MiB payload limit: arguments are capped at
// policy.MaxArgsBytes and outputs at activities.DefaultMaxOutputBytes.
const maxResultBytes = 1536 << 10

// denialReason is what the model reads when a person refused.
func denialReason(d *policy.Decision) string {
	if d.Reason != "" {
		return d.Reason
	}
	if d.Kind == policy.DeniedAlways {
		return "denied by " + d.DecidedBy + " for the rest of the session"
	}
	return "denied by " + d.DecidedBy
}

func (c *callRun) upsertStatus(ctx workflow.Context, s Status, more ...temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, append(more, AttrStatus.ValueSet(string(s)))...); err != nil {
		workflow.GetLogger(ctx).Warn("Could not update the status search attribute", "callID", c.state.Call.ID, "error", err)
	}
}

// Memo keys of a waiting call, read by "pending" listings without a query
// to each workflow.
const (
	MemoMessage  = "message"
	MemoArgs     = "args"
	MemoRule     = "rule"
	MemoGroups   = "groups"
	MemoDeadline = "deadline"
	// MemoApprovals says how far a four-eyes call is ("1 of 2 approvals").
	MemoApprovals = "approvals"
)

// maxMemoArgs abridges arguments in the memo; the full ones are in the
// call's state.
const maxMemoArgs = 512

func (c *callRun) upsertWaitingMemo(ctx workflow.Context, req policy.ApprovalRequest) {
	args := compact(c.state.Call.Args)
	if len(args) > maxMemoArgs {
		args = args[:maxMemoArgs] + "…"
	}
	memo := map[string]any{
		MemoMessage: req.Message, MemoArgs: args, MemoRule: req.Rule,
		MemoGroups: req.Groups, MemoDeadline: c.state.Deadline,
	}
	if a := c.state.Approvals; a != nil {
		memo[MemoApprovals] = a.progress()
	}
	if err := workflow.UpsertMemo(ctx, memo); err != nil {
		workflow.GetLogger(ctx).Warn("Could not update the memo", "callID", c.state.Call.ID, "error", err)
	}
}

// compact renders JSON on one line for messages.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// awaitWithTimeout is workflow.AwaitWithTimeout with a timer that is
// cancelled when the condition is met. (SDK v1.50 leaves that timer pending
// unless an SDK flag is set, so every wait would leave a timer behind to
// wake the workflow later for nothing.) It returns ctx's error when ctx is
// cancelled first.
func awaitWithTimeout(ctx workflow.Context, d time.Duration, condition func() bool) (bool, error) {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timer := workflow.NewTimer(tctx, d)
	if err := workflow.Await(ctx, func() bool { return condition() || timer.IsReady() }); err != nil {
		return false, err
	}
	// A cancelled ctx cancels the timer, whose future is then ready: that
	// is the cancellation, not the timeout (callers that loop until a
	// deadline would otherwise spin).
	if err := ctx.Err(); err != nil && !condition() {
		return false, err
	}
	return condition(), nil
}
