// Package calltrace builds the OpenTelemetry spans of one finished call
// from the facts its workflow recorded: an `execute_tool {tool}` span
// (OpenTelemetry's GenAI semantic conventions) with toolgate's policy,
// approval wait and tool run as children, each with the start and end
// times the call's history holds.
//
// Why after the fact: a call may wait hours, across worker restarts, and
// its workflow code replays. A span started in the workflow would be
// started again on every replay, and lost with the worker that held it.
// So the workflow keeps the facts (its own times, deterministic on
// replay) and hands them to one local activity when it ends, which emits
// every span at once with explicit timestamps, inside the caller's trace
// (the span context its start header carries).
package calltrace

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span names.
const (
	// SpanExecuteTool is the call's span, "execute_tool {tool}".
	SpanExecuteTool = "execute_tool"
	SpanPolicy      = "toolgate.policy"
	SpanWait        = "toolgate.approval.wait"
	SpanRun         = "toolgate.tool.run"
	// EventReminder and EventEscalation are the wait's notices.
	EventReminder   = "toolgate.reminder"
	EventEscalation = "toolgate.escalation"
)

// Attribute keys: the GenAI conventions' (opted in with
// OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental) and toolgate's.
const (
	AttrOperation   = "gen_ai.operation.name"
	AttrToolName    = "gen_ai.tool.name"
	AttrToolCallID  = "gen_ai.tool.call.id"
	AttrToolType    = "gen_ai.tool.type"
	AttrArguments   = "gen_ai.tool.call.arguments"
	AttrResult      = "gen_ai.tool.call.result"
	AttrErrorType   = "error.type"
	AttrRule        = "toolgate.rule"
	AttrVerdict     = "toolgate.verdict"
	AttrSession     = "toolgate.session"
	AttrExecution   = "toolgate.execution"
	AttrStatus      = "toolgate.status"
	AttrRequester   = "toolgate.requester"
	AttrPolicyVer   = "toolgate.policy.version"
	AttrGroups      = "toolgate.approval.groups"
	AttrChannels    = "toolgate.approval.channels"
	AttrDecidedBy   = "toolgate.approval.decided_by"
	AttrDecidedVia  = "toolgate.approval.channel"
	AttrOutcome     = "toolgate.approval.outcome"
	AttrNoticeGroup = "toolgate.notice.groups"
)

