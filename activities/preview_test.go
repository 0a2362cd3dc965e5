package activities

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

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
	claim := &policy.Preview{Kind: policy.PreviewDiff, Text: "+token: s3cret\n", ComputedBy: policy.ComputedByToolgate,
		Target: &policy.PreviewTarget{Path: "a.txt", File: "important.txt"}} // a target is toolgate's record, never the agent's
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

// RunTool hands the tool the files its call's previews showed, so that
// write_file can refuse to write any other; and it still takes the bare
// call that workflows scheduled before.
func TestRunToolHandsTheToolWhatItsPreviewsShowed(t *testing.T) {
	var got []tool.Input
	r := tool.NewRegistry()
	r.MustRegister(tool.Tool{Name: "write", Run: func(_ context.Context, in tool.Input) (json.RawMessage, error) {
		got = append(got, in)
		return json.RawMessage(`{}`), nil
	}})
	a := &Activities{Policy: askButEcho{}, Tools: r}
	call := policy.Call{ID: "c1", Session: "s1", Tool: "write", Args: json.RawMessage(`{"path":"link.txt"}`)}
	shown := &policy.PreviewTarget{Path: "link.txt", File: "target.txt", Link: true}
	ran := &policy.PreviewTarget{Path: "link.txt", File: "important.txt", Link: true}
	in := RunToolInput{Call: call, Preview: &policy.Preview{Kind: policy.PreviewDiff, Target: ran},
		PreviewShown: &policy.Preview{Kind: policy.PreviewDiff, Target: shown}}
	require.NoError(t, run(t, a, a.RunTool, in, nil))
	require.NoError(t, run(t, a, a.RunTool, RunToolInput{Call: call, Preview: &policy.Preview{Kind: policy.PreviewCommand}}, nil))
	require.Len(t, got, 2)
	assert.Equal(t, []policy.PreviewTarget{*shown, *ran}, got[0].Previewed, "what the approvers saw, then what the edit's preview showed")
	assert.Equal(t, "c1", got[0].CallID)
	assert.JSONEq(t, `{"path":"link.txt"}`, string(got[0].Args))
	assert.Empty(t, got[1].Previewed, "a preview of no file names none")

	old, err := converter.GetDefaultDataConverter().ToPayloads(call)
	require.NoError(t, err)
	var decoded RunToolInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(old, &decoded), "an input scheduled before previews were handed over")
	assert.Equal(t, RunToolInput{Call: call}, decoded)
}

// grantsOffline asks about every call and takes the network from shell's.
type grantsOffline struct{ askButEcho }

func (grantsOffline) SandboxFor(c policy.Call) *policy.SandboxGrant {
	if c.Tool != "shell" {
		return nil
	}
	return &policy.SandboxGrant{Read: []string{"/opt/sdk"}, NoNetwork: true}
}

// The preview of a tool that starts a process says how it runs, grants
// included, and the grant goes with the evaluation to the tool; a long
// command cannot push that line out of the preview.
func TestThePreviewSaysHowTheCallsProcessRuns(t *testing.T) {
	reg := func(process tool.Process, cmd string) *tool.Registry {
		r := tool.NewRegistry()
		r.MustRegister(tool.Tool{Name: "shell", Process: process, Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil },
			Preview: func(context.Context, json.RawMessage) (policy.Preview, error) {
				return policy.Preview{Kind: policy.PreviewCommand, Text: "$ " + cmd}, nil
			}})
		return r
	}
	evaluate := func(a *Activities) Evaluation {
		var ev Evaluation
		require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{ID: "c1", Tool: "shell", Args: json.RawMessage(`{}`)}}, &ev))
		return ev
	}

	ev := evaluate(&Activities{Policy: askButEcho{}, Tools: reg(tool.Sandboxed, "make")})
	assert.Equal(t, "$ make\nasked because: deploys need a person\nruns sandboxed: writes only the workspace; network allowed", ev.Preview.Text)
	assert.Nil(t, ev.Sandbox)

	ev = evaluate(&Activities{Policy: grantsOffline{}, Tools: reg(tool.Sandboxed, strings.Repeat("x", policy.MaxPreviewBytes))})
	assert.True(t, ev.Preview.Truncated)
	assert.True(t, strings.HasSuffix(ev.Preview.Text, "\nruns sandboxed: writes only the workspace; also reads /opt/sdk; no network"), ev.Preview.Text[len(ev.Preview.Text)-200:])
	assert.LessOrEqual(t, len(ev.Preview.Text), policy.MaxPreviewBytes, "the line is kept within the bound")
	assert.Equal(t, &policy.SandboxGrant{Read: []string{"/opt/sdk"}, NoNetwork: true}, ev.Sandbox)

	ev = evaluate(&Activities{Policy: askButEcho{}, Tools: reg(tool.Unsandboxed, "make")})
	assert.Contains(t, ev.Preview.Text, "\nruns UNSANDBOXED (the worker's --unsandboxed-tools)")

	ev = evaluate(&Activities{Policy: askButEcho{}, Tools: reg(tool.NoProcess, "make")})
	assert.NotContains(t, ev.Preview.Text, "runs ", "a tool that starts no process says nothing of a sandbox")
}
