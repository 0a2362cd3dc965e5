package workflows

import (
	"encoding/json"

	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// runTool runs the tool of a call toolgate runs, as an activity, with the
// preview of the arguments it runs with and, after an edit, the one the
// approvers were shown. A call without a preview (no person was asked)
// records no version marker: it has nothing to hand over.
func (c *callRun) runTool(ctx workflow.Context, call policy.Call, output *json.RawMessage) error {
	// The grant the call was judged with (nil in histories from before
	// grants): no new command, so nothing to version.
	in := activities.RunToolInput{Call: call, Sandbox: c.eval.Sandbox}
	ran, shown := c.eval.Preview, (*policy.Preview)(nil)
	if c.originalArgs != nil && c.state.Request != nil {
		shown = c.state.Request.Preview
	}
	if (ran != nil || shown != nil) && workflow.GetVersion(ctx, versionToolSeesPreview, workflow.DefaultVersion, 1) >= 1 {
		in.Preview, in.PreviewShown = ran, shown
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, toolActivityOptions(c.eval)), a.RunTool, in).Get(ctx, output)
}