// Call is what a finished call's workflow knows, the local activity's
// input. It holds names, statuses and times; Args and Output only when
// the operator opted in to content.
type Call struct {
	// Parent is the caller's span context as a W3C trace-context carrier
	// (traceparent, tracestate); empty: the call's span is a root.
	Parent map[string]string `json:"parent,omitempty"`

	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Session   string `json:"session"`
	Requester string `json:"requester,omitempty"`
	// Execution is "server" (toolgate runs the tool) or "agent".
	Execution string `json:"execution"`
	Rule      string `json:"rule,omitempty"`
	// Verdict is the policy's: allow, ask or deny ("" when it never
	// judged the call).
	Verdict       string `json:"verdict,omitempty"`
	PolicyVersion string `json:"policy_version,omitempty"`
	// Status is the Result's: ok, denied, timed_out, error or unknown.
	Status string `json:"status"`

	RequestedAt time.Time `json:"requested_at"`
	FinishedAt  time.Time `json:"finished_at"`
	Policy      *Step     `json:"policy,omitempty"`
	Wait        *Wait     `json:"wait,omitempty"`
	Run         *Step     `json:"run,omitempty"`

	// Args and Output are set only when content is captured; the
	// activity redacts Args with the policy first.
	Args   json.RawMessage `json:"args,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
}

// Step is a child span's time.
type Step struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Wait is the approval wait: whom it asked, through which channels, who
// decided, how, and the reminders and escalation on the way.
type Wait struct {
	Step
	Groups    []string `json:"groups,omitempty"`
	Channels  []string `json:"channels,omitempty"`
	DecidedBy string   `json:"decided_by,omitempty"`
	Channel   string   `json:"channel,omitempty"`
	// Outcome is the decision (approved, approved_for_session, denied,
	// ...) or timed_out.
	Outcome string   `json:"outcome,omitempty"`
	Notices []Notice `json:"notices,omitempty"`
}

// Notice is a reminder or an escalation sent while the call waited.
type Notice struct {
	// Kind is "reminder" or "escalation".
	Kind   string    `json:"kind"`
	At     time.Time `json:"at"`
	Groups []string  `json:"groups,omitempty"`
}

// Emit starts and ends the call's spans with tracer. It never reads the
// clock: every time is the call's.
func Emit(tracer trace.Tracer, c Call) {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(c.Parent))
	attrs := []attribute.KeyValue{
		attribute.String(AttrOperation, SpanExecuteTool),
		attribute.String(AttrToolName, c.Tool),
		attribute.String(AttrToolCallID, c.CallID),
		attribute.String(AttrToolType, "function"),
		attribute.String(AttrSession, c.Session),
		attribute.String(AttrExecution, c.Execution),
		attribute.String(AttrStatus, c.Status),
	}
	attrs = appendSet(attrs, AttrRule, c.Rule)
	attrs = appendSet(attrs, AttrVerdict, c.Verdict)
	attrs = appendSet(attrs, AttrRequester, c.Requester)
	if len(c.Args) > 0 {
		attrs = append(attrs, attribute.String(AttrArguments, string(c.Args)))
	}
	if len(c.Output) > 0 {
		attrs = append(attrs, attribute.String(AttrResult, string(c.Output)))
	}
	ctx, call := tracer.Start(ctx, SpanExecuteTool+" "+c.Tool, trace.WithTimestamp(c.RequestedAt),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if failed(c.Status) {
		// The status only: a reason may quote the arguments or output.
		call.SetAttributes(attribute.String(AttrErrorType, c.Status))
		call.SetStatus(codes.Error, c.Status)
	}
	if p := c.Policy; p != nil {
		pattrs := appendSet(appendSet(appendSet(nil, AttrRule, c.Rule), AttrVerdict, c.Verdict), AttrPolicyVer, c.PolicyVersion)
		_, s := tracer.Start(ctx, SpanPolicy, trace.WithTimestamp(p.Start), trace.WithAttributes(pattrs...))
		s.End(trace.WithTimestamp(within(p.End, p.Start)))
	}
	if w := c.Wait; w != nil {
		emitWait(ctx, tracer, *w)
	}
	if r := c.Run; r != nil {
		_, s := tracer.Start(ctx, SpanRun+" "+c.Tool, trace.WithTimestamp(r.Start), trace.WithAttributes(
			attribute.String(AttrToolName, c.Tool), attribute.String(AttrExecution, c.Execution)))
		if failed(c.Status) {
			s.SetStatus(codes.Error, c.Status)
		}
		s.End(trace.WithTimestamp(within(r.End, r.Start)))
	}
	call.End(trace.WithTimestamp(within(c.FinishedAt, c.RequestedAt)))
}

func emitWait(ctx context.Context, tracer trace.Tracer, w Wait) {
	var attrs []attribute.KeyValue
	if len(w.Groups) > 0 {
		attrs = append(attrs, attribute.StringSlice(AttrGroups, w.Groups))
	}
	if len(w.Channels) > 0 {
		attrs = append(attrs, attribute.StringSlice(AttrChannels, w.Channels))
	}
	attrs = appendSet(attrs, AttrDecidedBy, w.DecidedBy)
	attrs = appendSet(attrs, AttrDecidedVia, w.Channel)
	attrs = appendSet(attrs, AttrOutcome, w.Outcome)
	_, s := tracer.Start(ctx, SpanWait, trace.WithTimestamp(w.Start), trace.WithAttributes(attrs...))
	for _, n := range w.Notices {
		name := EventReminder
		if n.Kind == "escalation" {
			name = EventEscalation
		}
		var eattrs []attribute.KeyValue
		if len(n.Groups) > 0 {
			eattrs = append(eattrs, attribute.StringSlice(AttrNoticeGroup, n.Groups))
		}
		s.AddEvent(name, trace.WithTimestamp(n.At), trace.WithAttributes(eattrs...))
	}
	s.End(trace.WithTimestamp(within(w.End, w.Start)))
}

// failed says whether a call's status is a failure of the call: a
// denial or a timeout is an answer, not an error.
func failed(status string) bool {
	return status == "error" || status == "unknown"
}

func appendSet(attrs []attribute.KeyValue, key, value string) []attribute.KeyValue {
	if value == "" {
		return attrs
	}
	return append(attrs, attribute.String(key, value))
}

// within keeps an end from before its start (times from two clocks).
func within(end, start time.Time) time.Time {
	if end.Before(start) {
		return start
	}
	return end
}
