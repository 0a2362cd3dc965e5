package analytics_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/analytics"
	"github.com/toolgate/toolgate/ledger/callrecord"
	"github.com/toolgate/toolgate/policy/rules"
)

// docsWrites are 30 approved writes of rule w: 27 under docs/, 3 under
// src/; and 10 shell calls rule sh asked about, approved.
func docsWrites() []callrecord.Record {
	var out []callrecord.Record
	for i := range 30 {
		dir := "docs"
		if i%10 == 9 {
			dir = "src"
		}
		r := asked("w", "write_file", fmt.Sprintf(`{"path":"%s/%d.md","content":"x"}`, dir, i), "approved")
		out = append(out, r)
	}
	for i := range 10 {
		out = append(out, asked("sh", "shell", fmt.Sprintf(`{"command":"make %d"}`, i), "approved"))
	}
	return out
}

// proposed computes the suggestion for rule w against file (written to
// a temporary directory), and applies its diff there with patch(1) when
// it has one; the policy is the patched file, loaded.
func proposed(t *testing.T, file string, records []callrecord.Record) (analytics.Suggestion, *rules.Policy) {
	t.Helper()
	dir := t.TempDir()
	name := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(name, []byte(file), 0o600))
	rep, err := analytics.Compute(records, analytics.Options{Rule: "w", MinAsks: 10,
		Policy: &analytics.PolicyFile{Name: name, Data: []byte(file), Workspace: dir}})
	require.NoError(t, err)
	require.Len(t, rep.Suggestions, 1)
	s := rep.Suggestions[0]
	if s.Diff == "" {
		return s, nil
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "s.diff"), []byte(s.Diff), 0o600))
	cmd := exec.Command("patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-i", "s.diff")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", out, s.Diff)
	p, err := rules.Load(name, rules.Options{Workspace: dir})
	require.NoError(t, err, s.Diff)
	return s, p
}

func TestAPrefixDiffNarrowsTheRulesConditionAndNeedsNoAllowRuleWhenOneFollows(t *testing.T) {
	file := `rules:
  - name: w
    tool: write_file
    when: args.content != "" # never empty files
    action: ask
  - name: any-write
    tool: write_file
    action: allow
`
	s, p := proposed(t, file, docsWrites())
	require.NotNil(t, p, s.NoDiff)
	assert.Equal(t, `--- a/policy.yaml
+++ b/policy.yaml
@@ -1,7 +1,7 @@
 rules:
   - name: w
     tool: write_file
-    when: args.content != "" # never empty files
+    when: '(args.content != "") && !(has(args.path) && args.path.startsWith("docs/") && !args.path.contains(".."))'
     action: ask
   - name: any-write
     tool: write_file
`, s.Diff)
	assertVerdict(t, p, call("write_file", `{"path":"docs/a.md","content":"x"}`), rules.ActionAllow, "any-write")
	assertVerdict(t, p, call("write_file", `{"path":"src/a.go","content":"x"}`), rules.ActionAsk, "w")
	assertVerdict(t, p, call("write_file", `{"path":"docs/a.md","content":""}`), rules.ActionAllow, "any-write")
	assert.Equal(t, 40, s.Checked)
	assert.Equal(t, 27, s.Allowed)
}

func TestAPrefixDiffKeepsAMultiLineConditionWhole(t *testing.T) {
	file := `default: ask
rules:
  - name: w
    tool: write_file
    when: |
      args.content.size() < 1000 &&
        !args.path.endsWith(".env")
    action: ask
    examples:
      match: [{tool: write_file, args: {path: src/a.go, content: x}}]`
	s, p := proposed(t, file, docsWrites())
	require.NotNil(t, p, s.NoDiff)
	assert.Equal(t, "(\nargs.content.size() < 1000 &&\n  !args.path.endsWith(\".env\")\n) && !(has(args.path) && args.path.startsWith(\"docs/\") && !args.path.contains(\"..\"))",
		p.Explain()[0].When)
	assert.Contains(t, s.Diff, "-      match: [{tool: write_file, args: {path: src/a.go, content: x}}]\n\\ No newline at end of file\n",
		"the file ends without a newline, and so does the patched one")
	assert.True(t, strings.HasSuffix(s.Diff, "+    action: allow\n\\ No newline at end of file\n"), s.Diff)
	assertVerdict(t, p, call("write_file", `{"path":"docs/a.md","content":"x"}`), rules.ActionAllow, "w-docs")
	assertVerdict(t, p, call("write_file", `{"path":"docs/.env","content":"x"}`), rules.ActionAsk, "default")
	assertVerdict(t, p, call("write_file", `{"path":"src/a.go","content":"x"}`), rules.ActionAsk, "w")
}

