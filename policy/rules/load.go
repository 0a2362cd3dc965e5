package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/policy"
)

// maxProblems bounds how many problems a refused file reports.
const maxProblems = 20

// Load reads and parses the policy file at path (see Parse).
func Load(path string, opts Options) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return Parse(path, data, opts)
}

// CheckOptions are the options to load a file with away from the worker
// that will serve it, as `toolgate policy check` and `eval` do. A file
// that sets no workspace leaves it to the worker (Options.Workspace); to
// check such a file, workspace (a --workspace flag) stands in, or else the
// current directory, so that conditions reading `workspace`, and their
// examples, are still compiled and run, and path guards judge paths as
// they would in a workspace. A file's own `workspace:` wins over both.
// The worker's public URL is not known either: a `passkey: true` rule is
// taken without one (set PublicURL to check it against one).
func CheckOptions(workspace string) Options {
	if workspace == "" {
		workspace = "."
	}
	return Options{Workspace: workspace, checking: true}
}

// Parse parses a policy file's content; name is the file's name, used in
// error messages, and its directory anchors relative workspace paths. A bad
// file is refused with one "name:line: what is wrong" line per problem
// (joined with errors.Join), including rules whose examples fail.
func Parse(name string, data []byte, opts Options) (*Policy, error) {
	if name == "" {
		name = "policy"
	}
	l := &loader{file: name, dir: filepath.Dir(name), own: opts.Own}
	root, err := l.document(data)
	if err != nil {
		return nil, err
	}
	p := l.policy(root, opts)
	if len(l.errs) > 0 {
		if len(l.errs) > maxProblems {
			more := len(l.errs) - maxProblems
			l.errs = append(l.errs[:maxProblems], fmt.Errorf("%s: and %d more problems", name, more))
		}
		return nil, errors.Join(l.errs...)
	}
	sum := sha256.Sum256(data)
	p.version = "sha256:" + hex.EncodeToString(sum[:])[:12]
	return p, nil
}

var topFields = []string{"workspace", "default", "rules", "tools", "redact", "after", "guards", "quotas"}

var ruleFields = []string{
	"name", "tool", "tools", "when", "action", "reason", "message", "groups", "timeout",
	"on_timeout", "remind_after", "escalate_after", "escalate_to", "sticky_by", "report_timeout", "examples",
	"approvals", "distinct_groups", "user", "passkey", "sandbox", "mode",
}

// actionFields are the fields of a rule that say what it does; the
// default action takes these.
var actionFields = []string{
	"action", "reason", "message", "groups", "timeout",
	"on_timeout", "remind_after", "escalate_after", "escalate_to", "sticky_by",
	"approvals", "distinct_groups", "user", "passkey",
}

// askOnly are the fields that only an ask rule may set.
var askOnly = []string{"message", "groups", "timeout", "on_timeout", "remind_after", "escalate_after", "escalate_to", "sticky_by",
	"approvals", "distinct_groups", "user", "passkey"}

func (l *loader) policy(root *yaml.Node, opts Options) *Policy {
	p := &Policy{name: l.file, byName: map[string]*rule{}}
	if root.Kind != yaml.MappingNode {
		l.errorf(root, "a policy file must be a mapping with fields %s, not %s", strings.Join(topFields, ", "), describe(root))
		return p
	}
	top := l.fields(root, "policy", topFields...)
	if n := top["workspace"]; n != nil {
		p.workspace = l.absDir(n, l.str(n, "workspace"), l.dir)
	}
	if p.workspace == "" && opts.Workspace != "" {
		p.workspace = l.absDir(nil, opts.Workspace, "")
	}
	p.tools = l.tools(top["tools"])
	p.fallback = l.defaultRule(top["default"])
	p.byName[RuleDefault] = p.fallback
	l.rules(p, top["rules"])
	l.passkeyURL(p, opts)
	p.redactor = l.redact(top["redact"])
	p.after = l.after(top["after"])
	p.guards = l.guards(top["guards"], p.workspace)
	p.quotas = l.quotas(top["quotas"])
	if len(l.all.deny)+len(l.all.ask)+len(l.all.allow) > len(p.deny)+len(p.ask)+len(p.allow) {
		shadowed := *p
		shadowed.tiers = l.all
		p.shadowed = &shadowed
	}
	return p
}

