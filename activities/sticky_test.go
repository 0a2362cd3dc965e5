package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
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
	err           error // what the describe fails with, if set
}

func (s *sessionServer) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if s.err != nil {
		return nil, s.err
	}
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

	word := readSession(t, a, "write")
	require.NotNil(t, word.Sticky)
	assert.Equal(t, "alice", word.Sticky.DecidedBy)
	assert.Equal(t, "agent-a", word.Owner)
	assert.Nil(t, readSession(t, a, "shell").Sticky, "no decision for that key")

	s.status = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	assert.Nil(t, readSession(t, a, "write").Sticky, "a closed session's sticky decisions are gone")

	ended := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by root", DecidedBy: "root"}
	news.End = ended
	s.memo = memoOf(t, news, "agent-a")
	word = readSession(t, a, "write")
	require.NotNil(t, word.End, "a closed session that ended stays ended")
	assert.Equal(t, "root", word.End.DecidedBy)
}

func readSession(t *testing.T, a *Activities, key string) SessionWord {
	t.Helper()
	word, err := a.readSession(context.Background(), "toolgate/session/s1", key)
	require.NoError(t, err)
	return word
}

// The owner decides whether a call may run at all, so a session that
// cannot be read is an error (the evaluation is retried), never "nobody's".
func TestAnUnreadableSessionIsAnErrorNotAnOwnerlessSession(t *testing.T) {
	a := &Activities{Client: &sessionServer{err: serviceerror.NewNotFound("no such workflow")}}
	word := readSession(t, a, "write")
	assert.Equal(t, SessionWord{}, word, "a session never opened says nothing")

	a.Client = &sessionServer{err: serviceerror.NewUnavailable("frontend down")}
	_, err := a.readSession(context.Background(), "toolgate/session/s1", "write")
	require.ErrorContains(t, err, "read session toolgate/session/s1")
}

// Evaluate reads the session's owner for an auto-approved call too: the
// workflow denies a call into another agent's session on every path.
func TestEvaluateReadsTheOwnerOfAnAutoApprovedCall(t *testing.T) {
	s := &sessionServer{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, memo: memoOf(t, SessionNews{}, "agentA")}
	a := &Activities{Client: s, Policy: policy.Base{}, Tools: registry(t)}
	var ev Evaluation
	in := EvaluateInput{
		Call:    policy.Call{ID: "c1", Session: "s1", Tool: "big", Args: []byte(`{}`), Requester: "agentB"},
		Session: "toolgate/session/s1",
	}
	require.NoError(t, run(t, a, a.Evaluate, in, &ev))
	require.Nil(t, ev.Ask, "policy.Base approves without asking")
	assert.Equal(t, "agentA", ev.SessionOwner)

	// A worker that has not read this session's owner yet (another one,
	// or this one past knownTTL) must read it.
	down := &Activities{Client: &sessionServer{err: serviceerror.NewUnavailable("frontend down")}, Policy: policy.Base{}, Tools: registry(t)}
	err := run(t, down, down.Evaluate, in, &ev)
	require.Error(t, err, "an owner that cannot be read fails the evaluation, which Temporal retries")
}
