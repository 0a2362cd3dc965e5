package activities

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// allowAll approves everything without asking, except the tools it
// denies or gives to a group.
type allowAll struct {
	policy.Base
	deny   bool
	groups []string
}

func (p allowAll) EvaluateApproval(_ context.Context, c policy.Call) (*policy.ApprovalRequest, error) {
	switch {
	case p.deny:
		return nil, &policy.DenyError{Reason: "no definition changes here", Rule: "freeze"}
	case p.groups != nil:
		return &policy.ApprovalRequest{Message: "rule says", Groups: p.groups, Rule: "mcp-admins"}, nil
	}
	return nil, nil
}

func definitionChangeCall(requester string) policy.Call {
	args, _ := json.Marshal(policy.DefinitionChange{Server: "docs", Tool: "search", Change: "changed",
		Diff: []string{"-a", "+b"}, Definition: json.RawMessage(`{"name":"search"}`), Hash: "h1"})
	return policy.Call{ID: "dc-1", Session: "toolgate.pins.docs", Tool: policy.DefinitionChangeTool, Args: args, Requester: requester}
}

func withDefinitionChange() *tool.Registry {
	r := tool.NewRegistry()
	r.MustRegister(tool.Tool{Name: policy.DefinitionChangeTool, Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }},
		tool.Tool{Name: "echo", Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }})
	return r
}

func TestADefinitionChangeAlwaysAsksAPersonAndOnlyToolgateMayAskOne(t *testing.T) {
	evaluate := func(p policy.ToolPolicy, call policy.Call) Evaluation {
		a := &Activities{Policy: p, Tools: withDefinitionChange()}
		var ev Evaluation
		require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: call}, &ev))
		return ev
	}

	ev := evaluate(allowAll{}, definitionChangeCall(policy.ToolgateRequester))
	require.NotNil(t, ev.Ask, "a policy that allows everything still cannot approve a definition change")
	assert.Equal(t, []string{"admin"}, ev.Ask.Groups)
	assert.Contains(t, ev.Ask.Message, `MCP server "docs" changed the definition of its tool "search"`)
	assert.Equal(t, "definition_change:docs:search:h1", ev.Ask.StickyKey, "a sticky decision covers this very definition only")

	ev = evaluate(allowAll{groups: []string{"mcp-admins"}}, definitionChangeCall(policy.ToolgateRequester))
	require.NotNil(t, ev.Ask)
	assert.Equal(t, []string{"mcp-admins"}, ev.Ask.Groups, "a rule names who decides")

	ev = evaluate(allowAll{deny: true}, definitionChangeCall(policy.ToolgateRequester))
	assert.True(t, ev.Denied, "a rule may refuse every change")
	assert.Equal(t, "no definition changes here", ev.Reason)

	ev = evaluate(allowAll{}, definitionChangeCall("agent-1"))
	assert.True(t, ev.InvalidRequest)
	assert.Contains(t, ev.Problem, "definition_change calls are made by toolgate itself")
	assert.Nil(t, ev.Ask)
}

func TestToolgatesOwnToolIsNeverListedAndAHeldToolDoesNotRun(t *testing.T) {
	reg := withDefinitionChange()
	a := &Activities{Policy: allowAll{}, Tools: reg}
	listed, err := a.DescribeTools(context.Background())
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, "echo", listed[0].Name)

	reg.Hold("echo", "its definition changed since it was approved")
	err = run(t, a, a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: "echo"}}, nil)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr))
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, `tool "echo" is held: its definition changed since it was approved; it did not run`, appErr.Message())
}