// mode reads a rule's mode: enforce (the default) or shadow, which
// evaluates and records the rule without enforcing it.
func (l *loader) mode(n *yaml.Node, where string) (shadow bool) {
	if n == nil {
		return false
	}
	switch m := l.str(n, where+": mode"); m {
	case "enforce":
		return false
	case "shadow":
		return true
	default:
		l.errorf(n, "%s: mode must be enforce or shadow, not %q", where, m)
		return false
	}
}

func (l *loader) defaultRule(n *yaml.Node) *rule {
	r := &rule{name: RuleDefault, action: ActionAsk}
	if n == nil || isNull(n) {
		return r
	}
	where := "default"
	if n.Kind == yaml.ScalarNode {
		r.action = l.action(n, where)
		if r.action == ActionDeny {
			r.reason = "no rule allows this call"
		}
		return r
	}
	f := l.fields(n, where, actionFields...)
	l.actionBody(r, n, f, where)
	if r.action == ActionDeny && r.reason == "" {
		r.reason = "no rule allows this call"
	}
	return r
}

func (l *loader) action(n *yaml.Node, where string) Action {
	switch a := Action(l.str(n, where+": action")); a {
	case ActionAllow, ActionDeny, ActionAsk:
		return a
	case "":
		l.errorf(n, "%s: action is missing (allow, deny or ask)", where)
	default:
		l.errorf(n, "%s: unknown action %q (want allow, deny or ask)", where, a)
	}
	return ""
}

// actionBody reads the action and what goes with it into r.
func (l *loader) actionBody(r *rule, n *yaml.Node, f map[string]*yaml.Node, where string) {
	if f["action"] == nil {
		l.errorf(n, "%s: action is missing (allow, deny or ask)", where)
	} else {
		r.action = l.action(f["action"], where)
	}
	if r.action == "" {
		return // what else is allowed depends on the action
	}
	if r.action != ActionDeny && f["reason"] != nil {
		l.errorf(f["reason"], "%s: reason is only for deny rules (an ask rule has a message)", where)
	}
	if r.action == ActionDeny {
		r.reason = strings.TrimSpace(l.str(f["reason"], where+": reason"))
		if r.reason == "" && r.name != RuleDefault {
			l.errorf(n, "%s: a deny rule needs a reason; it is what the model is told", where)
		}
	}
	if r.action != ActionAsk {
		for _, k := range askOnly {
			if f[k] != nil {
				l.errorf(f[k], "%s: %s is only for ask rules", where, k)
			}
		}
		return
	}
	if n := f["message"]; n != nil {
		src := l.str(n, where+": message")
		// missingkey=error: an argument the call lacks fails the message
		// (which then says so) instead of printing "<no value>".
		t, err := template.New(r.name).Funcs(templateFuncs).Option("missingkey=error").Parse(src)
		if err != nil {
			l.errorf(n, "%s: message template: %v", where, err)
		} else {
			r.message = t
		}
	}
	r.groups = l.strList(f["groups"], where+": groups")
	r.timeout = l.duration(f["timeout"], where+": timeout")
	if n := f["approvals"]; n != nil {
		r.approvals = l.positiveInt(n, where+": approvals")
		if r.approvals > policy.MaxApprovals {
			l.errorf(n, "%s: approvals must be at most %d", where, policy.MaxApprovals)
		}
	}
	if n := f["distinct_groups"]; n != nil {
		r.distinctGroups = l.boolean(n, where+": distinct_groups", false)
		if r.distinctGroups && len(r.groups) < r.approvals {
			l.errorf(n, "%s: distinct_groups needs at least as many groups (%d) as approvals (%d)", where, len(r.groups), r.approvals)
		}
		if r.distinctGroups && r.approvals < 2 {
			l.errorf(n, "%s: distinct_groups is for a rule that needs approvals: 2 or more", where)
		}
	}
	if n := f["user"]; n != nil {
		r.user = l.boolean(n, where+": user", false)
		if r.user && r.approvals > 1 {
			l.errorf(n, "%s: user: true cannot go with approvals: %d; the person running the agent never counts toward four eyes", where, r.approvals)
		}
	}
	if n := f["passkey"]; n != nil {
		r.passkey = l.boolean(n, where+": passkey", false)
		r.passkeyLine = n.Line
		if r.passkey && r.user {
			l.errorf(n, "%s: passkey: true cannot go with user: true; the person running the agent decides in the agent's own client, where no passkey can be asked for", where)
		}
	}
	if n := f["on_timeout"]; n != nil {
		switch s := l.str(n, where+": on_timeout"); s {
		case "deny":
			r.onTimeout = policy.TimeoutDeny
		case "allow", "approve":
			r.onTimeout = policy.TimeoutApprove
		default:
			l.errorf(n, "%s: on_timeout must be deny or allow, not %q", where, s)
		}
	}
	if r.approvals > 1 && r.onTimeout == policy.TimeoutApprove {
		l.errorf(f["on_timeout"], "%s: on_timeout: allow would approve at the deadline a call that needs %d approvals; a four-eyes rule denies on timeout", where, r.approvals)
	}
	if r.passkey && r.onTimeout == policy.TimeoutApprove {
		l.errorf(f["on_timeout"], "%s: on_timeout: allow would approve at the deadline, with no passkey, a call whose every approval needs one (passkey: true)", where)
	}
	r.stickyBy = l.strList(f["sticky_by"], where+": sticky_by")
	for i, field := range r.stickyBy {
		if slices.Contains(r.stickyBy[:i], field) {
			l.errorf(f["sticky_by"], "%s: sticky_by names %q twice", where, field)
		}
	}
	s := Schedule{
		RemindAfter:   l.duration(f["remind_after"], where+": remind_after"),
		EscalateAfter: l.duration(f["escalate_after"], where+": escalate_after"),
		EscalateTo:    l.strList(f["escalate_to"], where+": escalate_to"),
	}
	if (s.EscalateAfter > 0) != (len(s.EscalateTo) > 0) {
		l.errorf(n, "%s: escalate_after and escalate_to go together", where)
	}
	limit := (&policy.ApprovalRequest{Timeout: r.timeout}).EffectiveTimeout()
	if s.RemindAfter >= limit {
		l.errorf(f["remind_after"], "%s: remind_after (%s) must be shorter than the timeout (%s)", where, s.RemindAfter, limit)
	}
	if s.EscalateAfter >= limit {
		l.errorf(f["escalate_after"], "%s: escalate_after (%s) must be shorter than the timeout (%s)", where, s.EscalateAfter, limit)
	}
	if s.RemindAfter > 0 || s.EscalateAfter > 0 || len(s.EscalateTo) > 0 {
		r.schedule = &s
	}
}

