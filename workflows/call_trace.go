package workflows

import (
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/calltrace"
)

// A call's OpenTelemetry spans (package calltrace) are emitted once, when
// it ends, by the TraceCall local activity, from what the call recorded:
// the SDK's tracing interceptor starts its workflow spans again on every
// replay and ends them with the worker that held them, so a call that
// waits hours across restarts cannot keep a span open. Only a call whose
// recorded evaluation says its worker traces (activities.Evaluation's
// Trace) runs TraceCall, so histories from before, and calls on workers
// without tracing, take the path they always took.

// traceHeaderKey is the start header's field where the SDK's OpenTelemetry
// interceptor (go.temporal.io/sdk/contrib/opentelemetry) puts the span
// context of whoever started the workflow: the caller's trace.
const traceHeaderKey = "_tracer-data"

// traceOptions bound TraceCall: emitting spans only hands them to the
// exporter's queue. One retry; a span lost is never worth a call's time.
var traceOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 5 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 2},
}

// callTrace is what a call keeps for its spans.
type callTrace struct {
	// on is the first evaluation's Trace: nil, no spans.
	on *activities.TraceSettings
	// parent is the caller's span context from the start header.
	parent  map[string]string
	verdict string
	policy  calltrace.Step
	run     calltrace.Step
}

// CallerTraceInterceptor hands the workflows the caller's span context
// from their start header, which the SDK shows interceptors only. A
// worker that traces installs it (worker.Options.Tracing).
func CallerTraceInterceptor() interceptor.WorkerInterceptor { return &callerTraceInterceptor{} }

type callerTraceInterceptor struct {
	interceptor.WorkerInterceptorBase
}

type callerTraceKey struct{}

func (*callerTraceInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &callerTraceInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type callerTraceInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

// ExecuteWorkflow reads the start header, recorded in the run's first
// event: the same on every replay.
func (w *callerTraceInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	if p := interceptor.WorkflowHeader(ctx)[traceHeaderKey]; p != nil {
		var m map[string]string
		if err := converter.GetDefaultDataConverter().FromPayload(p, &m); err == nil && m["traceparent"] != "" {
			ctx = workflow.WithValue(ctx, callerTraceKey{}, m)
		}
	}
	return w.Next.ExecuteWorkflow(ctx, in)
}

// callerSpan is the caller's span context (a W3C carrier), or nil.
func callerSpan(ctx workflow.Context) map[string]string {
	m, _ := ctx.Value(callerTraceKey{}).(map[string]string)
	return m
}

// startTrace emits the call's spans when its evaluation asked for them;
// the caller waits for the returned future (nil: nothing emitted).
func (c *callRun) startTrace(ctx workflow.Context, r Result) workflow.Future {
	if c.trace.on == nil {
		return nil
	}
	lctx := workflow.WithLocalActivityOptions(ctx, traceOptions)
	return workflow.ExecuteLocalActivity(lctx, a.TraceCall, c.traceFacts(r))
}

// awaitTrace waits for TraceCall; its failure only costs the spans.
func (c *callRun) awaitTrace(ctx workflow.Context, f workflow.Future) {
	if f == nil {
		return
	}
	if err := f.Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("The call's spans were not emitted", "callID", c.state.Call.ID, "error", err)
	}
}

// traceFacts are the finished call's facts for calltrace.Emit.
func (c *callRun) traceFacts(r Result) calltrace.Call {
	call := c.state.Call
	t := calltrace.Call{
		Parent: c.trace.parent, CallID: call.ID, Tool: call.Tool, Session: call.Session, Requester: call.Requester,
		Execution: executionName(call.Execution), Rule: r.Rule, Verdict: c.trace.verdict, PolicyVersion: r.PolicyVersion,
		Status: string(r.Status), RequestedAt: c.requestedAt, FinishedAt: r.FinishedAt,
	}
	if !c.trace.policy.End.IsZero() {
		p := c.trace.policy
		t.Policy = &p
	}
	if !c.trace.run.End.IsZero() {
		run := c.trace.run
		t.Run = &run
	}
	if req := c.state.Request; req != nil {
		t.Wait = c.waitFacts(r)
	}
	if c.trace.on.Content {
		t.Args, t.Output = call.Args, r.Output
	}
	return t
}

// waitFacts describe the wait of a call that asked: a person, or the
// session's sticky decision or the coded handler, which decide at once.
func (c *callRun) waitFacts(r Result) *calltrace.Wait {
	w := &calltrace.Wait{Groups: c.state.Request.Groups}
	w.Start = c.trace.policy.End
	if !c.state.WaitingSince.IsZero() {
		w.Start = c.state.WaitingSince
		w.Channels = c.eval.Channels
	}
	w.End = r.FinishedAt
	if d := c.state.Decision; d != nil {
		w.End, w.DecidedBy, w.Channel, w.Outcome = d.DecidedAt, d.DecidedBy, d.Channel, d.Kind.String()
	}
	if r.Status == StatusTimedOut {
		w.Outcome, w.DecidedBy, w.Channel = "timed_out", "timeout", "timeout"
	}
	for _, n := range c.state.Notices {
		if n.Kind == activities.NoticeReminder || n.Kind == activities.NoticeEscalation {
			w.Notices = append(w.Notices, calltrace.Notice{Kind: string(n.Kind), At: n.At, Groups: n.Groups})
		}
	}
	if w.Start.IsZero() || w.Start.After(w.End) {
		w.Start = w.End
	}
	return w
}
