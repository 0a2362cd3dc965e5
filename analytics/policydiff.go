package analytics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/ledger/callrecord"
	"github.com/toolgate/toolgate/policy/rules"
)

// A suggestion's diff is made as a person would edit the file, line by
// line, and is offered only once the edited file loads (rules.Parse, its
// examples included) and, evaluated on the recorded calls, allows the
// calls the suggestion is about and gives every other call the verdict
// the file gives it now.
//
// Ask rules are tried before allow rules (docs/policy.md), so an allow
// rule added for a prefix would never be reached: the diff narrows the
// ask rule's `when` so that the prefix no longer asks. Where nothing
// after it allows those calls (the default asks), it adds an allow rule
// with the same tools and exactly the narrowed-away condition.

// PolicyFile is the policy file suggestions are written against.
type PolicyFile struct {
	// Name is the file's name; the diff's headers carry its base name.
	Name string
	Data []byte
	// Workspace stands in for the worker's workspace when the file sets
	// none (rules.CheckOptions); "" is the current directory.
	Workspace string
}

// askOnly are the fields only an ask rule may have (policy/rules'
// load.go): dropped when a rule becomes an allow rule.
var askOnly = []string{"message", "groups", "timeout", "on_timeout", "remind_after", "escalate_after", "escalate_to", "sticky_by",
	"approvals", "distinct_groups", "user", "passkey"}

// policyEditor edits one policy file.
type policyEditor struct {
	file  PolicyFile
	base  string
	old   *rules.Policy
	lines []string
	// items are the mappings of `rules:`, by line.
	items map[int]*yaml.Node
	// trailingNewline: the file ends with one.
	trailingNewline bool
}

func (pf PolicyFile) editor() (*policyEditor, error) {
	old, err := rules.Parse(pf.Name, pf.Data, rules.CheckOptions(pf.Workspace))
	if err != nil {
		return nil, fmt.Errorf("the policy file does not load: %w", err)
	}
	ed := &policyEditor{file: pf, base: filepath.Base(pf.Name), old: old, items: map[int]*yaml.Node{}}
	if bytes.ContainsRune(pf.Data, '\r') {
		return ed, nil // no line edits in a file with CR line ends; the suggestions say so
	}
	text := string(pf.Data)
	ed.trailingNewline = strings.HasSuffix(text, "\n")
	ed.lines = strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var doc yaml.Node
	if err := yaml.Unmarshal(pf.Data, &doc); err != nil || len(doc.Content) == 0 {
		return ed, nil // rules.Parse read it; nothing to edit is found then
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "rules" && top.Content[i+1].Kind == yaml.SequenceNode {
			for _, item := range top.Content[i+1].Content {
				if item.Kind == yaml.MappingNode {
					ed.items[item.Line] = item
				}
			}
		}
	}
	return ed, nil
}

