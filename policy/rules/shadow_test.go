package rules

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// shadowPolicy tries two rules on live traffic: a deny of rm and an allow
// of docs writes, beside the enforced rules.
const shadowPolicy = `
default: ask
rules:
  - name: shell
    tool: shell
    action: allow
  - name: no-rm
    tool: shell
    when: args.command.startsWith('rm ')
    action: deny
    reason: rm is retired
    mode: shadow
  - name: writes
    tool: write_file
    action: ask
  - name: docs-writes
    tool: write_file
    when: args.path.startsWith('docs/')
    action: allow
    mode: shadow
  - name: reads
    tool: read_file
    action: allow
    mode: enforce
`

func TestShadowRulesAreRecordedNotEnforced(t *testing.T) {
	p := parse(t, shadowPolicy)

	rm := call("shell", `{"command":"rm -rf build"}`)
	v := p.Evaluate(rm)
	assert.Equal(t, ActionAllow, v.Action, "a shadow deny enforces nothing")
	assert.Equal(t, "shell", v.Rule)
	assert.Equal(t, &policy.Shadow{Rule: "no-rm", Action: "deny"}, p.ShadowFor(rm), "it says what it would have done")
	req, err := p.EvaluateApproval(context.Background(), rm)
	assert.NoError(t, err, "the worker's path does not deny either")
	assert.Nil(t, req)

	ls := call("shell", `{"command":"ls"}`)
	assert.Nil(t, p.ShadowFor(ls), "a call no shadow rule decides has no shadow verdict")
	assert.Equal(t, "shell", p.AllowRule(ls), "the rule that lets a call through is named")
	assert.Equal(t, "", p.AllowRule(call("write_file", `{}`)), "a call the file asks about has no allowing rule")
	assert.Equal(t, "default", parse(t, "default: allow\n").AllowRule(ls))

	// Ask rules are tried before allow rules, shadow or not: the enforced
	// writes rule still decides a docs write, so the shadow allow would not.
	doc := call("write_file", `{"path":"docs/a.md"}`)
	assert.Equal(t, ActionAsk, p.Evaluate(doc).Action)
	assert.Nil(t, p.ShadowFor(doc))

	assert.Nil(t, p.ShadowFor(call("read_file", `{}`)), "mode: enforce is an ordinary rule")
	assert.Equal(t, ActionAllow, p.Evaluate(call("read_file", `{}`)).Action)

	var explained []string
	for _, e := range p.Explain() {
		if e.Shadow {
			explained = append(explained, e.Name)
		}
	}
	assert.Equal(t, []string{"no-rm", "docs-writes"}, explained, "explain lists the shadow rules where they would be tried")
	assert.Len(t, p.Explain(), 6)
}

func TestShadowRuleBecomesTheVerdictWhenSwitchedOn(t *testing.T) {
	// The shadow verdict is the enforced one once the mode line goes.
	p := parse(t, shadowPolicy)
	on := parse(t, replaceOnce(t, shadowPolicy, "    reason: rm is retired\n    mode: shadow\n", "    reason: rm is retired\n"))
	rm := call("shell", `{"command":"rm x"}`)
	s := p.ShadowFor(rm)
	require.NotNil(t, s)
	v := on.Evaluate(rm)
	assert.Equal(t, s.Action, string(v.Action))
	assert.Equal(t, s.Rule, v.Rule)
	assert.Nil(t, on.ShadowFor(rm), "no shadow rule is left to decide it")
}

func TestShadowModeErrors(t *testing.T) {
	for name, src := range map[string]string{
		"unknown mode": "rules:\n  - name: r\n    tool: t\n    action: allow\n    mode: dry-run\n",
		"default":      "default:\n  action: ask\n  mode: shadow\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(src), Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "mode")
		})
	}
	_, err := Parse("test.yaml", []byte("rules:\n  - name: r\n    tool: t\n    action: allow\n    mode: dry-run\n"), Options{})
	assert.Contains(t, err.Error(), `mode must be enforce or shadow, not "dry-run"`)
}

// The worker holds its policy in a Reloader, often in a chain: both pass
// the shadow verdict on.
func TestShadowVerdictsThroughReloaderAndChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(shadowPolicy), 0o600))
	r, err := NewReloader(path, Options{}, nil)
	require.NoError(t, err)
	rm := call("shell", `{"command":"rm x"}`)
	assert.Equal(t, &policy.Shadow{Rule: "no-rm", Action: "deny"}, policy.ShadowOf(r, rm))
	chained := policy.Chain(parse(t, "default: allow\n"), r)
	assert.Equal(t, &policy.Shadow{Rule: "no-rm", Action: "deny"}, policy.ShadowOf(chained, rm), "a chain asks each of its policies")
	assert.Nil(t, policy.ShadowOf(parse(t, "default: allow\n"), rm), "a policy without shadow rules gives none")
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	require.Contains(t, s, old)
	return strings.Replace(s, old, new, 1)
}
