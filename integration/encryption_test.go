package integration

import (
	"bytes"
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

// encryptionPolicy asks for writes and shell commands, and two people for
// a payout; everything else (echo, read_file, MCP lookups, an agent's own
// deploy) is allowed.
const encryptionPolicy = `
default: allow
rules:
  - {name: two-keys, tool: write_file, when: "args.path == 'payout.txt'", action: ask, approvals: 2}
  - {name: writes-ask, tool: write_file, action: ask}
  - {name: shell-asks, tool: shell, action: ask}
`

// secretsRun makes one call of every kind through the API, each carrying
// its own secret string in its arguments, output, preview, edit, reason
// or error, and returns the secrets by where they went.
func secretsRun(t *testing.T, d *devEnv, tag string) map[string]string {
	as := func(name string) apiClient { return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name} }
	agent, bob, alice := as("agent-1"), as("bob"), as("alice")
	s := func(what string) string { return "SECRET-" + tag + "-" + what + "-7f3a" }
	secrets := map[string]string{}
	for _, what := range []string{"auto-args", "preview", "edit", "deny-args", "deny-reason", "sticky", "covered",
		"agent-args", "agent-report", "mcp", "four-eyes", "failed"} {
		secrets[what] = s(what)
	}

	submit := func(callID, session, toolName string, args map[string]any, extra map[string]any) apiResponse {
		t.Helper()
		body := map[string]any{"session": session, "call_id": callID, "tool": toolName, "args": args}
		for k, v := range extra {
			body[k] = v
		}
		return agent.do("POST", "/v1/calls?wait=30s", body)
	}
	waitPending := func(callID string) {
		t.Helper()
		require.Eventually(t, func() bool { return bob.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending" },
			30*time.Second, 50*time.Millisecond, "call %s waits", callID)
	}
	decide := func(who apiClient, callID string, body map[string]any) {
		t.Helper()
		r := who.do("POST", "/v1/calls/"+callID+"/decision", body)
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}
	final := func(callID string) map[string]any {
		t.Helper()
		var r apiResponse
		require.Eventually(t, func() bool {
			r = agent.do("GET", "/v1/calls/"+callID, nil)
			st, _ := r.body["status"].(string)
			return st != "" && st != "pending" && st != "approved" && st != "running"
		}, 30*time.Second, 50*time.Millisecond, "call %s ends", callID)
		return r.body
	}

	// Auto-approved: the arguments and the echoed output.
	r := submit(tag+"-auto", "enc", "echo", map[string]any{"msg": secrets["auto-args"]}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "ok", r.body["status"])

	// Asked and approved, with a preview of the new file's content.
	submit(tag+"-write", "enc", "write_file", map[string]any{"path": "notes.txt", "content": secrets["preview"] + "\n"}, nil)
	waitPending(tag + "-write")
	preview := bob.do("GET", "/v1/calls/"+tag+"-write", nil)
	require.Contains(t, preview.raw, secrets["preview"], "the approver is shown the content")
	decide(bob, tag+"-write", map[string]any{"decision": "approve"})
	assert.Equal(t, "ok", final(tag + "-write")["status"])

	// Approved with edited arguments: the edit runs.
	submit(tag+"-edit", "enc", "shell", map[string]any{"command": "echo harmless"}, nil)
	waitPending(tag + "-edit")
	decide(bob, tag+"-edit", map[string]any{"decision": "approve", "args": map[string]any{"command": "echo " + secrets["edit"]}})
	assert.Contains(t, fmt.Sprint(final(tag + "-edit")["output"]), secrets["edit"])

	// Denied with a reason.
	submit(tag+"-deny", "enc", "shell", map[string]any{"command": "echo " + secrets["deny-args"]}, nil)
	waitPending(tag + "-deny")
	decide(bob, tag+"-deny", map[string]any{"decision": "deny", "reason": secrets["deny-reason"]})
	assert.Equal(t, secrets["deny-reason"], final(tag + "-deny")["reason"])

	// Sticky: approved for the session, then a call it covers.
	submit(tag+"-sticky", "enc-sticky", "shell", map[string]any{"command": "echo " + secrets["sticky"]}, nil)
	waitPending(tag + "-sticky")
	decide(bob, tag+"-sticky", map[string]any{"decision": "approve_for_session"})
	assert.Equal(t, "ok", final(tag + "-sticky")["status"])
	r = submit(tag+"-covered", "enc-sticky", "shell", map[string]any{"command": "echo " + secrets["covered"]}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Contains(t, fmt.Sprint(r.body["output"]), secrets["covered"], "the sticky decision covered it")

	// Run by the agent, which reports its output.
	r = submit(tag+"-agent", "enc", "deploy", map[string]any{"env": secrets["agent-args"]}, map[string]any{"execution": "agent"})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	r = agent.do("POST", "/v1/calls/"+tag+"-agent/report", map[string]any{"output": map[string]any{"log": secrets["agent-report"]}})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	// An MCP upstream's tool.
	r = submit(tag+"-mcp", "enc", "web__lookup", map[string]any{"key": secrets["mcp"]}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Contains(t, r.raw, "value of "+secrets["mcp"])

	// Four eyes: two approvers.
	submit(tag+"-payout", "enc", "write_file", map[string]any{"path": "payout.txt", "content": secrets["four-eyes"]}, nil)
	waitPending(tag + "-payout")
	decide(alice, tag+"-payout", map[string]any{"decision": "approve"})
	decide(bob, tag+"-payout", map[string]any{"decision": "approve"})
	assert.Equal(t, "ok", final(tag + "-payout")["status"])

	// A tool that fails, its error naming what it was given.
	r = submit(tag+"-failed", "enc", "read_file", map[string]any{"path": secrets["failed"] + ".txt"}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "error", r.body["status"])
	assert.Contains(t, r.body["reason"], secrets["failed"])
	return secrets
}

// occurrences counts each secret in the files of dir whose names start
// with prefix (a SQLite database, its WAL and shared memory).
func occurrences(t *testing.T, dir, prefix string, secrets map[string]string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "%s* in %s", prefix, dir)
	found := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for what, secret := range secrets {
			found[what] += bytes.Count(b, []byte(secret))
		}
	}
	return found
}

func TestNoSecretReachesTemporalsDatabase(t *testing.T) {
	t.Run("encrypted, the default", func(t *testing.T) {
		d := newDevWithMCP(t, "--tokens", writeTokensFile(t, t.TempDir()), "--policy", writePolicy(t, encryptionPolicy))
		assert.Contains(t, d.dev.out.String(), "payloads   encrypted, new key k")
		secrets := secretsRun(t, d, "enc")
		d.dev.stop()
		for what, n := range occurrences(t, d.dataDir, "temporal.db", secrets) {
			assert.Zero(t, n, "the %s secret is in Temporal's database %d times", what, n)
		}
		for what, n := range occurrences(t, d.dataDir, "ledger.db", secrets) {
			assert.Zero(t, n, "the %s secret is in the ledger's database %d times", what, n)
		}
	})
	t.Run("without keys the same run leaves every secret there", func(t *testing.T) {
		d := newDevWithMCP(t, "--tokens", writeTokensFile(t, t.TempDir()), "--policy", writePolicy(t, encryptionPolicy),
			"--insecure-plaintext-payloads")
		assert.Contains(t, d.dev.out.String(), "payloads   unencrypted")
		secrets := secretsRun(t, d, "plain")
		d.dev.stop()
		for what, n := range occurrences(t, d.dataDir, "temporal.db", secrets) {
			assert.NotZero(t, n, "the %s secret, unencrypted, is in Temporal's database: the check above can fail", what)
		}
	})
}

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.TrimSpace(text)+"\n"), 0o644))
	return path
}
