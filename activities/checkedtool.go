package activities

import (
	"context"
	"encoding/json"

	"go.temporal.io/sdk/activity"
)

// CheckedOutput is what RunToolChecked returns: the before-call checks'
// refusal, or the outcome of the output middleware and the after-call
// checks on the tool's output.
type CheckedOutput struct {
	// Refused is why the before-call checks refused the call
	// (RunToolInput.BeforeCall): the tool did not run.
	Refused string           `json:"refused,omitempty"`
	After   AfterCallOutcome `json:"after"`
}

// RunToolChecked runs the before-call checks when asked to
// (RunToolInput.BeforeCall), the tool (RunTool), and then the output
// middleware and the after-call checks (AfterCall) on its output, in one
// activity. The call's history holds only what the model may see
// (redacted output, or the refusal), never the tool's raw output, and the
// call runs no local activity of its own around its tool. A call schedules
// it when its evaluation says so (Evaluation.ChecksWithTool).
//
// A check that panics refuses the call rather than failing the activity:
// a failed attempt would be retried, and the tool run again.
func (a *Activities) RunToolChecked(ctx context.Context, in RunToolInput) (CheckedOutput, error) {
	if in.BeforeCall {
		var before HookOutcome
		if why := panicked(ctx, "before-call checks", func() { before = a.beforeCall(ctx, in.Call) }); why != "" {
			before.Refusal = why
		}
		if before.Refusal != "" {
			a.leaveRoom(ctx, in.LeaveRoom) // the call no longer waits
			return CheckedOutput{Refused: before.Refusal}, nil
		}
	}
	var after AfterCallOutcome
	_, err := a.runTool(ctx, in, func(out json.RawMessage) {
		if why := panicked(ctx, "after-call checks", func() { after = a.afterCall(ctx, AfterCallInput{Call: in.Call, Output: out}) }); why != "" {
			after = AfterCallOutcome{Refusal: why}
		}
	})
	if err != nil {
		return CheckedOutput{}, err
	}
	return CheckedOutput{After: after}, nil
}

// panicked runs checks and says why they refuse the call if they panic
// (the policy's code, or its middleware's), else "". The reason names the
// checks, not what panicked: the panic, in the worker's log, may quote
// the output.
func panicked(ctx context.Context, what string, checks func()) (why string) {
	defer func() {
		if r := recover(); r != nil {
			activity.GetLogger(ctx).Error("A check panicked; the call is refused", "checks", what, "panic", r)
			why = "the " + what + " failed (see the worker's log)"
		}
	}()
	checks()
	return ""
}
