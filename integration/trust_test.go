package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

// The gate holds on every path: decisions through a session, session ends,
// a worker that dies while a tool runs, channels that are down.

const groupsPolicy = `default: ask
rules:
  - name: escalating
    tool: shell
    when: args.command.startsWith('esc')
    action: ask
    groups: [ops]
    escalate_after: 2s
    escalate_to: [finance]
  - name: finance
    tool: shell
    when: args.command.startsWith('fin')
    action: ask
    groups: [finance]
  - name: ops
    tool: shell
    action: ask
    groups: [ops]
`

func TestStickyDecisionsHoldToGroups(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(groupsPolicy), 0o644))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, devReady, "dev", "--data-dir", filepath.Join(dir, "data"), "--temporal-port", strconv.Itoa(freePort(t)),
		"--http", httpAddr, "--tokens", writeTokensFile(t, dir), "--policy", policyFile)
	as := func(name string) apiClient {
		return apiClient{t: t, base: "http://" + httpAddr, token: "token-" + name}
	}
	agent := as("agent-1")
	submit := func(callID, command string) {
		r := agent.do("POST", "/v1/calls?wait=100ms", map[string]any{"session": "g1", "tool": "shell", "call_id": callID, "args": map[string]any{"command": command}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
	}
	status := func(callID string) string {
		s, _ := agent.do("GET", "/v1/calls/"+callID, nil).body["status"].(string)
		return s
	}
	submit("ops1", "echo ops")
	submit("fin1", "fin report")
	require.Eventually(t, func() bool { return status("ops1") == "pending" && status("fin1") == "pending" }, 30*time.Second, 20*time.Millisecond)

	r := as("finance1").do("POST", "/v1/calls/fin1/decision", map[string]any{"decision": "approve_for_session"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	fin := agent.do("GET", "/v1/calls/fin1?wait=30s", nil)
	require.Equal(t, "ok", fin.body["status"], fin.raw)

	submit("ops2", "echo later") // registers after the sticky decision
	require.Eventually(t, func() bool { return status("ops2") == "pending" }, 30*time.Second, 20*time.Millisecond,
		"a later ops call still waits for ops")
	assert.Equal(t, "pending", status("ops1"), "finance's sticky decision did not decide the waiting ops call")

	r = as("finance1").do("POST", "/v1/calls/ops1/decision", map[string]any{"decision": "approve"})
	assert.Equal(t, http.StatusForbidden, r.status, r.raw)
	assert.Contains(t, r.errorMessage(), "finance1 may not decide call ops1")
	r = as("finance1").do("POST", "/v1/sessions/g1/end", nil)
	assert.Equal(t, http.StatusForbidden, r.status, r.raw)
	assert.Contains(t, r.errorMessage(), "finance1 may not end session g1")
	r = as("alice").do("DELETE", "/v1/sessions/g1/sticky/shell", nil)
	assert.Equal(t, http.StatusForbidden, r.status, "ops may not revoke finance's decision: %s", r.raw)

	r = as("alice").do("POST", "/v1/calls/ops1/decision", map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "ok", agent.do("GET", "/v1/calls/ops1?wait=30s", nil).body["status"])
	r = as("root").do("POST", "/v1/sessions/g1/end", nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, float64(1), r.body["denied_calls"])
	assert.Equal(t, "denied", agent.do("GET", "/v1/calls/ops2?wait=30s", nil).body["status"])

	t.Run("after an escalation the escalation group sees the call and may decide it", func(t *testing.T) {
		r := agent.do("POST", "/v1/calls?wait=100ms", map[string]any{"session": "g2", "tool": "shell", "call_id": "esc1", "args": map[string]any{"command": "esc deploy"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		listed := func() bool {
			for _, c := range as("finance1").do("GET", "/v1/pending", nil).body["calls"].([]any) {
				if c.(map[string]any)["call_id"] == "esc1" {
					return true
				}
			}
			return false
		}
		assert.False(t, listed(), "before the escalation finance does not see it")
		require.Eventually(t, listed, 30*time.Second, 50*time.Millisecond)
		r = as("finance1").do("POST", "/v1/calls/esc1/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", agent.do("GET", "/v1/calls/esc1?wait=30s", nil).body["status"])
	})

	t.Run("identifiers that are not identifiers are a 400 that names them", func(t *testing.T) {
		for _, path := range []string{"/v1/calls/a%00b", "/v1/calls/%ff", "/v1/sessions/%ff"} {
			r := as("root").do("GET", path, nil)
			assert.Equal(t, http.StatusBadRequest, r.status, "%s: %s", path, r.raw)
		}
		r := agent.do("POST", "/v1/calls", map[string]any{"session": "g3", "tool": strings.Repeat("x", 10000), "args": map[string]any{}})
		assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "tool")
	})
}

// alive reports whether a process exists.
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestWorkerKilledWhileAToolRunsEndsUnknown(t *testing.T) {
	d := newDev(t)
	command := `echo started >> runs.txt; sleep 120 & echo $! > sleep.pid; wait; echo finished >> runs.txt`
	d.callJSON(5, "--session", "k", "--id", "lost1", "--wait", "300ms", "shell", fmt.Sprintf(`{"command":%q}`, command))
	require.Equal(t, 0, d.cli("approve", "lost1", "--by", "alice").code)
	pidFile := filepath.Join(d.workspace, "sleep.pid")
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, 30*time.Second, 20*time.Millisecond, "the tool started")

	d.dev.kill()
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 50*time.Millisecond,
		"the tool's processes die with the worker")

	d.startDev()
	r := d.cli("status", "lost1", "--json", "--wait", "90s")
	require.Equal(t, 6, r.code, "exit status 6: unknown\n%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, `"status": "unknown"`)
	assert.Contains(t, r.stdout, "may or may not have run")
	assert.Equal(t, 1, countLines(t, filepath.Join(d.workspace, "runs.txt")), "no second attempt started, none finished")
}

// hangingServer accepts connections and never answers, like a peer that
// is up but stuck.
func hangingServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func TestChannelsThatHangOrRefuseNeverHoldBackTheResult(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for k, v := range map[string]string{
		"SLACK_BOT_TOKEN":         slackToken,
		"SLACK_SIGNING_SECRET":    slackSecret,
		"SLACK_CHANNEL":           "#approvals",
		"SLACK_API_URL":           "http://" + hangingServer(t) + "/api/",
		"SMTP_ADDR":               fmt.Sprintf("127.0.0.1:%d", freePort(t)), // nothing listens: refused
		"SMTP_FROM":               "toolgate <toolgate@example.com>",
		"TOOLGATE_PUBLIC_URL":     "http://" + httpAddr,
		"TOOLGATE_APPROVERS_FILE": write("approvers.yaml", channelsApprovers),
		"TOOLGATE_WEBHOOK_URLS":   "http://" + hangingServer(t) + "/hook",
		"TOOLGATE_WEBHOOK_SECRET": webhookSecret,
		"TOOLGATE_LINK_SECRET":    linkSecret,
	} {
		t.Setenv(k, v)
	}
	start(t, devReady, "dev", "--data-dir", filepath.Join(dir, "data"), "--temporal-port", strconv.Itoa(freePort(t)),
		"--http", httpAddr, "--tokens", writeTokensFile(t, dir), "--policy", write("policy.yaml", channelsPolicy))
	agent := apiClient{t: t, base: "http://" + httpAddr, token: "token-agent-1"}
	r := agent.do("POST", "/v1/calls?wait=100ms", map[string]any{"session": "dead", "tool": "shell", "call_id": "d1", "args": map[string]any{"command": "echo hi"}})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/d1", nil).body["status"] == "pending" }, 30*time.Second, 20*time.Millisecond)

	r = apiClient{t: t, base: "http://" + httpAddr, token: "token-alice"}.do("POST", "/v1/calls/d1/decision", map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	// ?wait= answers 200 only once the call's workflow has completed.
	res := agent.do("GET", "/v1/calls/d1?wait=20s", nil)
	require.Equal(t, http.StatusOK, res.status, "the call completed while every channel still hangs or refuses: %s", res.raw)
	assert.Equal(t, "ok", res.body["status"])
}

// allowAll approves every call without asking anyone.
type allowAll struct{ policy.Base }

func TestATimedOutToolThatIsNotIdempotentRunsOnce(t *testing.T) {
	d := newDev(t)
	tc := d.temporal()
	defer tc.Close()

	// A worker of this test's own, with a tool that outlasts its timeout,
	// on a task queue of its own.
	var runs atomic.Int32
	tools := tool.NewRegistry()
	tools.MustRegister(
		tool.Tool{Name: "pay", Options: tool.Options{Timeout: time.Second}, Run: func(ctx context.Context, _ tool.Input) (json.RawMessage, error) {
			runs.Add(1)
			<-ctx.Done() // paying takes longer than the timeout allows
			return nil, ctx.Err()
		}},
	)
	const queue = "slow-tools"
	door := d.door()
	w, err := worker.New(tc, worker.Options{TaskQueue: queue, Policy: allowAll{}, Tools: tools, DataConverter: keyring.DataConverter(d.keyring()),
		Doors: statement.NewDoors(door.Public())})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := tgclient.New(tc, queue).WithDoor(door).Call(ctx, tgclient.CallRequest{Session: "pay", CallID: "pay1", Tool: "pay", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusUnknown, r.Status, r.Reason)
	assert.Contains(t, r.Reason, "it did not finish within its timeout")
	assert.Equal(t, int32(1), runs.Load(), "the server did not start a second attempt")
}
