package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

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
func CheckOptions(workspace string) Options {
	if workspace == "" {
		workspace = "."
	}
	return Options{Workspace: workspace}
}

// Parse parses a policy file's content; name is the file's name, used in
// error messages, and its directory anchors relative workspace paths. A bad
// file is refused with one "name:line: what is wrong" line per problem
// (joined with errors.Join), including rules whose examples fail.
func Parse(name string, data []byte, opts Options) (*Policy, error) {
	if name == "" {
		name = "policy"
	}
	l := &loader{file: name, dir: filepath.Dir(name)}
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

// fileError is one problem of a file, at a line.
type fileError struct {
	file string
	line int
	msg  string
}

func (e *fileError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg)
	}
	return e.file + ": " + e.msg
}

// loader walks the YAML nodes of a file, collecting problems with lines.
type loader struct {
	file string
	dir  string
	errs []error
}

func (l *loader) errorf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.errs = append(l.errs, &fileError{file: l.file, line: line, msg: fmt.Sprintf(format, args...)})
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data into the root node of its only document.
func (l *loader) document(data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The YAML parser reads untrusted files; a bug in it must not bring
		// down a server that hot-reloads its policy.
		if x := recover(); x != nil {
			root, err = nil, &fileError{file: l.file, msg: fmt.Sprintf("the YAML parser failed: %v", x)}
		}
	}()
	syntax := func(err error) error {
		if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return &fileError{file: l.file, line: line, msg: m[2]}
		}
		return &fileError{file: l.file, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &fileError{file: l.file, msg: "the file is empty"}
		}
		return nil, syntax(err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, &fileError{file: l.file, line: next.Line, msg: "a policy file holds one YAML document; remove the second"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntax(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &fileError{file: l.file, msg: "the file is empty"}
	}
	root = doc.Content[0]
	// Aliases are refused: they make line numbers ambiguous, and expanding
	// them can blow up (billion laughs).
	if a := findAlias(root, 0); a != nil {
		return nil, &fileError{file: l.file, line: a.Line, msg: "YAML aliases (*name) are not supported in a policy file"}
	}
	return root, nil
}

func findAlias(n *yaml.Node, depth int) *yaml.Node {
	if n.Kind == yaml.AliasNode || depth > 10000 {
		return n
	}
	for _, c := range n.Content {
		if a := findAlias(c, depth+1); a != nil {
			return a
		}
	}
	return nil
}

// fields checks that n is a mapping with only the allowed keys, each once,
// and returns the values by key. A missing or null n is an empty mapping.
func (l *loader) fields(n *yaml.Node, what string, allowed ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n == nil || isNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		l.errorf(n, "%s must be a mapping of fields, not %s", what, describe(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.errorf(k, "%s: field names must be plain strings", what)
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			l.errorf(k, "%s: unknown field %q (known fields: %s)", what, k.Value, strings.Join(allowed, ", "))
			continue
		}
		if _, dup := out[k.Value]; dup {
			l.errorf(k, "%s: field %q is given twice", what, k.Value)
			continue
		}
		out[k.Value] = v
	}
	return out
}

// peekName returns the name field of a mapping, for messages about it.
func peekName(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode {
			return strings.TrimSpace(v.Value)
		}
	}
	return ""
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}

// str returns a scalar's text; a null or absent node is "".
func (l *loader) str(n *yaml.Node, what string) string {
	if n == nil || isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		l.errorf(n, "%s must be a string, not %s", what, describe(n))
		return ""
	}
	return n.Value
}

// strList returns a list of non-empty strings; a single string is a list
// of one.
func (l *loader) strList(n *yaml.Node, what string) []string {
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		if n.Value == "" {
			l.errorf(n, "%s must not be empty", what)
			return nil
		}
		return []string{n.Value}
	}
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, "%s must be a list of strings, not %s", what, describe(n))
		return nil
	}
	var out []string
	for _, e := range n.Content {
		if e.Kind != yaml.ScalarNode || isNull(e) || e.Value == "" {
			l.errorf(e, "%s: each entry must be a non-empty string, not %s", what, describe(e))
			continue
		}
		out = append(out, e.Value)
	}
	return out
}

// duration parses a Go duration such as "90s" or "2h"; it must be > 0.
func (l *loader) duration(n *yaml.Node, what string) time.Duration {
	s := l.str(n, what)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.errorf(n, "%s: %q is not a duration (write e.g. 90s, 30m or 2h)", what, s)
		return 0
	}
	if d <= 0 {
		l.errorf(n, "%s must be positive, not %s", what, s)
		return 0
	}
	return d
}

