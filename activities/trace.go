package activities

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"

	"github.com/toolgate/toolgate/calltrace"
	"github.com/toolgate/toolgate/policy"
)

// Tracing is how a worker exports its calls' spans.
type Tracing struct {
	// Tracer emits the spans. Required.
	Tracer trace.Tracer
	// CaptureContent puts a call's arguments (redacted by the policy's
	// output middleware first) and output in its execute_tool span.
	CaptureContent bool
}

// TraceSettings tell a call's workflow, through its recorded evaluation,
// that it emits its spans and what they may hold.
type TraceSettings struct {
	// Content: the arguments and output go to the spans.
	Content bool `json:"content,omitempty"`
}

func (t *Tracing) settings() *TraceSettings {
	if t == nil || t.Tracer == nil {
		return nil
	}
	return &TraceSettings{Content: t.CaptureContent}
}

// TraceCall emits a finished call's spans (package calltrace). A worker
// whose tracing is off since the call's evaluation emits nothing. It
// never fails the call: a span that cannot be built is only lost.
func (a *Activities) TraceCall(ctx context.Context, c calltrace.Call) error {
	t := a.Tracing
	if t == nil || t.Tracer == nil {
		return nil
	}
	switch {
	case !t.CaptureContent:
		c.Args, c.Output = nil, nil
	case len(c.Args) > 0:
		args, err := a.redact(ctx, policy.Call{ID: c.CallID, Session: c.Session, Tool: c.Tool, Requester: c.Requester}, c.Args)
		if err != nil {
			// Unredacted arguments never go out: the span goes without.
			activity.GetLogger(ctx).Warn("Call's arguments left out of its span: redaction failed", "callID", c.CallID, "error", err)
			args = nil
		}
		c.Args = args
	}
	calltrace.Emit(t.Tracer, c)
	return nil
}
