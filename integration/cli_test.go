package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// countLines reads how many times a shell call appended to a file in the
// workspace: the proof that a tool ran exactly once.
func countLines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

func TestCLIVerbs(t *testing.T) {
	d := newDev(t)

	t.Run("health", func(t *testing.T) {
		d := d.in(t)
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get("http://" + d.httpAddr + path)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, path)
			if path == "/readyz" {
				assert.Contains(t, string(body), `"tools":"Tools run sandboxed (Landlock ABI `, "readiness says how tools run")
			}
		}
		assert.Contains(t, d.dev.out.String(), "  tools      Tools run sandboxed (Landlock ABI ", "so does dev's banner")
	})

	t.Run("auto-approved call", func(t *testing.T) {
		d := d.in(t)
		out := d.callJSON(0, "--session", "s-auto", "echo", `{"hello":"world"}`)
		assert.Equal(t, "ok", out["status"])
		assert.Equal(t, map[string]any{"hello": "world"}, out["output"])
		assert.Equal(t, "approved", out["decision"])
		assert.Equal(t, "policy", out["decided_by"])
		assert.Equal(t, "policy", out["channel"])
		assert.Equal(t, "s-auto", out["session"])
		assert.Equal(t, "echo", out["tool"])
		assert.NotEmpty(t, out["call_id"])
	})

	t.Run("a call without gRPC compression; an unknown compression is refused", func(t *testing.T) {
		d := d.in(t)
		r := d.cliWith([]string{"TEMPORAL_GRPC_COMPRESSION=none"}, "call", "--json", "--session", "s-plain-grpc", "echo", `{"hello":"plain"}`)
		require.Equal(t, 0, r.code, r.stderr)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		assert.Equal(t, "ok", out["status"])
		assert.Equal(t, map[string]any{"hello": "plain"}, out["output"])

		r = d.cli("call", "--grpc-compression", "zstd", "--session", "s-plain-grpc", "echo", `{}`)
		assert.Equal(t, 2, r.code, "a usage error")
		assert.Contains(t, r.stderr, `--grpc-compression: unknown gRPC compression "zstd": use gzip or none`)
	})

	t.Run("write waits, pending lists it, approve runs it", func(t *testing.T) {
		d := d.in(t)
		out := d.callJSON(5, "--session", "s-write", "--id", "w1", "--wait", "500ms", "write_file", `{"path":"notes/a.txt","content":"hello"}`)
		assert.Equal(t, "pending", out["status"])
		assert.Equal(t, "w1", out["call_id"])

		r := d.cli("pending", "--json", "--session", "s-write")
		require.Equal(t, 0, r.code, r.stderr)
		var pending []tgclient.PendingCall
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &pending))
		require.Len(t, pending, 1)
		assert.Equal(t, "w1", pending[0].CallID)
		assert.Equal(t, "write_file", pending[0].Tool)
		assert.Contains(t, pending[0].Message, `"notes/a.txt"`)
		assert.Contains(t, pending[0].Args, "hello")

		text := d.cli("pending")
		assert.Contains(t, text.stdout, "w1")

		r = d.cli("approve", "w1", "--by", "alice")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "approved by alice")

		r = d.cli("status", "w1", "--json", "--wait", "30s")
		require.Equal(t, 0, r.code, r.stderr)
		var res workflows.Result
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
		assert.Equal(t, workflows.StatusOK, res.Status)
		assert.Equal(t, "alice", res.DecidedBy)
		assert.Equal(t, "cli", res.Channel)
		content, err := os.ReadFile(filepath.Join(d.workspace, "notes/a.txt"))
		require.NoError(t, err)
		assert.Equal(t, "hello", string(content))

		r = d.cli("approve", "w1", "--by", "bob")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "already decided: approved by alice via cli at")
		r = d.cli("deny", "w1", "--by", "bob")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "already decided")
	})

	t.Run("refused decisions", func(t *testing.T) {
		d := d.in(t)
		r := d.cli("approve", "no-such-call", "--by", "alice")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `unknown call "no-such-call"`)

		d.callJSON(5, "--session", "s-self", "--id", "self1", "--requester", "agent-7", "--wait", "300ms", "shell", `{"command":"true"}`)
		r = d.cli("approve", "self1", "--by", "agent-7")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "agent-7 requested call self1 and cannot decide it")
		r = d.cli("approve", "self1")
		assert.Equal(t, 2, r.code, "--by is required")
		r = d.cli("approve", "self1", "--by", "alice", "--args", "{not json")
		assert.Equal(t, 2, r.code)
		r = d.cli("status", "self1", "--json")
		assert.Equal(t, 5, r.code, "refused decisions left the call waiting: %s", r.stdout)
	})

	t.Run("deny with a reason reaches the result", func(t *testing.T) {
		d := d.in(t)
		d.callJSON(5, "--session", "s-deny", "--id", "d1", "--wait", "300ms", "shell", `{"command":"rm -rf build"}`)
		r := d.cli("deny", "d1", "--by", "alice", "--reason", "use make clean instead")
		require.Equal(t, 0, r.code, r.stderr)
		r = d.cli("status", "d1", "--json", "--wait", "30s")
		assert.Equal(t, 3, r.code)
		var res workflows.Result
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
		assert.Equal(t, workflows.StatusDenied, res.Status)
		assert.Equal(t, "use make clean instead", res.Reason)
		assert.Equal(t, "denied_with_reason", res.Decision)
	})

	t.Run("approve for session, show, revoke", func(t *testing.T) {
		d := d.in(t)
		runs := filepath.Join(d.workspace, "sticky-runs.txt")
		d.callJSON(5, "--session", "s-sticky", "--id", "st1", "--wait", "300ms", "shell", `{"command":"echo run >> sticky-runs.txt"}`)
		r := d.cli("approve", "st1", "--by", "alice", "--for-session")
		require.Equal(t, 0, r.code, r.stderr)

		out := d.callJSON(0, "--session", "s-sticky", "--wait", "30s", "shell", `{"command":"echo run >> sticky-runs.txt"}`)
		assert.Equal(t, "approved_for_session", out["decision"])
		assert.Equal(t, "alice", out["decided_by"])
		assert.Equal(t, "session", out["channel"])
		d.cli("status", "st1", "--wait", "30s")
		assert.Equal(t, 2, countLines(t, runs))

		r = d.cli("session", "show", "s-sticky", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var view workflows.SessionView
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &view))
		require.Len(t, view.Sticky, 1)
		assert.Equal(t, "shell", view.Sticky[0].Key)
		assert.Equal(t, "st1", view.Sticky[0].FromCall)

		r = d.cli("session", "revoke", "s-sticky", "shell", "--by", "alice")
		require.Equal(t, 0, r.code, r.stderr)
		r = d.cli("session", "revoke", "s-sticky", "shell", "--by", "alice")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `no sticky decision for "shell"`)
		out = d.callJSON(5, "--session", "s-sticky", "--wait", "500ms", "shell", `{"command":"echo run >> sticky-runs.txt"}`)
		assert.Equal(t, "pending", out["status"], "after the revoke the tool asks again")
	})

	t.Run("deny always, then end the session", func(t *testing.T) {
		d := d.in(t)
		d.callJSON(5, "--session", "s-end", "--id", "e1", "--wait", "300ms", "write_file", `{"path":"x.txt","content":"x"}`)
		d.callJSON(5, "--session", "s-end", "--id", "e2", "--wait", "300ms", "shell", `{"command":"true"}`)
		r := d.cli("deny", "e1", "--by", "alice", "--always")
		require.Equal(t, 0, r.code, r.stderr)
		out := d.callJSON(3, "--session", "s-end", "write_file", `{"path":"y.txt","content":"y"}`)
		assert.Equal(t, "denied_always", out["decision"])
		assert.Equal(t, "session", out["channel"])

		r = d.cli("session", "end", "s-end", "--by", "alice")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "1 waiting calls denied")
		r = d.cli("status", "e2", "--json", "--wait", "30s")
		assert.Equal(t, 3, r.code)
		assert.Contains(t, r.stdout, "the session was ended by alice")
	})

	t.Run("policy and argument refusals", func(t *testing.T) {
		d := d.in(t)
		out := d.callJSON(3, "--session", "s-bad", "write_file", `{"path":"../../etc/passwd","content":"x"}`)
		assert.Equal(t, "denied", out["status"])
		assert.Contains(t, out["reason"], "outside the workspace")
		assert.Equal(t, "policy", out["decided_by"])

		out = d.callJSON(2, "--session", "s-bad", "launch_missiles", `{}`)
		assert.Equal(t, "error", out["status"])
		assert.Contains(t, out["reason"], `unknown tool "launch_missiles"`)
		out = d.callJSON(2, "--session", "s-bad", "read_file", `{"path":3}`)
		assert.Contains(t, out["reason"], "/path")

		r := d.cli("call", "--session", "s-bad", "echo", `{not json`)
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "args must be a JSON object")
		r = d.cli("call", "echo", `{}`)
		assert.Equal(t, 2, r.code, "missing --session")
		big := filepath.Join(t.TempDir(), "big.json")
		require.NoError(t, os.WriteFile(big, fmt.Appendf(nil, `{"big":%q}`, strings.Repeat("x", 600<<10)), 0o600))
		r = d.cli("call", "--session", "s-bad", "echo", "@"+big)
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "over the 524288-byte limit")
		r = d.cli("frobnicate")
		assert.Equal(t, 2, r.code)
	})

	t.Run("metrics", func(t *testing.T) {
		d := d.in(t)
		d.callJSON(0, "--session", "s-metrics", "echo", `{}`)
		// Counters reach Prometheus at the next report, within a second.
		wanted := []*regexp.Regexp{
			regexp.MustCompile(`(?m)^toolgate_calls_finished\{[^}]*status="ok"[^}]*tool="echo"[^}]*\} [1-9]`),
			regexp.MustCompile(`(?m)^toolgate_decisions\{[^}]*channel="policy"[^}]*decision="approved"[^}]*\} [1-9]`),
			regexp.MustCompile(`(?m)^toolgate_policy_evaluation_count\{[^}]*tool="echo"[^}]*\} [1-9]`),
			regexp.MustCompile(`(?m)^temporal_workflow_completed\{[^}]*workflow_type="ToolCallWorkflow"[^}]*\} [1-9]`),
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := http.Get("http://" + d.httpAddr + "/metrics")
			if !assert.NoError(c, err) {
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, re := range wanted {
				assert.True(c, re.Match(body), "no metric matches %s", re)
			}
		}, 15*time.Second, 200*time.Millisecond)
		r := d.cli("health", "--url", "http://"+d.httpAddr+"/readyz")
		assert.Equal(t, 0, r.code, r.stderr)
		r = d.cli("health", "--url", "http://127.0.0.1:1/readyz")
		assert.Equal(t, 1, r.code)
	})

	t.Run("a resubmitted call ID returns the first outcome; another call under it is refused", func(t *testing.T) {
		d := d.in(t)
		runs := filepath.Join(d.workspace, "once.txt")
		args := `{"command":"echo run >> once.txt; echo first"}`
		d.callJSON(5, "--session", "s-idem", "--id", "once", "--wait", "300ms", "shell", args)
		require.Equal(t, 0, d.cli("approve", "once", "--by", "alice").code)
		first := d.callJSON(0, "--session", "s-idem", "--id", "once", "--wait", "30s", "shell", args)
		again := d.callJSON(0, "--session", "s-idem", "--id", "once", "shell", `{ "command" : "echo run >> once.txt; echo first" }`)
		assert.Equal(t, first["output"], again["output"])
		assert.Equal(t, first["finished_at"], again["finished_at"])
		assert.Equal(t, 1, countLines(t, runs), "the tool ran once")

		for _, other := range [][]string{
			{"--session", "s-idem", "--id", "once", "shell", `{"command":"echo run >> once.txt; echo second"}`}, // other arguments
			{"--session", "s-other", "--id", "once", "shell", args},                                             // another session
		} {
			r := d.cli(append([]string{"call"}, other...)...)
			assert.Equal(t, 2, r.code, r.stderr)
			assert.Contains(t, r.stderr, `call_id "once" is already taken by another call`)
			assert.NotContains(t, r.stderr, "s-idem", "the error does not reveal the first call")
		}
		assert.Equal(t, 1, countLines(t, runs), "the tool still ran once")
	})
}

