// Package telemetry builds a process's OpenTelemetry trace and meter
// providers from the standard OTEL_* variables (or toolgate's
// --otel-endpoint flag), with OTLP exporters, and the Temporal SDK's
// tracing interceptor over them (temporal.go). It is off unless an OTLP
// endpoint is given: off, it builds nothing and starts no goroutine, and
// New returns nil.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Environment variables toolgate reads beside the exporters' own
// (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _CERTIFICATE, ... are read by
// the exporters themselves).
const (
	EnvEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	EnvProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesExporter  = "OTEL_TRACES_EXPORTER"
	EnvMetricsExporter = "OTEL_METRICS_EXPORTER"
	EnvSDKDisabled     = "OTEL_SDK_DISABLED"
	// EnvCaptureContent=true puts a call's arguments and output (after
	// the policy's redaction) in its execute_tool span. Off by default.
	EnvCaptureContent = "TOOLGATE_OTEL_CAPTURE_CONTENT"
)

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL that toolgate exports with.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Options say how to build the providers.
type Options struct {
	// Endpoint is the OTLP endpoint's base URL (--otel-endpoint, e.g.
	// http://127.0.0.1:4318); it turns telemetry on and overrides
	// OTEL_EXPORTER_OTLP_ENDPOINT. Empty: the environment decides.
	Endpoint string
	// Service is service.name unless OTEL_SERVICE_NAME says otherwise.
	// Default "toolgate".
	Service string
	// CaptureContent opts in to arguments and outputs in spans, as
	// TOOLGATE_OTEL_CAPTURE_CONTENT=true does.
	CaptureContent bool
	// Getenv reads the environment; nil: os.Getenv.
	Getenv func(string) string
	// MetricInterval is how often metrics are exported; zero: the
	// exporter's default (OTEL_METRIC_EXPORT_INTERVAL, else 60 s).
	MetricInterval time.Duration
}

// Telemetry is what a process exports with. A nil *Telemetry is off.
type Telemetry struct {
	// TracerProvider is nil when traces are off (OTEL_TRACES_EXPORTER=none).
	TracerProvider *sdktrace.TracerProvider
	// MeterProvider is nil when metrics are off (OTEL_METRICS_EXPORTER=none).
	MeterProvider *sdkmetric.MeterProvider
	// CaptureContent: an operator opted in to arguments and outputs in
	// spans.
	CaptureContent bool
	// Endpoint and Protocol say where it exports, for the logs.
	Endpoint, Protocol string
}

// InstrumentationName names toolgate's tracer and meter.
const InstrumentationName = "github.com/toolgate/toolgate"

// On reports whether the environment (or endpoint, the flag) turns
// telemetry on.
func On(endpoint string, getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(getenv(EnvSDKDisabled), "true") {
		return false
	}
	return endpoint != "" || getenv(EnvEndpoint) != "" || getenv(EnvTracesEndpoint) != "" || getenv(EnvMetricsEndpoint) != ""
}

// New builds the providers, or returns nil when telemetry is off.
func New(ctx context.Context, o Options) (*Telemetry, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if !On(o.Endpoint, getenv) {
		return nil, nil
	}
	protocol := getenv(EnvProtocol)
	if protocol == "" {
		protocol = ProtocolHTTP // the specification's default
	}
	if protocol != ProtocolHTTP && protocol != ProtocolGRPC {
		return nil, fmt.Errorf("%s=%s: toolgate exports with %s or %s", EnvProtocol, protocol, ProtocolHTTP, ProtocolGRPC)
	}
	var base *url.URL
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("--otel-endpoint %q: want an http(s) URL such as http://127.0.0.1:4318", o.Endpoint)
		}
		base = u
	}
	service := o.Service
	if service == "" {
		service = "toolgate"
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the default name.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", service)), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &Telemetry{
		CaptureContent: o.CaptureContent || strings.EqualFold(getenv(EnvCaptureContent), "true"),
		Protocol:       protocol,
		Endpoint:       firstOf(o.Endpoint, getenv(EnvTracesEndpoint), getenv(EnvEndpoint)),
	}
	if getenv(EnvTracesExporter) != "none" {
		exp, err := traceExporter(ctx, protocol, base)
		if err != nil {
			return nil, err
		}
		t.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	}
	if getenv(EnvMetricsExporter) != "none" {
		exp, err := metricExporter(ctx, protocol, base)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, err
		}
		var readerOpts []sdkmetric.PeriodicReaderOption
		if o.MetricInterval > 0 {
			readerOpts = append(readerOpts, sdkmetric.WithInterval(o.MetricInterval))
		}
		t.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, readerOpts...)), sdkmetric.WithResource(res))
	}
	return t, nil
}

func traceExporter(ctx context.Context, protocol string, base *url.URL) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if base != nil {
			opts = append(opts, otlptracegrpc.WithEndpoint(base.Host))
			if base.Scheme == "http" {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		if base != nil {
			opts = append(opts, otlptracehttp.WithEndpoint(base.Host), otlptracehttp.WithURLPath(signalPath(base, "traces")))
			if base.Scheme == "http" {
				opts = append(opts, otlptracehttp.WithInsecure())
			}
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return exp, nil
}

func metricExporter(ctx context.Context, protocol string, base *url.URL) (sdkmetric.Exporter, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	if protocol == ProtocolGRPC {
		var opts []otlpmetricgrpc.Option
		if base != nil {
			opts = append(opts, otlpmetricgrpc.WithEndpoint(base.Host))
			if base.Scheme == "http" {
				opts = append(opts, otlpmetricgrpc.WithInsecure())
			}
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		var opts []otlpmetrichttp.Option
		if base != nil {
			opts = append(opts, otlpmetrichttp.WithEndpoint(base.Host), otlpmetrichttp.WithURLPath(signalPath(base, "metrics")))
			if base.Scheme == "http" {
				opts = append(opts, otlpmetrichttp.WithInsecure())
			}
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP metric exporter: %w", err)
	}
	return exp, nil
}

// signalPath appends /v1/<signal> to a base URL's path, as the
// specification says for OTEL_EXPORTER_OTLP_ENDPOINT.
func signalPath(base *url.URL, signal string) string {
	return strings.TrimSuffix(base.Path, "/") + "/v1/" + signal
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Tracer is toolgate's tracer, or nil when traces are off.
func (t *Telemetry) Tracer() trace.Tracer {
	if t == nil || t.TracerProvider == nil {
		return nil
	}
	return t.TracerProvider.Tracer(InstrumentationName)
}

// Meter is toolgate's meter, or nil when metrics are off.
func (t *Telemetry) Meter() metric.Meter {
	if t == nil || t.MeterProvider == nil {
		return nil
	}
	return t.MeterProvider.Meter(InstrumentationName)
}

// Shutdown flushes what is buffered and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.TracerProvider != nil {
		errs = append(errs, t.TracerProvider.Shutdown(ctx))
	}
	if t.MeterProvider != nil {
		errs = append(errs, t.MeterProvider.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
