// Package rules is toolgate's policy file: YAML rules that allow, deny or
// ask about tool calls, with CEL conditions, plus built-in guards (workspace
// paths, output redaction, after-call limits) and quotas.
//
// Rules are evaluated in tiers: every deny rule first, then every ask rule,
// then every allow rule; within a tier the first rule that matches (in file
// order) decides. So a broad allow can never override a specific deny, and
// moving rules around in the file cannot silently widen access. When no rule
// matches, the file's default action decides (ask, unless the file says
// otherwise). Guards run before any rule.
//
// A condition that fails at run time (a missing argument, a value of the
// wrong type, arguments that are not a JSON object) never allows a call and
// never crashes: the call asks a person, with a message naming the rule and
// the error. A failing deny rule only asks if no other deny rule matches
// cleanly, since a refusal is stricter than a question.
//
// Conditions see the call's execution ("toolgate" or "agent") and its
// tool's MCP annotations, the four hints defaulted as MCP says. The
// `tools:` section describes tools the agent runs itself (agent-executed
// calls): a JSON Schema for their arguments and how long to wait for the
// agent's report (see AgentTool, CheckAgentArgs and ReportTimeout).
//
// A policy file is checked entirely at load: YAML syntax, unknown fields,
// CEL that does not compile or is not boolean, durations, globs, regular
// expressions, message templates, JSON Schemas, and each rule's examples.
// A bad file is refused with "file:line: what is wrong", and a Reloader
// keeps serving the last good one.
package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// Action is what a rule does with a call it matches.
type Action string

// The actions a rule or the file's default can take.
const (
	// ActionAllow runs the call without asking anyone.
	ActionAllow Action = "allow"
	// ActionDeny refuses the call; the reason goes back to the model.
	ActionDeny Action = "deny"
	// ActionAsk asks a person (or an approval handler) to decide.
	ActionAsk Action = "ask"
)

// Rule names that are not rules of the file.
const (
	// RuleDefault is the name of the file's default action, used when no
	// rule matched.
	RuleDefault = "default"
	// RuleGuards is the name under which the built-in guards refuse calls.
	RuleGuards = "guards"
)

// Options configure Load and Parse.
type Options struct {
	// Workspace is the value of `workspace` in CEL conditions and message
	// templates, and the guards' workspace root, when the file sets none
	// (the file's `workspace:` field wins). Optional; a relative directory
	// is taken from the process's working directory. Conditions that use
	// `workspace` are refused at load if neither the file nor this sets it.
	Workspace string
	// Own are toolgate's own files and directories (keys, tokens,
	// databases): a rule's sandbox grant that reaches one is refused at
	// load. Optional.
	Own []string
	// PublicURL is where people open toolgate (its --public-url), the
	// origin a passkey is bound to. A file with a `passkey: true` rule is
	// refused without it, or when its host is an IP address (browsers
	// refuse one as a passkey's relying party), or when it is plain http
	// on a host other than localhost (browsers offer passkeys only on
	// secure pages). Optional for files without such a rule.
	PublicURL string

	// checking marks the options of a load away from the worker
	// (CheckOptions): there the worker's public URL is not known, so a
	// passkey rule's need of one is checked only if PublicURL is set.
	checking bool
}

// Verdict is what the policy decides about one call.
type Verdict struct {
	// Action is allow, deny or ask.
	Action Action `json:"action"`
	// Rule names the rule that decided: a rule's name, RuleGuards or
	// RuleDefault.
	Rule string `json:"rule"`
	// Reason is the refusal that goes back to the model for deny; for allow
	// and ask it explains the verdict to people (e.g. `policy whatif`).
	Reason string `json:"reason,omitempty"`
	// Request is what a person is asked; set only for ask.
	Request *policy.ApprovalRequest `json:"request,omitempty"`
	// Sandbox is the deciding rule's grant to the call's process (allow
	// and ask); nil: the sandbox's default.
	Sandbox *policy.SandboxGrant `json:"sandbox,omitempty"`
}

