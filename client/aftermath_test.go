package client

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// recordTemporal is Temporal with one call, as its query answers, and
// the records started for it: a second start is refused as Temporal's
// WorkflowIDReusePolicy refuses it.
type recordTemporal struct {
	client.Client
	call    workflows.CallState
	started []client.StartWorkflowOptions
}

func (f *recordTemporal) QueryWorkflow(_ context.Context, id, _, query string, _ ...any) (converter.EncodedValue, error) {
	if id != workflows.CallWorkflowID(f.call.Call.ID) || query != workflows.QueryCall {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(f.call)
	if err != nil {
		return nil, err
	}
	return client.NewValue(p), nil
}

func (f *recordTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	if len(f.started) > 0 {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "", "")
	}
	f.started = append(f.started, o)
	rec := args[0].(workflows.RanAfterEnd)
	rec.CallStatus, rec.DecidedBy = f.call.Result.Status, f.call.Result.DecidedBy
	return recordRun{rec: rec}, nil
}

type recordRun struct {
	client.WorkflowRun
	rec workflows.RanAfterEnd
}

func (r recordRun) Get(_ context.Context, v any) error {
	*v.(*workflows.RanAfterEnd) = r.rec
	return nil
}
func (r recordRun) GetWithOptions(ctx context.Context, v any, _ client.WorkflowRunGetOptions) error {
	return r.Get(ctx, v)
}

// deniedUserCall is an agent-executed call of a `user: true` rule, run by
// agent-1 for dana, that alice denied.
func deniedUserCall() workflows.CallState {
	return workflows.CallState{
		Call: policy.Call{ID: "c1", Session: "s1", Tool: "Edit", Args: json.RawMessage(`{"file_path":"a.go"}`),
			Requester: "agent-1", ActingUser: "dana", Execution: policy.ExecutionAgent},
		Status:  workflows.StatusDenied,
		Request: &policy.ApprovalRequest{Rule: "edits", User: true},
		Result:  &workflows.Result{CallID: "c1", Status: workflows.StatusDenied, DecidedBy: "alice"},
	}
}

func danasRun() workflows.RanAfterEnd {
	return workflows.RanAfterEnd{User: "dana", Via: "Claude Code's permission prompt",
		Args: json.RawMessage(`{"file_path":"a.go"}`), Output: json.RawMessage(`"ok"`)}
}

func TestARunAfterTheEndIsRecordedOnceByTheRequester(t *testing.T) {
	f := &recordTemporal{call: deniedUserCall()}
	c := New(f, "").WithDoor(testDoor)

	rec, err := c.RecordRanAfterEnd(context.Background(), "c1", "agent-1", danasRun())

	require.NoError(t, err)
	assert.Equal(t, "c1", rec.CallID)
	assert.Equal(t, "agent-1", rec.Requester)
	assert.Equal(t, "alice", rec.DecidedBy)
	require.Len(t, f.started, 1)
	assert.Equal(t, "toolgate/call/c1/after", f.started[0].ID, "beside the call, never a call's ID")

	_, err = c.RecordRanAfterEnd(context.Background(), "c1", "agent-1", danasRun())
	var refused *RefusedError
	require.ErrorAs(t, err, &refused, "a second record")
	assert.Equal(t, workflows.ErrTypeAlreadyRecorded, refused.Type)
	assert.Contains(t, refused.Message, "call c1 already has its record")
}

func TestARecordTheCallDoesNotBearOutIsRefusedBeforeAnythingStarts(t *testing.T) {
	for _, tc := range []struct {
		name, requester, user string
		change                func(*workflows.CallState)
		errType, says         string
	}{
		{"not the requester", "agent-2", "dana", nil, workflows.ErrTypeNotAuthorized, "only the agent that requested call c1"},
		{"not the acting user", "agent-1", "mallory", nil, workflows.ErrTypeNotAuthorized, "the person running its agent is dana, not mallory"},
		{"the call did not end denied", "agent-1", "dana", func(st *workflows.CallState) {
			st.Status, st.Result.Status = workflows.StatusOK, workflows.StatusOK
		}, workflows.ErrTypeNotWaiting, "has not ended denied or timed out (status ok)"},
		{"the call still waits", "agent-1", "dana", func(st *workflows.CallState) {
			st.Status, st.Result = workflows.StatusPending, nil
		}, workflows.ErrTypeNotWaiting, "(status pending)"},
		{"the rule is not user: true", "agent-1", "dana", func(st *workflows.CallState) { st.Request.User = false }, workflows.ErrTypeNotAuthorized, "user: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := deniedUserCall()
			if tc.change != nil {
				tc.change(&st)
			}
			f := &recordTemporal{call: st}
			rec := danasRun()
			rec.User = tc.user

			_, err := New(f, "").WithDoor(testDoor).RecordRanAfterEnd(context.Background(), "c1", tc.requester, rec)

			var refused *RefusedError
			require.ErrorAs(t, err, &refused)
			assert.Equal(t, tc.errType, refused.Type)
			assert.Contains(t, refused.Message, tc.says)
			assert.Empty(t, f.started, "nothing is written")
		})
	}

	f := &recordTemporal{call: deniedUserCall()}
	_, err := New(f, "").WithDoor(testDoor).RecordRanAfterEnd(context.Background(), "c2", "agent-1", danasRun())
	assert.ErrorIs(t, err, ErrUnknownCall)
	bad := danasRun()
	bad.Error = "failed"
	_, err = New(f, "").WithDoor(testDoor).RecordRanAfterEnd(context.Background(), "c1", "agent-1", bad)
	var input *InputError
	require.ErrorAs(t, err, &input, "an output and an error")
	assert.Equal(t, "output", input.Field)
	assert.Empty(t, f.started)
}
