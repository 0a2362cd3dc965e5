package activities

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// redactSecret replaces the fake secret "sk-live-123".
type redactSecret struct{}

func (redactSecret) TransformOutput(_ context.Context, _ policy.Call, out json.RawMessage) (json.RawMessage, int, error) {
	return json.RawMessage(strings.ReplaceAll(string(out), "sk-live-123", "[REDACTED]")), strings.Count(string(out), "sk-live-123"), nil
}

// refuseTokens refuses, after the call, any output that still names a token.
type refuseTokens struct{ policy.Base }

func (refuseTokens) AfterCall(_ context.Context, _ policy.Call, out json.RawMessage) error {
	if strings.Contains(string(out), "token") {
		return errors.New("the output names a token")
	}
	return nil
}

func TestRunToolCheckedReturnsOnlyWhatTheChecksLetThrough(t *testing.T) {
	tools := tool.NewRegistry()
	tools.MustRegister(
		tool.Tool{Name: "leak", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`{"key":"sk-live-123"}`), nil
		}},
		tool.Tool{Name: "token", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`{"token":"sk-live-123"}`), nil
		}},
		tool.Tool{Name: "fails", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return nil, tool.Permanent(errors.New("account closed"))
		}},
	)
	a := &Activities{Policy: refuseTokens{}, Tools: tools, Middleware: []policy.OutputMiddleware{redactSecret{}}}

	var out CheckedOutput
	require.NoError(t, run(t, a, a.RunToolChecked, RunToolInput{Call: policy.Call{ID: "c1", Tool: "leak"}}, &out))
	assert.JSONEq(t, `{"key":"[REDACTED]"}`, string(out.After.Output))
	assert.Equal(t, 1, out.After.Redactions)
	assert.Empty(t, out.After.Refusal)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "sk-live-123", "the activity's result (what the history records) holds no raw output")

	out = CheckedOutput{}
	require.NoError(t, run(t, a, a.RunToolChecked, RunToolInput{Call: policy.Call{ID: "c2", Tool: "token"}}, &out))
	assert.Equal(t, "the output names a token", out.After.Refusal)
	assert.Equal(t, 1, out.After.Redactions)
	assert.Empty(t, out.After.Output, "a refused output is not returned")

	// Asked to, it runs the before-call checks first: a refusal keeps the
	// tool from running.
	ran := 0
	tools.MustRegister(tool.Tool{Name: "counted", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
		ran++
		return json.RawMessage(`{}`), nil
	}})
	checked := 0
	a.Policy = &beforeCounter{refuse: "window closed", n: &checked}
	out = CheckedOutput{}
	require.NoError(t, run(t, a, a.RunToolChecked, RunToolInput{Call: policy.Call{ID: "c4", Tool: "counted"}, BeforeCall: true}, &out))
	assert.Equal(t, "window closed", out.Refused)
	assert.Zero(t, ran, "the tool did not run")
	out = CheckedOutput{}
	require.NoError(t, run(t, a, a.RunToolChecked, RunToolInput{Call: policy.Call{ID: "c5", Tool: "counted"}}, &out))
	assert.Empty(t, out.Refused)
	assert.Equal(t, 1, ran, "not asked to, it runs the tool without them")
	assert.Equal(t, 1, checked)

	err = run(t, a, a.RunToolChecked, RunToolInput{Call: policy.Call{ID: "c3", Tool: "fails"}}, nil)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "the tool's failure is the activity's, as RunTool's")
	assert.Equal(t, "account closed", appErr.Message())
	assert.True(t, appErr.NonRetryable())
}

// Evaluate runs the before-call checks of a call it approves outright and
// of no other, and says that the tool's activity runs the output checks.
func TestEvaluateRunsTheBeforeCallChecksOfAnAutoApprovedCall(t *testing.T) {
	checked := 0
	p := &beforeCounter{refuse: "window closed", n: &checked}
	tools := tool.NewRegistry()
	tools.MustRegister(tool.Tool{Name: "echo", Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }},
		tool.Tool{Name: "ask", Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }})
	a := &Activities{Policy: p, Tools: tools}

	var ev Evaluation
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{ID: "c1", Tool: "echo", Execution: policy.ExecutionToolgate}, Session: "s"}, &ev))
	require.NotNil(t, ev.BeforeCall)
	assert.Equal(t, "window closed", ev.BeforeCall.Refusal)
	assert.Equal(t, 1, checked)
	assert.True(t, ev.ChecksWithTool)

	for _, in := range []EvaluateInput{
		{Call: policy.Call{ID: "c2", Tool: "ask", Execution: policy.ExecutionToolgate}, Session: "s"}, // a person is asked
		{Call: policy.Call{ID: "c3", Tool: "echo", Execution: policy.ExecutionToolgate}},              // an edit's evaluation
	} {
		ev = Evaluation{}
		require.NoError(t, run(t, a, a.Evaluate, in, &ev))
		assert.Nil(t, ev.BeforeCall, in.Call.ID)
	}
	assert.Equal(t, 1, checked, "only the auto-approved call's checks ran")
}

// beforeCounter asks about tool "ask", approves the rest, and refuses
// every call before it runs.
type beforeCounter struct {
	policy.Base
	refuse string
	n      *int
}

func (p *beforeCounter) EvaluateApproval(_ context.Context, c policy.Call) (*policy.ApprovalRequest, error) {
	if c.Tool == "ask" {
		return &policy.ApprovalRequest{Message: "ok?", Rule: "ask"}, nil
	}
	return nil, nil
}

func (p *beforeCounter) BeforeCall(context.Context, policy.Call) error {
	*p.n++
	return errors.New(p.refuse)
}

// panicky panics in the checks named by its fields.
type panicky struct {
	policy.Base
	before, after bool
}

func (p panicky) BeforeCall(context.Context, policy.Call) error {
	if p.before {
		panic("policy bug before")
	}
	return nil
}

func (p panicky) AfterCall(_ context.Context, _ policy.Call, out json.RawMessage) error {
	if p.after {
		panic("policy bug after: " + string(out))
	}
	return nil
}

// A check that panics refuses the call instead of failing the activity,
// whose retry would run the tool again; the refusal does not quote the
// output the panic did.
func TestRunToolCheckedRefusesWhenACheckPanics(t *testing.T) {
	ran := 0
	tools := tool.NewRegistry()
	tools.MustRegister(tool.Tool{Name: "counted", Options: tool.Options{Idempotent: true}, Run: func(context.Context, tool.Input) (json.RawMessage, error) {
		ran++
		return json.RawMessage(`{"key":"sk-live-123"}`), nil
	}})
	a := &Activities{Policy: panicky{after: true}, Tools: tools}
	var out CheckedOutput
	require.NoError(t, run(t, a, a.RunToolChecked, RunToolInput{Call: policy.Call{ID: "c1", Tool: "counted"}}, &out))
	assert.Equal(t, "the after-call checks failed (see the worker's log)", out.After.Refusal)
	assert.Empty(t, out.After.Output)
	assert.Equal(t, 1, ran, "the tool ran once and the activity did not fail, so nothing runs it again")
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "sk-live-123")

	a.Policy = panicky{before: true}
	out = CheckedOutput{}
	require.NoError(t, run(t, a, a.RunToolChecked, RunToolInput{Call: policy.Call{ID: "c2", Tool: "counted"}, BeforeCall: true}, &out))
	assert.Equal(t, "the before-call checks failed (see the worker's log)", out.Refused)
	assert.Equal(t, 1, ran, "refused before the call: the tool did not run")
}
