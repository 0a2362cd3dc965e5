// Package activities runs everything a tool call does outside workflow
// code: policy evaluation, the coded approval handler, the hooks around a
// tool, the tool itself and notifications. Short steps run as local
// activities; the tool runs as a regular activity with its own timeouts and
// retries.
package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/tool"
)

// DefaultMaxOutputBytes caps a tool's output: Temporal refuses payloads
// over 2 MiB, so a larger output fails the call with a clear reason.
const DefaultMaxOutputBytes = 1 << 20

// Error types of tool failures (temporal.ApplicationError.Type()).
const (
	ErrTypeToolFailed     = "ToolFailed"
	ErrTypeOutputTooLarge = "OutputTooLarge"
	// ErrTypeOutcomeUnknown: the tool may or may not have run
	// (tool.OutcomeUnknown).
	ErrTypeOutcomeUnknown = "ToolOutcomeUnknown"
	// ErrTypeAgentReported: the agent reported that its tool failed.
	ErrTypeAgentReported = "AgentReportedError"
	// ErrTypeAgentUnsure: the agent ran its tool but cannot tell whether
	// it succeeded; the error's details carry the output.
	ErrTypeAgentUnsure = "AgentOutcomeUnknown"
)

// Metrics the activities emit; Prometheus adds _total or _bucket.
const (
	// MetricPolicyEvaluation times policy evaluation, tagged tool.
	MetricPolicyEvaluation = "toolgate_policy_evaluation"
	// MetricNotificationFailures counts failed notification attempts.
	MetricNotificationFailures = "toolgate_notification_failures"
)

// Activities holds what the activities need. Every field but Policy and
// Tools is optional.
type Activities struct {
	Policy     policy.ToolPolicy
	Tools      *tool.Registry
	Handler    policy.ApprovalHandler
	Hooks      []policy.LifecycleHook
	Middleware []policy.OutputMiddleware
	// Channels reach approvers (Slack, email, webhooks); optional.
	Channels []Channel
	// Client starts session workflows (SignalWithStart).
	Client client.Client
	// DataConverter is the one Client was dialled with: it decodes the
	// memos the activities read. Nil: the SDK's default.
	DataConverter converter.DataConverter
	// Doors are the doors whose statements the worker trusts: a call's
	// submission is checked against them (Evaluate). Nil trusts none.
	Doors *statement.Doors
	// MaxOutputBytes caps tool outputs; zero means DefaultMaxOutputBytes.
	MaxOutputBytes int
	// Ledger receives the workflows' ledger entries; nil: none kept.
	Ledger Ledger
	// Passkeys and RelyingParty check the passkey assertions of rules
	// that need them (VerifyPasskey); nil: such approvals are refused.
	Passkeys     Passkeys
	RelyingParty passkey.RelyingParty
	// Tracing exports the calls' spans (TraceCall); nil: no tracing, and
	// no call asks for it.
	Tracing *Tracing

	// reads shares the describes of busy sessions among this worker's
	// calls.
	reads sessionReads
	// joins gathers the registrations of calls parking in one session
	// into shared signals to its waiting rooms.
	joins roomJoins
	// leaves are the room leaves in flight (leaveRoom, Drain).
	leaves sync.WaitGroup
}

// MetricStatementsRefused counts the messages refused for their statement
// (workflows.MetricStatementsRefused), tagged message.
const MetricStatementsRefused = "toolgate_statements_refused"

// MetricShadowVerdicts counts the calls a `mode: shadow` rule would have
// decided, by rule, by its action and by the enforced verdict.
const MetricShadowVerdicts = "toolgate_shadow_verdicts"

func (a *Activities) doors() *statement.Doors {
	if a.Doors == nil {
		return statement.NewDoors()
	}
	return a.Doors
}

func (a *Activities) dataConverter() converter.DataConverter {
	if a.DataConverter == nil {
		return converter.GetDefaultDataConverter()
	}
	return a.DataConverter
}