// propose sets the suggestion's diff, or says why there is none.
func (ed *policyEditor) propose(s *Suggestion, records []callrecord.Record) {
	var ex *rules.Explained
	for _, e := range ed.old.Explain() {
		if e.Name == s.Rule && !e.Shadow {
			ex = &e
			break
		}
	}
	switch {
	case s.Rule == rules.RuleDefault:
		s.NoDiff = "these calls matched no rule and the default asked; write an allow rule for them"
		return
	case ex == nil:
		s.NoDiff = fmt.Sprintf("%s has no enforced rule `%s` (renamed or removed since?)", ed.base, s.Rule)
		return
	case ex.Action != rules.ActionAsk:
		s.NoDiff = fmt.Sprintf("rule `%s` is no longer an ask rule in %s (it says %s)", s.Rule, ed.base, ex.Action)
		return
	case ed.lines == nil:
		s.NoDiff = fmt.Sprintf("%s has CR line ends; edit it by hand", ed.base)
		return
	}
	item := ed.items[ex.Line]
	if item == nil || item.Style&yaml.FlowStyle != 0 {
		s.NoDiff = fmt.Sprintf("rule `%s` is not written one field a line; edit it by hand", s.Rule)
		return
	}
	r := &ruleEdit{ed: ed, ex: *ex, item: item, fields: fieldsOf(item)}
	type attempt struct {
		edits []edit
		want  rules.Explained // the rule as the edit leaves it
		added string          // the rule the edit adds, if any
	}
	var attempts []attempt
	if s.Prefix == "" {
		want := r.ex
		want.Action, want.Groups, want.Approvals, want.Passkey = rules.ActionAllow, nil, 0, false
		attempts = []attempt{{edits: r.allowWhole(), want: want}}
	} else {
		want := r.ex
		want.When = r.and("!(" + underPrefixCEL(s.Prefix) + ")")
		narrow := r.narrow(s.Prefix)
		added, rule := r.allowRule(s.Prefix)
		attempts = []attempt{{edits: narrow, want: want}, {edits: append(slices.Clip(narrow), rule...), want: want, added: added}}
	}
	if r.problem != "" {
		s.NoDiff = r.problem
		return
	}
	for _, a := range attempts {
		text := apply(ed.lines, a.edits)
		checked, allowed, why := ed.check(text, s, records, a.want, a.added)
		if why == "" {
			s.Diff, s.Checked, s.Allowed = unified(ed.base, ed.lines, text, !ed.trailingNewline), checked, allowed
			s.NoDiff = ""
			return
		}
		s.NoDiff = why
	}
}

// check loads the edited file, finds the rule as want says and every
// other rule (but added) as it was, and evaluates the records with it.
func (ed *policyEditor) check(text []string, s *Suggestion, records []callrecord.Record, want rules.Explained, added string) (checked, allowed int, problem string) {
	data := strings.Join(text, "\n")
	if ed.trailingNewline {
		data += "\n"
	}
	edited, err := rules.Parse(ed.file.Name, []byte(data), rules.CheckOptions(ed.file.Workspace))
	if err != nil {
		first, _, _ := strings.Cut(err.Error(), "\n")
		return 0, 0, "the changed file would not load (" + first + "); edit it by hand"
	}
	if !sameRules(ed.old.Explain(), s.Rule, want, edited.Explain(), added) {
		return 0, 0, "the change would not read as intended; edit the file by hand"
	}
	stillAsked := map[string]int{}
	for _, r := range records {
		if r.Sealed || r.Verdict == "" {
			continue
		}
		checked++
		call := r.Call()
		was, now := ed.old.Evaluate(call), edited.Evaluate(call)
		path, _ := pathArg(r)
		target := was.Rule == s.Rule && was.Action == rules.ActionAsk && (s.Prefix == "" || underPrefix(path, s.Prefix))
		switch {
		case target && now.Action == rules.ActionAllow:
			allowed++
		case target:
			stillAsked[now.Rule]++
		case now.Action != was.Action || now.Rule != was.Rule:
			return 0, 0, fmt.Sprintf("the change would also turn call %s from %s (rule `%s`) to %s (rule `%s`); edit the file by hand",
				r.CallID, was.Action, was.Rule, now.Action, now.Rule)
		}
	}
	if len(stillAsked) > 0 {
		var by []string
		for _, rule := range sortedKeys(stillAsked) {
			by = append(by, fmt.Sprintf("%d by `%s`", stillAsked[rule], rule))
		}
		return 0, 0, "with the change these calls would still not be allowed (" + strings.Join(by, ", ") + ")"
	}
	return checked, allowed, ""
}

// sameRules reports whether the edited file's rules (after) are the
// file's rules (before) with rule as want says, and added (if any) new.
func sameRules(before []rules.Explained, rule string, want rules.Explained, after []rules.Explained, added string) bool {
	key := func(e rules.Explained) string {
		e.Line = 0
		b, _ := json.Marshal(e)
		return string(b)
	}
	list := func(es []rules.Explained, skip string) []string {
		var out []string
		for _, e := range es {
			switch e.Name {
			case skip:
			case rule:
				out = append(out, key(want))
			default:
				out = append(out, key(e))
			}
		}
		slices.Sort(out)
		return out
	}
	// want replaces the rule's line in before; the edited rule must read
	// as want in after.
	wanted := list(before, "")
	got := list(after, added)
	for _, e := range after {
		if e.Name == rule && key(e) != key(want) {
			return false
		}
	}
	return slices.Equal(wanted, got)
}

