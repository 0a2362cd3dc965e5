// Package metrics exposes the Temporal SDK's metrics and toolgate's own in
// Prometheus form, and to an OpenTelemetry meter when OTLP export is on.
// The SDK and toolgate's workflows and activities write through one
// client.MetricsHandler (toolgate's names are in workflows.Metric* and
// activities.Metric*); HTTP serves them at /metrics.
package metrics

import (
	"io"
	"net/http"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/uber-go/tally/v4"
	"github.com/uber-go/tally/v4/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	sdkotel "go.temporal.io/sdk/contrib/opentelemetry"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// Metrics is one process's metrics registry.
type Metrics struct {
	// Handler goes into client.Options.MetricsHandler.
	Handler client.MetricsHandler
	// HTTP serves the Prometheus text format.
	HTTP   http.Handler
	closer io.Closer
}

// New returns a registry with Go runtime metrics, ready for the SDK.
func New() *Metrics { return NewWithMeter(nil, nil) }

// NewWithMeter is New whose handler also writes every metric to meter
// (OTLP export); nil meter: Prometheus alone. onError hears the meter's
// errors (nil: they are dropped; the SDK's default panics).
func NewWithMeter(meter metric.Meter, onError func(error)) *Metrics {
	reg := prom.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reporter := prometheus.NewReporter(prometheus.Options{Registerer: reg, DefaultTimerType: prometheus.HistogramTimerType})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       prometheus.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, time.Second)
	m := &Metrics{Handler: sdktally.NewMetricsHandler(scope), HTTP: reporter.HTTPHandler(), closer: closer}
	if meter != nil {
		if onError == nil {
			onError = func(error) {}
		}
		otel := sdkotel.NewMetricsHandler(sdkotel.MetricsHandlerOptions{Meter: meter, OnError: onError, UseMonotonicCounters: true})
		m.Handler = fanout{m.Handler, otel}
	}
	return m
}

// Close flushes and stops the registry.
func (m *Metrics) Close() error { return m.closer.Close() }