// positiveInt parses a whole number > 0.
func (l *loader) positiveInt(n *yaml.Node, what string) int {
	if n == nil || isNull(n) {
		return 0
	}
	i, err := strconv.ParseInt(n.Value, 0, 64)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || err != nil || i > math.MaxInt32 {
		l.errorf(n, "%s must be a whole number, not %s", what, describe(n))
		return 0
	}
	if i <= 0 {
		l.errorf(n, "%s must be positive, not %d", what, i)
		return 0
	}
	return int(i)
}

func (l *loader) boolean(n *yaml.Node, what string, def bool) bool {
	if n == nil || isNull(n) {
		return def
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		l.errorf(n, "%s must be true or false, not %s", what, describe(n))
		return def
	}
	return b
}

// globs parses tool globs (path.Match syntax).
func (l *loader) globs(n *yaml.Node, what string) []string {
	globs := l.strList(n, what)
	for _, g := range globs {
		if _, err := path.Match(g, ""); err != nil {
			l.errorf(n, "%s: bad glob %q: %v", what, g, err)
		}
	}
	return globs
}

func (l *loader) regexp(n *yaml.Node, what string) *regexp.Regexp {
	s := l.str(n, what)
	if s == "" {
		return nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		l.errorf(n, "%s: bad regular expression: %v", what, err)
		return nil
	}
	return re
}

// absDir makes a workspace directory absolute: relative to base when it
// comes from the file, to the working directory otherwise.
func (l *loader) absDir(n *yaml.Node, dir, base string) string {
	if dir == "" {
		return ""
	}
	if !filepath.IsAbs(dir) && base != "" {
		dir = filepath.Join(base, dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		l.errorf(n, "directory %q: %v", dir, err)
		return ""
	}
	return abs
}

var topFields = []string{"workspace", "default", "rules", "redact", "after", "guards", "quotas"}

var ruleFields = []string{
	"name", "tool", "tools", "when", "action", "reason", "message", "groups", "timeout",
	"on_timeout", "remind_after", "escalate_after", "escalate_to", "sticky_by", "examples",
}

// actionFields are the fields of a rule that say what it does; the
// default action takes these.
var actionFields = []string{
	"action", "reason", "message", "groups", "timeout",
	"on_timeout", "remind_after", "escalate_after", "escalate_to", "sticky_by",
}

// askOnly are the fields that only an ask rule may set.
var askOnly = []string{"message", "groups", "timeout", "on_timeout", "remind_after", "escalate_after", "escalate_to", "sticky_by"}

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
	p.fallback = l.defaultRule(top["default"])
	p.byName[RuleDefault] = p.fallback
	l.rules(p, top["rules"])
	p.redactor = l.redact(top["redact"])
	p.after = l.after(top["after"])
	p.guards = l.guards(top["guards"], p.workspace)
	p.quotas = l.quotas(top["quotas"])
	return p
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

// ruleExamples are a rule's examples, kept until they are checked.
type ruleExamples struct {
	rule  *rule
	where string
	cases []example
}

type example struct {
	node  *yaml.Node
	label string // e.g. "match[0]"
	want  bool
	call  policy.Call
	text  string // the example as JSON, for messages
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
		switch r.action {
		case ActionDeny:
			p.deny = append(p.deny, r)
		case ActionAsk:
			p.ask = append(p.ask, r)
		case ActionAllow:
			p.allow = append(p.allow, r)
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

func (l *loader) examples(n *yaml.Node, where string) []example {
	f := l.fields(n, where+": examples", "match", "no_match")
	var out []example
	for _, list := range []string{"match", "no_match"} {
		ln := f[list]
		if ln == nil || isNull(ln) {
			continue
		}
		if ln.Kind != yaml.SequenceNode {
			l.errorf(ln, "%s: examples: %s must be a list of calls, not %s", where, list, describe(ln))
			continue
		}
		for i, en := range ln.Content {
			ex := example{node: en, label: fmt.Sprintf("%s[%d]", list, i), want: list == "match"}
			what := where + ": example " + ex.label
			ef := l.fields(en, what, "tool", "args", "session", "requester")
			if en.Kind != yaml.MappingNode {
				continue
			}
			ex.call.Tool = l.str(ef["tool"], what+": tool")
			if ex.call.Tool == "" {
				l.errorf(en, "%s: tool is missing", what)
			}
			ex.call.Session = l.str(ef["session"], what+": session")
			ex.call.Requester = l.str(ef["requester"], what+": requester")
			args := map[string]any{}
			if an := ef["args"]; an != nil && !isNull(an) {
				if an.Kind != yaml.MappingNode {
					l.errorf(an, "%s: args must be a mapping, not %s", what, describe(an))
					continue
				}
				v, ok := l.plain(an, what+": args")
				if !ok {
					continue
				}
				args = v.(map[string]any)
			}
			raw, err := json.Marshal(args)
			if err != nil {
				l.errorf(en, "%s: args cannot be written as JSON: %v", what, err)
				continue
			}
			ex.call.Args = raw
			ex.call.ID = "example-" + ex.label
			text, _ := json.Marshal(struct {
				Tool      string          `json:"tool"`
				Args      json.RawMessage `json:"args"`
				Session   string          `json:"session,omitempty"`
				Requester string          `json:"requester,omitempty"`
			}{ex.call.Tool, raw, ex.call.Session, ex.call.Requester})
			ex.text = string(text)
			out = append(out, ex)
		}
	}
	return out
}

// plain converts a YAML node to the JSON value it denotes.
func (l *loader) plain(n *yaml.Node, what string) (any, bool) {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				l.errorf(k, "%s: keys must be strings", what)
				return nil, false
			}
			v, ok := l.plain(n.Content[i+1], what)
			if !ok {
				return nil, false
			}
			m[k.Value] = v
		}
		return m, true
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, ok := l.plain(c, what)
			if !ok {
				return nil, false
			}
			s = append(s, v)
		}
		return s, true
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, true
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				return i, true
			}
			var f float64
			if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
		case "!!float":
			var f float64
			if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
			l.errorf(n, "%s: %s is not a JSON number", what, n.Value)
			return nil, false
		}
		return n.Value, true
	}
	l.errorf(n, "%s: unsupported YAML", what)
	return nil, false
}

