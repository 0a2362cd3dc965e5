package rules

import "github.com/toolgate/toolgate/policy"

// Explained is one rule as `toolgate policy explain` shows it: what it
// matches and what it does, its process's sandbox included.
type Explained struct {
	Name   string   `json:"name"`
	Line   int      `json:"line,omitempty"`
	Action Action   `json:"action"`
	Tools  []string `json:"tools,omitempty"`
	When   string   `json:"when,omitempty"`
	Reason string   `json:"reason,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Approvals is how many approvals an ask rule needs (four eyes: 2+).
	Approvals int `json:"approvals,omitempty"`
	// Passkey says that every approval of an ask rule's calls needs a
	// passkey of the approver (passkey: true; ApprovalRequest.Passkey).
	Passkey bool `json:"passkey,omitempty"`
	// Sandbox is how the processes of the calls it allows or asks about
	// run (policy.SandboxGrant.Describe); empty for a deny rule.
	Sandbox string               `json:"sandbox,omitempty"`
	Grant   *policy.SandboxGrant `json:"grant,omitempty"`
	// Shadow: the rule is in shadow mode, evaluated and recorded, never
	// enforced.
	Shadow bool `json:"shadow,omitempty"`
}

// Explain lists the rules in the order they are tried (deny, ask, allow,
// then the default), each with what it grants the processes of its calls.
func (p *Policy) Explain() []Explained {
	var out []Explained
	all := p.tiers
	if p.shadowed != nil {
		all = p.shadowed.tiers // shadow rules are listed where they would be tried
	}
	for _, tier := range [][]*rule{all.deny, all.ask, all.allow, {p.fallback}} {
		for _, r := range tier {
			e := Explained{Name: r.name, Line: r.line, Action: r.action, Tools: r.tools, Reason: r.reason, Groups: r.groups, Approvals: r.approvals,
				Passkey: r.action == ActionAsk && r.passkey, Shadow: r.shadow}
			if r.cond != nil {
				e.When = r.cond.src
			}
			if r.action != ActionDeny {
				e.Grant = r.grantOf()
				e.Sandbox = e.Grant.Describe(false)
			}
			out = append(out, e)
		}
	}
	return out
}