// edit replaces lines from..to (1-based, inclusive; to = from-1
// inserts before from) with lines.
type edit struct {
	from, to int
	lines    []string
}

// apply makes the edits, which must not overlap.
func apply(lines []string, edits []edit) []string {
	es := slices.Clone(edits)
	slices.SortStableFunc(es, func(a, b edit) int { return b.from - a.from })
	out := slices.Clone(lines)
	for _, e := range es {
		out = slices.Concat(out[:e.from-1], e.lines, out[e.to:])
	}
	return out
}

// field is one key of a rule's mapping.
type field struct {
	key, value *yaml.Node
}

func fieldsOf(item *yaml.Node) map[string]field {
	out := map[string]field{}
	for i := 0; i+1 < len(item.Content); i += 2 {
		out[item.Content[i].Value] = field{item.Content[i], item.Content[i+1]}
	}
	return out
}

// ruleEdit edits one rule; problem says why it cannot be edited.
type ruleEdit struct {
	ed      *policyEditor
	ex      rules.Explained
	item    *yaml.Node
	fields  map[string]field
	problem string
}

func (r *ruleEdit) notSimple(why string) []edit {
	if r.problem == "" {
		r.problem = fmt.Sprintf("rule `%s`: %s; edit it by hand", r.ex.Name, why)
	}
	return nil
}