func (l *loader) rules(p *Policy, n *yaml.Node) {
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, "rules must be a list, not %s", describe(n))
		return
	}
	var all []ruleExamples
	for i, rn := range n.Content {
		where := fmt.Sprintf("rules[%d]", i)
		if name := peekName(rn); name != "" {
			where = fmt.Sprintf("rule %q", name)
		}
		f := l.fields(rn, where, ruleFields...)
		if rn.Kind != yaml.MappingNode {
			continue
		}
		r := &rule{line: rn.Line}
		r.name = strings.TrimSpace(l.str(f["name"], where+": name"))
		if r.name == "" || r.name == RuleDefault || r.name == RuleGuards || p.byName[r.name] != nil {
			where = fmt.Sprintf("rules[%d]", i)
		}
		switch {
		case r.name == "":
			l.errorf(rn, "%s: name is missing; every rule needs one for approvers and the audit trail", where)
		case r.name == RuleDefault || r.name == RuleGuards:
			l.errorf(f["name"], "%s: the name %q is reserved", where, r.name)
		case p.byName[r.name] != nil:
			l.errorf(f["name"], "%s: another rule is already named %q", where, r.name)
		default:
			p.byName[r.name] = r
		}
		switch {
		case f["tool"] != nil && f["tools"] != nil:
			l.errorf(f["tools"], "%s: give tool or tools, not both", where)
		case f["tool"] != nil:
			r.tools = l.globs(f["tool"], where+": tool")
		case f["tools"] != nil:
			r.tools = l.globs(f["tools"], where+": tools")
		}
		if len(r.tools) == 0 && f["tool"] == nil && f["tools"] == nil {
			l.errorf(rn, "%s: tool is missing (a name or a glob such as fs.* or mcp__github__*)", where)
		}
		if cn := f["when"]; cn != nil {
			r.cond = l.condition(cn, where, p.workspace)
		}
		l.actionBody(r, rn, f, where)
		if n := f["report_timeout"]; n != nil {
			if r.action == ActionDeny {
				l.errorf(n, "%s: report_timeout is only for allow and ask rules (a denied call is never run)", where)
			}
			r.reportTimeout = l.duration(n, where+": report_timeout")
		}
		if n := f["sandbox"]; n != nil {
			if r.action == ActionDeny {
				l.errorf(n, "%s: sandbox is only for allow and ask rules (a denied call is never run)", where)
			}
			r.sandbox = l.sandbox(n, where, l.own)
		}
		r.shadow = l.mode(f["mode"], where)
		l.all.add(r)
		if !r.shadow {
			p.tiers.add(r)
		}
		if en := f["examples"]; en != nil {
			all = append(all, ruleExamples{rule: r, where: where, cases: l.examples(en, where)})
		}
	}
	if len(l.errs) > 0 {
		return // examples of a broken file would only add noise
	}
	for _, re := range all {
		for _, ex := range re.cases {
			l.checkExample(re.rule, re.where, ex, p.workspace)
		}
	}
}

