package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The history service's requests and its BusyWorkflow refusals are summed
// (the refusals by operation); other causes, other services' requests and
// other counters are not them.
func TestHistoryCountsAreReadFromTheHistoryMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# TYPE service_errors_resource_exhausted counter
service_errors_resource_exhausted{namespace="default",operation="DescribeWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 3
service_errors_resource_exhausted{namespace="other",operation="DescribeWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 2
service_errors_resource_exhausted{namespace="default",operation="SignalWithStartWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 1
service_errors_resource_exhausted{namespace="default",operation="StartWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 9
service_errors_entity_not_found{namespace="default",operation="DescribeWorkflowExecution",service_name="history"} 4
# TYPE service_requests counter
service_requests{namespace="default",operation="DescribeWorkflowExecution",service_name="history"} 120
service_requests{namespace="default",operation="RecordWorkflowTaskStarted",service_name="history"} 3e+03
service_requests{namespace="default",operation="StartWorkflowExecution",service_name="frontend"} 77
`)
	}))
	defer srv.Close()
	c := &Cluster{HistoryMetrics: srv.URL}
	got, err := c.HistoryCounts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, HistoryCounts{Requests: 3120, BusyWorkflow: map[string]int{"DescribeWorkflowExecution": 5, "SignalWithStartWorkflowExecution": 1}}, got)
}

// A metrics endpoint that does not answer is an error, not zero refusals.
func TestHistoryCountsFailWhenTheMetricsDoNotAnswer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := (&Cluster{HistoryMetrics: srv.URL}).HistoryCounts(context.Background())
	assert.ErrorContains(t, err, "404")
}
