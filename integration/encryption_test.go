package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/integration/cluster"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/workflows"
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
// or error, and returns the secrets by where they went. Under the default
// policy (default is true: no encryptionPolicy, no MCP upstream) it makes
// those the default policy asks or allows alike: no agent-run, MCP or
// four-eyes call.
func secretsRun(t *testing.T, d *devEnv, tag string, defaultPolicy bool) map[string]string {
	as := func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}
	agent, bob, alice := as("agent-1"), as("bob"), as("alice")
	s := func(what string) string { return "SECRET-" + tag + "-" + what + "-7f3a" }
	secrets := map[string]string{}
	kinds := []string{"auto-args", "preview", "edit", "deny-args", "deny-reason", "sticky", "covered", "failed"}
	if !defaultPolicy {
		kinds = append(kinds, "agent-args", "agent-report", "mcp", "four-eyes")
	}
	for _, what := range kinds {
		secrets[what] = s(what)
	}

	// submit waits for the call's result up to wait: "20s" for one that
	// ends on its own, "200ms" for one that waits for a person (202).
	submit := func(wait, callID, session, toolName string, args map[string]any, extra map[string]any) apiResponse {
		t.Helper()
		body := map[string]any{"session": session, "call_id": callID, "tool": toolName, "args": args}
		for k, v := range extra {
			body[k] = v
		}
		return agent.do("POST", "/v1/calls?wait="+wait, body)
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
	final := func(callID string) apiResponse {
		t.Helper()
		var r apiResponse
		require.Eventually(t, func() bool {
			r = agent.do("GET", "/v1/calls/"+callID, nil)
			_, ended := r.body["finished_at"] // a Result, not the waiting view
			return ended
		}, 30*time.Second, 50*time.Millisecond, "call %s ends", callID)
		return r
	}

	// Auto-approved: the arguments and the echoed output.
	r := submit("20s", tag+"-auto", tag, "echo", map[string]any{"msg": secrets["auto-args"]}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "ok", r.body["status"])

	// Asked and approved, with a preview of the new file's content.
	submit("200ms", tag+"-write", tag, "write_file", map[string]any{"path": "notes.txt", "content": secrets["preview"] + "\n"}, nil)
	waitPending(tag + "-write")
	preview := bob.do("GET", "/v1/calls/"+tag+"-write", nil)
	require.Contains(t, preview.raw, secrets["preview"], "the approver is shown the content")
	decide(bob, tag+"-write", map[string]any{"decision": "approve"})
	assert.Equal(t, "ok", final(tag + "-write").body["status"])

	// Approved with edited arguments: the edit runs.
	submit("200ms", tag+"-edit", tag, "shell", map[string]any{"command": "echo harmless"}, nil)
	waitPending(tag + "-edit")
	decide(bob, tag+"-edit", map[string]any{"decision": "approve", "args": map[string]any{"command": "echo " + secrets["edit"]}})
	assert.Contains(t, fmt.Sprint(final(tag + "-edit").body["output"]), secrets["edit"])

	// Denied with a reason.
	submit("200ms", tag+"-deny", tag, "shell", map[string]any{"command": "echo " + secrets["deny-args"]}, nil)
	waitPending(tag + "-deny")
	decide(bob, tag+"-deny", map[string]any{"decision": "deny", "reason": secrets["deny-reason"]})
	denied := final(tag + "-deny")
	assert.Equal(t, "denied", denied.body["status"], denied.raw)
	assert.Contains(t, denied.raw, secrets["deny-reason"], "the agent hears why")

	// Sticky: approved for the session, then a call it covers.
	submit("200ms", tag+"-sticky", tag+"-sticky", "shell", map[string]any{"command": "echo " + secrets["sticky"]}, nil)
	waitPending(tag + "-sticky")
	decide(bob, tag+"-sticky", map[string]any{"decision": "approve_for_session"})
	assert.Equal(t, "ok", final(tag + "-sticky").body["status"])
	r = submit("20s", tag+"-covered", tag+"-sticky", "shell", map[string]any{"command": "echo " + secrets["covered"]}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Contains(t, fmt.Sprint(r.body["output"]), secrets["covered"], "the sticky decision covered it")

	// A tool that fails, its error naming what it was given.
	r = submit("20s", tag+"-failed", tag, "read_file", map[string]any{"path": secrets["failed"] + ".txt"}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "error", r.body["status"])
	assert.Contains(t, r.body["reason"], secrets["failed"])
	if defaultPolicy {
		return secrets
	}

	// Run by the agent, which reports its output.
	r = submit("20s", tag+"-agent", tag, "deploy", map[string]any{"env": secrets["agent-args"]}, map[string]any{"execution": "agent"})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	r = agent.do("POST", "/v1/calls/"+tag+"-agent/report", map[string]any{"output": map[string]any{"log": secrets["agent-report"]}})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	// An MCP upstream's tool.
	r = submit("20s", tag+"-mcp", tag, "web__lookup", map[string]any{"key": secrets["mcp"]}, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Contains(t, r.raw, "value of "+secrets["mcp"])

	// Four eyes: two approvers.
	submit("200ms", tag+"-payout", tag, "write_file", map[string]any{"path": "payout.txt", "content": secrets["four-eyes"]}, nil)
	waitPending(tag + "-payout")
	decide(alice, tag+"-payout", map[string]any{"decision": "approve"})
	decide(bob, tag+"-payout", map[string]any{"decision": "approve"})
	assert.Equal(t, "ok", final(tag + "-payout").body["status"])
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
		secrets := secretsRun(t, d, "enc", false)
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
		secrets := secretsRun(t, d, "plain", false)
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

// firstInputKey is the key ID the call's request was encrypted with, read
// from its history with a client that has no keys.
func firstInputKey(t *testing.T, d *devEnv, callID string) string {
	t.Helper()
	tc, err := client.Dial(client.Options{HostPort: d.address(), Namespace: "default", Logger: quietLogger{}})
	require.NoError(t, err)
	defer tc.Close()
	it := tc.GetWorkflowHistory(context.Background(), workflows.CallWorkflowID(callID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	ev, err := it.Next()
	require.NoError(t, err)
	p := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0]
	assert.Equal(t, keyring.EncodingEncrypted, string(p.GetMetadata()["encoding"]))
	return string(p.GetMetadata()[keyring.MetadataKeyID])
}

func TestKeysRotateAndOldCallsStillRead(t *testing.T) {
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: "127.0.0.1:" + fmt.Sprint(freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	args := []string{"dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port), "--http", d.httpAddr,
		"--tokens", writeTokensFile(t, t.TempDir()), "--policy", writePolicy(t, encryptionPolicy)}
	d.dev = start(t, devReady, args...)
	key1 := d.keyring().Current()

	r := d.cli("call", "--session", "rot", "--id", "rot-1", "echo", `{"v":"SECRET-rot-1"}`)
	require.Equal(t, 0, r.code, r.stderr)
	r = d.cli("call", "--session", "rot", "--id", "rot-2", "--wait", "1s", "write_file", `{"path":"r.txt","content":"SECRET-rot-2"}`)
	require.Equal(t, 5, r.code, "waits for a person: %s %s", r.stdout, r.stderr)
	assert.Equal(t, key1, firstInputKey(t, d, "rot-1"))

	r = d.cli("keys", "new", d.keysFile())
	require.Equal(t, 0, r.code, r.stderr)
	key2 := d.keyring().Current()
	require.NotEqual(t, key1, key2)
	r = d.cli("keys", "list", d.keysFile())
	assert.Regexp(t, key1+`\s+\S+\s*\n`, r.stdout, "key 1 is kept, not current")
	assert.Regexp(t, key2+`\s+\S+\s+yes`, r.stdout)

	// Restarted, dev encrypts with key 2 and reads what key 1 wrote.
	d.dev.stop()
	d.dev = start(t, devReady, args...)
	assert.Contains(t, d.dev.out.String(), "payloads   encrypted, key "+key2)
	r = d.cli("call", "--session", "rot", "--id", "rot-3", "echo", `{"v":"SECRET-rot-3"}`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, key2, firstInputKey(t, d, "rot-3"))
	r = d.cli("approve", "rot-2", "--by", "bob")
	require.Equal(t, 0, r.code, "a call that began under key 1 is decided under key 2: %s %s", r.stdout, r.stderr)
	require.Eventually(t, func() bool { return strings.Contains(d.cli("status", "rot-2").stdout, "status: ok") }, 30*time.Second, 200*time.Millisecond)
	for id, secret := range map[string]string{"rot-1": "SECRET-rot-1", "rot-3": "SECRET-rot-3"} {
		r = d.cli("status", id)
		assert.Contains(t, r.stdout, secret, "%s shows its output", id)
	}
	r = d.cli("pending")
	assert.Equal(t, 0, r.code, r.stderr)

	// A keyring without key 1 says which key it lacks.
	raw, err := os.ReadFile(d.keysFile())
	require.NoError(t, err)
	var ring map[string]any
	require.NoError(t, json.Unmarshal(raw, &ring))
	var kept []any
	for _, k := range ring["keys"].([]any) {
		if k.(map[string]any)["id"] != key1 {
			kept = append(kept, k)
		}
	}
	ring["keys"] = kept
	partial := filepath.Join(t.TempDir(), "keys.json")
	b, err := json.Marshal(ring)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(partial, b, 0o600))
	r = d.cliWith([]string{"TOOLGATE_KEYS=" + partial}, "status", "rot-1")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "encrypted with key "+key1)
	assert.NotContains(t, r.stdout+r.stderr, "SECRET-rot-1")
}

func TestTheTemporalCLIReadsHistoriesThroughTheCodec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cli, err := cluster.BuildCLI(ctx)
	require.NoError(t, err)
	d := startDevWithPolicy(t, encryptionPolicy)
	r := d.cli("call", "--session", "cli", "--id", "via-cli", "echo", `{"v":"SECRET-codec-cli"}`)
	require.Equal(t, 0, r.code, r.stderr)

	show := func(extra ...string) (string, error) {
		args := append([]string{"workflow", "show", "-w", workflows.CallWorkflowID("via-cli"), "--address", d.address(), "--namespace", "default"}, extra...)
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		return string(out), err
	}
	endpoint := "http://" + d.httpAddr + "/codec/default"
	out, err := show("--codec-endpoint", endpoint, "--codec-auth", "Bearer token-bob")
	require.NoError(t, err, out)
	assert.Contains(t, out, "SECRET-codec-cli", "an approver reads the call through the codec")

	out, err = show()
	require.NoError(t, err, out)
	assert.NotContains(t, out, "SECRET-codec-cli", "without the codec: ciphertext")
	assert.Contains(t, out, keyring.EncodingEncrypted)

	for _, auth := range []string{"Bearer token-agent-1", ""} {
		args := []string{"--codec-endpoint", endpoint}
		if auth != "" {
			args = append(args, "--codec-auth", auth)
		}
		out, err = show(args...)
		assert.NotContains(t, out, "SECRET-codec-cli", "%q is refused", auth)
		assert.Error(t, err, "the CLI fails when the codec refuses %q: %s", auth, out)

		// What the codec answered it.
		req, err := http.NewRequestWithContext(ctx, "POST", endpoint+"/decode", strings.NewReader(`{"payloads": []}`))
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, map[string]int{"": http.StatusUnauthorized, "Bearer token-agent-1": http.StatusForbidden}[auth], resp.StatusCode)
	}
}
