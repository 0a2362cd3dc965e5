package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/integration/cluster"
	"github.com/toolgate/toolgate/workflows"
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
		ledgerFlags := []string{"--ledger", filepath.Join(d.dataDir, "ledger.db"), "--ledger-key", filepath.Join(d.dataDir, "ledger.key")}
		for _, from := range [][]string{ledgerFlags, {"--from", "temporal", "--since", "1h"}} {
			r := d.cli(append([]string{"policy", "whatif", candidate}, from...)...)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Regexp(t, `(?m)^\S+\s+q1\s+echo\s+allow\s+deny\s+no-echo`, r.stdout)
			assert.Regexp(t, `(?m)^\s+allow -> deny\s+[4-9]`, r.stdout, "the echo calls of q1 and q2")
			assert.NotContains(t, r.stdout, "ledger1", "the ledger write asked then and would ask now")
			assert.Contains(t, r.stdout, "would be decided differently by "+candidate)
		}

		// Temporal forgets a call (its retention, or a delete); the
		// ledger does not, and whatif still replays it.
		cli, err := cluster.BuildCLI(context.Background())
		require.NoError(t, err)
		forgotten := "forget-me"
		d.callJSON(0, "--session", "q5", "--id", forgotten, "echo", `{}`)
		out, err := exec.Command(cli, "workflow", "delete", "--workflow-id", workflows.CallWorkflowID(forgotten),
			"--address", d.address(), "--namespace", "default").CombinedOutput()
		require.NoError(t, err, string(out))
		require.Eventually(t, func() bool {
			return !strings.Contains(d.cli("policy", "whatif", candidate, "--from", "temporal", "--since", "1h").stdout, forgotten)
		}, 30*time.Second, 500*time.Millisecond, "Temporal no longer has the call")
		r := d.cli(append([]string{"policy", "whatif", candidate}, ledgerFlags...)...)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(forgotten)+`\s+q5\s+echo\s+allow\s+deny\s+no-echo`, r.stdout, "the ledger still has it")
		assert.Contains(t, r.stdout, "the ledger, calls of any age")

		r = d.cliWith([]string{"TOOLGATE_KEYS="}, append([]string{"policy", "whatif", candidate}, ledgerFlags...)...)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Regexp(t, `calls not replayed: their arguments are encrypted and no key given opens them`, r.stdout,
			"without the keyring the sealed arguments are not guessed at")

		r = d.cli("policy", "check", candidate)
		assert.Equal(t, 0, r.code, r.stderr)
		r = d.cli("policy", "eval", candidate, "echo", `{}`)
		assert.Equal(t, 0, r.code)
		assert.Contains(t, r.stdout, `"rule": "no-echo"`)
	})

	t.Run("a shadow rule records what it would have done and enforces nothing", func(t *testing.T) {
		d := d.in(t)
		shadowed := strings.Replace(policyV1, "quotas:", `  - name: retire-list-dir
    tool: list_dir
    action: deny
    reason: list_dir is being retired
    mode: shadow
quotas:`, 1)
		require.NoError(t, os.WriteFile(policyFile, []byte(shadowed), 0o644))
		r := d.cli("policy", "explain", policyFile)
		assert.Regexp(t, `retire-list-dir \(line \d+\): deny \(shadow: evaluated and recorded, not enforced\)`, r.stdout)
		sum := sha256.Sum256([]byte(shadowed))
		version := "sha256:" + hex.EncodeToString(sum[:])[:12]
		var out map[string]any
		require.Eventually(t, func() bool {
			out = d.callJSON(0, "--session", "sh1", "list_dir", `{"path":"."}`)
			return out["policy_version"] == version
		}, 20*time.Second, 300*time.Millisecond, "the worker takes the file")
		assert.Equal(t, "ok", out["status"], "the shadow deny refused nothing: %v", out)
		assert.Equal(t, "reads", out["rule"])

		entries := d.cli("audit", "show", out["call_id"].(string), "--json", "--ledger", filepath.Join(d.dataDir, "ledger.db"),
			"--ledger-key", filepath.Join(d.dataDir, "ledger.key"))
		require.Equal(t, 0, entries.code, entries.stderr)
		assert.Contains(t, entries.stdout, `"shadow":{"action":"deny","rule":"retire-list-dir"}`, "the call's submission records it")
		assert.Contains(t, entries.stdout, `"verdict":"allow"`)

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := http.Get("http://" + d.httpAddr + "/metrics")
			if !assert.NoError(c, err) {
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Prometheus's sanitizer writes the rule's "-" as "_".
			assert.Regexp(c, `(?m)^toolgate_shadow_verdicts\{[^}]*action="deny"[^}]*enforced="allow"[^}]*rule="retire_list_dir"[^}]*\} [1-9]`, string(body))
			assert.Regexp(c, `(?m)^toolgate_verdicts\{[^}]*rule="reads"[^}]*tool="list_dir"[^}]*verdict="allow"[^}]*\} [1-9]`, string(body))
		}, 15*time.Second, 200*time.Millisecond, "and counts it")
	})
}
