package analytics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/analytics"
	"github.com/toolgate/toolgate/ledger/callrecord"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/rules"
)

// scriptPolicy is the policy file the scripted calls were judged by.
const scriptPolicy = `default: ask
rules:
  - name: no-rm
    tool: shell
    when: args.command.startsWith("rm ")
    action: deny
    reason: no deletes
  - name: shell-asks
    tool: shell
    action: ask
    groups: [ops]
  - name: writes
    tool: write_file
    action: ask
    # Approvers see the path.
    message: 'Write {{printf "%q" .args.path}}?'
    groups: [ops, dev]
    timeout: 2h
    examples:
      match:
        - {tool: write_file, args: {path: src/main.go, content: "x"}}

  - name: fetch
    tools: [http_get, http_post]
    action: ask
    groups:
      - ops
    timeout: 1h
    on_timeout: allow

  - name: deploys
    tool: deploy
    action: ask
  - {name: reads, tools: [read_file, list_dir], action: allow}
`

func TestTheReportOfAScriptedLedgerIsWhatTheScriptBooked(t *testing.T) {
	s := scriptedLedger(t)
	l := s.write(t)
	since, until := s.t0, s.t0.Add(30*24*time.Hour)
	records, err := callrecord.Read(context.Background(), l, since, until)
	require.NoError(t, err)
	require.Greater(t, len(records), 2500, "a few thousand calls")

	ws := t.TempDir()
	rep, err := analytics.Compute(records, analytics.Options{Since: since, Until: until,
		Policy: &analytics.PolicyFile{Name: filepath.Join(ws, "policy.yaml"), Data: []byte(scriptPolicy), Workspace: ws}})
	require.NoError(t, err)
	assert.Equal(t, "30 days", rep.Window)
	assert.Equal(t, analytics.DefaultMinAsks, rep.MinAsks)
	assert.Equal(t, analytics.DefaultThreshold, rep.Threshold)

	var ruleNames []string
	calls := 0
	for _, rr := range rep.Rules {
		ruleNames = append(ruleNames, rr.Rule)
		assert.Equal(t, s.byRule[rr.Rule].counts(), rr.Counts, "rule %q", rr.Rule)
		var tools []string
		for _, tr := range rr.Tools {
			tools = append(tools, tr.Tool)
			assert.Equal(t, s.byTool[[2]string{rr.Rule, tr.Tool}].counts(), tr.Counts, "rule %q, tool %s", rr.Rule, tr.Tool)
		}
		var booked []string
		for key := range s.byTool {
			if key[0] == rr.Rule {
				booked = append(booked, key[1])
			}
		}
		slices.Sort(booked)
		assert.Equal(t, booked, tools, "rule %q: its tools, in order", rr.Rule)
		c := rr.Counts
		assert.Equal(t, c.Asked, c.Approved+c.Denied+c.Timeouts+c.Waiting+c.Other, "rule %q: every asked call is counted once", rr.Rule)
		assert.Equal(t, c.Calls, c.Asked+c.AutoApproved+c.PolicyDenied+c.Unjudged, "rule %q", rr.Rule)
		calls += s.byRule[rr.Rule].c.Calls
	}
	assert.Equal(t, []string{"", "deploys", "fetch", "no-rm", "reads", "shell-asks", "writes"}, ruleNames)
	assert.Equal(t, calls, rep.Calls)
	assert.Equal(t, len(records), rep.Calls, "the calls submitted before the window are left out")

	// Figures the script's choices fix, spelled out.
	writes := rep.Rules[6].Counts
	assert.Equal(t, 500, writes.Asked, "500 calls, ten of them new runs of earlier IDs: 500 records, not 490")
	assert.Equal(t, []analytics.Count{{Key: "not this file", N: 3}}, writes.DenialReasons)
	assert.Equal(t, 10, writes.Edits)
	shellAsks := rep.Rules[5].Counts
	assert.Contains(t, shellAsks.DenialReasons, analytics.Count{Key: analytics.ReasonSealed, N: s.byRule["shell-asks"].reasons[analytics.ReasonSealed]})
	assert.Positive(t, s.byRule["shell-asks"].reasons[analytics.ReasonSealed])
	assert.Equal(t, 20, shellAsks.BySticky)

	var wantShadow []analytics.ShadowReport
	for _, rule := range []string{"reads-ask", "shell-strict"} {
		sr := *s.shadows[rule]
		for change, n := range s.changes[rule] {
			sr.Changes = append(sr.Changes, analytics.Count{Key: change, N: n})
		}
		wantShadow = append(wantShadow, sr)
	}
	assert.Equal(t, wantShadow, rep.Shadow)
	assert.Equal(t, wantShadow[0].Calls, wantShadow[0].Differ, "reads-ask would ask about calls the policy allowed: all differ")
	assert.Less(t, wantShadow[1].Differ, wantShadow[1].Calls, "shell-strict agrees with no-rm")

	// Suggestions: writes (99 % approved, mostly under docs/) and fetch
	// (99 %, no paths); not shell-asks (70 %), not deploys (15 asks).
	require.Len(t, rep.Suggestions, 2)
	fetch, wr := rep.Suggestions[0], rep.Suggestions[1]
	assert.Equal(t, "fetch", fetch.Rule)
	assert.Equal(t, "", fetch.Prefix, "fetch's calls have no path: the whole rule")
	assert.Equal(t, "writes", wr.Rule)
	assert.Equal(t, "docs/", wr.Prefix)
	assert.Equal(t, s.docsApproved, wr.UnderPrefix)
	w := s.byRule["writes"].counts()
	assert.Equal(t, fmt.Sprintf("rule `writes` asked 500 times in 30 days, approved %d of the %d decided (%.1f %%), 5 timed out, 10 approved with edits, median %s: "+
		"consider `allow` for paths under `docs/` (%d of the %d approvals, no denial there)",
		w.Approved, w.Approved+w.Denied, 100*w.ApprovalRate, analytics.Human(time.Duration(w.MedianDecision)), s.docsApproved, w.Approved), wr.Text)
	f := s.byRule["fetch"].counts()
	assert.Equal(t, fmt.Sprintf("rule `fetch` asked 400 times in 30 days, approved %d (%.1f %%), median %s: consider `allow` for the whole rule",
		f.Approved, 100*f.ApprovalRate, analytics.Human(time.Duration(f.MedianDecision))), fetch.Text)

	// Each diff was checked on every readable call: the calls it is about
	// are allowed, no other verdict changes.
	assert.Empty(t, wr.NoDiff)
	assert.Equal(t, s.readable, wr.Checked)
	assert.Equal(t, s.docsWrites, wr.Allowed)
	assert.Empty(t, fetch.NoDiff)
	assert.Equal(t, s.readable, fetch.Checked)
	assert.Less(t, fetch.Allowed, 400, "fetch's sealed calls could not be evaluated")

	// Applied with patch(1), each diff gives a file that loads and does
	// what the suggestion says; so do both together.
	docs, src, up := call("write_file", `{"path":"docs/new.md","content":"x"}`), call("write_file", `{"path":"src/new.go","content":"x"}`),
		call("write_file", `{"path":"docs/../src/x.go","content":"x"}`)
	get, mk, rm := call("http_get", `{"url":"https://example.com"}`), call("shell", `{"command":"make"}`), call("shell", `{"command":"rm -rf /"}`)
	p := applyDiffs(t, ws, wr.Diff)
	assertVerdict(t, p, docs, rules.ActionAllow, "writes-docs")
	assertVerdict(t, p, src, rules.ActionAsk, "writes")
	assertVerdict(t, p, up, rules.ActionAsk, "writes")
	assertVerdict(t, p, get, rules.ActionAsk, "fetch")
	p = applyDiffs(t, ws, fetch.Diff)
	assertVerdict(t, p, get, rules.ActionAllow, "fetch")
	assertVerdict(t, p, docs, rules.ActionAsk, "writes")
	p = applyDiffs(t, ws, wr.Diff, fetch.Diff)
	for c, want := range map[*policy.Call][2]string{&docs: {"allow", "writes-docs"}, &src: {"ask", "writes"}, &get: {"allow", "fetch"},
		&mk: {"ask", "shell-asks"}, &rm: {"deny", "no-rm"}} {
		assertVerdict(t, p, *c, rules.Action(want[0]), want[1])
	}
	assert.Contains(t, fetch.Diff, "-    groups:\n-      - ops\n-    timeout: 1h\n-    on_timeout: allow\n", "the ask-only fields go")
	assert.NotContains(t, wr.Diff, "-    message:", "the narrowed rule keeps asking as it did")

	// JSON carries the same report.
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back analytics.Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rep, back)
}

