package activities

import (
	"context"
)

// CheckedOutput is what RunToolChecked returns: the outcome of the output
// middleware and the after-call checks on the tool's output.
type CheckedOutput struct {
	After AfterCallOutcome `json:"after"`
}

// RunToolChecked runs the tool (RunTool), then the output middleware and
// the after-call checks (AfterCall) on its output, in the same activity.
// The call's history then holds only what the model may see (redacted
// output, or the refusal), never the tool's raw output, and the call needs
// no local activity after its tool. A call schedules it when its
// evaluation says so (Evaluation.ChecksWithTool).
func (a *Activities) RunToolChecked(ctx context.Context, in RunToolInput) (CheckedOutput, error) {
	out, err := a.RunTool(ctx, in)
	if err != nil {
		return CheckedOutput{}, err
	}
	return CheckedOutput{After: a.afterCall(ctx, AfterCallInput{Call: in.Call, Output: out})}, nil
}
