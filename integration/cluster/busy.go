package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
)

// busyWorkflowLine matches the history service's count of requests it
// refused because their workflow was busy (its lock not free before the
// caller's deadline), by operation.
var busyWorkflowLine = regexp.MustCompile(`^service_errors_resource_exhausted\{.*\boperation="([^"]+)".*\bresource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW".*\} ([0-9.e+]+)$`)

// BusyWorkflowRefusals reads, from the history service's metrics, how many
// requests it refused as BusyWorkflow since it started, by operation (the
// server's own fault counter; clients retry such refusals, so they show
// only as time).
func (c *Cluster) BusyWorkflowRefusals(ctx context.Context) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.HistoryMetrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the history service's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the history service's metrics: %s", resp.Status)
	}
	counts := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := busyWorkflowLine.FindStringSubmatch(sc.Text()); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return nil, fmt.Errorf("history metrics: %q: %w", sc.Text(), err)
			}
			counts[m[1]] += int(v)
		}
	}
	return counts, sc.Err()
}
