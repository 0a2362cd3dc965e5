package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// RanAfterEndWorkflow records that the tool of an agent-executed call ran
// although the call had ended denied or timed out: the call's rule let the
// person running the agent decide it (`user: true`), and they approved it
// at the agent's own permission prompt after toolgate had ended the call.
// Nothing tells toolgate between that approval and the run, and a finished
// call cannot change, so the record is a workflow of its own beside the
// call (RanAfterEndWorkflowID), one per call. It reads the call (a query,
// as an activity) and refuses a record the call does not bear out: not
// its requester's, a call that did not end denied or timed out, whose
// rule did not say `user: true`, or another user than its acting user.
// Then it returns the record, stamped with the call's outcome and the
// time: the record is the workflow's result.
func RanAfterEndWorkflow(ctx workflow.Context, rec RanAfterEnd) (RanAfterEnd, error) {
	if field, problem := rec.Invalid(); field != "" {
		return RanAfterEnd{}, temporal.NewNonRetryableApplicationError(field+" "+problem, ErrTypeInvalidRecord, nil)
	}
	if id := workflow.GetInfo(ctx).WorkflowExecution.ID; id != RanAfterEndWorkflowID(rec.CallID) {
		return RanAfterEnd{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("a record of call %s belongs in workflow %s, not %s", rec.CallID, RanAfterEndWorkflowID(rec.CallID), id), ErrTypeInvalidRecord, nil)
	}
	actx := workflow.WithActivityOptions(ctx, readCallOptions)
	// The query's answer is the call's CallState as JSON: decoded as one.
	var st CallState
	in := activities.QueryInput{WorkflowID: CallWorkflowID(rec.CallID), Query: QueryCall}
	if err := workflow.ExecuteActivity(actx, a.QueryWorkflow, in).Get(ctx, &st); err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeNoSuchWorkflow {
			return RanAfterEnd{}, temporal.NewNonRetryableApplicationError("unknown call "+rec.CallID, ErrTypeNotWaiting, nil)
		}
		return RanAfterEnd{}, fmt.Errorf("read call %s: %w", rec.CallID, err)
	}
	if err := rec.Refusal(st); err != nil {
		return RanAfterEnd{}, err
	}
	if len(rec.Output) > 0 {
		// The output middleware (secret redaction) holds for what ran
		// after the end as for any reported output: the record keeps no
		// secret a Result would not.
		var after activities.AfterCallOutcome
		lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
		in := activities.AfterCallInput{Call: st.Call, Output: rec.Output}
		if err := workflow.ExecuteLocalActivity(lctx, a.AfterCall, in).Get(ctx, &after); err != nil {
			return RanAfterEnd{}, fmt.Errorf("redact the output of call %s: %w", rec.CallID, err)
		}
		rec.Output, rec.Redactions = after.Output, after.Redactions
		if after.Refusal != "" {
			rec.Output, rec.Withheld = nil, "the after-call checks refused the output: "+after.Refusal
		}
	}
	rec.CallStatus, rec.DecidedBy = st.Result.Status, st.Result.DecidedBy
	rec.At = workflow.Now(ctx)
	return rec, nil
}

// RanAfterEndWorkflowType is the record's workflow type name.
const RanAfterEndWorkflowType = "ToolgateRanAfterEnd"

// RanAfterEndWorkflowID is the ID of the record of call callID. Call IDs
// hold no "/" (client.ValidateID), so it is never a call's workflow ID.
func RanAfterEndWorkflowID(callID string) string { return CallWorkflowID(callID) + "/after" }

// Error types of a refused record.
const (
	// ErrTypeInvalidRecord: the record itself is malformed (no user, an
	// output over the limit, ...).
	ErrTypeInvalidRecord = "InvalidRecord"
	// ErrTypeAlreadyRecorded: the call has its record already.
	ErrTypeAlreadyRecorded = "AlreadyRecorded"
)

// Limits of a record, so that it stays well under Temporal's 2 MiB
// payload limit: the arguments as a call's, the output as a report's.
const (
	MaxRecordArgsBytes   = policy.MaxArgsBytes
	MaxRecordOutputBytes = activities.DefaultMaxOutputBytes
	MaxRecordTextBytes   = 8 << 10
)

// readCallOptions bound the read of the call a record is about.
var readCallOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
}

