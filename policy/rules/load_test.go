package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each must appear in the error
	}{
		{"yaml syntax", "default: ask\nrules: a: b\n", []string{"test.yaml:2: mapping values are not allowed in this context"}},
		{"empty file", "", []string{"test.yaml: the file is empty"}},
		{"comments only", "# nothing\n", []string{"test.yaml: the file is empty"}},
		{"not a mapping", "- a\n- b\n", []string{"test.yaml:1: a policy file must be a mapping"}},
		{"two documents", "default: ask\n---\ndefault: allow\n", []string{"test.yaml:2: a policy file holds one YAML document"}},
		{"alias", "quotas:\n  - &q {name: a, tools: [x], max: 1, per: 1h}\n  - *q\n", []string{"test.yaml:3: YAML aliases"}},
		{"unknown top-level field", "default: ask\nrulez: []\n", []string{`test.yaml:2: policy: unknown field "rulez"`}},
		{"unknown rule field", `
rules:
  - name: r
    tool: x
    action: allow
    condition: "true"
`, []string{`test.yaml:6: rule "r": unknown field "condition"`}},
		{"repeated field", "rules:\n  - name: r\n    tool: x\n    action: allow\n    action: deny\n", []string{`test.yaml:5: rule "r": field "action" is given twice`}},
		{"CEL does not compile", `
rules:
  - name: bad-cel
    tool: x
    when: args.path.startsWith(
    action: allow
`, []string{`test.yaml:5: rule "bad-cel": when: `}},
		{"CEL error on a later line of a block", `
rules:
  - name: bad-cel
    tool: x
    when: |
      args.a == 1 &&
      nosuchvar == 2
    action: allow
`, []string{`test.yaml:7: rule "bad-cel": when: undeclared reference to 'nosuchvar'`}},
		{"CEL not boolean", `
rules:
  - name: not-bool
    tool: x
    when: args.size() + 1
    action: allow
`, []string{`test.yaml:5: rule "not-bool": when: the condition must be a boolean, but its type is int`}},
		{"CEL bad regex constant", `
rules:
  - name: re
    tool: x
    when: args.c.matches('(')
    action: allow
`, []string{`test.yaml:5: rule "re": when: `}},
		{"workspace unset", `
rules:
  - name: ws
    tool: x
    when: args.p.startsWith(workspace)
    action: allow
`, []string{`test.yaml:5: rule "ws": the condition uses workspace, but no workspace is set`}},
		{"unknown action", "rules:\n  - name: r\n    tool: x\n    action: maybe\n", []string{`test.yaml:4: rule "r": unknown action "maybe"`}},
		{"missing action", "rules:\n  - name: r\n    tool: x\n", []string{`test.yaml:2: rule "r": action is missing`}},
		{"missing name", "rules:\n  - tool: x\n    action: allow\n", []string{`test.yaml:2: rules[0]: name is missing`}},
		{"duplicate name", "rules:\n  - {name: r, tool: x, action: allow}\n  - {name: r, tool: y, action: allow}\n", []string{`test.yaml:3: rules[1]: another rule is already named "r"`}},
		{"reserved name", "rules:\n  - {name: guards, tool: x, action: allow}\n", []string{`reserved`}},
		{"missing tool", "rules:\n  - {name: r, action: allow}\n", []string{`test.yaml:2: rule "r": tool is missing`}},
		{"bad glob", "rules:\n  - {name: r, tool: 'fs.[', action: allow}\n", []string{`test.yaml:2: rule "r": tool: bad glob "fs.["`}},
		{"deny without reason", "rules:\n  - name: r\n    tool: x\n    action: deny\n", []string{`test.yaml:2: rule "r": a deny rule needs a reason`}},
		{"message on allow", "rules:\n  - name: r\n    tool: x\n    action: allow\n    message: hi\n", []string{`test.yaml:5: rule "r": message is only for ask rules`}},
		{"reason on ask", "rules:\n  - name: r\n    tool: x\n    action: ask\n    reason: hi\n", []string{`test.yaml:5: rule "r": reason is only for deny rules`}},
		{"bad duration", "rules:\n  - name: r\n    tool: x\n    action: ask\n    timeout: 2 hours\n", []string{`test.yaml:5: rule "r": timeout: "2 hours" is not a duration`}},
		{"negative duration", "rules:\n  - name: r\n    tool: x\n    action: ask\n    timeout: -1h\n", []string{`test.yaml:5: rule "r": timeout must be positive`}},
		{"bad on_timeout", "rules:\n  - name: r\n    tool: x\n    action: ask\n    on_timeout: later\n", []string{`test.yaml:5: rule "r": on_timeout must be deny or allow`}},
		{"escalation half given", "rules:\n  - name: r\n    tool: x\n    action: ask\n    escalate_after: 1h\n", []string{`escalate_after and escalate_to go together`}},
		{"remind after the timeout", "rules:\n  - name: r\n    tool: x\n    action: ask\n    timeout: 1h\n    remind_after: 2h\n", []string{`test.yaml:6: rule "r": remind_after (2h0m0s) must be shorter than the timeout (1h0m0s)`}},
		{"template error", "rules:\n  - name: r\n    tool: x\n    action: ask\n    message: 'Write {{.args.path'\n", []string{`test.yaml:5: rule "r": message template: `}},
		{"template unknown function", "rules:\n  - name: r\n    tool: x\n    action: ask\n    message: '{{shout .tool}}'\n", []string{`test.yaml:5: rule "r": message template: `, `"shout" not defined`}},
		{"bad default", "default: maybe\n", []string{`test.yaml:1: default: unknown action "maybe"`}},
		{"approvals on allow", "rules:\n  - {name: r, tool: x, action: allow, approvals: 2}\n", []string{`approvals is only for ask rules`}},
		{"four eyes allowed on timeout", "rules:\n  - {name: r, tool: x, action: ask, approvals: 2, on_timeout: allow}\n", []string{`a four-eyes rule denies on timeout`}},
		{"too many approvals", "rules:\n  - {name: r, tool: x, action: ask, approvals: 11}\n", []string{`approvals must be at most 10`}},
		{"zero approvals", "rules:\n  - {name: r, tool: x, action: ask, approvals: 0}\n", []string{`approvals must be`}},
		{"distinct groups without enough groups", "rules:\n  - {name: r, tool: x, action: ask, groups: [a], approvals: 2, distinct_groups: true}\n", []string{`distinct_groups needs at least as many groups (1) as approvals (2)`}},
		{"user with four eyes", "rules:\n  - {name: r, tool: x, action: ask, approvals: 2, user: true}\n", []string{`user: true cannot go with approvals: 2`}},
		{"user on deny", "rules:\n  - {name: r, tool: x, action: deny, reason: no, user: true}\n", []string{`user is only for ask rules`}},
		{"user not a bool", "rules:\n  - {name: r, tool: x, action: ask, user: maybe}\n", []string{`user must be true or false`}},
		{"bad redact pattern", "redact:\n  patterns:\n    - {name: x, regex: '('}\n", []string{`test.yaml:3: redact: patterns[0]: regex: bad regular expression`}},
		{"empty-matching redact pattern", "redact:\n  patterns:\n    - {name: x, regex: 'a*'}\n", []string{`the regex matches the empty string`}},
		{"unknown disabled pattern", "redact:\n  disable: [nope]\n", []string{`test.yaml:2: redact: disable: unknown built-in pattern "nope"`}},
		{"redact builtin not a bool", "redact:\n  builtin: maybe\n", []string{`test.yaml:2: redact: builtin must be true or false`}},
		{"after without a limit", "after:\n  - name: a\n", []string{`test.yaml:2: after-call rule "a": give max_output_bytes, reject_pattern or both`}},
		{"after bad size", "after:\n  - {name: a, max_output_bytes: lots}\n", []string{`test.yaml:2: after-call rule "a": max_output_bytes must be a whole number`}},
		{"guards bad glob", "guards:\n  protected_paths: ['[']\n", []string{`test.yaml:2: guards: protected_paths: bad glob`}},
		{"guards unclosed alternatives", "guards:\n  protected_paths: ['secrets/{a,b']\n", []string{`test.yaml:2: guards: protected_paths: bad glob "secrets/{a,b": syntax error in pattern`}},
		{"quota without per", "quotas:\n  - {name: q, tools: [x], max: 3}\n", []string{`test.yaml:2: quota "q": per is missing`}},
		{"quota zero max", "quotas:\n  - {name: q, tools: [x], max: 0, per: 1h}\n", []string{`test.yaml:2: quota "q": max must be positive`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.src), Options{})
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestLoadReportsSeveralProblems(t *testing.T) {
	_, err := Parse("p.yaml", []byte("rules:\n  - {name: a, tool: x, action: nope}\n  - {name: b, tool: x, action: deny}\n"), Options{})
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	assert.Len(t, lines, 2)
	assert.Contains(t, lines[0], "p.yaml:2:")
	assert.Contains(t, lines[1], "p.yaml:3:")
}

func TestExamples(t *testing.T) {
	good := `
rules:
  - name: no-rm
    tool: shell
    when: args.command.startsWith('rm ')
    action: deny
    reason: no
    examples:
      match:
        - {tool: shell, args: {command: rm -r x}}
      no_match:
        - {tool: shell, args: {command: ls}}
        - {tool: other, args: {command: rm x}}
`
	parse(t, good)

	tests := []struct {
		name string
		src  string
		want string
	}{
		{"match that does not match", `
rules:
  - name: no-rm
    tool: shell
    when: args.command.startsWith('rm ')
    action: deny
    reason: no
    examples:
      match:
        - {tool: shell, args: {command: rm x}}
        - {tool: shell, args: {command: ls -l}}
`, `test.yaml:11: rule "no-rm": example match[1] {"tool":"shell","args":{"command":"ls -l"}} does not match the rule (the condition is false)`},
		{"match of another tool", `
rules:
  - name: r
    tools: [a, b]
    action: allow
    examples:
      match:
        - {tool: c}
`, `test.yaml:8: rule "r": example match[0] {"tool":"c","args":{}} does not match the rule (tool "c" is not one of a, b)`},
		{"no_match that matches", `
rules:
  - name: big
    tool: pay
    when: args.amount > 500
    action: ask
    examples:
      no_match:
        - {tool: pay, args: {amount: 10}}
        - {tool: pay, args: {amount: 1000, to: bob}, session: s, requester: r}
`, `test.yaml:10: rule "big": example no_match[1] {"tool":"pay","args":{"amount":1000,"to":"bob"},"session":"s","requester":"r"} matches the rule, but is listed under no_match`},
		{"example on which the condition fails", `
rules:
  - name: big
    tool: pay
    when: args.amount > 500
    action: ask
    examples:
      no_match:
        - {tool: pay, args: {to: bob}}
`, `test.yaml:9: rule "big": example no_match[0] {"tool":"pay","args":{"to":"bob"}}: the condition fails on it: no such key: amount`},
		{"example on which the message fails", `
rules:
  - name: w
    tool: w
    action: ask
    message: '{{len .args.content}}'
    examples:
      match:
        - {tool: w, args: {path: a}}
`, `test.yaml:9: rule "w": example match[0] {"tool":"w","args":{"path":"a"}}: the message template fails on it`},
		{"unknown example field", `
rules:
  - name: w
    tool: w
    action: allow
    examples:
      match:
        - {tool: w, argz: {}}
`, `test.yaml:8: rule "w": example match[0]: unknown field "argz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.src), Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestExampleValueTypes(t *testing.T) {
	parse(t, `
rules:
  - name: types
    tool: t
    when: args.i == 3 && args.f == 1.5 && args.b && args.n == null && args.s == 'x' && args.l[1] == 2 && args.m.k == 'v'
    action: allow
    examples:
      match:
        - {tool: t, args: {i: 3, f: 1.5, b: true, n: null, s: x, l: [1, 2], m: {k: v}}}
`)
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	require.NoError(t, os.WriteFile(path, []byte("default: allow\n"), 0o600))
	p, err := Load(path, Options{})
	require.NoError(t, err)
	assert.Equal(t, path, p.Name())
	_, err = Load(filepath.Join(dir, "missing.yaml"), Options{})
	assert.ErrorContains(t, err, "read policy")
}
