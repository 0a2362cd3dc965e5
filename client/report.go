package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// MaxReportErrorBytes caps the error text of a report.
const MaxReportErrorBytes = 8 << 10

// Validate refuses a report that is not exactly one of an output (JSON,
// at most activities.DefaultMaxOutputBytes) or an error text.
func (r *Report) Validate() error {
	switch {
	case len(r.Output) > 0 && r.Error != "":
		return &InputError{Field: "output", Problem: `and "error" exclude each other: report what the tool returned, or why it failed`}
	case r.Unknown != "" && r.Error != "":
		return &InputError{Field: "unknown", Problem: `and "error" exclude each other: a tool that failed did not end unknown`}
	case len(r.Output) == 0 && r.Error == "" && r.Unknown == "":
		return &InputError{Field: "output", Problem: `or "error" is required`}
	case len(r.Unknown) > MaxReportErrorBytes:
		return &InputError{Field: "unknown", Problem: fmt.Sprintf("is %d bytes, over the %d-byte limit", len(r.Unknown), MaxReportErrorBytes)}
	case len(r.Output) > activities.DefaultMaxOutputBytes:
		return &InputError{Field: "output", Problem: fmt.Sprintf("is %d bytes, over the %d-byte limit", len(r.Output), activities.DefaultMaxOutputBytes)}
	case len(r.Output) > 0 && !json.Valid(r.Output):
		return &InputError{Field: "output", Problem: "must be JSON"}
	case len(r.Run) > workflows.MaxRunBytes:
		return &InputError{Field: "run", Problem: fmt.Sprintf("is over %d bytes", workflows.MaxRunBytes)}
	case len(r.Error) > MaxReportErrorBytes:
		return &InputError{Field: "error", Problem: fmt.Sprintf("is %d bytes, over the %d-byte limit", len(r.Error), MaxReportErrorBytes)}
	}
	return nil
}

// reportStartWait bounds the retries of a report that arrives while the
// worker is still starting the report step (approved is shown in the same
// workflow task that schedules it).
const reportStartWait = 10 * time.Second

// Report completes an approved agent-executed call with the agent's
// account of its run. Only the call's requester may report it, once; a
// call that is not approved yet, already reported or ended, or that
// toolgate runs itself is refused with a *RefusedError (ErrTypeNotWaiting;
// ErrTypeNotAuthorized for another requester). The after-call checks then
// run on the output; Wait returns the final Result.
func (c *Client) Report(ctx context.Context, callID, requester string, r Report) error {
	if err := ValidateID("call_id", callID); err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if c.door == nil {
		return ErrNoDoorKey
	}
	call, run, err := c.callFacts(ctx, callID)
	if err != nil {
		return err
	}
	switch {
	case call.Requester != requester:
		return &RefusedError{Type: workflows.ErrTypeNotAuthorized, Message: "only the agent that requested call " + callID + " may report it"}
	case call.Execution != policy.ExecutionAgent:
		return &RefusedError{Type: workflows.ErrTypeNotWaiting, Message: "toolgate runs the tool of call " + callID + " itself: there is nothing to report"}
	}
	var toolErr error
	var output any
	switch {
	case r.Error != "":
		toolErr = temporal.NewNonRetryableApplicationError(r.Error, activities.ErrTypeAgentReported, nil)
	case r.Unknown != "":
		toolErr = temporal.NewNonRetryableApplicationError(r.Unknown, activities.ErrTypeAgentUnsure, nil, r.Output)
	case len(r.Output) > 0:
		output = r.Output
	}
	if err := c.reportable(ctx, callID, r.Run); err != nil {
		return err
	}
	// The statement goes first: the workflow takes the report only with
	// it (workflows.SignalReport).
	st := policy.ReportStatement(call, r.Output, r.Error, r.Unknown)
	st.Run = run
	said, err := c.sign(st)
	if err != nil {
		return err
	}
	if err := c.tc.SignalWorkflow(ctx, workflows.CallWorkflowID(callID), "", workflows.SignalReport, said); err != nil {
		return c.mapNotFound(ctx, callID, fmt.Errorf("report call %s: %w", callID, err))
	}
	deadline := time.Now().Add(reportStartWait)
	for {
		if err := c.reportable(ctx, callID, r.Run); err != nil {
			return err
		}
		err := c.tc.CompleteActivityByID(ctx, c.namespace, workflows.CallWorkflowID(callID), "", workflows.ReportActivityID, output, toolErr)
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("report call %s: %w", callID, err)
			}
			return nil
		}
		// Not started yet, or reported by someone else meanwhile: look again.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// reportable refuses a report for a call that does not wait for one, or,
// when run is set, that another run (or none) claimed.
func (c *Client) reportable(ctx context.Context, callID, run string) error {
	st, err := c.Status(ctx, callID)
	if err != nil {
		return err
	}
	if st.Result == nil && st.State.Result != nil {
		st.Result = st.State.Result
	}
	switch {
	case st.Result != nil:
		return &RefusedError{Type: workflows.ErrTypeNotWaiting, Message: fmt.Sprintf("call %s already ended (status %s): a call is reported once", callID, st.Result.Status)}
	case st.State.Status != workflows.StatusApproved:
		return &RefusedError{Type: workflows.ErrTypeNotWaiting, Message: fmt.Sprintf("call %s is not approved (status %s): run the tool only once the call is approved", callID, st.State.Status)}
	case run != "" && (st.State.Claim == nil || st.State.Claim.Run != run):
		return &RefusedError{Type: workflows.ErrTypeAlreadyClaimed, Message: fmt.Sprintf("run %s did not take the approval of call %s: only the run that claimed it reports it", run, callID)}
	}
	return nil
}

// WaitDecided blocks until the call has a Result or, for an agent-executed
// call, until it is approved and waits for the agent's report; or until
// ctx ends (context.DeadlineExceeded). It follows the call's history with
// a long poll, so it wakes on the event itself.
func (c *Client) WaitDecided(ctx context.Context, callID string) (Status, error) {
	if err := ValidateID("call_id", callID); err != nil {
		return Status{}, err
	}
	it := c.tc.GetWorkflowHistory(ctx, workflows.CallWorkflowID(callID), "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			if waitEnded(ctx, err) {
				return Status{}, context.DeadlineExceeded
			}
			return Status{}, c.mapNotFound(ctx, callID, fmt.Errorf("wait for call %s: %w", callID, err))
		}
		attrs := ev.GetActivityTaskScheduledEventAttributes()
		if attrs == nil || attrs.GetActivityId() != workflows.ReportActivityID {
			continue
		}
		// The report step is scheduled: approved, unless already reported.
		st, err := c.Status(ctx, callID)
		if err != nil || st.Result != nil || st.State.Status == workflows.StatusApproved {
			return st, err
		}
	}
	return c.Status(ctx, callID) // closed
}