// RanAfterEnd is the record that a call's tool ran after the call ended
// denied or timed out (RanAfterEndWorkflow), as the agent reported it.
// client.Status puts it in the call's Result (Result.RanAfterEnd).
type RanAfterEnd struct {
	CallID string `json:"call_id"`
	// Requester is the agent that recorded the run: the call's requester.
	Requester string `json:"requester"`
	// User approved the run at the agent's own prompt: the call's acting
	// user.
	User string `json:"user"`
	// Via says where they approved it, e.g. "Claude Code's permission
	// prompt".
	Via string `json:"via"`
	// Args are the arguments the tool ran with, as the agent reported them.
	Args json.RawMessage `json:"args"`
	// Output is what the tool returned, or Error why it failed; neither
	// when the agent could not tell.
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Redactions counts the secrets the output middleware took out of
	// Output; Withheld says why the output is not kept (the after-call
	// checks refused it). The workflow sets them.
	Redactions int    `json:"redactions,omitempty"`
	Withheld   string `json:"withheld,omitempty"`
	// CallStatus and DecidedBy are the call's outcome when the tool ran
	// (denied by alice, or timed out); At is when toolgate recorded the
	// run. The workflow sets them.
	CallStatus Status    `json:"call_status,omitempty"`
	DecidedBy  string    `json:"decided_by,omitempty"`
	At         time.Time `json:"at,omitzero"`
}

// Invalid names the field of a record that is missing or over its
// limits, and what is wrong with it; "" when the record is well formed.
func (r RanAfterEnd) Invalid() (field, problem string) {
	switch {
	case r.CallID == "":
		return "call_id", "is required"
	case r.Requester == "":
		return "requester", "is required: the agent that ran the tool"
	case r.User == "":
		return "user", "is required: the person who approved the run at the agent's prompt"
	case r.User == r.Requester:
		return "user", "names the requester: the person running an agent is not the agent"
	case len(r.Args) == 0 || string(r.Args) == "null" || !json.Valid(r.Args):
		return "args", "must be the JSON arguments the tool ran with"
	case len(r.Args) > MaxRecordArgsBytes:
		return "args", fmt.Sprintf("are %d bytes, over the %d-byte limit", len(r.Args), MaxRecordArgsBytes)
	case len(r.Output) > 0 && r.Error != "":
		return "output", `and "error" exclude each other: record what the tool returned, or why it failed`
	case len(r.Output) > 0 && !json.Valid(r.Output):
		return "output", "must be JSON"
	case len(r.Output) > MaxRecordOutputBytes:
		return "output", fmt.Sprintf("is %d bytes, over the %d-byte limit", len(r.Output), MaxRecordOutputBytes)
	case len(r.Error) > MaxRecordTextBytes:
		return "error", fmt.Sprintf("is %d bytes, over the %d-byte limit", len(r.Error), MaxRecordTextBytes)
	case len(r.Via) > MaxRecordTextBytes:
		return "via", fmt.Sprintf("is %d bytes, over the %d-byte limit", len(r.Via), MaxRecordTextBytes)
	}
	return "", ""
}

// Refusal says why the call st does not bear the record out, as a
// non-retryable application error (ErrTypeNotAuthorized, ErrTypeNotWaiting),
// or nil: only the call's requester records a run, only of an
// agent-executed call that ended denied or timed out, whose rule let the
// person running the agent decide it, approved by that person.
func (r RanAfterEnd) Refusal(st CallState) error {
	refuse := func(typ, format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), typ, nil)
	}
	call, res := st.Call, st.Result
	switch {
	case call.Requester != r.Requester:
		return refuse(ErrTypeNotAuthorized, "only the agent that requested call %s may record how its tool ran", r.CallID)
	case res == nil || (res.Status != StatusDenied && res.Status != StatusTimedOut):
		return refuse(ErrTypeNotWaiting, "call %s has not ended denied or timed out (status %s): a run is recorded against the call's end only then", r.CallID, st.Status)
	case call.Execution != policy.ExecutionAgent:
		return refuse(ErrTypeNotWaiting, "toolgate runs the tool of call %s itself: it did not run after the call ended", r.CallID)
	case st.Request == nil || !st.Request.User:
		return refuse(ErrTypeNotAuthorized, "call %s: %v, so nobody approved it at the agent's prompt", r.CallID, policy.ErrUserNotAsked)
	case call.ActingUser != r.User:
		return refuse(ErrTypeNotAuthorized, "call %s: the person running its agent is %s, not %s", r.CallID, orNobody(call.ActingUser), r.User)
	}
	return nil
}

func orNobody(s string) string {
	if s == "" {
		return "nobody named"
	}
	return s
}
