package metrics

import (
	"time"

	"go.temporal.io/sdk/client"
)

// fanout writes every metric to each of its handlers: Prometheus (tally)
// and OpenTelemetry, when OTLP export is on.
type fanout []client.MetricsHandler

var _ client.MetricsHandler = fanout(nil)

func (f fanout) WithTags(tags map[string]string) client.MetricsHandler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithTags(tags)
	}
	return out
}

func (f fanout) Counter(name string) client.MetricsCounter {
	cs := make(counters, len(f))
	for i, h := range f {
		cs[i] = h.Counter(name)
	}
	return cs
}

func (f fanout) Gauge(name string) client.MetricsGauge {
	gs := make(gauges, len(f))
	for i, h := range f {
		gs[i] = h.Gauge(name)
	}
	return gs
}

func (f fanout) Timer(name string) client.MetricsTimer {
	ts := make(timers, len(f))
	for i, h := range f {
		ts[i] = h.Timer(name)
	}
	return ts
}

type counters []client.MetricsCounter

func (cs counters) Inc(d int64) {
	for _, c := range cs {
		c.Inc(d)
	}
}

type gauges []client.MetricsGauge

func (gs gauges) Update(v float64) {
	for _, g := range gs {
		g.Update(v)
	}
}

type timers []client.MetricsTimer

func (ts timers) Record(d time.Duration) {
	for _, t := range ts {
		t.Record(d)
	}
}
