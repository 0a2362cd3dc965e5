package bench

import (
	"context"
	"encoding/json"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The baseline: the least a durable design on Temporal can do for one tool
// call, measured beside toolgate in the same run.

// baselineQueue keeps the baseline's workers apart from toolgate's.
const baselineQueue = "toolgate-bench-baseline"

// startBare starts a bare workflow on the baseline's queue the way the
// bench starts toolgate's calls: eagerly when Options.EagerStart says so.
func (b *runner) startBare(ctx context.Context, wf any, args ...any) (client.WorkflowRun, error) {
	return b.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: baselineQueue, EnableEagerStart: b.o.EagerStart}, wf, args...)
}

// signalName wakes BaselineSignalWorkflow.
const signalName = "go"

// baselineActivities stand in for the policy (local) and the tool.
type baselineActivities struct{}

// Policy is the local activity in the policy's place.
func (baselineActivities) Policy(_ context.Context, args json.RawMessage) (bool, error) {
	return len(args) > 0, nil
}

// Tool is the activity in the tool's place: it echoes its arguments.
func (baselineActivities) Tool(_ context.Context, args json.RawMessage) (json.RawMessage, error) {
	return args, nil
}

var ba baselineActivities

// BaselineWorkflow runs one local activity and one activity, as a gated
// tool call must at the least.
func BaselineWorkflow(ctx workflow.Context, args json.RawMessage) (json.RawMessage, error) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
	var ok bool
	if err := workflow.ExecuteLocalActivity(lctx, ba.Policy, args).Get(ctx, &ok); err != nil {
		return nil, err
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var out json.RawMessage
	err := workflow.ExecuteActivity(actx, ba.Tool, args).Get(ctx, &out)
	return out, err
}

// BaselineSignalWorkflow waits for one signal, then returns: the floor
// for a call that waits for a person.
func BaselineSignalWorkflow(ctx workflow.Context) (string, error) {
	var v string
	workflow.GetSignalChannel(ctx, signalName).Receive(ctx, &v)
	return v, nil
}
