package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/toolgate/toolgate/policy"
)

// Rules of the default policy, as recorded in ApprovalRequest.Rule and
// DenyError.Rule.
const (
	RuleWriteFile   = "default/write_file"
	RuleShell       = "default/shell"
	RuleUnknownTool = "default/unknown-tool"
	// RuleAnnotatedTool asks about a registered tool whose annotations do
	// not say it is read-only (say, an MCP server's tool).
	RuleAnnotatedTool = "default/annotated-tool"
)

// DefaultPolicyVersion is the version the default policy records with its
// decisions. Version 2 judges agent-executed calls and annotated tools.
const DefaultPolicyVersion = "builtin-default/2"

// defaultPolicy is the policy DefaultPolicy returns.
type defaultPolicy struct {
	policy.Base
	ws Workspace
}

var (
	_ policy.ToolPolicy = (*defaultPolicy)(nil)
	_ policy.Versioned  = (*defaultPolicy)(nil)
)

// DefaultPolicy returns the policy for the built-in tools: echo, read_file
// and list_dir run without asking (the tools themselves refuse paths
// outside ws); write_file and shell ask a person, except that a write_file
// whose path leaves ws is refused at once. Another registered tool whose
// annotations say readOnlyHint true (and not destructiveHint true) runs
// without asking; one with other annotations asks (RuleAnnotatedTool).
// Any other tool asks, since no rule matched it (RuleUnknownTool); so
// does every agent-executed call, whatever its tool's name, since toolgate
// knows nothing of the tools an agent runs itself. Its version is
// DefaultPolicyVersion.
func DefaultPolicy(ws Workspace) policy.ToolPolicy { return &defaultPolicy{ws: ws} }

// Version implements policy.Versioned.
func (p *defaultPolicy) Version() string { return DefaultPolicyVersion }

// EvaluateApproval implements policy.ToolPolicy.
func (p *defaultPolicy) EvaluateApproval(_ context.Context, call policy.Call) (*policy.ApprovalRequest, error) {
	if call.Execution != policy.ExecutionToolgate {
		// The agent's own "shell" or "read_file" is not toolgate's: none of
		// the rules below, which know toolgate's tools, applies to it.
		return &policy.ApprovalRequest{
			Message: fmt.Sprintf("The agent asks to run its own tool %q, which no rule knows; allow this call? Arguments: %s", call.Tool, argsText(call.Args)),
			Rule:    RuleUnknownTool,
		}, nil
	}
	switch call.Tool {
	case EchoTool, ReadFileTool, ListDirTool:
		return nil, nil
	case WriteFileTool:
		return p.writeFile(call)
	case ShellTool:
		var args struct {
			Command string `json:"command"`
		}
		if err := json.Unmarshal(call.Args, &args); err != nil {
			return nil, &policy.DenyError{Reason: "shell arguments are not valid: " + argsProblem(err), Rule: RuleShell}
		}
		return &policy.ApprovalRequest{
			Message: fmt.Sprintf("Run shell command %q in the workspace?", args.Command),
			Rule:    RuleShell,
		}, nil
	}
	if call.Annotations != nil {
		return p.annotated(call)
	}
	return &policy.ApprovalRequest{
		Message: fmt.Sprintf("No rule matched tool %q; allow this call?", call.Tool),
		Rule:    RuleUnknownTool,
	}, nil
}

// annotated judges a registered tool by its hints: read-only and not
// destructive runs; anything else asks. Hints that are not booleans count
// as absent, and an absent readOnlyHint means the tool may write (MCP's
// default).
func (p *defaultPolicy) annotated(call policy.Call) (*policy.ApprovalRequest, error) {
	readOnly, _ := call.Annotations["readOnlyHint"].(bool)
	destructive, _ := call.Annotations["destructiveHint"].(bool)
	if readOnly && !destructive {
		return nil, nil
	}
	name := fmt.Sprintf("%q", call.Tool)
	if title, _ := call.Annotations["title"].(string); title != "" {
		name = fmt.Sprintf("%q (%s)", call.Tool, title)
	}
	why := "is not marked read-only"
	if destructive {
		why = "may be destructive"
	}
	return &policy.ApprovalRequest{
		Message: fmt.Sprintf("Tool %s %s; allow this call? Arguments: %s", name, why, argsText(call.Args)),
		Rule:    RuleAnnotatedTool,
	}, nil
}

// maxArgsText bounds the arguments quoted in a message.
const maxArgsText = 1024

// argsText shows a call's arguments to a person, compact and bounded.
func argsText(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil || b.Len() == 0 {
		b.Reset()
		b.Write(raw)
	}
	s := b.String()
	if s == "" {
		return "{}"
	}
	if len(s) > maxArgsText {
		cut := maxArgsText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func (p *defaultPolicy) writeFile(call policy.Call) (*policy.ApprovalRequest, error) {
	var args struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Append  bool   `json:"append"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return nil, &policy.DenyError{Reason: "write_file arguments are not valid: " + argsProblem(err), Rule: RuleWriteFile}
	}
	if _, err := p.ws.Resolve(args.Path); errors.Is(err, ErrOutsideWorkspace) {
		return nil, &policy.DenyError{
			Reason: fmt.Sprintf("write_file path %q is outside the workspace", args.Path),
			Rule:   RuleWriteFile,
		}
	}
	// Other resolution problems (say, a parent that is a file) are left to
	// the tool, which reports them; the person still decides the intent.
	verb := "Write"
	if args.Append {
		verb = "Append"
	}
	return &policy.ApprovalRequest{
		Message: fmt.Sprintf("%s %d bytes to %q?", verb, len(args.Content), args.Path),
		Rule:    RuleWriteFile,
	}, nil
}
