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
// records no version marker: it has nothing to hand over. A call whose
// evaluation says so (checksWithTool) has the activity run its checks
// too, and gets their outcome (checked) instead of the raw output.
func (c *callRun) runTool(ctx workflow.Context, call policy.Call, output *json.RawMessage) (checked *activities.CheckedOutput, _ error) {
	// The grant the call was judged with (nil in histories from before
	// grants): no new command, so nothing to version.
	in := activities.RunToolInput{Call: call, Sandbox: c.eval.Sandbox}
	ran, shown := c.eval.Preview, (*policy.Preview)(nil)
	if c.originalArgs != nil && c.state.Request != nil {
		shown = c.state.Request.Preview
	}
	if (ran != nil || shown != nil) && c.version(ctx, versionToolSeesPreview, 1) >= 1 {
		in.Preview, in.PreviewShown = ran, shown
	}
	handed := c.handLeaveToTool(ctx, &in)
	actx := workflow.WithActivityOptions(ctx, toolActivityOptions(c.eval))
	var err error
	if c.checksWithTool(call) {
		in.BeforeCall = c.eval.BeforeCall == nil // not run at evaluation
		var out activities.CheckedOutput
		if err = workflow.ExecuteActivity(actx, a.RunToolChecked, in).Get(ctx, &out); err == nil {
			checked = &out
		}
	} else {
		err = workflow.ExecuteActivity(actx, a.RunTool, in).Get(ctx, output)
	}
	if err != nil && handed {
		c.joined = true // the activity may never have run: the call's end sends the leave too
	}
	return checked, err
}

// handLeaveToTool gives the call's leave of its waiting room to the tool's
// activity, which sends it while the tool runs, in a call that began at
// versionBaseline; it reports whether it did.
func (c *callRun) handLeaveToTool(ctx workflow.Context, in *activities.RunToolInput) bool {
	if !c.joined || !c.atBaseline(ctx) {
		return false
	}
	c.joined = false
	in.LeaveRoom = &activities.RoomLeave{WorkflowID: RoomWorkflowID(c.state.Call.Session, c.room), Signal: SignalDone, CallID: c.state.Call.ID}
	return true
}
