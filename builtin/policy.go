package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/policy"
)

// Rules of the default policy, as recorded in ApprovalRequest.Rule and
// DenyError.Rule.
const (
	RuleWriteFile   = "default/write_file"
	RuleShell       = "default/shell"
	RuleUnknownTool = "default/unknown-tool"
)

// DefaultPolicyVersion is the version the default policy records with its
// decisions.
const DefaultPolicyVersion = "builtin-default/1"

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
// whose path leaves ws is refused at once; any other tool asks, since no
// rule matched it. Its version is DefaultPolicyVersion.
func DefaultPolicy(ws Workspace) policy.ToolPolicy { return &defaultPolicy{ws: ws} }

// Version implements policy.Versioned.
func (p *defaultPolicy) Version() string { return DefaultPolicyVersion }

// EvaluateApproval implements policy.ToolPolicy.
func (p *defaultPolicy) EvaluateApproval(_ context.Context, call policy.Call) (*policy.ApprovalRequest, error) {
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
	default:
		return &policy.ApprovalRequest{
			Message: fmt.Sprintf("No rule matched tool %q; allow this call?", call.Tool),
			Rule:    RuleUnknownTool,
		}, nil
	}
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