// applyDiffs applies diffs to a copy of scriptPolicy in dir with patch(1),
// refusing any fuzz, and loads the result.
func applyDiffs(t *testing.T, dir string, diffs ...string) *rules.Policy {
	t.Helper()
	file := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(file, []byte(scriptPolicy), 0o600))
	for i, d := range diffs {
		require.NotEmpty(t, d)
		patch := filepath.Join(dir, fmt.Sprintf("s%d.diff", i))
		require.NoError(t, os.WriteFile(patch, []byte(d), 0o600))
		cmd := exec.Command("patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-i", patch)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "patch:\n%s\n%s", out, d)
	}
	p, err := rules.Load(file, rules.Options{Workspace: dir})
	require.NoError(t, err)
	return p
}

func call(tool, args string) policy.Call {
	return policy.Call{ID: "x", Session: "s", Tool: tool, Args: json.RawMessage(args)}
}

func assertVerdict(t *testing.T, p *rules.Policy, c policy.Call, action rules.Action, rule string) {
	t.Helper()
	v := p.Evaluate(c)
	assert.Equal(t, action, v.Action, "%s %s", c.Tool, c.Args)
	assert.Equal(t, rule, v.Rule, "%s %s", c.Tool, c.Args)
}

func TestTheFilterKeepsOneRuleAndItsShadow(t *testing.T) {
	s := scriptedLedger(t)
	records, err := callrecord.Read(context.Background(), s.write(t), s.t0, time.Time{})
	require.NoError(t, err)

	rep, err := analytics.Compute(records, analytics.Options{Since: s.t0, Until: s.t0.Add(720 * time.Hour), Rule: "writes"})
	require.NoError(t, err)
	require.Len(t, rep.Rules, 1)
	assert.Equal(t, s.byRule["writes"].counts(), rep.Rules[0].Counts)
	assert.Equal(t, s.byRule["writes"].c.Calls, rep.Calls)
	assert.Empty(t, rep.Shadow)
	require.Len(t, rep.Suggestions, 1)
	assert.Empty(t, rep.Suggestions[0].Diff, "no policy file, no diff")
	assert.Empty(t, rep.Suggestions[0].NoDiff)

	rep, err = analytics.Compute(records, analytics.Options{Rule: "shell-strict"})
	require.NoError(t, err)
	assert.Empty(t, rep.Rules, "a shadow rule decides no call")
	require.Len(t, rep.Shadow, 1)
	assert.Equal(t, s.shadows["shell-strict"].Calls, rep.Shadow[0].Calls)
	assert.Equal(t, "since 2026-11-01", rep.Window, "the whole ledger is named by its first call")
}
