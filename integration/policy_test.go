package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const policyV1 = `
default: ask
rules:
  - name: no-rm
    tool: shell
    when: args.command.startsWith('rm ')
    action: deny
    reason: rm is not allowed here
  - name: ledger
    tool: write_file
    when: args.path.startsWith('ledger/')
    action: ask
    message: 'Write to the ledger: {{.args.path}}?'
    groups: [finance]
  - name: reads
    tools: [echo, read_file, list_dir]
    action: allow
quotas:
  - {name: echo-per-hour, tools: [echo], max: 2, per: 1h}
`

func TestPolicyFile(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(policyV1), 0o644))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t)}
	d.httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d.workspace = filepath.Join(d.dataDir, "workspace")
	tokens := writeTokensFile(t, dir)
	startDev := func() {
		d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
			"--http", d.httpAddr, "--tokens", tokens, "--policy", policyFile)
	}
	startDev()
	as := func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}

	t.Run("rules decide and the result names rule and version", func(t *testing.T) {
		d := d.in(t)
		out := d.callJSON(3, "--session", "p1", "shell", `{"command":"rm -r build"}`)
		assert.Equal(t, "rm is not allowed here", out["reason"])
		assert.Equal(t, "no-rm", out["rule"])
		assert.Regexp(t, `^sha256:[0-9a-f]{12}$`, out["policy_version"])
		out = d.callJSON(4, "--session", "p1", "read_file", `{"path":"nothing-here.txt"}`)
		assert.Equal(t, `tool failed: read "nothing-here.txt": no such file or directory`, out["reason"], "allowed by rule reads; the tool's own error")
	})

	t.Run("an approver outside the rule's groups cannot decide", func(t *testing.T) {
		agent := as("agent-1")
		r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "p2", "tool": "write_file", "call_id": "ledger1",
			"args": map[string]any{"path": "ledger/2026.txt", "content": "+1"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, "Write to the ledger: ledger/2026.txt?", r.body["message"])
		assert.Equal(t, []any{"finance"}, r.body["groups"])
		require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/ledger1", nil).body["status"] == "pending" }, 30*time.Second, 20*time.Millisecond)
		r = as("alice").do("POST", "/v1/calls/ledger1/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "alice may not decide call ledger1")
		pending := as("alice").do("GET", "/v1/pending", nil)
		assert.Empty(t, pending.body["calls"], "alice's list shows only what she may decide")
		r = as("finance1").do("POST", "/v1/calls/ledger1/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", agent.do("GET", "/v1/calls/ledger1?wait=30s", nil).body["status"])
	})

	t.Run("quotas are counted by the session and survive a restart", func(t *testing.T) {
		d := d.in(t)
		d.callJSON(0, "--session", "q1", "echo", `{"n":1}`)
		d.callJSON(0, "--session", "q1", "echo", `{"n":2}`)
		out := d.callJSON(4, "--session", "q1", "echo", `{"n":3}`)
		assert.Contains(t, out["reason"], "quota echo-per-hour: at most 2 echo calls per 1h0m0s in this session")
		d.callJSON(0, "--session", "q2", "echo", `{}`) // another session has its own count

		d.dev.kill()
		startDev()
		out = d.callJSON(4, "--session", "q1", "echo", `{"n":4}`)
		assert.Contains(t, out["reason"], "quota echo-per-hour", "kill -9 and a restart reset nothing")
	})

	t.Run("a broken file is refused and the last good one keeps serving; a fixed one is taken", func(t *testing.T) {
		d := d.in(t)
		before := d.callJSON(3, "--session", "p3", "shell", `{"command":"rm x"}`)["policy_version"]
		require.NoError(t, os.WriteFile(policyFile, []byte(policyV1+"\n  - {name: broken, tools: [x], max: -1, per: 1h}\n"), 0o644))
		// Give the reloader (every 2s) time to see the broken file, then
		// check the old rules still decide.
		require.Eventually(t, func() bool {
			return strings.Contains(d.dev.out.String(), "policy file refused; keeping the last good version")
		}, 20*time.Second, 100*time.Millisecond, "the worker logs the broken file")
		assert.Contains(t, d.dev.out.String(), "policy.yaml:21", "the log names file and line")
		out := d.callJSON(3, "--session", "p3", "shell", `{"command":"rm x"}`)
		assert.Equal(t, before, out["policy_version"])

		fixed := strings.Replace(policyV1, "reason: rm is not allowed here", "reason: rm is still not allowed", 1)
		require.NoError(t, os.WriteFile(policyFile, []byte(fixed), 0o644))
		require.Eventually(t, func() bool {
			out := d.callJSON(3, "--session", "p3", "shell", `{"command":"rm x"}`)
			return out["reason"] == "rm is still not allowed" && out["policy_version"] != before
		}, 20*time.Second, 200*time.Millisecond)
	})

	t.Run("whatif shows which recorded calls a candidate file would decide differently", func(t *testing.T) {
		d := d.in(t)
		candidate := filepath.Join(dir, "candidate.yaml")
		require.NoError(t, os.WriteFile(candidate, []byte(`
default: ask
rules:
  - name: no-echo
    tool: echo
    action: deny
    reason: echo is retired
  - name: no-rm
    tool: shell
    when: args.command.startsWith('rm ')
    action: deny
    reason: rm
  - name: reads
    tools: [read_file, list_dir]
    action: allow
`), 0o644))
		r := d.cli("policy", "whatif", candidate, "--since", "1h")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Regexp(t, `(?m)^\S+\s+q1\s+echo\s+allow\s+deny\s+no-echo`, r.stdout)
		assert.Regexp(t, `(?m)^\s+allow -> deny\s+[4-9]`, r.stdout, "the echo calls of q1 and q2")
		assert.NotContains(t, r.stdout, "ledger1", "the ledger write asked then and would ask now")
		assert.Contains(t, r.stdout, "would be decided differently by "+candidate)

		r = d.cli("policy", "check", candidate)
		assert.Equal(t, 0, r.code, r.stderr)
		r = d.cli("policy", "eval", candidate, "echo", `{}`)
		assert.Equal(t, 0, r.code)
		assert.Contains(t, r.stdout, `"rule": "no-echo"`)
	})
}