func (l *loader) condition(n *yaml.Node, where, workspace string) *condition {
	src := l.str(n, where+": when")
	if strings.TrimSpace(src) == "" {
		l.errorf(n, "%s: when is empty; remove it to match every call of the tool", where)
		return nil
	}
	c, problems := compileCondition(src)
	for _, pr := range problems {
		line := n.Line
		if pr.line > 0 {
			// Block scalars (| and >) start on the line after the indicator.
			if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				line += pr.line
			} else {
				line += pr.line - 1
			}
		}
		col := ""
		if pr.column > 0 {
			col = fmt.Sprintf(" (column %d of the condition)", pr.column)
		}
		l.errs = append(l.errs, &fileError{file: l.file, line: line, msg: fmt.Sprintf("%s: when: %s%s", where, pr.msg, col)})
	}
	if c != nil && c.usesWorkspace && workspace == "" {
		l.errorf(n, "%s: the condition uses workspace, but no workspace is set (set workspace: in the file, or the workspace option)", where)
	}
	return c
}

// passkeyURL refuses the file's passkey rules when the public URL cannot
// carry passkeys (see Options.PublicURL), one problem per rule, at the
// line that says passkey: true.
func (l *loader) passkeyURL(p *Policy, opts Options) {
	if opts.checking && opts.PublicURL == "" {
		return
	}
	problem := passkeyURLProblem(opts.PublicURL)
	if problem == "" {
		return
	}
	var rs []*rule
	for _, r := range append(slices.Clip(p.ask), p.fallback) {
		if r.passkey && r.action == ActionAsk {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *rule) int { return a.passkeyLine - b.passkeyLine })
	for _, r := range rs {
		where := fmt.Sprintf("rule %q", r.name)
		if r == p.fallback {
			where = "default"
		}
		l.errorf(&yaml.Node{Line: r.passkeyLine}, "%s: passkey: true needs %s", where, problem)
	}
}

// passkeyURLProblem says what keeps a public URL from carrying passkeys,
// completing "passkey: true needs ...", or returns "" if nothing does. A
// passkey's relying party is the host people open toolgate at: browsers
// refuse an IP address (and a host the URL standard reads as one, such as
// 127.1), and offer passkeys only on https pages or http://localhost.
func passkeyURLProblem(publicURL string) string {
	const howTo = "start toolgate with --public-url https://HOST"
	if strings.TrimSpace(publicURL) == "" {
		return "a public URL: passkeys are bound to the host people open toolgate at; " + howTo +
			" (browsers refuse an IP address as a passkey's relying party)"
	}
	u, err := url.Parse(publicURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" {
		return fmt.Sprintf("a public URL such as https://HOST, not --public-url %q; %s", publicURL, howTo)
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if isIPHost(host) {
		return fmt.Sprintf("a public URL with a host name, not the IP address %s (--public-url %s): browsers refuse an IP address as a passkey's relying party; %s",
			u.Hostname(), u.Redacted(), howTo)
	}
	if u.Scheme == "http" && host != "localhost" && !strings.HasSuffix(host, ".localhost") {
		return fmt.Sprintf("an https public URL, not --public-url %s: browsers offer passkeys only on secure pages (https, or http://localhost); %s",
			u.Redacted(), howTo)
	}
	return ""
}

// isIPHost reports whether browsers take a URL's host for an IP address:
// an IP literal, or a name whose last label is a number (the URL
// standard parses 127.1 or 0x7f.1 as IPv4).
func isIPHost(host string) bool {
	if net.ParseIP(host) != nil {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true // e.g. an IPv6 address with a zone
	}
	last := host[strings.LastIndex(host, ".")+1:]
	if last == "" {
		return false
	}
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}
