package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/workflows"
)

// RanAfterEndRecorder is implemented by the agent clients that can record
// a run against a call's end (*Client, and *apiclient.Client over the
// HTTP API); a hook asks for it with a type assertion, so an Agent need
// not have it.
type RanAfterEndRecorder interface {
	// RecordRanAfterEnd records that call callID's tool ran after the call
	// ended denied or timed out (see Client.RecordRanAfterEnd); requester
	// must be the call's requester (the API takes it from the token), and
	// rec.User its acting user (the API takes it from the token's owner).
	RecordRanAfterEnd(ctx context.Context, callID, requester string, rec workflows.RanAfterEnd) (workflows.RanAfterEnd, error)
}

var _ RanAfterEndRecorder = (*Client)(nil)

// RecordRanAfterEnd records that the tool of an agent-executed call ran
// after the call had ended denied or timed out, approved by its acting
// user (rec.User) at the agent's own permission prompt: the call's
// outcome stays, and Status shows the run beside it (Result.RanAfterEnd).
// rec holds the arguments the tool ran with and its output or error;
// CallID and Requester are set from callID and requester. Only the call's
// requester records, once per call, and only when the call's rule said
// `user: true` and rec.User is its acting user: anything else is refused
// with a *RefusedError before anything is written (ErrTypeNotAuthorized,
// ErrTypeNotWaiting, ErrTypeAlreadyRecorded for a second record), and the
// record's workflow checks the call again. It returns the record as
// stored.
func (c *Client) RecordRanAfterEnd(ctx context.Context, callID, requester string, rec workflows.RanAfterEnd) (workflows.RanAfterEnd, error) {
	if err := ValidateID("call_id", callID); err != nil {
		return workflows.RanAfterEnd{}, err
	}
	rec.CallID, rec.Requester = callID, requester
	rec.CallStatus, rec.DecidedBy, rec.At = "", "", time.Time{}
	if field, problem := rec.Invalid(); field != "" {
		return workflows.RanAfterEnd{}, &InputError{Field: field, Problem: problem}
	}
	st, err := c.callState(ctx, callID)
	if err != nil {
		return workflows.RanAfterEnd{}, err
	}
	if err := rec.Refusal(st); err != nil {
		return workflows.RanAfterEnd{}, refusal(err)
	}
	run, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        workflows.RanAfterEndWorkflowID(callID),
		TaskQueue: c.taskQueue,
		// A refused record (its workflow failed) leaves the ID free; a
		// written one keeps it: one record per call.
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, workflows.RanAfterEndWorkflowType, rec)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return workflows.RanAfterEnd{}, &RefusedError{Type: workflows.ErrTypeAlreadyRecorded,
			Message: fmt.Sprintf("call %s already has its record of the run after its end: a call has one", callID)}
	}
	if err != nil {
		return workflows.RanAfterEnd{}, fmt.Errorf("record the run of call %s: %w", callID, err)
	}
	var out workflows.RanAfterEnd
	if err := run.Get(ctx, &out); err != nil {
		return workflows.RanAfterEnd{}, refusal(err)
	}
	return out, nil
}

// callState is the call's CallState, from its query: a closed call
// answers too (Temporal replays its history).
func (c *Client) callState(ctx context.Context, callID string) (workflows.CallState, error) {
	var st workflows.CallState
	v, err := c.tc.QueryWorkflow(ctx, workflows.CallWorkflowID(callID), "", workflows.QueryCall)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return st, fmt.Errorf("%w %q", ErrUnknownCall, callID)
	}
	if err != nil {
		return st, fmt.Errorf("query call %s: %w", callID, err)
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("decode call %s: %w", callID, err)
	}
	return st, nil
}

// RanAfterEnd returns the record that call callID's tool ran after the
// call ended, or nil when there is none (a refused record is none).
func (c *Client) RanAfterEnd(ctx context.Context, callID string) (*workflows.RanAfterEnd, error) {
	id := workflows.RanAfterEndWorkflowID(callID)
	desc, err := c.tc.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describe the record of call %s: %w", callID, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		return nil, nil
	}
	var rec workflows.RanAfterEnd
	if err := c.tc.GetWorkflow(ctx, id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()).Get(ctx, &rec); err != nil {
		return nil, fmt.Errorf("read the record of call %s: %w", callID, err)
	}
	return &rec, nil
}

// withRanAfterEnd adds to a Result that ended denied or timed out the
// record of a run after its end, if there is one.
func (c *Client) withRanAfterEnd(ctx context.Context, callID string, r *workflows.Result) error {
	if r == nil || (r.Status != workflows.StatusDenied && r.Status != workflows.StatusTimedOut) {
		return nil
	}
	rec, err := c.RanAfterEnd(ctx, callID)
	if err != nil {
		return err
	}
	r.RanAfterEnd = rec
	return nil
}
