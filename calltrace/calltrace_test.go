package calltrace

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func emitted(t *testing.T, c Call) map[string]tracetest.SpanStub {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	Emit(tp.Tracer("test"), c)
	out := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		out[s.Name] = s
	}
	return out
}

var t0 = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

// A call without a caller's trace is a trace of its own; a failed tool
// marks the call and its run as errors by status alone, never its reason.
func TestFailedCallWithoutCaller(t *testing.T) {
	spans := emitted(t, Call{
		CallID: "c1", Tool: "shell", Session: "s", Execution: "server", Verdict: "allow", Status: "error",
		RequestedAt: t0, FinishedAt: t0.Add(3 * time.Second),
		Policy: &Step{Start: t0, End: t0.Add(time.Millisecond)},
		Run:    &Step{Start: t0.Add(time.Second), End: t0.Add(2 * time.Second)},
	})
	require.Len(t, spans, 3)
	root := spans["execute_tool shell"]
	require.False(t, root.Parent.IsValid(), "a root span")
	require.Equal(t, codes.Error, root.Status.Code)
	require.Equal(t, "error", root.Status.Description)
	require.Equal(t, t0, root.StartTime)
	require.Equal(t, t0.Add(3*time.Second), root.EndTime)
	run := spans["toolgate.tool.run shell"]
	require.Equal(t, root.SpanContext.SpanID(), run.Parent.SpanID())
	require.Equal(t, codes.Error, run.Status.Code)
	require.Equal(t, time.Second, run.EndTime.Sub(run.StartTime))
}

// An approval wait carries its reminders and escalation as events, and
// a denial is no error.
func TestWaitEvents(t *testing.T) {
	spans := emitted(t, Call{
		Parent: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		CallID: "c2", Tool: "write_file", Session: "s", Execution: "server", Verdict: "ask", Status: "denied",
		RequestedAt: t0, FinishedAt: t0.Add(3 * time.Hour),
		Wait: &Wait{Step: Step{Start: t0, End: t0.Add(3 * time.Hour)}, Groups: []string{"ops"}, DecidedBy: "bob", Channel: "slack", Outcome: "denied",
			Notices: []Notice{{Kind: "reminder", At: t0.Add(time.Hour)}, {Kind: "escalation", At: t0.Add(2 * time.Hour), Groups: []string{"sre"}}}},
	})
	root := spans["execute_tool write_file"]
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", root.SpanContext.TraceID().String())
	require.Equal(t, codes.Unset, root.Status.Code)
	wait := spans["toolgate.approval.wait"]
	require.Len(t, wait.Events, 2)
	require.Equal(t, EventReminder, wait.Events[0].Name)
	require.Equal(t, EventEscalation, wait.Events[1].Name)
	require.Equal(t, t0.Add(2*time.Hour), wait.Events[1].Time)
}