// MarshalJSON writes the verdict for people, as `toolgate policy eval`
// prints it: the request's durations the way a policy file writes them
// ("2h", "1h30m"), its timeout even when the rule leaves it to the
// default, and on_timeout by name ("deny" or "allow"). It is for reading,
// not for decoding back into a Verdict.
func (v Verdict) MarshalJSON() ([]byte, error) {
	type request struct {
		Message       string   `json:"message"`
		Groups        []string `json:"groups,omitempty"`
		Timeout       string   `json:"timeout"`
		OnTimeout     string   `json:"on_timeout"`
		StickyKey     string   `json:"sticky_key,omitempty"`
		Rule          string   `json:"rule,omitempty"`
		RemindAfter   string   `json:"remind_after,omitempty"`
		EscalateAfter string   `json:"escalate_after,omitempty"`
		EscalateTo    []string `json:"escalate_to,omitempty"`
		Approvals     int      `json:"approvals,omitempty"`
		Distinct      bool     `json:"distinct_groups,omitempty"`
		User          bool     `json:"user,omitempty"`
		Passkey       bool     `json:"passkey,omitempty"`
	}
	out := struct {
		Action  Action               `json:"action"`
		Rule    string               `json:"rule"`
		Reason  string               `json:"reason,omitempty"`
		Request *request             `json:"request,omitempty"`
		Sandbox *policy.SandboxGrant `json:"sandbox,omitempty"`
	}{Action: v.Action, Rule: v.Rule, Reason: v.Reason, Sandbox: v.Sandbox}
	if r := v.Request; r != nil {
		onTimeout := "deny"
		if r.OnTimeout == policy.TimeoutApprove {
			onTimeout = "allow"
		}
		out.Request = &request{
			Message:       r.Message,
			Groups:        r.Groups,
			Timeout:       formatDuration(r.EffectiveTimeout()),
			OnTimeout:     onTimeout,
			StickyKey:     r.StickyKey,
			Rule:          r.Rule,
			RemindAfter:   formatDuration(r.RemindAfter),
			EscalateAfter: formatDuration(r.EscalateAfter),
			EscalateTo:    r.EscalateTo,
			Approvals:     r.Approvals,
			Distinct:      r.DistinctGroups,
			User:          r.User,
			Passkey:       r.Passkey,
		}
	}
	return json.Marshal(out)
}

// formatDuration writes d as a policy file would, without zero minutes or
// seconds: "2h", "30m", "1h30m", "1m30s"; "" for zero.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	s := d.String() // e.g. "2h0m0s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Schedule is when an ask rule reminds and escalates while a call waits.
// The policy only parses it; the approval workflow acts on it.
type Schedule struct {
	// RemindAfter is when to remind the approvers; zero means never.
	RemindAfter time.Duration `json:"remind_after,omitempty"`
	// EscalateAfter is when to add EscalateTo to the approvers; zero means
	// never. It is set exactly when EscalateTo is.
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	// EscalateTo are the approver groups asked after EscalateAfter.
	EscalateTo []string `json:"escalate_to,omitempty"`
}

// Policy is a loaded policy file. It is immutable and safe for concurrent
// use.
type Policy struct {
	name      string
	version   string
	workspace string
	// tiers are the enforced rules; shadowed is the policy with its
	// shadow rules enforced too (nil without any), for ShadowFor.
	tiers
	shadowed *Policy
	byName   map[string]*rule
	fallback *rule
	guards   *guards
	redactor *redactor
	after    []*afterRule
	quotas   []Quota
	tools    map[string]*agentTool
}

var (
	_ policy.ToolPolicy       = (*Policy)(nil)
	_ policy.Versioned        = (*Policy)(nil)
	_ policy.OutputMiddleware = (*Policy)(nil)
	_ policy.QuotaPolicy      = (*Policy)(nil)
	_ policy.AgentToolPolicy  = (*Policy)(nil)
	_ policy.OutrightDenier   = (*Policy)(nil)
	_ policy.ShadowPolicy     = (*Policy)(nil)
	_ policy.AllowRuler       = (*Policy)(nil)
)

// tiers are rules in the order they are tried: deny, then ask, then
// allow, each in file order.
type tiers struct {
	deny, ask, allow []*rule
}

func (t *tiers) add(r *rule) {
	switch r.action {
	case ActionDeny:
		t.deny = append(t.deny, r)
	case ActionAsk:
		t.ask = append(t.ask, r)
	case ActionAllow:
		t.allow = append(t.allow, r)
	}
}

// AllowRule implements policy.AllowRuler: the rule (or the default) that
// allows call; "" when the file does not allow it.
func (p *Policy) AllowRule(call policy.Call) string {
	if v := p.evaluate(call); v.Action == ActionAllow {
		return v.Rule
	}
	return ""
}

