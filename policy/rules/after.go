package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RejectedOutputError is AfterCall's refusal of a tool's output. Its text,
// which goes back to the model, is the rule's reason and the limit that
// was hit.
type RejectedOutputError struct {
	// Rule names the after-call rule that rejected the output.
	Rule string
	// Reason is the rule's reason followed by the limit, in parentheses.
	Reason string
}

// Error returns the reason, which goes back to the model.
func (e *RejectedOutputError) Error() string { return e.Reason }

// defaultRejectReason is the reason of an after-call rule that gives none.
const defaultRejectReason = "the tool's output was rejected by policy"

// afterRule is one entry of `after:`.
type afterRule struct {
	name     string
	tools    []string // globs; empty means every tool
	maxBytes int
	reject   *regexp.Regexp
	reason   string
}

// check rejects output that is too large or matches the reject pattern,
// in the raw JSON or in any of its decoded strings (where newlines and
// quotes are not escaped).
func (a *afterRule) check(tool string, output json.RawMessage) error {
	if len(a.tools) > 0 && !matchAny(a.tools, tool) {
		return nil
	}
	if a.maxBytes > 0 && len(output) > a.maxBytes {
		return &RejectedOutputError{Rule: a.name, Reason: fmt.Sprintf(
			"%s (output is %d bytes, over the %d-byte limit of after-call rule %q)", a.reason, len(output), a.maxBytes, a.name)}
	}
	if a.reject != nil && (a.reject.Match(output) || anyString(output, a.reject.MatchString)) {
		return &RejectedOutputError{Rule: a.name, Reason: fmt.Sprintf(
			"%s (output matches the reject pattern of after-call rule %q)", a.reason, a.name)}
	}
	return nil
}

// anyString reports whether f holds for a string (value or key) of the
// JSON output.
func anyString(output []byte, f func(string) bool) bool {
	dec := json.NewDecoder(bytes.NewReader(output))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && f(s) {
			return true
		}
	}
}

// after reads the after-call rules (the `after:` section).
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