// Evaluation is the policy's verdict on a call, recorded in history so a
// replay never consults the policy again.
type Evaluation struct {
	// Problem is set when the call cannot run at all: unknown tool,
	// arguments that fail the schema, a failing policy.
	Problem string `json:"problem,omitempty"`
	// InvalidRequest: the problem is the call's (unknown tool, bad
	// arguments), not the policy's.
	InvalidRequest bool `json:"invalid_request,omitempty"`
	// Unsubmitted says why the call's submission is refused: it carries no
	// valid statement of a trusted door that its requester asked for it.
	// Nothing else is evaluated.
	Unsubmitted string `json:"unsubmitted,omitempty"`
	// Denied is set when the policy refused; Reason says why.
	Denied bool   `json:"denied,omitempty"`
	Reason string `json:"reason,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// Ask is set when a person (or the handler) must decide.
	Ask *policy.ApprovalRequest `json:"ask,omitempty"`
	// Sandbox is the deciding rule's grant to the call's process; nil:
	// the sandbox's default.
	Sandbox       *policy.SandboxGrant `json:"sandbox,omitempty"`
	ToolOptions   tool.Options         `json:"tool_options"`
	PolicyVersion string               `json:"policy_version,omitempty"`
	// Quota limits calls of this tool per session; the session counts.
	Quota *policy.Quota `json:"quota,omitempty"`
	// Sticky is the session's sticky decision for the call's key, read
	// from its memo: the call applies it when its author may decide the
	// call, and then never waits. Nil: none known; the call asks its
	// waiting room, which holds every decision the session takes.
	Sticky *policy.Decision `json:"sticky,omitempty"`
	// SessionEnded: the session has ended, so no person is asked.
	SessionEnded bool `json:"session_ended,omitempty"`
	// SessionOwner is the agent the session belongs to ("" when unknown).
	SessionOwner string `json:"session_owner,omitempty"`
	// ReportTimeout bounds the wait for the agent's report of an
	// agent-executed call.
	ReportTimeout time.Duration `json:"report_timeout,omitempty"`
	// Preview is what the call will change, when it asks a person (or
	// EvaluateInput.Preview) and its tool can tell; redacted and bounded.
	Preview *policy.Preview `json:"preview,omitempty"`
	// HasHandler and Channels tell the workflow which optional steps
	// exist, so it schedules no activity that would do nothing.
	HasHandler bool     `json:"has_handler,omitempty"`
	Channels   []string `json:"channels,omitempty"`
	// AtBaseline is true from every worker of this release: the call
	// whose evaluation says so began at the workflows' baseline, known
	// from this recorded result instead of a version marker (a marker
	// costs the call a search-attribute write). A result recorded by an
	// earlier release lacks it, and the call asks for the marker.
	AtBaseline bool `json:"at_baseline,omitempty"`
	// Shadow is what a `mode: shadow` rule would have decided, when one
	// would: recorded in the call's ledger entry, never enforced.
	Shadow *policy.Shadow `json:"shadow,omitempty"`
	// LedgerOff: this worker keeps no ledger, so the call appends nothing
	// (AppendLedger would answer Off) and schedules no append. Recorded
	// here, so that replay takes the same path; a result from an earlier
	// release lacks it, and the call asks AppendLedger.
	LedgerOff bool `json:"ledger_off,omitempty"`
	// Trace is set when this worker exports traces: the call emits its
	// spans when it ends (TraceCall). Recorded here, so that the call's
	// workflow branches on its history, never on a worker's settings.
	Trace *TraceSettings `json:"trace,omitempty"`
	// BeforeCall is the outcome of the before-call checks, run here for a
	// call the policy approves outright (beforeCallNow): such a call runs
	// in the same workflow task, so a second local activity only to run
	// them would cost it a round trip. Nil: the call runs them itself
	// (BeforeCall), as a result recorded by an earlier release says.
	BeforeCall *HookOutcome `json:"before_call,omitempty"`
	// ChecksWithTool is true from every worker of this release: a tool
	// toolgate runs is scheduled as RunToolChecked, which runs the
	// before-call checks (unless BeforeCall holds them), the tool, the
	// output middleware and the after-call checks. A result recorded by an
	// earlier release lacks it, and the call runs BeforeCall, RunTool and
	// AfterCall, as that release did.
	ChecksWithTool bool `json:"checks_with_tool,omitempty"`
}

// Verdict is what the policy said about the call: allow, ask or deny; ""
// when it never judged it (a refused submission, a problem).
func (ev Evaluation) Verdict() string {
	switch {
	case ev.Unsubmitted != "" || ev.Problem != "":
		return ""
	case ev.Denied:
		return "deny"
	case ev.Ask != nil:
		return "ask"
	}
	return "allow"
}

// EvaluateInput is the argument of Evaluate.
type EvaluateInput struct {
	Call policy.Call `json:"call"`
	// Session is the session workflow whose memo holds its sticky
	// decisions, end and owner; empty skips the lookup.
	Session string `json:"session,omitempty"`
	// Preview asks for the call's preview even when the policy does not
	// ask a person (arguments an approver edited).
	Preview bool `json:"preview,omitempty"`
	// AgentPreview is the agent's preview of an agent-executed call.
	AgentPreview *policy.Preview `json:"agent_preview,omitempty"`
	// CheckSubmission asks for the call's Submission to be checked
	// against the doors first, as of StartedAt (its workflow's start).
	CheckSubmission bool              `json:"check_submission,omitempty"`
	Submission      *statement.Signed `json:"submission,omitempty"`
	StartedAt       time.Time         `json:"started_at,omitzero"`
}

// Evaluate checks the tool and its arguments, then asks the policy. Given
// the session, it also reads the session's owner, end and the sticky
// decision of the call's key, so a call covered by one costs no round trip
// to the session.
func (a *Activities) Evaluate(ctx context.Context, in EvaluateInput) (Evaluation, error) {
	call := in.Call
	ev := Evaluation{
		PolicyVersion:  policy.VersionOf(a.Policy),
		HasHandler:     a.Handler != nil,
		Channels:       a.channelNames(),
		AtBaseline:     true,
		LedgerOff:      a.Ledger == nil,
		ChecksWithTool: true,
		Trace:          a.Tracing.settings(),
	}
	if in.CheckSubmission {
		at := in.StartedAt
		if at.IsZero() { // never zero from a server; the clock is checked all the same
			at = time.Now()
		}
		if _, err := a.doors().Check(in.Submission, policy.SubmissionStatement(call), at); err != nil {
			activity.GetLogger(ctx).Warn("Refused a message without a valid statement from a toolgate door", "message", "submit", "subject", call.ID, "requester", call.Requester, "error", err)
			activity.GetMetricsHandler(ctx).WithTags(map[string]string{"message": "submit"}).Counter(MetricStatementsRefused).Inc(1)
			ev.Unsubmitted = "refused: " + err.Error()
			return ev, nil
		}
	}
	if problem := a.checkTool(&call, &ev); problem != "" {
		ev.Problem, ev.InvalidRequest = problem, true
		return ev, nil
	}
	if problem := definitionChangeProblem(call); problem != "" {
		ev.Problem, ev.InvalidRequest = problem, true
		return ev, nil
	}
	if q, ok := policy.QuotaOf(a.Policy, call.Tool); ok {
		ev.Quota = &q
	}
	start := time.Now()
	req, err := a.Policy.EvaluateApproval(ctx, call)
	activity.GetMetricsHandler(ctx).WithTags(map[string]string{"tool": call.Tool}).Timer(MetricPolicyEvaluation).Record(time.Since(start))
	if deny, ok := policy.AsDeny(err); ok {
		ev.Denied, ev.Reason, ev.Rule = true, deny.Reason, deny.Rule
		a.recordShadow(ctx, call, &ev)
		return ev, nil
	}
	if err != nil {
		ev.Problem = "policy failed: " + err.Error()
		return ev, nil
	}
	if call.Tool == policy.DefinitionChangeTool {
		req = definitionChangeAsk(call, req)
	}
	if req != nil {
		ev.Ask = req
		ev.Rule = req.Rule
	} else {
		ev.Rule = policy.AllowRuleOf(a.Policy, call) // for the result, the ledger and the metrics
	}
	ev.Sandbox = policy.SandboxOf(a.Policy, call)
	if req != nil || in.Preview {
		ev.Preview = a.preview(ctx, call, req, ev.Sandbox, in.AgentPreview)
	}
	if in.Session != "" {
		// Read on every call, auto-approved ones too: whose session it is
		// holds whatever the policy says (a call started around the client
		// must not run in another agent's session).
		key := ""
		if req != nil {
			key = req.StickyKeyFor(call)
		}
		var word SessionWord
		known, ok := a.reads.known(in.Session, time.Now())
		switch {
		case ok && req == nil:
			// Nobody is asked, so only the owner matters, and it was
			// read moments ago: the busy session is not described again.
			word.Owner = known.Owner
		case ok && known.Quiet && a.Handler == nil:
			// A person is asked, and nothing can decide the call before
			// it joins its waiting room, which reads the session afresh
			// after the call's registration (JoinWaitingRoom): a session
			// that showed no sticky decision and no end moments ago is not
			// described twice for it.
			word.Owner = known.Owner
		default:
			if word, err = a.readSession(ctx, in.Session, key); err != nil {
				return Evaluation{}, err // retried: the owner must be known
			}
		}
		ev.Sticky, ev.SessionEnded, ev.SessionOwner = word.Sticky, word.End != nil, word.Owner
	}
	a.recordShadow(ctx, call, &ev)
	if beforeCallNow(in, ev) {
		before := a.beforeCall(ctx, call)
		ev.BeforeCall = &before
	}
	return ev, nil
}

// beforeCallNow reports whether Evaluate runs a call's before-call checks
// itself: the call's own evaluation (not an edit's), which the policy
// approves outright, in its requester's session, with no quota to take
// first (the quota is taken before the checks, as for every other call).
// Any other call runs them later, if it runs at all.
func beforeCallNow(in EvaluateInput, ev Evaluation) bool {
	return in.Session != "" && ev.Verdict() == "allow" && ev.Quota == nil &&
		(ev.SessionOwner == "" || ev.SessionOwner == in.Call.Requester)
}

// recordShadow sets what a shadow rule would have decided about a call
// the policy judged, and counts it by rule, by what it would do and by
// what the enforced rules did.
func (a *Activities) recordShadow(ctx context.Context, call policy.Call, ev *Evaluation) {
	enforced := ev.Verdict()
	if enforced == "" {
		return
	}
	if ev.Shadow = policy.ShadowOf(a.Policy, call); ev.Shadow != nil {
		activity.GetMetricsHandler(ctx).WithTags(map[string]string{"rule": ev.Shadow.Rule, "action": ev.Shadow.Action, "enforced": enforced}).
			Counter(MetricShadowVerdicts).Inc(1)
	}
}

// checkTool checks the call's tool and arguments: against the registry for
// a tool toolgate runs (whose annotations the policy then sees), against
// the policy's declared schema, if any, for a tool the agent runs. It sets
// the tool's options and returns the problem, or "".
func (a *Activities) checkTool(call *policy.Call, ev *Evaluation) string {
	switch call.Execution {
	case policy.ExecutionToolgate:
		if err := a.Tools.Validate(call.Tool, call.Args); err != nil {
			return err.Error()
		}
		t, _ := a.Tools.Lookup(call.Tool)
		ev.ToolOptions, call.Annotations = t.Options, t.Annotations
	case policy.ExecutionAgent:
		call.Annotations = nil // hints come from toolgate's registry only
		ev.ReportTimeout = policy.DefaultReportTimeout
		if p, ok := a.Policy.(policy.AgentToolPolicy); ok {
			if err := p.CheckAgentArgs(call.Tool, call.Args); err != nil {
				return err.Error()
			}
			if d := p.ReportTimeout(*call); d > 0 {
				ev.ReportTimeout = d
			}
		}
	default:
		return fmt.Sprintf("unknown execution %q: it is \"agent\" or empty", call.Execution)
	}
	return ""
}

// AwaitReport is the tool step of an agent-executed call: the agent runs
// the tool, and its report (client.Report) completes this activity by
// workflow ID and workflows.ReportActivityID.
func (a *Activities) AwaitReport(ctx context.Context, call policy.Call) (json.RawMessage, error) {
	activity.GetLogger(ctx).Debug("Waiting for the agent's report", "callID", call.ID)
	return nil, activity.ErrResultPending
}

// AskHandlerInput is the argument of AskHandler.
type AskHandlerInput struct {
	Call    policy.Call            `json:"call"`
	Request policy.ApprovalRequest `json:"request"`
}

// AskHandler lets the coded ApprovalHandler decide; nil defers to a person.
func (a *Activities) AskHandler(ctx context.Context, in AskHandlerInput) (*policy.Decision, error) {
	if a.Handler == nil {
		return nil, nil
	}
	d, err := a.Handler.Approve(ctx, in.Call, in.Request)
	if err != nil || d == nil {
		return nil, err
	}
	if d.Channel == "" {
		d.Channel = "handler"
	}
	if d.DecidedBy == "" {
		d.DecidedBy = "handler"
	}
	if err := d.Validate(); err != nil {
		return nil, temporal.NewNonRetryableApplicationError("approval handler returned an invalid decision: "+err.Error(), "InvalidDecision", nil)
	}
	return d, nil
}

// HookOutcome is the result of a policy hook: Refusal is the hook's error
// text, empty when the hook accepted.
type HookOutcome struct {
	Refusal string `json:"refusal,omitempty"`
}

// BeforeCall runs the policy's BeforeCall hook.
func (a *Activities) BeforeCall(ctx context.Context, call policy.Call) (HookOutcome, error) {
	return a.beforeCall(ctx, call), nil
}

func (a *Activities) beforeCall(ctx context.Context, call policy.Call) HookOutcome {
	if err := a.Policy.BeforeCall(ctx, call); err != nil {
		return HookOutcome{Refusal: err.Error()}
	}
	return HookOutcome{}
}

// RunToolInput is the argument of RunTool: the call, and what its
// previews showed. Its JSON is the call's with two fields more, so it
// decodes the bare policy.Call that older workflows scheduled.
type RunToolInput struct {
	policy.Call
	// Preview is the preview of the arguments the tool runs with;
	// PreviewShown the one the approvers were shown, when an approver's
	// edit changed the arguments. Nil when none was made.
	Preview      *policy.Preview `json:"preview,omitempty"`
	PreviewShown *policy.Preview `json:"preview_shown,omitempty"`
	// Sandbox is the grant the evaluation found (Evaluation.Sandbox).
	Sandbox *policy.SandboxGrant `json:"sandbox,omitempty"`
	// LeaveRoom, when set, is the call's leave of its waiting room, which
	// RunTool sends while the tool runs.
	LeaveRoom *RoomLeave `json:"leave_room,omitempty"`
	// BeforeCall asks RunToolChecked to run the before-call checks first.
	BeforeCall bool `json:"before_call,omitempty"`
}

// previewed lists the files the input's previews showed.
func (in RunToolInput) previewed() []policy.PreviewTarget {
	var out []policy.PreviewTarget
	for _, p := range []*policy.Preview{in.PreviewShown, in.Preview} {
		if p != nil && p.Target != nil {
			out = append(out, *p.Target)
		}
	}
	return out
}

// RunTool runs the tool, between the lifecycle hooks. The call ID is the
// tool's idempotency key; the files the call's previews showed go to the
// tool (tool.Input.Previewed), which may refuse to act elsewhere.
func (a *Activities) RunTool(ctx context.Context, in RunToolInput) (json.RawMessage, error) {
	return a.runTool(ctx, in, nil)
}

// runTool is RunTool; then, when given, runs with the tool's output while
// the step's heartbeat still beats (with the mark that the tool began), so
// that checks after the tool never make its step look lost.
func (a *Activities) runTool(ctx context.Context, in RunToolInput, then func(json.RawMessage)) (json.RawMessage, error) {
	a.leaveRoom(ctx, in.LeaveRoom) // whatever happens next
	call := in.Call
	t, err := a.Tools.Get(call.Tool)
	if err != nil {
		// Gone, or held since the call was judged (an upstream changed it).
		return nil, temporal.NewNonRetryableApplicationError(err.Error()+"; it did not run", ErrTypeToolFailed, nil)
	}
	info := activity.GetInfo(ctx)
	if !t.Options.Idempotent {
		if err := startOnce(ctx, a.Client); err != nil {
			return nil, err
		}
	}
	for _, h := range a.Hooks {
		h.OnToolStart(ctx, call)
	}
	// A heartbeat without the mark would erase it.
	hb := newStepHeartbeat(ToolHeartbeat{Started: !t.Options.Idempotent})
	ctx = tool.WithProgress(ctx, hb.report)
	stop := hb.run(ctx, t.Options.HeartbeatTimeout, progressSender(ctx, a.Client))
	defer stop()
	start := time.Now()
	out, err := t.Run(ctx, tool.Input{CallID: call.ID, Session: call.Session, Args: call.Args, Previewed: in.previewed(), Sandbox: in.Sandbox})
	if err != nil && !t.Options.Idempotent && !temporal.IsApplicationError(err) {
		// The tool ran and failed: running it again could repeat what it
		// did before failing.
		err = tool.Permanent(err)
	}
	if err == nil && len(out) == 0 {
		out = json.RawMessage("null")
	}
	if err == nil && !json.Valid(out) {
		err = tool.Permanent(errors.New("tool returned output that is not valid JSON"))
	}
	if limit := a.maxOutput(); err == nil && len(out) > limit {
		err = temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("tool output is %d bytes, over the %d-byte limit", len(out), limit), ErrTypeOutputTooLarge, nil)
	}
	for _, h := range a.Hooks {
		h.OnToolEnd(ctx, call, policy.ToolEnd{Output: out, Err: err, Duration: time.Since(start), Attempt: info.Attempt})
	}
	if err == nil {
		if then != nil {
			then(out)
		}
		return out, nil
	}
	var unknown *tool.OutcomeUnknownError
	if errors.As(err, &unknown) {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOutcomeUnknown, nil)
	}
	var permanent *tool.PermanentError
	if errors.As(err, &permanent) {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeToolFailed, nil)
	}
	return nil, err
}

// startOnce guards a tool that is not idempotent. An attempt that finds
// the previous one's mark ends the call unknown: that attempt was lost
// after the tool began. Otherwise it records the mark on the server before
// the tool acts, so an attempt lost before this point (a worker killed
// while the task was on its way, a history restart) is simply retried:
// its tool never began. A mark that cannot be recorded fails the attempt
// before the tool runs, and it is retried.
func startOnce(ctx context.Context, c client.Client) error {
	if activity.HasHeartbeatDetails(ctx) {
		var mark ToolHeartbeat
		if err := activity.GetHeartbeatDetails(ctx, &mark); err == nil && mark.Started {
			return temporal.NewNonRetryableApplicationError(
				howLost(ctx, c)+", and it is not idempotent, so toolgate did not run it again", ErrTypeOutcomeUnknown, nil)
		}
	}
	if c == nil { // activity tests without a server
		activity.RecordHeartbeat(ctx, ToolHeartbeat{Started: true})
		return nil
	}
	// The client's heartbeat answers with the server's error, unlike
	// activity.RecordHeartbeat, which only logs it.
	if err := c.RecordActivityHeartbeat(ctx, activity.GetInfo(ctx).TaskToken, ToolHeartbeat{Started: true}); err != nil {
		return fmt.Errorf("record that the tool begins (it has not): %w", err)
	}
	return nil
}

// howLost says how the previous attempt of this tool step ended, from the
// server's record of the pending activity (a describe: strongly
// consistent), in the words a model reads.
func howLost(ctx context.Context, c client.Client) string {
	const unsure = "its previous attempt was lost after the tool began (its worker died, or it ran past its timeout)"
	if c == nil {
		return unsure
	}
	info := activity.GetInfo(ctx)
	d, err := c.DescribeWorkflowExecution(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	if err != nil {
		return unsure
	}
	for _, pa := range d.GetPendingActivities() {
		if pa.GetActivityId() != info.ActivityID {
			continue
		}
		switch pa.GetLastFailure().GetTimeoutFailureInfo().GetTimeoutType() {
		case enumspb.TIMEOUT_TYPE_HEARTBEAT:
			return "its worker stopped answering while it ran (heartbeat timeout)"
		case enumspb.TIMEOUT_TYPE_START_TO_CLOSE:
			return "it did not finish within its timeout"
		}
	}
	return unsure
}

func (a *Activities) maxOutput() int {
	if a.MaxOutputBytes > 0 {
		return a.MaxOutputBytes
	}
	return DefaultMaxOutputBytes
}

// AfterCallInput is the argument of AfterCall.
type AfterCallInput struct {
	Call   policy.Call     `json:"call"`
	Output json.RawMessage `json:"output"`
}

// AfterCallOutcome is the output the model will see, or why it will not.
type AfterCallOutcome struct {
	Output     json.RawMessage `json:"output,omitempty"`
	Redactions int             `json:"redactions,omitempty"`
	Refusal    string          `json:"refusal,omitempty"`
}

// AfterCall runs the output middleware, then the policy's AfterCall hook
// on the transformed output.
func (a *Activities) AfterCall(ctx context.Context, in AfterCallInput) (AfterCallOutcome, error) {
	return a.afterCall(ctx, in), nil
}

func (a *Activities) afterCall(ctx context.Context, in AfterCallInput) AfterCallOutcome {
	out := in.Output
	changes := 0
	for _, m := range a.Middleware {
		next, n, err := m.TransformOutput(ctx, in.Call, out)
		if err != nil {
			return AfterCallOutcome{Refusal: "output middleware: " + err.Error()}
		}
		out, changes = next, changes+n
	}
	if err := a.Policy.AfterCall(ctx, in.Call, out); err != nil {
		return AfterCallOutcome{Refusal: err.Error(), Redactions: changes}
	}
	return AfterCallOutcome{Output: out, Redactions: changes}
}
