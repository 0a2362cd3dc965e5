package telemetry

import (
	"fmt"

	"go.opentelemetry.io/otel/trace"
	sdkotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// TemporalTracerName names the tracer of the Temporal SDK's own spans
// (StartWorkflow, RunWorkflow, RunActivity, ...).
const TemporalTracerName = "temporal-sdk-go"

// TemporalTracer is the tracer of the Temporal SDK's spans, or nil when
// traces are off.
func (t *Telemetry) TemporalTracer() trace.Tracer {
	if t == nil || t.TracerProvider == nil {
		return nil
	}
	return t.TracerProvider.Tracer(TemporalTracerName)
}

// TemporalInterceptor is the SDK's tracing interceptor over tracer, for a
// Temporal client and the workers made from it. It puts the caller's span
// context (the context's) in every workflow's start header; queries are
// not traced (the inbox asks often, and a query may replay a whole call).
func TemporalInterceptor(tracer trace.Tracer) (interceptor.ClientInterceptor, error) {
	i, err := sdkotel.NewTracingInterceptor(sdkotel.TracerOptions{Tracer: tracer, DisableQueryTracing: true, AllowInvalidParentSpans: true})
	if err != nil {
		return nil, fmt.Errorf("tracing interceptor: %w", err)
	}
	return i, nil
}
