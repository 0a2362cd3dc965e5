package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/telemetry"
)

// otelSetup is a process's OpenTelemetry: its flags, and what they built.
type otelSetup struct {
	endpoint       string
	captureContent bool
	// serverTraces lets toolgate dev's embedded Temporal server read the
	// OTEL_* variables too (its own spans: tens of MB a minute).
	serverTraces bool
	// tel is nil while telemetry is off.
	tel *telemetry.Telemetry
	// propagate carries a caller's trace context (a hook's TRACEPARENT)
	// to Temporal without exporting anything.
	propagate bool
}

// add adds --otel-endpoint and --otel-capture-content.
func (o *otelSetup) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.endpoint, "otel-endpoint", "", "export traces and metrics over OTLP to this base URL, e.g. http://127.0.0.1:4318 (default: off, unless OTEL_EXPORTER_OTLP_ENDPOINT is set; OTEL_EXPORTER_OTLP_PROTOCOL=grpc for gRPC); docs/observability.md")
	f.BoolVar(&o.captureContent, "otel-capture-content", false, "put each call's arguments (after the policy's redaction) and output in its span (env "+telemetry.EnvCaptureContent+"=true); off: no argument or output in any span")
}

// start builds the providers when telemetry is on; the returned stop
// flushes them.
func (o *otelSetup) start(ctx context.Context, logger *zap.Logger) (stop func(), err error) {
	tel, err := telemetry.New(ctx, telemetry.Options{Endpoint: o.endpoint, CaptureContent: o.captureContent})
	if err != nil {
		return nil, usageError("%v", err)
	}
	if tel == nil {
		return func() {}, nil
	}
	o.tel = tel
	logger.Info("OpenTelemetry export on", zap.String("endpoint", tel.Endpoint), zap.String("protocol", tel.Protocol),
		zap.Bool("traces", tel.TracerProvider != nil), zap.Bool("metrics", tel.MeterProvider != nil), zap.Bool("content", tel.CaptureContent))
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			logger.Warn("OpenTelemetry export: flush at exit failed", zap.Error(err))
		}
	}, nil
}

// tracing is the worker's, or nil when traces are off.
func (o *otelSetup) tracing() *activities.Tracing {
	t := o.tel.Tracer()
	if t == nil {
		return nil
	}
	return &activities.Tracing{Tracer: t, CaptureContent: o.tel.CaptureContent}
}

// interceptor is the SDK's tracing interceptor for the Temporal client
// and its workers (telemetry.TemporalInterceptor), or nil when this
// process neither traces nor carries a caller's trace.
func (o *otelSetup) interceptor() (interceptor.ClientInterceptor, error) {
	tracer := o.tel.TemporalTracer()
	if tracer == nil {
		if !o.propagate {
			return nil, nil
		}
		// A no-op tracer's spans keep their parent's context: the
		// header carries the caller's own span.
		tracer = noop.NewTracerProvider().Tracer(telemetry.TemporalTracerName)
	}
	return telemetry.TemporalInterceptor(tracer)
}

// hookTraceContext is the TRACEPARENT an agent set for the hook command.
func hookTraceContext() bool { return os.Getenv("TRACEPARENT") != "" }
