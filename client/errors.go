package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/workflows"
)

// ErrUnknownCall is returned for a call ID that names no call.
var ErrUnknownCall = errors.New("unknown call")

// ErrCallIDTaken is the cause (errors.Is) of the *InputError that refuses
// a call ID already naming another call: another session, tool, requester
// or other arguments. The HTTP API answers it with 409.
var ErrCallIDTaken = errors.New("call ID is taken")

// ErrNoResult is the cause of the error of a call whose workflow ended
// without a Result: an operator terminated it, or it failed. Nothing more
// will happen to the call; the HTTP API answers it with 410.
var ErrNoResult = errors.New("the call ended without a result")

// InputError is a request that names a bad field.
type InputError struct {
	Field   string
	Problem string
	// Err is the cause, for errors.Is; optional.
	Err error
}

func (e *InputError) Error() string { return e.Field + " " + e.Problem }

// Unwrap returns the cause.
func (e *InputError) Unwrap() error { return e.Err }

// AlreadyDecidedError refuses a decision for a call that has one, or that
// timed out. It says by whom and when.
type AlreadyDecidedError struct {
	CallID    string
	Decision  string
	DecidedBy string
	Channel   string
	DecidedAt time.Time
	// Message is the full explanation, from the workflow or built here.
	Message string
}

func (e *AlreadyDecidedError) Error() string { return e.Message }

// RefusedError is a decision or session change the workflow refused, e.g.
// an invalid decision, a self-approval, a call not waiting yet.
type RefusedError struct {
	// Type is one of the workflows.ErrType* constants.
	Type    string
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

// refusal turns an update's rejection into the client's error types.
func refusal(err error) error {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return err
	}
	if appErr.Type() == workflows.ErrTypeAlreadyDecided {
		return &AlreadyDecidedError{Message: appErr.Message()}
	}
	return &RefusedError{Type: appErr.Type(), Message: appErr.Message()}
}

// mapNotFound explains a NotFound from Temporal: a signal or update to a
// finished workflow fails exactly like one to a workflow that never
// existed, so the call is described to tell the two apart.
func (c *Client) mapNotFound(ctx context.Context, callID string, err error) error {
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		return err
	}
	desc, derr := c.tc.DescribeWorkflowExecution(ctx, workflows.CallWorkflowID(callID), "")
	if derr != nil {
		if errors.As(derr, &nf) {
			return fmt.Errorf("%w %q", ErrUnknownCall, callID)
		}
		return derr
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return err
	}
	return c.AlreadyDecided(ctx, callID)
}

// AlreadyDecided builds the refusal for a decision on a finished call, from
// its Result: by whom, via what and when it was decided, or when it timed
// out.
func (c *Client) AlreadyDecided(ctx context.Context, callID string) error {
	var r workflows.Result
	if err := c.tc.GetWorkflow(ctx, workflows.CallWorkflowID(callID), "").Get(ctx, &r); err != nil {
		return &AlreadyDecidedError{CallID: callID, Message: fmt.Sprintf("call %s is finished and cannot be decided", callID)}
	}
	e := &AlreadyDecidedError{CallID: callID, Decision: r.Decision, DecidedBy: r.DecidedBy, Channel: r.Channel, DecidedAt: r.DecidedAt}
	switch {
	case r.Status == workflows.StatusTimedOut:
		e.Message = fmt.Sprintf("call %s timed out at %s: nobody decided it in time", callID, r.FinishedAt.UTC().Format(time.RFC3339))
	case r.DecidedBy != "":
		e.Message = fmt.Sprintf("call %s was already decided: %s by %s via %s at %s", callID, r.Decision, r.DecidedBy, r.Channel, r.DecidedAt.UTC().Format(time.RFC3339))
	default:
		e.Message = fmt.Sprintf("call %s is finished (%s: %s) and cannot be decided", callID, r.Status, r.Reason)
	}
	return e
}

// IsSearchAttributeNotMapped reports whether err is a frontend refusing one
// of toolgate's search attributes because it has no mapping for it yet:
// registered moments ago (each frontend refreshes its namespace cache every
// few seconds), or not registered at all. Worth retrying shortly.
func IsSearchAttributeNotMapped(err error) bool {
	var invalid *serviceerror.InvalidArgument
	if !errors.As(err, &invalid) {
		return false
	}
	return strings.Contains(invalid.Error(), "no mapping defined for search attribute")
}
