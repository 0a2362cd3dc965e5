package policy

import "strings"

// SandboxGrant is what a rule grants the process of a call it allows or
// asks about, beyond the sandbox's tight default (package sandbox): the
// workspace read-write, the system's directories read-only, the network
// on. It applies to tools that start a process per call (the built-in
// shell); a nil grant is the default.
type SandboxGrant struct {
	// Read are more directories the process reads and executes.
	Read []string `json:"read,omitempty"`
	// Write are more directories the process reads and writes.
	Write []string `json:"write,omitempty"`
	// NoNetwork refuses the process every TCP connect and bind.
	NoNetwork bool `json:"no_network,omitempty"`
}

// SandboxPolicy is a policy whose rules may grant a call's process more
// than the default, or take its network away.
type SandboxPolicy interface {
	// SandboxFor is the grant of the rule that allows or asks about call;
	// nil: the default.
	SandboxFor(call Call) *SandboxGrant
}

// SandboxOf is p's grant for call, nil when p grants none.
func SandboxOf(p ToolPolicy, call Call) *SandboxGrant {
	if s, ok := p.(SandboxPolicy); ok {
		return s.SandboxFor(call)
	}
	return nil
}

// Describe says in words how a call's process runs, as the preview a
// person approves shows it: "runs sandboxed: writes only the workspace;
// network allowed". unsandboxed says the worker runs tools without the
// sandbox (--unsandboxed-tools).
func (g *SandboxGrant) Describe(unsandboxed bool) string {
	if unsandboxed {
		return "runs UNSANDBOXED (the worker's --unsandboxed-tools): it reaches whatever the worker's user reaches"
	}
	var b strings.Builder
	b.WriteString("runs sandboxed: ")
	if g == nil || len(g.Write) == 0 {
		b.WriteString("writes only the workspace")
	} else {
		b.WriteString("writes the workspace and " + strings.Join(g.Write, ", "))
	}
	if g != nil && len(g.Read) > 0 {
		b.WriteString("; also reads " + strings.Join(g.Read, ", "))
	}
	if g != nil && g.NoNetwork {
		b.WriteString("; no network")
	} else {
		b.WriteString("; network allowed")
	}
	return b.String()
}
