package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/analytics"
	"github.com/toolgate/toolgate/ledger"
)

// statsLedger is a ledger of two days ago: rule writes asked 63 times
// (60 approvals under docs/, 2 under src/, one denial under src/), rule
// shell-asks 5 times (2 approved), rule reads allowed 10 calls.
func statsLedger(t *testing.T) (db, key, policyFile string) {
	dir := t.TempDir()
	db, key = filepath.Join(dir, "ledger.db"), filepath.Join(dir, "ledger.key")
	keys, _, err := ledger.LoadOrCreateKey(key, "prod")
	require.NoError(t, err)
	ctx := context.Background()
	l, err := ledger.Open(ctx, ledger.Options{DSN: db, Keys: keys})
	require.NoError(t, err)
	defer l.Close()
	at := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	n := 0
	add := func(rule, tool, verdict, args string, d *ledger.Decision) {
		n++
		id := fmt.Sprintf("c%d", n)
		sub := at.Add(time.Duration(n) * time.Minute)
		es := []ledger.Entry{{Kind: ledger.KindCallSubmitted, Event: id + "/r/" + ledger.KindCallSubmitted, At: sub, CallID: id, Session: "s",
			Requester: "agent-1", Tool: tool, Args: json.RawMessage(args), Rule: rule, Verdict: verdict}}
		d.At = sub.Add(6 * time.Second)
		es = append(es, ledger.Entry{Kind: ledger.KindCallDecided, Event: id + "/r/" + ledger.KindCallDecided, At: d.At, CallID: id, Session: "s", Decision: d})
		_, err := l.Append(ctx, es...)
		require.NoError(t, err)
	}
	person := func(kind, reason string) *ledger.Decision {
		return &ledger.Decision{Kind: kind, DecidedBy: "alice", Channel: "inbox", Groups: []string{"ops"}, Reason: reason}
	}
	for i := range 60 {
		add("writes", "write_file", "ask", fmt.Sprintf(`{"path":"docs/p%d.md","content":"x"}`, i), person("approved", ""))
	}
	for i := range 2 {
		add("writes", "write_file", "ask", fmt.Sprintf(`{"path":"src/p%d.go","content":"x"}`, i), person("approved", ""))
	}
	add("writes", "write_file", "ask", `{"path":"src/main.go","content":"x"}`, person("denied_with_reason", "not src"))
	for i := range 5 {
		kind := "denied"
		if i < 2 {
			kind = "approved"
		}
		add("shell-asks", "shell", "ask", fmt.Sprintf(`{"command":"make %d"}`, i), &ledger.Decision{Kind: kind, DecidedBy: "bob", Channel: "slack"})
	}
	for i := range 10 {
		add("reads", "read_file", "allow", fmt.Sprintf(`{"path":"notes/%d.txt"}`, i), &ledger.Decision{Kind: "approved", DecidedBy: "policy", Channel: "policy"})
	}
	policyFile = filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(`rules:
  - name: writes
    tool: write_file
    action: ask
    groups: [ops]
  - name: shell-asks
    tool: shell
    action: ask
  - name: reads
    tool: read_file
    action: allow
`), 0o600))
	return db, key, policyFile
}

func stats(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"stats"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestStatsPrintsTheRulesAndASuggestionWithItsDiff(t *testing.T) {
	db, key, policyFile := statsLedger(t)
	code, out, errs := stats("--ledger", db, "--ledger-key", key, "--policy", policyFile)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "78 calls in the last 30 days, from the decision ledger.")
	assert.Regexp(t, `RULE\s+TOOL\s+CALLS\s+ALLOWED\s+DENIED\s+ASKED\s+APPROVED\s+REFUSED\s+RATE\s+MEDIAN\s+P95`, out)
	assert.Regexp(t, regexp.MustCompile(`(?m)^writes\s+write_file\s+63\s+0\s+0\s+63\s+62\s+1\s+98\.4 %\s+6 s\s+6 s\s+0\s+0\s+0\s+0\s+0$`), out)
	assert.Regexp(t, regexp.MustCompile(`(?m)^shell-asks\s+shell\s+5\s+0\s+0\s+5\s+2\s+3\s+40\.0 %`), out)
	assert.Regexp(t, regexp.MustCompile(`(?m)^reads\s+read_file\s+10\s+10\s+0\s+0\s+0\s+0\s+-\s+-\s+-`), out)
	assert.Contains(t, out, "rule writes\n  decided via    inbox 63\n  for groups     ops 63\n  denied because \"not src\" 1\n")
	assert.Contains(t, out, "  rule `writes` asked 63 times in 30 days, approved 62 (98.4 %), median 6 s: consider `allow` for paths under `docs/` (60 of the 62 approvals, no denial there)\n")
	assert.Contains(t, out, "  Checked on 78 recorded calls: the change allows 60 of them and no other verdict changes.\n")
	assert.Contains(t, out, `    --- a/policy.yaml
    +++ b/policy.yaml
    @@ -1,8 +1,13 @@
     rules:
       - name: writes
         tool: write_file
    +    when: '!(has(args.path) && args.path.startsWith("docs/") && !args.path.contains(".."))'
         action: ask
         groups: [ops]
    +  - name: writes-docs
    +    tool: write_file
    +    when: 'has(args.path) && args.path.startsWith("docs/") && !args.path.contains("..")'
    +    action: allow
       - name: shell-asks
         tool: shell
         action: ask
`)
	assert.NotContains(t, out, "rule `shell-asks` asked", "40 % approved: no suggestion")

	code, out, errs = stats("--ledger", db, "--ledger-key", key, "--json", "--since", "0")
	require.Equal(t, 0, code, errs)
	var rep analytics.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, 78, rep.Calls)
	require.Len(t, rep.Suggestions, 1)
	assert.Equal(t, "docs/", rep.Suggestions[0].Prefix)
	assert.Empty(t, rep.Suggestions[0].Diff, "no --policy, no diff")
	assert.True(t, rep.Since.IsZero())

	code, out, errs = stats("--ledger", db, "--ledger-key", key, "--rule", "shell-asks", "--min-asks", "3", "--threshold", "0.4")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "5 calls of rule shell-asks in the last 30 days")
	assert.NotContains(t, out, "write_file")
	assert.Contains(t, out, "rule `shell-asks` asked 5 times in 30 days, approved 2 (40.0 %)")
	assert.Contains(t, out, "Give --policy FILE for each suggestion's change to the file, as a diff.")

	code, out, errs = stats("--ledger", db, "--ledger-key", key, "--since", "1d")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "No calls in the last 1 day.\n", out)
}

func TestStatsRefusesBadFlags(t *testing.T) {
	db, key, _ := statsLedger(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--threshold", "1.5"}, "--threshold is an approval rate above 0 and at most 1"},
		{[]string{"--min-asks", "0"}, "--min-asks is at least 1"},
		{[]string{"--since", "a month"}, `"a month" is not a span of time`},
		{[]string{"--policy", filepath.Join(t.TempDir(), "secret-dir", "nope.yaml")}, "--policy: no such file or directory"},
		{[]string{"extra"}, "stats takes no arguments"},
	} {
		code, _, errs := stats(append([]string{"--ledger", db, "--ledger-key", key}, c.args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, errs)
		assert.Contains(t, errs, c.want, c.args)
		assert.NotContains(t, errs, "secret-dir", "no path in the message")
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("rules: [{name: w}]\n"), 0o600))
	code, _, errs := stats("--ledger", db, "--ledger-key", key, "--policy", bad)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "the policy file does not load")
}
