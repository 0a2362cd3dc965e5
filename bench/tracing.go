package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/calltrace"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/telemetry"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

// tracedQueue is the task queue of the bench's toolgate worker that
// exports traces and metrics over OTLP, as `toolgate worker
// --otel-endpoint` does.
const tracedQueue = "toolgate-bench-traced"

// TraceExport is what the traced worker sent to the bench's OTLP
// receiver (an in-process HTTP server that discards every export).
type TraceExport struct {
	// Calls: traced calls made (warm-up, check and latency case).
	Calls          int64 `json:"calls"`
	TraceRequests  int64 `json:"trace_requests"`
	TraceBytes     int64 `json:"trace_bytes"`
	MetricRequests int64 `json:"metric_requests"`
	MetricBytes    int64 `json:"metric_bytes"`
	// CheckedSpans: the spans of the checked call's trace that reached
	// the receiver, its execute_tool span and the SDK interceptor's.
	CheckedSpans int `json:"checked_spans"`
}

// tracedWorker is a toolgate worker, and the client of its calls, with
// OpenTelemetry on.
type tracedWorker struct {
	calls    *tgclient.Client
	tel      *telemetry.Telemetry
	receiver *otlpReceiver
	made     atomic.Int64 // calls made
	stop     func()
}

// noEnv is an empty environment: the traced worker exports with the
// defaults a user gets, whatever OTEL_* variables this shell sets.
func noEnv(string) string { return "" }

// startTracedWorker sets up a client like opts and a toolgate worker on
// it as `toolgate worker --otel-endpoint` does (the same telemetry,
// metrics handler, tracing interceptor and worker tracing), exporting
// over OTLP/HTTP to an in-process receiver.
func startTracedWorker(ctx context.Context, opts client.Options, tools *tool.Registry, logger *zap.Logger) (*tracedWorker, error) {
	rcv := newOTLPReceiver()
	tel, err := telemetry.New(ctx, telemetry.Options{Endpoint: rcv.URL(), Getenv: noEnv})
	if err != nil {
		rcv.Close()
		return nil, err
	}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
		rcv.Close()
	}
	m := metrics.NewWithMeter(tel.Meter(), func(err error) { logger.Debug("OpenTelemetry metric", zap.Error(err)) })
	opts.MetricsHandler = m.Handler
	tracing, err := telemetry.TemporalInterceptor(tel.TemporalTracer())
	if err != nil {
		_ = m.Close()
		shutdown()
		return nil, err
	}
	opts.Interceptors = append(slices.Clone(opts.Interceptors), tracing)
	tc, err := client.Dial(opts)
	if err != nil {
		_ = m.Close()
		shutdown()
		return nil, err
	}
	w, err := worker.New(tc, worker.Options{TaskQueue: tracedQueue, Policy: benchPolicy{}, Tools: tools, Doors: benchDoors,
		Tracing: &activities.Tracing{Tracer: tel.Tracer(), CaptureContent: tel.CaptureContent}})
	if err == nil {
		err = w.Start()
	}
	if err != nil {
		tc.Close()
		_ = m.Close()
		shutdown()
		return nil, err
	}
	return &tracedWorker{
		calls: tgclient.New(tc, tracedQueue).WithDoor(benchDoor), tel: tel, receiver: rcv,
		// The providers flush last: the worker's last spans go out.
		stop: func() { w.Stop(); tc.Close(); _ = m.Close(); shutdown() },
	}, nil
}

func (b *runner) autoTraced(ctx context.Context) error {
	b.traced.made.Add(1)
	return callOn(ctx, b.traced.calls, b.session("auto-traced"), toolEcho)
}

// checkTraced makes one call on the traced worker, flushes, and reads
// what the receiver got: the call's execute_tool span must be there, in
// one trace with the SDK interceptor's spans, or the traced figures
// measure nothing.
func (b *runner) checkTraced(ctx context.Context, r *Report) error {
	id := "bench-traced-" + b.run
	b.traced.receiver.keep(true)
	defer b.traced.receiver.keep(false)
	b.traced.made.Add(1)
	res, err := b.traced.calls.Call(ctx, tgclient.CallRequest{Requester: benchAgent, CallID: id, Session: b.session("auto-traced"), Tool: toolEcho, Args: args})
	if err != nil {
		return err
	}
	if res.Status != workflows.StatusOK {
		return fmt.Errorf("call %s: %s: %s", id, res.Status, res.Reason)
	}
	if err := b.traced.tel.TracerProvider.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flush the traced worker's spans: %w", err)
	}
	spans, err := b.traced.receiver.keptSpans()
	if err != nil {
		return err
	}
	r.Traced.CheckedSpans, err = callTrace(spans, id)
	return err
}

// callTrace finds the call's execute_tool span among spans and counts
// the spans of its trace; the trace must hold a span of the SDK's tracing
// interceptor too (the client's StartWorkflow, whose header carried it).
func callTrace(spans []receivedSpan, callID string) (int, error) {
	var call *receivedSpan
	for i, s := range spans {
		if s.scope == telemetry.InstrumentationName && strings.HasPrefix(s.span.GetName(), calltrace.SpanExecuteTool+" ") && hasAttr(s, calltrace.AttrToolCallID, callID) {
			call = &spans[i]
			break
		}
	}
	if call == nil {
		return 0, fmt.Errorf("call %s: no %s span reached the OTLP receiver (%d spans did): the traced case measures nothing", callID, calltrace.SpanExecuteTool, len(spans))
	}
	n, sdk := 0, 0
	for _, s := range spans {
		if bytes.Equal(s.span.GetTraceId(), call.span.GetTraceId()) {
			n++
			if s.scope == telemetry.TemporalTracerName {
				sdk++
			}
		}
	}
	if sdk == 0 {
		return n, fmt.Errorf("call %s: its trace holds no span of the SDK's tracing interceptor: the traced case measures the call's spans alone", callID)
	}
	return n, nil
}

func hasAttr(s receivedSpan, key, value string) bool {
	for _, kv := range s.span.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue() == value
		}
	}
	return false
}

// exported flushes the traced worker's providers and reads what the
// receiver was sent so far.
func (b *runner) exported(ctx context.Context, r *Report) error {
	t, rcv := b.traced.tel, b.traced.receiver
	if err := t.TracerProvider.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flush the traced worker's spans: %w", err)
	}
	if err := t.MeterProvider.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flush the traced worker's metrics: %w", err)
	}
	e := &r.Traced
	e.Calls = b.traced.made.Load()
	e.TraceRequests, e.TraceBytes = rcv.traceRequests.Load(), rcv.traceBytes.Load()
	e.MetricRequests, e.MetricBytes = rcv.metricRequests.Load(), rcv.metricBytes.Load()
	if e.TraceRequests == 0 {
		return fmt.Errorf("the traced worker exported no spans")
	}
	return nil
}

func printTraced(w io.Writer, t TraceExport, ratio float64) {
	perCall := 0.0
	if t.Calls > 0 {
		perCall = float64(t.TraceBytes) / float64(t.Calls)
	}
	fmt.Fprintf(w, "tracing (OTLP/HTTP to an in-process receiver, default batching): auto-approved call traced / untraced: %.2f (p50); %d calls exported %d span batches, %.1f KiB (%.0f B/call), and %d metric exports; the checked call's trace held %d spans\n",
		ratio, t.Calls, t.TraceRequests, float64(t.TraceBytes)/1024, perCall, t.MetricRequests, t.CheckedSpans)
}