// ShadowFor implements policy.ShadowPolicy: when one of the file's
// `mode: shadow` rules would decide call were it enforced, what it would
// do. Evaluate never applies them.
func (p *Policy) ShadowFor(call policy.Call) *policy.Shadow {
	if p.shadowed == nil {
		return nil
	}
	v := p.shadowed.evaluate(call)
	if r := p.byName[v.Rule]; r == nil || !r.shadow {
		return nil
	}
	return &policy.Shadow{Rule: v.Rule, Action: string(v.Action)}
}

// Name returns the file name the policy was loaded from.
func (p *Policy) Name() string { return p.name }

// Version returns a hash of the file's content, "sha256:" and 12 hex
// digits. It implements policy.Versioned.
func (p *Policy) Version() string { return p.version }

// Workspace returns the workspace the policy's conditions and guards use,
// or "" when none is set.
func (p *Policy) Workspace() string { return p.workspace }

// Quotas returns the file's quotas in file order.
func (p *Policy) Quotas() []Quota {
	out := make([]Quota, len(p.quotas))
	for i, q := range p.quotas {
		q.Tools = append([]string(nil), q.Tools...)
		out[i] = q
	}
	return out
}

// QuotaFor returns the first quota (in file order) that counts tool.
func (p *Policy) QuotaFor(tool string) (Quota, bool) {
	for _, q := range p.quotas {
		if q.Matches(tool) {
			q.Tools = append([]string(nil), q.Tools...)
			return q, true
		}
	}
	return Quota{}, false
}

// SessionQuota implements policy.QuotaPolicy with QuotaFor.
func (p *Policy) SessionQuota(tool string) (policy.Quota, bool) {
	q, ok := p.QuotaFor(tool)
	return policy.Quota{Name: q.Name, Max: q.Max, Per: q.Per}, ok
}

// Schedule returns the reminder and escalation schedule of the named ask
// rule (RuleDefault for the default action). ok is false when the rule does
// not exist or sets none of remind_after, escalate_after and escalate_to.
func (p *Policy) Schedule(rule string) (Schedule, bool) {
	r, ok := p.byName[rule]
	if !ok || r.schedule == nil {
		return Schedule{}, false
	}
	s := *r.schedule
	s.EscalateTo = append([]string(nil), s.EscalateTo...)
	return s, true
}

// Evaluate decides a call: guards first, then the deny, ask and allow tiers,
// then the default action. It never panics and reads nothing but the call,
// except that guards resolve symlinks under the workspace root. The
// built-in file tools' path argument is always confined to the workspace,
// with or without a guards section. A call whose path arguments are to be
// checked but whose arguments are not a JSON object is refused (its paths
// cannot be checked).
//
// A rule whose condition fails on the call (see the package comment) makes
// the call ask a person, with a message naming the rule and the error.
func (p *Policy) Evaluate(call policy.Call) Verdict {
	v := p.evaluate(call)
	if v.Action != ActionDeny {
		v.Sandbox = p.byName[v.Rule].grantOf()
	}
	return v
}

func (p *Policy) evaluate(call policy.Call) Verdict {
	in := newInput(call, p.workspace)
	if v, refused := p.guards.check(in); refused {
		return v
	}
	var failed *rule
	var failure error
	for _, r := range p.deny {
		ok, err := r.matches(in)
		if err != nil {
			if failed == nil {
				failed, failure = r, err
			}
			continue
		}
		if ok {
			return Verdict{Action: ActionDeny, Rule: r.name, Reason: r.reason}
		}
	}
	if failed != nil {
		return p.failedVerdict(failed, failure, in)
	}
	for _, r := range p.ask {
		ok, err := r.matches(in)
		if err != nil {
			return p.failedVerdict(r, err, in)
		}
		if ok {
			return r.askVerdict(in, fmt.Sprintf("rule %q asks", r.name))
		}
	}
	for _, r := range p.allow {
		ok, err := r.matches(in)
		if err != nil {
			return p.failedVerdict(r, err, in)
		}
		if ok {
			return Verdict{Action: ActionAllow, Rule: r.name, Reason: fmt.Sprintf("rule %q allows", r.name)}
		}
	}
	return p.fallbackVerdict(in)
}

