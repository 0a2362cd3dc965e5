package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

// HistoryCounts are counters of the history service since it started.
type HistoryCounts struct {
	// Requests is how many requests it served: a reading that did not
	// grow over a run did not see the run, so its zero refusals say
	// nothing.
	Requests int
	// BusyWorkflow is how many requests it refused because their
	// workflow was busy (its lock not free before the caller's deadline),
	// by operation. Clients retry such refusals, so they show only as
	// time.
	BusyWorkflow map[string]int
}

var (
	requestsLine     = regexp.MustCompile(`^service_requests\{.*\bservice_name="history".*\} ([0-9.e+]+)$`)
	busyWorkflowLine = regexp.MustCompile(`^service_errors_resource_exhausted\{.*\boperation="([^"]+)".*\bresource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW".*\} ([0-9.e+]+)$`)
)

// MetricsFlush is how long the history service takes to publish what it
// counted: its metrics (tally) are reported once a second. Wait this long
// after a run before reading its counts.
const MetricsFlush = 2 * time.Second

// HistoryCounts reads the history service's Prometheus metrics.
func (c *Cluster) HistoryCounts(ctx context.Context) (HistoryCounts, error) {
	counts := HistoryCounts{BusyWorkflow: map[string]int{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.HistoryMetrics, nil)
	if err != nil {
		return counts, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return counts, fmt.Errorf("read the history service's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counts, fmt.Errorf("read the history service's metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := requestsLine.FindStringSubmatch(line); m != nil {
			n, err := counter(line, m[1])
			if err != nil {
				return counts, err
			}
			counts.Requests += n
		}
		if m := busyWorkflowLine.FindStringSubmatch(line); m != nil {
			n, err := counter(line, m[2])
			if err != nil {
				return counts, err
			}
			counts.BusyWorkflow[m[1]] += n
		}
	}
	return counts, sc.Err()
}

// counter is a counter line's value.
func counter(line, value string) (int, error) {
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return 0, fmt.Errorf("history metrics: %q: %w", line, err)
	}
	return int(v), nil
}
