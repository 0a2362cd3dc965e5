package activities

import (
	"context"
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
func (a *Activities) RunToolChecked(ctx context.Context, in RunToolInput) (CheckedOutput, error) {
	if in.BeforeCall {
		if before := a.beforeCall(ctx, in.Call); before.Refusal != "" {
			a.leaveRoom(ctx, in.LeaveRoom) // the call no longer waits
			return CheckedOutput{Refused: before.Refusal}, nil
		}
	}
	out, err := a.RunTool(ctx, in)
	if err != nil {
		return CheckedOutput{}, err
	}
	return CheckedOutput{After: a.afterCall(ctx, AfterCallInput{Call: in.Call, Output: out})}, nil
}
