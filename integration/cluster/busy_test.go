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

// The history service's BusyWorkflow refusals are summed by operation;
// other causes, and other counters, are not them.
func TestBusyWorkflowRefusalsAreReadFromTheHistoryMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# TYPE service_errors_resource_exhausted counter
service_errors_resource_exhausted{namespace="default",operation="DescribeWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 3
service_errors_resource_exhausted{namespace="other",operation="DescribeWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 2
service_errors_resource_exhausted{namespace="default",operation="SignalWithStartWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 1
service_errors_resource_exhausted{namespace="default",operation="StartWorkflowExecution",resource_exhausted_cause="RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT",resource_exhausted_scope="RESOURCE_EXHAUSTED_SCOPE_NAMESPACE",service_name="history"} 9
service_errors_entity_not_found{namespace="default",operation="DescribeWorkflowExecution",service_name="history"} 4
`)
	}))
	defer srv.Close()
	c := &Cluster{HistoryMetrics: srv.URL}
	got, err := c.BusyWorkflowRefusals(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"DescribeWorkflowExecution": 5, "SignalWithStartWorkflowExecution": 1}, got)
}
