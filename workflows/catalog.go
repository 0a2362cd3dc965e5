package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/tool"
)

// ToolCatalogWorkflowType is the registered name of ToolCatalogWorkflow.
const ToolCatalogWorkflowType = "ToolCatalogWorkflow"

// CatalogTimeout bounds a catalog run: a client with no worker to answer
// gets a timeout instead of a workflow that stays open.
const CatalogTimeout = time.Minute

// ToolCatalogWorkflow returns the tools a worker on its task queue runs
// that the policy does not deny outright (activities.DescribeTools): how
// a client that holds only a Temporal address lists the tools. It runs one
// local activity and keeps no state.
func ToolCatalogWorkflow(ctx workflow.Context) ([]tool.Descriptor, error) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: 30 * time.Second,
		StartToCloseTimeout:    10 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var tools []tool.Descriptor
	if err := workflow.ExecuteLocalActivity(lctx, a.DescribeTools).Get(ctx, &tools); err != nil {
		return nil, err
	}
	return tools, nil
}
