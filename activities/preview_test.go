package activities

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// maskSecrets replaces "s3cret" in outputs, as the policy's redaction does.
type maskSecrets struct{}

func (maskSecrets) TransformOutput(_ context.Context, _ policy.Call, out json.RawMessage) (json.RawMessage, int, error) {
	n := strings.Count(string(out), "s3cret")
	return json.RawMessage(strings.ReplaceAll(string(out), "s3cret", "[REDACTED]")), n, nil
}

func previewTools() *tool.Registry {
	noop := func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }
	r := tool.NewRegistry()
	r.MustRegister(
		tool.Tool{Name: "write", Run: noop, Preview: func(_ context.Context, args json.RawMessage) (policy.Preview, error) {
			var a struct{ Content string }
			_ = json.Unmarshal(args, &a)
			return policy.Preview{Kind: policy.PreviewDiff, Text: "+" + a.Content + "\n"}, nil
		}},
		tool.Tool{Name: "shell", Run: noop, Preview: func(context.Context, json.RawMessage) (policy.Preview, error) {
			return policy.Preview{Kind: policy.PreviewCommand, Text: "$ make deploy"}, nil
		}},
		tool.Tool{Name: "broken", Run: noop, Preview: func(context.Context, json.RawMessage) (policy.Preview, error) {
			return policy.Preview{}, errors.New("disk on fire")
		}},
		tool.Tool{Name: "echo", Run: noop, Preview: func(context.Context, json.RawMessage) (policy.Preview, error) {
			panic("a call nobody is asked about is not previewed")
		}},
	)
	return r
}

// askButEcho asks about every tool but echo, which it allows.
type askButEcho struct{ policy.Base }

func (askButEcho) EvaluateApproval(_ context.Context, c policy.Call) (*policy.ApprovalRequest, error) {
	if c.Tool == "echo" {
		return nil, nil
	}
	return &policy.ApprovalRequest{Message: "deploys need a person", Rule: "r"}, nil
}

func TestACallThatAsksCarriesARedactedBoundedPreview(t *testing.T) {
	a := &Activities{Policy: askButEcho{}, Tools: previewTools(), Middleware: []policy.OutputMiddleware{maskSecrets{}}}
	evaluate := func(toolName, args string) Evaluation {
		var ev Evaluation
		require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{ID: "c1", Tool: toolName, Args: json.RawMessage(args)}}, &ev))
		return ev
	}

	ev := evaluate("write", `{"content":"password: s3cret"}`)
	require.NotNil(t, ev.Preview)
	assert.Equal(t, policy.Preview{Kind: policy.PreviewDiff, Text: "+password: [REDACTED]\n", ComputedBy: "toolgate"}, *ev.Preview,
		"the policy's redaction runs before any channel sees it")

	ev = evaluate("write", `{"content":"`+strings.Repeat("x", policy.MaxPreviewBytes)+`"}`)
	assert.True(t, ev.Preview.Truncated)
	assert.LessOrEqual(t, len(ev.Preview.Text), policy.MaxPreviewBytes)

	ev = evaluate("shell", `{}`)
	assert.Equal(t, "$ make deploy\nasked because: deploys need a person", ev.Preview.Text)

	ev = evaluate("broken", `{}`)
	assert.Equal(t, policy.PreviewText, ev.Preview.Kind)
	assert.Contains(t, ev.Preview.Text, "could not tell what this call will change: disk on fire")

	assert.Nil(t, evaluate("echo", `{}`).Preview)
}

func TestAnAgentsPreviewIsShownAsItsClaimAndRedacted(t *testing.T) {
	a := &Activities{Policy: askButEcho{}, Tools: previewTools(), Middleware: []policy.OutputMiddleware{maskSecrets{}}}
	claim := &policy.Preview{Kind: policy.PreviewDiff, Text: "+token: s3cret\n", ComputedBy: policy.ComputedByToolgate}
	var ev Evaluation
	in := EvaluateInput{Call: policy.Call{ID: "c1", Tool: "Edit", Execution: policy.ExecutionAgent, Args: json.RawMessage(`{}`)}, AgentPreview: claim}
	require.NoError(t, run(t, a, a.Evaluate, in, &ev))
	require.NotNil(t, ev.Preview)
	assert.Equal(t, policy.Preview{Kind: policy.PreviewDiff, Text: "+token: [REDACTED]\n", ComputedBy: policy.ComputedByAgent}, *ev.Preview,
		"whatever the agent says it computed, it is the agent's")

	in = EvaluateInput{Call: policy.Call{ID: "c2", Tool: "write", Args: json.RawMessage(`{"content":"mine"}`)}, AgentPreview: claim}
	require.NoError(t, run(t, a, a.Evaluate, in, &ev))
	assert.Equal(t, "+mine\n", ev.Preview.Text, "a tool toolgate runs is previewed by toolgate, never by the agent")
}
