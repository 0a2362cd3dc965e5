package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"

	"github.com/toolgate/toolgate/calltrace"
	"github.com/toolgate/toolgate/telemetry"
)

// TestCallTrace: the trace check passes only when the receiver was sent
// the call's execute_tool span in one trace with a span of the SDK's
// tracing interceptor, exported as the traced worker exports.
func TestCallTrace(t *testing.T) {
	ctx := context.Background()
	rcv := newOTLPReceiver()
	defer rcv.Close()
	tel, err := telemetry.New(ctx, telemetry.Options{Endpoint: rcv.URL(), Getenv: noEnv})
	require.NoError(t, err)
	defer func() { _ = tel.Shutdown(ctx) }()
	rcv.keep(true)

	spans, err := rcv.keptSpans()
	require.NoError(t, err)
	_, err = callTrace(spans, "c1")
	assert.ErrorContains(t, err, "no execute_tool span", "nothing exported: the check fails")

	// c1's spans under a StartWorkflow span, as the client's interceptor
	// starts it; c2's alone, its caller untraced.
	sctx, start := tel.TemporalTracer().Start(ctx, "StartWorkflow:toolgate.call")
	parent := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(sctx, parent)
	now := time.Now()
	calltrace.Emit(tel.Tracer(), calltrace.Call{Parent: parent, CallID: "c1", Tool: "echo", Session: "s", Execution: "server", Status: "ok",
		RequestedAt: now, FinishedAt: now.Add(time.Millisecond), Run: &calltrace.Step{Start: now, End: now.Add(time.Millisecond)}})
	start.End()
	calltrace.Emit(tel.Tracer(), calltrace.Call{CallID: "c2", Tool: "echo", Session: "s", Execution: "server", Status: "ok", RequestedAt: now, FinishedAt: now})
	require.NoError(t, tel.TracerProvider.ForceFlush(ctx))

	spans, err = rcv.keptSpans()
	require.NoError(t, err)
	n, err := callTrace(spans, "c1")
	require.NoError(t, err)
	assert.Equal(t, 3, n, "StartWorkflow, execute_tool and its run")
	_, err = callTrace(spans, "c2")
	assert.ErrorContains(t, err, "no span of the SDK's tracing interceptor")
	_, err = callTrace(spans, "c3")
	assert.ErrorContains(t, err, "no execute_tool span")
	assert.Positive(t, rcv.traceRequests.Load())
	assert.Positive(t, rcv.traceBytes.Load())

	rcv.keep(false)
	spans, err = rcv.keptSpans()
	require.NoError(t, err)
	assert.Empty(t, spans, "stopping keeping drops what was kept")
}