func TestKillDuringWaitThenRestartLosesNothing(t *testing.T) {
	d := newDev(t)
	c := d.client()
	runs := filepath.Join(d.workspace, "runs.txt")

	// A sticky decision before the crash.
	d.callJSON(5, "--session", "s-crash", "--id", "k1", "--wait", "300ms", "shell", `{"command":"echo k1 >> runs.txt"}`)
	require.Equal(t, 0, d.cli("approve", "k1", "--by", "alice", "--for-session").code)
	d.cli("status", "k1", "--wait", "30s")
	// A call waiting for a person at the moment of the crash.
	d.callJSON(5, "--session", "s-crash", "--id", "k2", "--wait", "300ms", "write_file", `{"path":"after-crash.txt","content":"survived"}`)
	d.waitPending(c, "k2")

	d.dev.kill()
	d.startDev()

	r := d.cli("pending", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"k2"`, "the waiting call survived kill -9")
	require.Equal(t, 0, d.cli("approve", "k2", "--by", "bob").code)
	out := d.callJSON(0, "--session", "s-crash", "--id", "k2", "--wait", "30s", "write_file", `{"path":"after-crash.txt","content":"survived"}`)
	assert.Equal(t, "bob", out["decided_by"])
	content, err := os.ReadFile(filepath.Join(d.workspace, "after-crash.txt"))
	require.NoError(t, err)
	assert.Equal(t, "survived", string(content))

	// The sticky decision taken before the crash still holds.
	out = d.callJSON(0, "--session", "s-crash", "--id", "k3", "--wait", "30s", "shell", `{"command":"echo k3 >> runs.txt"}`)
	assert.Equal(t, "approved_for_session", out["decision"])
	assert.Equal(t, "alice", out["decided_by"])
	assert.Equal(t, 2, countLines(t, runs), "k1 and k3 each ran once")

	d.dev.stop()
}

// workerPIDCommand is a shell call that prints the PID of the worker that
// runs it: the parent of the shell's parent, the worker's sandbox helper.
var workerPIDCommand = json.RawMessage(`{"command":"sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status"}`)

func TestTwoWorkerProcessesShareCalls(t *testing.T) {
	d := newDev(t)
	second := start(t, "Worker running", "worker", "--temporal-address", d.address(), "--keys", d.keysFile(), "--doors", d.doorsFile(), "--workspace", d.workspace)
	c := d.client()
	ctx := context.Background()

	// One approval for the session, then calls that report which process
	// ran them: the shell's parent is the worker's sandbox helper, whose
	// parent is the worker.
	first, err := c.Submit(ctx, tgclient.CallRequest{Session: "s-pool", Tool: "shell", Args: workerPIDCommand})
	require.NoError(t, err)
	d.waitPending(c, first)
	_, err = c.Decide(ctx, first, approvedForSession("alice"))
	require.NoError(t, err)

	const n = 40
	pids := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Call(ctx, tgclient.CallRequest{Session: "s-pool", Tool: "shell", Args: workerPIDCommand})
			if !assert.NoError(t, err) || !assert.Equal(t, workflows.StatusOK, r.Status, r.Reason) {
				return
			}
			var out struct{ Stdout string }
			assert.NoError(t, json.Unmarshal(r.Output, &out))
			mu.Lock()
			pids[strings.TrimSpace(out.Stdout)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	devPID := fmt.Sprint(d.dev.cmd.Process.Pid)
	workerPID := fmt.Sprint(second.cmd.Process.Pid)
	assert.Len(t, pids, 2, "calls ran in exactly the two worker processes: %v", pids)
	assert.Positive(t, pids[devPID], "dev's worker ran calls: %v", pids)
	assert.Positive(t, pids[workerPID], "the second worker ran calls: %v", pids)
	second.stop()
}

func approvedForSession(by string) policy.Decision {
	return policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: by, Channel: "test"}
}

// A burst of calls registering with a new session at the same moment: the
// session is created once (signal-with-start), every call is parked, and
// one approval for the session releases them all.
func TestBurstOfCallsInANewSession(t *testing.T) {
	d := newDev(t)
	c := d.client()
	ctx := context.Background()
	const n = 15
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := c.Submit(ctx, tgclient.CallRequest{CallID: fmt.Sprintf("burst-%d", i), Session: "s-burst", Tool: "write_file",
				Args: json.RawMessage(fmt.Sprintf(`{"path":"burst/%d.txt","content":"x"}`, i))})
			assert.NoError(t, err)
			ids[i] = id
		}()
	}
	wg.Wait()
	for _, id := range ids {
		d.waitPending(c, id)
	}
	view, err := c.Session(ctx, "s-burst")
	require.NoError(t, err)
	assert.Len(t, view.Waiting, n, "every call is parked in the one session")

	_, err = c.Decide(ctx, ids[0], approvedForSession("alice"))
	require.NoError(t, err)
	for _, id := range ids {
		r, err := c.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, workflows.StatusOK, r.Status, "%s: %s", id, r.Reason)
		assert.Equal(t, "alice", r.DecidedBy)
	}
	entries, err := os.ReadDir(filepath.Join(d.workspace, "burst"))
	require.NoError(t, err)
	assert.Len(t, entries, n)
}