func TestAWholeRuleDiffDropsTheAskOnlyFieldsWithTheirComments(t *testing.T) {
	file := `rules:
  - name: w
    tool: shell
    action: "ask"   # for now
    # The message people see.
    message: |
      Run {{.args.command}}?

      It is a shell command.
    groups:
    - ops
    sticky_by: [command]
    sandbox: {network: false}
  - {name: other, tool: shell, action: deny, reason: no}
`
	var records []callrecord.Record
	for i := range 12 {
		records = append(records, asked("w", "shell", fmt.Sprintf(`{"command":"make %d"}`, i), "approved"))
	}
	s, p := proposed(t, file, records)
	require.NotNil(t, p, s.NoDiff)
	assert.Equal(t, `--- a/policy.yaml
+++ b/policy.yaml
@@ -1,14 +1,6 @@
 rules:
   - name: w
     tool: shell
-    action: "ask"   # for now
-    # The message people see.
-    message: |
-      Run {{.args.command}}?
-
-      It is a shell command.
-    groups:
-    - ops
-    sticky_by: [command]
+    action: "allow"   # for now
     sandbox: {network: false}
   - {name: other, tool: shell, action: deny, reason: no}
`, s.Diff)
	assertVerdict(t, p, call("shell", `{"command":"make"}`), rules.ActionDeny, "other")
	assert.Equal(t, rules.ActionAllow, p.Explain()[1].Action)
}

func TestNoDiffWhenTheChangeCannotBeMadeOrChecked(t *testing.T) {
	ask := `rules:
  - name: w
    tool: write_file
    action: ask
`
	for _, c := range []struct {
		name, file, why string
	}{
		{"written in flow style", "rules:\n  - {name: w, tool: write_file, action: ask}\n", "rule `w` is not written one field a line"},
		{"no such rule", "rules:\n  - {name: v, tool: write_file, action: ask}\n", "policy.yaml has no enforced rule `w`"},
		{"an allow rule now", "rules:\n  - {name: w, tool: write_file, action: allow}\n", "rule `w` is no longer an ask rule in policy.yaml (it says allow)"},
		{"a shadow rule", "rules:\n  - {name: w, tool: write_file, action: ask, mode: shadow}\n", "policy.yaml has no enforced rule `w`"},
		{"another ask rule catches them", ask + "  - name: docs-ask\n    tool: write_file\n    action: ask\n",
			"with the change these calls would still not be allowed (27 by `docs-ask`)"},
		{"an example that no longer matches", ask + "    examples: {match: [{tool: write_file, args: {path: docs/a.md}}]}\n",
			"the changed file would not load ("},
		{"CR line ends", strings.ReplaceAll(ask, "\n", "\r\n"), "policy.yaml has CR line ends"},
		{"the dash line holds the tool", "rules:\n  - tool: write_file\n    name: w\n    action: ask\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, p := proposed(t, c.file, docsWrites())
			if c.why == "" {
				require.NotNil(t, p, s.NoDiff)
				assertVerdict(t, p, call("write_file", `{"path":"docs/a.md","content":"x"}`), rules.ActionAllow, "w-docs")
				return
			}
			assert.Empty(t, s.Diff)
			assert.Contains(t, s.NoDiff, c.why)
			assert.Equal(t, "docs/", s.Prefix, "the suggestion stands without its diff")
		})
	}
}

func TestAPolicyFileThatDoesNotLoadIsAnError(t *testing.T) {
	_, err := analytics.Compute(docsWrites(), analytics.Options{Policy: &analytics.PolicyFile{Name: "policy.yaml", Data: []byte("rules: [{name: w}]\n")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the policy file does not load: policy.yaml:1:")
}
