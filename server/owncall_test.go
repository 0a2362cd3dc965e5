package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// oneCallTemporal holds one running agent-executed call, waiting for a
// person: its history starts with the call, and its claim update refuses
// as the workflow's validator does. Every other workflow ID names nothing.
type oneCallTemporal struct {
	client.Client // nil: methods not written here panic
	call          policy.Call
}

func (f *oneCallTemporal) GetWorkflowHistory(_ context.Context, id, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	if id != workflows.CallWorkflowID(f.call.ID) {
		return &oneEvent{}
	}
	input, err := converter.GetDefaultDataConverter().ToPayloads(workflows.CallInput{Call: f.call})
	if err != nil {
		panic(err)
	}
	return &oneEvent{&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
		WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: input},
	}}}
}

func (f *oneCallTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, serviceerror.NewNotFound("workflow not found")
}

func (f *oneCallTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if o.WorkflowID != workflows.CallWorkflowID(f.call.ID) {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	req := o.Args[0].(workflows.ClaimRequest)
	if req.By != f.call.Requester {
		return nil, temporal.NewApplicationError("only the agent that requested call "+f.call.ID+" may take its approval", workflows.ErrTypeNotAuthorized)
	}
	return nil, temporal.NewApplicationError("call "+f.call.ID+" is not approved and waiting for its run (status pending)", workflows.ErrTypeNotWaiting)
}

// An agent that claims or reports another agent's call gets the answer a
// call that does not exist gets, byte for byte: nothing tells it the call
// is there. The call's own agent is told why, and so is an admin, who may
// read every call.
func TestAnotherAgentsCallIsAnsweredAsAnUnknownOne(t *testing.T) {
	tokens, err := NewTokens([]TokenEntry{
		{Name: "agent-1", Role: RoleAgent, SHA256: HashToken("agent-1-token")},
		{Name: "agent-2", Role: RoleAgent, SHA256: HashToken("agent-2-token")},
		{Name: "root", Role: RoleAdmin, SHA256: HashToken("root-token")},
	})
	require.NoError(t, err)
	call := policy.Call{ID: "c1", Session: "s1", Tool: "deploy", Requester: "agent-1", Execution: policy.ExecutionAgent, Args: json.RawMessage(`{}`)}
	withCall := New(Config{Calls: tgclient.New(&oneCallTemporal{call: call}, "").WithDoor(testDoor), Tokens: tokens})
	nothing := New(Config{Calls: tgclient.New(&oneCallTemporal{call: policy.Call{ID: "elsewhere", Requester: "agent-1"}}, "").WithDoor(testDoor), Tokens: tokens})

	for _, req := range []struct{ path, body string }{
		{"/v1/calls/c1/claim", `{"run":"toolu_1"}`},
		{"/v1/calls/c1/claim", `{"run":"toolu_1","no_report":true}`},
		{"/v1/calls/c1/report", `{"output":{"deployed":true}}`},
		{"/v1/calls/c1/report", `{"error":"failed"}`},
	} {
		others := apiCall(withCall, "agent-2-token", "POST", req.path, req.body)
		unknown := apiCall(nothing, "agent-2-token", "POST", req.path, req.body)
		assert.Equal(t, http.StatusNotFound, unknown.Code, "%s: %s", req.path, unknown.Body.String())
		assert.Equal(t, unknown.Code, others.Code, "%s %s: %s", req.path, req.body, others.Body.String())
		assert.Equal(t, unknown.Body.String(), others.Body.String(), "%s %s", req.path, req.body)
		code, msg := apiErrorOf(t, others)
		assert.Equal(t, "unknown_call", code)
		assert.Equal(t, `unknown call "c1"`, msg)
	}

	rec := apiCall(withCall, "agent-1-token", "POST", "/v1/calls/c1/claim", `{"run":"toolu_1"}`)
	assert.Equal(t, http.StatusConflict, rec.Code, "its own agent hears why: %s", rec.Body.String())
	code, _ := apiErrorOf(t, rec)
	assert.Equal(t, "not_waiting", code)

	rec = apiCall(withCall, "root-token", "POST", "/v1/calls/c1/report", `{"output":1}`)
	assert.Equal(t, http.StatusForbidden, rec.Code, "an admin reads every call, and hears why: %s", rec.Body.String())
	_, msg := apiErrorOf(t, rec)
	assert.Contains(t, msg, "only the agent that requested call c1 may report it")

	// A bad body is refused before any call is looked at, alike.
	bad := apiCall(withCall, "agent-2-token", "POST", "/v1/calls/c1/report", `{}`)
	assert.Equal(t, http.StatusBadRequest, bad.Code, bad.Body.String())
	assert.Equal(t, apiCall(nothing, "agent-2-token", "POST", "/v1/calls/c1/report", `{}`).Body.String(), bad.Body.String())
}