// indent is how many spaces a line starts with.
func indent(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

func blank(line string) bool { return strings.TrimSpace(line) == "" }

// end is the last line of f's value: the lines after its key that are
// indented deeper (or, for a block sequence, as deep and starting with
// "- "), blank lines between them included.
func (r *ruleEdit) end(f field) int {
	lines := r.ed.lines
	col := f.key.Column - 1
	seq := f.value.Kind == yaml.SequenceNode && f.value.Style&yaml.FlowStyle == 0
	last := f.key.Line
	for n := f.key.Line + 1; n <= len(lines); n++ {
		l := lines[n-1]
		switch {
		case blank(l):
			continue
		case indent(l) > col, seq && indent(l) == col && strings.HasPrefix(strings.TrimSpace(l), "-"):
			last = n
			continue
		}
		break
	}
	return last
}

// itemEnd is the rule's last line.
func (r *ruleEdit) itemEnd() int {
	last := r.item.Line
	for _, f := range r.fields {
		last = max(last, r.end(f))
	}
	return last
}

// remove drops a field, with the comment lines right above it at its
// indentation.
func (r *ruleEdit) remove(f field) edit {
	from := f.key.Line
	for from > r.item.Line+1 {
		l := r.ed.lines[from-2]
		if indent(l) != f.key.Column-1 || !strings.HasPrefix(strings.TrimSpace(l), "#") {
			break
		}
		from--
	}
	return edit{from: from, to: r.end(f)}
}

// onOwnLine checks that f does not share the rule's first line (the one
// with the dash), which an edit must keep.
func (r *ruleEdit) onOwnLine(f field) bool { return f.key.Line != r.item.Line }

// actionRe finds an action's scalar, plain or quoted, on its line.
var actionRe = regexp.MustCompile(`^(["']?)ask(["']?)(\s*(#.*)?)$`)

// allowWhole turns the ask rule into an allow rule: `action: allow`, and
// the fields only an ask rule has dropped.
func (r *ruleEdit) allowWhole() []edit {
	act, ok := r.fields["action"]
	if !ok || act.value.Line != act.key.Line {
		return r.notSimple("its action is not on one line")
	}
	line := r.ed.lines[act.value.Line-1]
	m := actionRe.FindStringSubmatch(line[act.value.Column-1:])
	if m == nil || m[1] != m[2] {
		return r.notSimple("its action is not written `action: ask`")
	}
	edits := []edit{{from: act.key.Line, to: act.key.Line, lines: []string{line[:act.value.Column-1] + m[1] + "allow" + m[2] + m[3]}}}
	for _, k := range askOnly {
		f, ok := r.fields[k]
		if !ok {
			continue
		}
		if !r.onOwnLine(f) {
			return r.notSimple(k + " shares a line with another field")
		}
		edits = append(edits, r.remove(f))
	}
	return edits
}

// keyIndent is the indentation of the rule's fields.
func (r *ruleEdit) keyIndent() string { return strings.Repeat(" ", r.item.Column-1) }

// whenLines writes `when: expr` at the rule's indentation: on one line,
// or as a block when expr spans lines.
func (r *ruleEdit) whenLines(expr string) []string {
	if !strings.Contains(expr, "\n") {
		return []string{r.keyIndent() + "when: '" + strings.ReplaceAll(expr, "'", "''") + "'"}
	}
	out := []string{r.keyIndent() + "when: |-"}
	for _, l := range strings.Split(expr, "\n") {
		if l == "" {
			out = append(out, "")
			continue
		}
		out = append(out, r.keyIndent()+"  "+l)
	}
	return out
}

// and joins the rule's condition (if any) with more.
func (r *ruleEdit) and(more string) string {
	old := strings.TrimRight(r.ex.When, "\n")
	switch {
	case old == "":
		return more
	case strings.Contains(old, "\n"):
		return "(\n" + old + "\n) && " + more
	}
	return "(" + old + ") && " + more
}

// narrow makes the rule's condition leave out the calls under prefix.
func (r *ruleEdit) narrow(prefix string) []edit {
	expr := r.and("!(" + underPrefixCEL(prefix) + ")")
	if f, ok := r.fields["when"]; ok {
		if !r.onOwnLine(f) {
			return r.notSimple("its condition shares the line with its dash")
		}
		return []edit{{from: f.key.Line, to: r.end(f), lines: r.whenLines(expr)}}
	}
	tool, ok := r.fields["tool"]
	if !ok {
		tool, ok = r.fields["tools"]
	}
	if !ok {
		return r.notSimple("it names no tool")
	}
	after := r.end(tool)
	return []edit{{from: after + 1, to: after, lines: r.whenLines(expr)}}
}

// allowRule adds, after the rule, an allow rule for what narrow left
// out: the same tools (and sandbox, report timeout), the rule's
// condition and the prefix's. It returns the new rule's name.
func (r *ruleEdit) allowRule(prefix string) (string, []edit) {
	lines := r.ed.lines
	first := lines[r.item.Line-1]
	lead := first[:r.item.Column-1] // "  - "
	name := r.newName(prefix)
	out := []string{lead + "name: " + name}
	for _, k := range []string{"tool", "tools", "report_timeout", "sandbox"} {
		f, ok := r.fields[k]
		if !ok {
			continue
		}
		for n := f.key.Line; n <= r.end(f); n++ {
			l := lines[n-1]
			if n == f.key.Line {
				l = r.keyIndent() + l[f.key.Column-1:]
			}
			out = append(out, l)
		}
	}
	out = append(out, r.whenLines(r.and(underPrefixCEL(prefix)))...)
	out = append(out, r.keyIndent()+"action: allow")
	end := r.itemEnd()
	if end < len(lines) && blank(lines[end]) {
		out = append([]string{""}, out...)
	}
	return name, []edit{{from: end + 1, to: end, lines: out}}
}

// newName names the added allow rule after the rule and the prefix,
// unlike any rule of the file.
func (r *ruleEdit) newName(prefix string) string {
	slug := strings.Trim(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(prefix, "-"), "-")
	name := r.ex.Name + "-" + slug
	taken := func(n string) bool {
		return slices.ContainsFunc(r.ed.old.Explain(), func(e rules.Explained) bool { return e.Name == n })
	}
	for i := 2; taken(name); i++ {
		name = fmt.Sprintf("%s-%s-%d", r.ex.Name, slug, i)
	}
	return name
}
