package activities

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// previewTimeout bounds a tool's preview: the call's evaluation waits for
// it.
const previewTimeout = 5 * time.Second

// preview is what the call will change, passed through the output
// middleware (the policy's redaction) and bounded; nil when nobody can
// tell. A tool toolgate runs previews itself; for a tool the agent runs,
// the agent's preview (its claim) is all there is. req is the policy's
// question, if it asks: a command's preview says why.
func (a *Activities) preview(ctx context.Context, call policy.Call, req *policy.ApprovalRequest, grant *policy.SandboxGrant, agents *policy.Preview) *policy.Preview {
	var p policy.Preview
	process := ""
	switch {
	case call.Execution == policy.ExecutionAgent && agents != nil:
		p = *agents
		p.ComputedBy = policy.ComputedByAgent
		p.Target = nil // toolgate's record of what it previewed, never the agent's
	case call.Execution == policy.ExecutionToolgate:
		t, err := a.Tools.Get(call.Tool)
		if err != nil || t.Preview == nil {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, previewTimeout)
		defer cancel()
		if p, err = t.Preview(pctx, call.Args); err != nil {
			p = policy.Preview{Kind: policy.PreviewText, Text: "toolgate could not tell what this call will change: " + err.Error()}
		}
		if p.Kind == policy.PreviewCommand && req != nil && req.Message != "" {
			p.Text += "\nasked because: " + req.Message
		}
		if t.Process != tool.NoProcess {
			// What a person approves says how it runs: it is what runs.
			// Kept whole by the bound, so a long command cannot cut it off.
			process = "\n" + grant.Describe(t.Process == tool.Unsandboxed)
		}
		p.ComputedBy = policy.ComputedByToolgate
	default:
		return nil
	}
	p.Text = a.redactText(ctx, call, p.Text)
	p = p.BoundedWith(process)
	return &p
}

// redact passes text through the output middleware, as a JSON string;
// a middleware that fails leaves nothing of it.
func (a *Activities) redactText(ctx context.Context, call policy.Call, text string) string {
	raw, err := json.Marshal(text)
	if err != nil {
		return ""
	}
	if raw, err = a.redact(ctx, call, raw); err != nil {
		return "(the preview is withheld: the output middleware failed on it)"
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		return "(the preview is withheld: the output middleware did not return text)"
	}
	return out
}
