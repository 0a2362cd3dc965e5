package rules

import (
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/sandbox"
)

// sandboxFields are the fields of a rule's `sandbox:`.
var sandboxFields = []string{"read", "write", "network"}

// sandbox reads a rule's `sandbox:`: more directories its calls'
// processes read (read) or write (write), and whether they reach the
// network (network, default true). Paths are absolute; one that overlaps
// toolgate's own files (Options.Own) is refused.
func (l *loader) sandbox(n *yaml.Node, where string, own []string) *policy.SandboxGrant {
	where += ": sandbox"
	if n.Kind != yaml.MappingNode {
		l.errorf(n, "%s must be a mapping with fields read, write and network, not %s", where, describe(n))
		return nil
	}
	f := l.fields(n, where, sandboxFields...)
	g := &policy.SandboxGrant{
		Read:      l.grantPaths(f["read"], where+": read"),
		Write:     l.grantPaths(f["write"], where+": write"),
		NoNetwork: !l.boolean(f["network"], where+": network", true),
	}
	if err := (sandbox.Policy{ReadOnly: g.Read, ReadWrite: g.Write}).Overlap(own); err != nil {
		l.errorf(n, "%s: %v", where, err)
	}
	if line := g.Describe(false); len(line) > policy.MaxSandboxLine {
		l.errorf(n, "%s names more than a person approving its calls can be shown (%d bytes said, %d at most)", where, len(line), policy.MaxSandboxLine)
	}
	return g
}

// grantPaths reads a list of absolute directories, cleaned.
func (l *loader) grantPaths(n *yaml.Node, what string) []string {
	paths := l.strList(n, what)
	for i, p := range paths {
		if !filepath.IsAbs(p) {
			l.errorf(n, "%s: %q is not an absolute path", what, p)
		}
		paths[i] = filepath.Clean(p)
	}
	return paths
}

// SandboxFor implements policy.SandboxPolicy: the grant of the rule that
// allows or asks about call, nil for the default or a denied call.
func (p *Policy) SandboxFor(call policy.Call) *policy.SandboxGrant {
	return p.Evaluate(call).Sandbox
}

// grantOf is a copy of r's grant for a verdict.
func (r *rule) grantOf() *policy.SandboxGrant {
	if r == nil || r.sandbox == nil {
		return nil
	}
	g := *r.sandbox
	g.Read, g.Write = append([]string(nil), g.Read...), append([]string(nil), g.Write...)
	return &g
}
