package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// denyingPolicy denies the tools in denied outright, and every tool whose
// annotations say it is destructive.
type denyingPolicy struct {
	testPolicy
	denied map[string]bool
}

func (p *denyingPolicy) DeniesOutright(call policy.Call) bool {
	return p.denied[call.Tool] || call.Annotations["destructiveHint"] == true
}

var _ policy.OutrightDenier = (*denyingPolicy)(nil)

func catalogTools() *tool.Registry {
	noop := func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }
	r := tool.NewRegistry()
	r.MustRegister(
		tool.Tool{Name: "read", Description: "Read a file.\nSecond line.", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
			Annotations: map[string]any{"readOnlyHint": true}, Run: noop},
		tool.Tool{Name: "delete", Description: "Delete a file.", Annotations: map[string]any{"destructiveHint": true}, Run: noop},
		tool.Tool{Name: "shell", Description: "Run a command.", Run: noop},
		tool.Tool{Name: "echo", Run: noop},
	)
	return r
}

func runCatalog(t *testing.T, p policy.ToolPolicy) []tool.Descriptor {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger{})
	env := s.NewTestWorkflowEnvironment()
	useDoors(env, true)
	env.RegisterActivity(&activities.Activities{Policy: p, Tools: catalogTools()})
	env.RegisterWorkflowWithOptions(ToolCatalogWorkflow, workflow.RegisterOptions{Name: ToolCatalogWorkflowType})
	env.ExecuteWorkflow(ToolCatalogWorkflowType)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var ds []tool.Descriptor
	require.NoError(t, env.GetWorkflowResult(&ds))
	return ds
}

func names(ds []tool.Descriptor) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

func TestCatalogListsEveryToolWithItsSchemaAndAnnotations(t *testing.T) {
	ds := runCatalog(t, &testPolicy{})
	assert.Equal(t, []string{"delete", "echo", "read", "shell"}, names(ds), "every tool, sorted by name")
	read := ds[2]
	assert.Equal(t, "Read a file.\nSecond line.", read.Description)
	assert.JSONEq(t, `{"type":"object","properties":{"path":{"type":"string"}}}`, string(read.Schema))
	assert.Equal(t, map[string]any{"readOnlyHint": true}, read.Annotations)
	assert.Empty(t, ds[1].Schema, "a tool without a schema has none")
}

func TestCatalogLeavesOutToolsThePolicyDeniesOutright(t *testing.T) {
	ds := runCatalog(t, &denyingPolicy{denied: map[string]bool{"shell": true}})
	assert.Equal(t, []string{"echo", "read"}, names(ds), "shell is denied by name, delete by its annotations")
}

func TestCatalogRetriesAFailingListingThenFails(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger{})
	env := s.NewTestWorkflowEnvironment()
	useDoors(env, true)
	env.RegisterActivity(&activities.Activities{Policy: &testPolicy{}, Tools: catalogTools()})
	env.RegisterWorkflowWithOptions(ToolCatalogWorkflow, workflow.RegisterOptions{Name: ToolCatalogWorkflowType})
	attempts := 0
	env.OnActivity("DescribeTools", mock.Anything).Return(func(context.Context) ([]tool.Descriptor, error) {
		attempts++
		return nil, errors.New("registry unavailable")
	})
	env.ExecuteWorkflow(ToolCatalogWorkflowType)
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "registry unavailable")
	assert.Equal(t, 3, attempts, "a failing listing is tried three times, then the error reaches the caller")
}
