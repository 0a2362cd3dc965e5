package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/toolgate/toolgate/policy"
)

// sessionServer answers for one session workflow: its status and memo,
// and counts the queries that reach its worker.
type sessionServer struct {
	client.Client // nil: methods not written here panic
	status        enumspb.WorkflowExecutionStatus
	memo          map[string]*commonpb.Payload
	queries       int
}

func (s *sessionServer) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: s.status, Memo: &commonpb.Memo{Fields: s.memo},
	}}, nil
}

func (s *sessionServer) QueryWorkflowWithOptions(context.Context, *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error) {
	s.queries++
	return nil, context.DeadlineExceeded // a busy worker
}

func shownSticky(t *testing.T, byKey map[string]*policy.Decision) map[string]*commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(byKey)
	require.NoError(t, err)
	return map[string]*commonpb.Payload{"sticky": p}
}

func TestStickyDecisionsAreReadFromTheSessionsMemoWithoutAQuery(t *testing.T) {
	approved := &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "session"}
	lookup := StickyLookup{WorkflowID: "toolgate/session/s1", Query: "sticky", Memo: "sticky"}

	s := &sessionServer{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, memo: shownSticky(t, map[string]*policy.Decision{"write": approved})}
	a := &Activities{Client: s}
	got := a.lookupSticky(context.Background(), lookup, "write").Sticky
	require.NotNil(t, got)
	assert.Equal(t, "alice", got.DecidedBy)
	assert.Nil(t, a.lookupSticky(context.Background(), lookup, "shell").Sticky, "no decision for that key")
	assert.Zero(t, s.queries, "the session's worker is not asked")

	s.status = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	assert.Nil(t, a.lookupSticky(context.Background(), lookup, "write").Sticky, "an ended session's decisions are gone")

	s.status, s.memo = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
	assert.Nil(t, a.lookupSticky(context.Background(), lookup, "write").Sticky)
	assert.Equal(t, 1, s.queries, "a session that does not show them is asked")
}