// checkExample runs one example against its rule alone.
func (l *loader) checkExample(r *rule, where string, ex example, workspace string) {
	in := newInput(ex.call, workspace)
	got, err := r.matches(in)
	switch {
	case err != nil:
		l.errorf(ex.node, "%s: example %s %s: the condition fails on it: %v", where, ex.label, ex.text, err)
		return
	case got && !ex.want:
		l.errorf(ex.node, "%s: example %s %s matches the rule, but is listed under no_match", where, ex.label, ex.text)
		return
	case !got && ex.want:
		why := "the condition is false"
		if !matchAny(r.tools, ex.call.Tool) {
			why = fmt.Sprintf("tool %q is not one of %s", ex.call.Tool, strings.Join(r.tools, ", "))
		}
		l.errorf(ex.node, "%s: example %s %s does not match the rule (%s)", where, ex.label, ex.text, why)
		return
	}
	if got && r.action == ActionAsk && r.message != nil {
		if _, err := r.render(in); err != nil {
			l.errorf(ex.node, "%s: example %s %s: the message template fails on it: %v", where, ex.label, ex.text, err)
		}
	}
}

func (l *loader) redact(n *yaml.Node) *redactor {
	f := l.fields(n, "redact", "builtin", "disable", "patterns")
	r := &redactor{}
	builtin := l.boolean(f["builtin"], "redact: builtin", true)
	disable := l.strList(f["disable"], "redact: disable")
	known := builtinPatternNames()
	for _, d := range disable {
		if !slices.Contains(known, d) {
			l.errorf(f["disable"], "redact: disable: unknown built-in pattern %q (known: %s)", d, strings.Join(known, ", "))
		}
	}
	if builtin {
		for _, p := range builtinPatterns {
			if !slices.Contains(disable, p.name) {
				r.patterns = append(r.patterns, p)
			}
		}
		r.keys = !slices.Contains(disable, PatternCredential)
	}
	pn := f["patterns"]
	if pn == nil || isNull(pn) {
		return r
	}
	if pn.Kind != yaml.SequenceNode {
		l.errorf(pn, "redact: patterns must be a list, not %s", describe(pn))
		return r
	}
	names := map[string]bool{}
	for i, en := range pn.Content {
		where := fmt.Sprintf("redact: patterns[%d]", i)
		pf := l.fields(en, where, "name", "regex")
		if en.Kind != yaml.MappingNode {
			continue
		}
		name := l.str(pf["name"], where+": name")
		switch {
		case name == "":
			l.errorf(en, "%s: name is missing", where)
		case !patternNameRe.MatchString(name):
			l.errorf(pf["name"], "%s: name %q may only hold letters, digits, _, . and -", where, name)
		case names[name] || slices.Contains(known, name):
			l.errorf(pf["name"], "%s: the name %q is already used", where, name)
		}
		names[name] = true
		if pf["regex"] == nil {
			l.errorf(en, "%s: regex is missing", where)
			continue
		}
		re := l.regexp(pf["regex"], where+": regex")
		if re == nil {
			continue
		}
		if re.MatchString("") {
			l.errorf(pf["regex"], "%s: the regex matches the empty string", where)
			continue
		}
		p := redactionPattern{name: name, re: re}
		if g := re.SubexpIndex("secret"); g > 0 {
			p.groups = []int{g}
		}
		r.patterns = append(r.patterns, p)
	}
	return r
}

var patternNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (l *loader) after(n *yaml.Node) []*afterRule {
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, "after must be a list, not %s", describe(n))
		return nil
	}
	var out []*afterRule
	names := map[string]bool{}
	for i, en := range n.Content {
		where := fmt.Sprintf("after[%d]", i)
		if name := peekName(en); name != "" && !names[name] {
			where = fmt.Sprintf("after-call rule %q", name)
		}
		f := l.fields(en, where, "name", "tools", "max_output_bytes", "reject_pattern", "reason")
		if en.Kind != yaml.MappingNode {
			continue
		}
		a := &afterRule{name: strings.TrimSpace(l.str(f["name"], where+": name"))}
		switch {
		case a.name == "":
			l.errorf(en, "%s: name is missing", where)
		case names[a.name]:
			l.errorf(f["name"], "%s: another after-call rule is named %q", where, a.name)
		}
		names[a.name] = true
		a.tools = l.globs(f["tools"], where+": tools")
		a.maxBytes = l.positiveInt(f["max_output_bytes"], where+": max_output_bytes")
		a.reject = l.regexp(f["reject_pattern"], where+": reject_pattern")
		a.reason = strings.TrimSpace(l.str(f["reason"], where+": reason"))
		if a.reason == "" {
			a.reason = defaultRejectReason
		}
		if f["max_output_bytes"] == nil && f["reject_pattern"] == nil {
			l.errorf(en, "%s: give max_output_bytes, reject_pattern or both", where)
		}
		out = append(out, a)
	}
	return out
}

func (l *loader) guards(n *yaml.Node, workspace string) *guards {
	if n == nil {
		// The built-in tools' paths are confined all the same.
		return &guards{root: workspace}
	}
	f := l.fields(n, "guards", "workspace_root", "path_args", "protected_paths")
	g := &guards{root: workspace, pathArgs: []string{"path"}}
	if rn := f["workspace_root"]; rn != nil {
		if root := l.absDir(rn, l.str(rn, "guards: workspace_root"), l.dir); root != "" {
			g.root = root
		}
	}
	if f["path_args"] != nil {
		g.pathArgs = l.strList(f["path_args"], "guards: path_args")
	}
	for _, glob := range l.strList(f["protected_paths"], "guards: protected_paths") {
		glob = strings.TrimPrefix(glob, "/") // globs are anchored at the root anyway
		if err := validPathGlob(glob); err != nil {
			l.errorf(f["protected_paths"], "guards: protected_paths: %v", err)
			continue
		}
		g.protected = append(g.protected, glob)
	}
	return g
}

func (l *loader) quotas(n *yaml.Node) []Quota {
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, "quotas must be a list, not %s", describe(n))
		return nil
	}
	var out []Quota
	names := map[string]bool{}
	for i, en := range n.Content {
		where := fmt.Sprintf("quotas[%d]", i)
		if name := peekName(en); name != "" && !names[name] {
			where = fmt.Sprintf("quota %q", name)
		}
		f := l.fields(en, where, "name", "tools", "max", "per")
		if en.Kind != yaml.MappingNode {
			continue
		}
		q := Quota{Name: strings.TrimSpace(l.str(f["name"], where+": name"))}
		switch {
		case q.Name == "":
			l.errorf(en, "%s: name is missing", where)
		case names[q.Name]:
			l.errorf(f["name"], "%s: another quota is named %q", where, q.Name)
		}
		names[q.Name] = true
		q.Tools = l.globs(f["tools"], where+": tools")
		if len(q.Tools) == 0 && f["tools"] == nil {
			l.errorf(en, "%s: tools is missing", where)
		}
		if f["max"] == nil {
			l.errorf(en, "%s: max is missing", where)
		}
		q.Max = l.positiveInt(f["max"], where+": max")
		if f["per"] == nil {
			l.errorf(en, "%s: per is missing (a duration such as 1h)", where)
		}
		q.Per = l.duration(f["per"], where+": per")
		out = append(out, q)
	}
	return out
}