// CheckPath refuses a file a tool is about to act on, given where it
// really is (absolute, symlinks resolved): a file outside the workspace,
// or one the guards' protected_paths protect. Evaluate judges the path a
// call names; the built-in tools call CheckPath (as builtin.Workspace's
// Guard) on the file they actually opened, so that a symlink swapped in
// after the evaluation cannot lead them to a protected file. Without a
// workspace it accepts every path.
func (p *Policy) CheckPath(realPath string) error { return p.guards.checkFile(realPath) }

// failedVerdict asks a person about a call on which r's condition failed.
// Its sticky key includes the call's ID, so that a sticky decision taken
// about another call of the tool (say, "approve shell for the session")
// never covers a call that a rule could not judge.
func (p *Policy) failedVerdict(r *rule, err error, in *input) Verdict {
	reason := fmt.Sprintf("the condition of %s rule %q failed on this call: %v", r.action, r.name, err)
	req := &policy.ApprovalRequest{
		Message:   fmt.Sprintf("Rule %q could not judge this call to %s (%v); a person must decide. Arguments: %s", r.name, in.call.Tool, err, in.argsText()),
		StickyKey: in.call.Tool + "|unjudged=" + r.name + "|call=" + in.call.ID,
		Rule:      r.name,
	}
	if r.action == ActionAsk {
		req.Groups = append([]string(nil), r.groups...)
		req.Timeout = r.timeout
	}
	// Nor is it approved with less than a rule that might have judged it
	// needs: a passkey, if a passkey rule is one of them.
	req.Passkey = p.passkeyMayApply(in.call.Tool)
	// OnTimeout stays deny even for an ask rule that says on_timeout: allow:
	// a call the rule could not judge is never approved by silence.
	return Verdict{Action: ActionAsk, Rule: r.name, Reason: reason, Request: req}
}

// passkeyMayApply reports whether a passkey rule might decide a call of
// tool: an ask rule of the tool, or the default, that says passkey: true.
func (p *Policy) passkeyMayApply(tool string) bool {
	if p.fallback.action == ActionAsk && p.fallback.passkey {
		return true
	}
	for _, r := range p.ask {
		if r.passkey && matchAny(r.tools, tool) {
			return true
		}
	}
	return false
}

func (p *Policy) fallbackVerdict(in *input) Verdict {
	r := p.fallback
	switch r.action {
	case ActionAllow:
		return Verdict{Action: ActionAllow, Rule: RuleDefault, Reason: "no rule matched; the default allows"}
	case ActionDeny:
		return Verdict{Action: ActionDeny, Rule: RuleDefault, Reason: r.reason}
	}
	return r.askVerdict(in, "no rule matched; the default asks")
}

// EvaluateApproval implements policy.ToolPolicy: allow returns nil, nil;
// deny a *policy.DenyError naming the rule; ask the verdict's request.
func (p *Policy) EvaluateApproval(_ context.Context, call policy.Call) (*policy.ApprovalRequest, error) {
	return verdictToApproval(p.Evaluate(call))
}

func verdictToApproval(v Verdict) (*policy.ApprovalRequest, error) {
	switch v.Action {
	case ActionAllow:
		return nil, nil
	case ActionDeny:
		return nil, &policy.DenyError{Reason: v.Reason, Rule: v.Rule}
	}
	return v.Request, nil
}

// BeforeCall implements policy.ToolPolicy; the file has no before-call
// rules, so it accepts every call.
func (p *Policy) BeforeCall(context.Context, policy.Call) error { return nil }

// AfterCall implements policy.ToolPolicy: it applies the file's after-call
// rules (in file order) to the output, which output redaction has already
// transformed. A rejection is a *RejectedOutputError.
func (p *Policy) AfterCall(_ context.Context, call policy.Call, output json.RawMessage) error {
	for _, a := range p.after {
		if err := a.check(call.Tool, output); err != nil {
			return err
		}
	}
	return nil
}

// TransformOutput implements policy.OutputMiddleware: it replaces secrets in
// the output's string values with "[REDACTED:<pattern name>]" and returns
// how many it replaced. JSON output stays valid JSON (and is returned
// unchanged, byte for byte, when nothing was redacted); output that is not
// JSON is redacted as text.
func (p *Policy) TransformOutput(_ context.Context, _ policy.Call, output json.RawMessage) (json.RawMessage, int, error) {
	out, n := p.redactor.redact(output)
	return out, n, nil
}

// matchAny reports whether name matches one of the globs (path.Match).
func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
