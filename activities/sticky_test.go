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

// sessionServer answers for one session workflow: its status and memo.
type sessionServer struct {
	client.Client // nil: methods not written here panic
	status        enumspb.WorkflowExecutionStatus
	memo          map[string]*commonpb.Payload
}

func (s *sessionServer) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: s.status, Memo: &commonpb.Memo{Fields: s.memo},
	}}, nil
}

func memoOf(t *testing.T, news SessionNews, owner string) map[string]*commonpb.Payload {
	n, err := converter.GetDefaultDataConverter().ToPayload(news)
	require.NoError(t, err)
	o, err := converter.GetDefaultDataConverter().ToPayload(owner)
	require.NoError(t, err)
	return map[string]*commonpb.Payload{MemoNews: n, MemoOwner: o}
}

func TestTheSessionsWordIsReadFromItsMemo(t *testing.T) {
	approved := policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", Channel: "session"}
	news := SessionNews{Revision: 3, Sticky: []KeyedDecision{{Key: "write", Since: 3, Decision: approved}}}
	s := &sessionServer{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, memo: memoOf(t, news, "agent-a")}
	a := &Activities{Client: s}

	word := a.readSession(context.Background(), "toolgate/session/s1", "write")
	require.NotNil(t, word.Sticky)
	assert.Equal(t, "alice", word.Sticky.DecidedBy)
	assert.Equal(t, "agent-a", word.Owner)
	assert.Nil(t, a.readSession(context.Background(), "toolgate/session/s1", "shell").Sticky, "no decision for that key")

	s.status = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	assert.Nil(t, a.readSession(context.Background(), "toolgate/session/s1", "write").Sticky, "a closed session's sticky decisions are gone")

	ended := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by root", DecidedBy: "root"}
	news.End = ended
	s.memo = memoOf(t, news, "agent-a")
	word = a.readSession(context.Background(), "toolgate/session/s1", "write")
	require.NotNil(t, word.End, "a closed session that ended stays ended")
	assert.Equal(t, "root", word.End.DecidedBy)
}
