package integration

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/integration/cluster"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/workflows"
)

// insiderPolicy asks a person for shell and for write_file; a write under
// ops/ is ops's to decide, one under fin/ finance's.
const insiderPolicy = `
default: allow
rules:
  - {name: ops-write, tool: write_file, action: ask, groups: [ops], when: 'args.path.startsWith("ops/")'}
  - {name: fin-write, tool: write_file, action: ask, groups: [finance], when: 'args.path.startsWith("fin/")'}
  - {name: shell, tool: shell, action: ask}
  - {name: write, tool: write_file, action: ask}
`

// The insider of issue 45: someone who can reach Temporal with the stock
// `temporal` CLI, but holds no door key. The workers take plain JSON
// payloads, so the CLI reaches the workflows; the statements are what
// stop it. Every attempt must be refused, counted and logged, run
// nothing, and leave no call.decided in the ledger.
func TestInsiderWithTheStockTemporalCLI(t *testing.T) {
	x := startInsiderDev(t)

	t.Run("a call started with plain JSON ends in error, refused, and runs nothing", func(t *testing.T) {
		before := x.refused(t, "submit")
		out, err := x.stock("workflow", "start", "--type", workflows.ToolCallWorkflowType, "--task-queue", workflows.TaskQueue,
			"--workflow-id", workflows.CallWorkflowID("forged-start"), "--input",
			`{"call":{"id":"forged-start","session":"insider-start","tool":"write_file","args":{"path":"forged-start.txt","content":"pwned"},"requester":"agentA"}}`)
		require.NoError(t, err, "Temporal itself takes the start: %s", out)
		var st map[string]any
		require.Eventually(t, func() bool {
			st = x.status(t, "forged-start")
			return st["status"] != nil && st["status"] != "evaluating" && st["status"] != "pending"
		}, 30*time.Second, 100*time.Millisecond, "the forged call never ended: %v", st)
		assert.Equal(t, "error", st["status"], st)
		assert.Equal(t, true, st["invalid_request"], st)
		assert.True(t, strings.HasPrefix(str(st["reason"]), "refused: "), "reason: %v", st["reason"])
		assert.Contains(t, str(st["reason"]), "no statement")
		x.assertNothingRan(t, "forged-start", "forged-start.txt")
		x.assertCounted(t, "submit", before)
		x.assertLogged(t, "forged-start", "no statement")
	})

	t.Run("forged decisions and a cancel of a waiting call are ignored or refused", func(t *testing.T) {
		x.submitWaiting(t, "insider-wait", "wait-1", "write_file", map[string]any{"path": "wait-1.txt", "content": "as asked"})
		forged := func(kind string, extra map[string]any) map[string]any {
			d := map[string]any{"kind": kind, "decided_by": "alice", "decider_groups": []string{"*"}, "channel": "inbox",
				"identity": map[string]any{"iss": "https://idp.example.com", "sub": "alice-sub-forged"}}
			for k, v := range extra {
				d[k] = v
			}
			return map[string]any{"call_id": "wait-1", "decision": d}
		}

		before := x.refused(t, "decide_signal")
		out, err := x.stock("workflow", "signal", "--workflow-id", workflows.CallWorkflowID("wait-1"), "--name", workflows.SignalDecide,
			"--input", mustJSON(t, forged("approved", nil)))
		require.NoError(t, err, "a signal cannot be refused to its sender: %s", out)
		x.assertCounted(t, "decide_signal", before)
		x.assertLogged(t, "wait-1", "no statement")
		assert.Equal(t, "pending", x.status(t, "wait-1")["status"], "the signal was ignored")

		x.refusedUpdate(t, workflows.CallWorkflowID("wait-1"), workflows.UpdateDecide, forged("approved", nil), "decide", "no statement")
		x.refusedUpdate(t, workflows.CallWorkflowID("wait-1"), workflows.UpdateDecide,
			forged("approved_with_edits", map[string]any{"edited_args": map[string]any{"path": "wait-1.txt", "content": "pwned"}}), "decide", "no statement")
		x.refusedUpdate(t, workflows.CallWorkflowID("wait-1"), workflows.UpdateCancel,
			map[string]any{"call_id": "wait-1", "by": "any-name", "groups": []string{"*"}}, "cancel", "no statement")

		assert.Equal(t, "pending", x.status(t, "wait-1")["status"], "nothing decided or cancelled the call")
		x.assertNothingRan(t, "wait-1", "wait-1.txt")
	})

	t.Run("a session is neither ended nor revoked nor given a sticky decision", func(t *testing.T) {
		session := "insider-session"
		x.submitWaiting(t, session, "sess-1", "write_file", map[string]any{"path": "sess-1.txt", "content": "one"})
		r := x.as("bob").do("POST", "/v1/calls/sess-1/decision", map[string]any{"decision": "approve_for_session"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		x.waitStatus(t, "sess-1", "ok")

		sid := workflows.SessionWorkflowID(session)
		x.refusedUpdate(t, sid, workflows.UpdateEnd, map[string]any{"by": "root", "groups": []string{"*"}}, "end", "no statement")
		x.refusedUpdate(t, sid, workflows.UpdateRevoke, map[string]any{"key": "write_file", "by": "root", "groups": []string{"*"}}, "revoke", "no statement")
		before := x.refused(t, "sticky")
		out, err := x.stock("workflow", "signal", "--workflow-id", sid, "--name", workflows.SignalSticky, "--input",
			`{"key":"shell","tool":"shell","decision":{"kind":"approved_for_session","decided_by":"alice","decider_groups":["*"],"channel":"inbox"},"from_call":"forged"}`)
		require.NoError(t, err, out)
		x.assertCounted(t, "sticky", before)
		x.assertLogged(t, session, "no statement")

		// The forged sticky decision is not recorded: shell still asks.
		x.submitWaiting(t, session, "sess-sh", "shell", map[string]any{"command": "touch sess-sh-pwned"})
		time.Sleep(time.Second)
		assert.Equal(t, "pending", x.status(t, "sess-sh")["status"], "a new shell call still waits for a person")
		x.assertNothingRan(t, "sess-sh", "sess-sh-pwned")
		// Neither revoked nor ended: bob's sticky decision still holds.
		r = x.as("agent-1").do("POST", "/v1/calls?wait=20s", map[string]any{"session": session, "call_id": "sess-2", "tool": "write_file",
			"args": map[string]any{"path": "sess-2.txt", "content": "two"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"], r.raw)
		show := x.tg(t, x.proj, nil, "session", "show", session)
		assert.Contains(t, show.stdout, "sticky: write_file  approved_for_session by bob via api", show.stdout+show.stderr)
		assert.NotContains(t, show.stdout, "sticky: shell", show.stdout)
		assert.NotContains(t, show.stdout, "ended", show.stdout)
	})

	t.Run("a valid statement copied from another call is refused", func(t *testing.T) {
		x.submitWaiting(t, "insider-copy", "copy-a", "write_file", map[string]any{"path": "copy-a.txt", "content": "a"})
		x.submitWaiting(t, "insider-copy", "copy-b", "write_file", map[string]any{"path": "copy-b.txt", "content": "b"})
		r := x.as("bob").do("POST", "/v1/calls/copy-a/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		x.waitStatus(t, "copy-a", "ok")
		var real *ledger.Decision
		require.Eventually(t, func() bool { real = x.decided(t, "copy-a"); return real != nil }, 20*time.Second, 200*time.Millisecond)
		require.NotNil(t, real.Statement, "bob's decision in the ledger carries the API's statement")

		copied := map[string]any{"call_id": "copy-b", "decision": map[string]any{"kind": real.Kind, "decided_by": real.DecidedBy,
			"decider_groups": real.Groups, "channel": real.Channel, "statement": real.Statement}}
		x.refusedUpdate(t, workflows.CallWorkflowID("copy-b"), workflows.UpdateDecide, copied, "decide", "does not match the message: call differs")
		assert.Equal(t, "pending", x.status(t, "copy-b")["status"])
		x.assertNothingRan(t, "copy-b", "copy-b.txt")
	})

	t.Run("a decider claiming groups their statement does not name is refused", func(t *testing.T) {
		// alice (ops) edits an ops write into finance's: the policy
		// refuses her edit, and the call keeps waiting. Her signed
		// request is in the call's history.
		x.submitWaiting(t, "insider-groups", "groups-c", "write_file", map[string]any{"path": "ops/groups-c.txt", "content": "ok"})
		r := x.as("alice").do("POST", "/v1/calls/groups-c/decision", map[string]any{"decision": "approve",
			"args": map[string]any{"path": "fin/groups-c.txt", "content": "pwned"}})
		require.Equal(t, http.StatusBadRequest, r.status, r.raw)
		require.Equal(t, "invalid_edit", r.errorCode(), r.raw)
		req := x.acceptedDecision(t, "groups-c")
		require.NotNil(t, req.Decision.Statement)
		require.Equal(t, []string{"ops"}, req.Decision.DeciderGroups)

		// The insider replays it as a decider for every group, which
		// would take the edit.
		req.Decision.DeciderGroups = []string{"*"}
		x.refusedUpdate(t, workflows.CallWorkflowID("groups-c"), workflows.UpdateDecide, req, "decide", "does not match the message: groups differs")
		assert.Equal(t, "pending", x.status(t, "groups-c")["status"])
		x.assertNothingRan(t, "groups-c", filepath.Join("fin", "groups-c.txt"))
		x.assertNothingRan(t, "groups-c", filepath.Join("ops", "groups-c.txt"))
	})

	t.Run("statements of an unknown door key or expired are refused; the door's own is taken", func(t *testing.T) {
		args := map[string]any{"path": "keys-d.txt", "content": "d"}
		x.submitWaiting(t, "insider-keys", "keys-d", "write_file", args)
		_, stranger, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		door := x.door()

		unknown := x.signedDecision(t, statement.NewSigner("dev", stranger), "insider-keys", "keys-d", args)
		x.refusedUpdate(t, workflows.CallWorkflowID("keys-d"), workflows.UpdateDecide, unknown, "decide", "signed by a door key this worker does not trust")
		expired := x.signedDecision(t, door.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }), "insider-keys", "keys-d", args)
		x.refusedUpdate(t, workflows.CallWorkflowID("keys-d"), workflows.UpdateDecide, expired, "decide", "statement of door dev expired at")
		assert.Equal(t, "pending", x.status(t, "keys-d")["status"])
		x.assertNothingRan(t, "keys-d", "keys-d.txt")

		// The same message, signed now with the door's key: the stock CLI
		// is not what is refused, the statement is.
		out, err := x.stock("workflow", "update", "execute", "--workflow-id", workflows.CallWorkflowID("keys-d"), "--name", workflows.UpdateDecide,
			"--input", mustJSON(t, x.signedDecision(t, door, "insider-keys", "keys-d", args)))
		if err != nil { // the call's answer is encrypted: the CLI cannot read it
			assert.Contains(t, out, "payload encoding is not supported", out)
		}
		x.waitStatus(t, "keys-d", "ok")
		b, err := os.ReadFile(filepath.Join(x.workspace, "keys-d.txt"))
		require.NoError(t, err)
		assert.Equal(t, "d", string(b))
		d := x.decided(t, "keys-d")
		require.NotNil(t, d)
		assert.Equal(t, "carol", d.DecidedBy)
		require.NotNil(t, d.Statement)
		assert.Equal(t, door.KeyID(), d.Statement.KeyID)
	})
}

// The doors still decide: the HTTP API, and the CLI where it finds dev's
// door key; without one the CLI says where to go.
func TestInsiderLegitimateDoorsStillDecide(t *testing.T) {
	x := startInsiderDev(t)

	t.Run("the HTTP API", func(t *testing.T) {
		x.submitWaiting(t, "legit-api", "legit-api", "write_file", map[string]any{"path": "legit-api.txt", "content": "api"})
		r := x.as("bob").do("POST", "/v1/calls/legit-api/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		x.waitStatus(t, "legit-api", "ok")
		x.assertDecidedAtTheDoor(t, "legit-api", "bob", "legit-api.txt", "api")
		assertNoVersionMarker(t, x.devEnv, "legit-api")
	})

	t.Run("toolgate approve in the dev's directory", func(t *testing.T) {
		x.submitWaiting(t, "legit-cli", "legit-cli", "write_file", map[string]any{"path": "legit-cli.txt", "content": "cli"})
		r := x.tg(t, x.proj, nil, "approve", "legit-cli", "--by", "carol", "--groups", "*")
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		x.waitStatus(t, "legit-cli", "ok")
		x.assertDecidedAtTheDoor(t, "legit-cli", "carol", "legit-cli.txt", "cli")
	})

	t.Run("toolgate call in the dev's directory signs its submission", func(t *testing.T) {
		r := x.tg(t, x.proj, nil, "call", "--session", "legit-call", "--id", "legit-call", "echo", `{"hi":1}`)
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		entries := x.ledgerEntries(t, "legit-call")
		require.NotEmpty(t, entries)
		assert.Equal(t, ledger.KindCallSubmitted, entries[0].Kind)
		require.NotNil(t, entries[0].Statement, "the submission carries the door's statement")
		assert.Equal(t, x.door().KeyID(), entries[0].Statement.KeyID)
	})

	t.Run("toolgate approve without a door key exits 2 and says where to go", func(t *testing.T) {
		x.submitWaiting(t, "legit-nokey", "legit-nokey", "write_file", map[string]any{"path": "legit-nokey.txt", "content": "x"})
		r := x.tg(t, t.TempDir(), []string{"TOOLGATE_KEYS=" + x.keysFile()}, "approve", "legit-nokey", "--by", "carol", "--groups", "*")
		assert.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "--door-key")
		assert.Contains(t, r.stderr, "--api")
		assert.Equal(t, "pending", x.status(t, "legit-nokey")["status"])
		x.assertNothingRan(t, "legit-nokey", "legit-nokey.txt")
	})
}

// The first moves against a cluster as operators run one (package
// cluster: the stock server on PostgreSQL, a toolgate worker that trusts
// only the cluster's door): a forged start and forged decisions are
// refused, a door's decision is taken.
func TestInsiderOnTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cli, err := cluster.BuildCLI(ctx)
	require.NoError(t, err)
	c, err := cluster.Start(context.Background(), cluster.Options{Mode: cluster.Documented, Toolgate: binary, Workers: 1, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", c.Logs(4000))
		}
		c.Close()
	})
	_, port, err := net.SplitHostPort(c.FrontendAddress)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	x := &insiderDev{devEnv: &devEnv{t: t, port: p, workspace: c.Workspace, keys: c.Keys, doorKey: c.DoorKey}, temporalCLI: cli}
	tg := x.client()
	runs := func() string { b, _ := os.ReadFile(filepath.Join(c.Workspace, "runs.txt")); return string(b) }

	out, err := x.stock("workflow", "start", "--type", workflows.ToolCallWorkflowType, "--task-queue", workflows.TaskQueue,
		"--workflow-id", workflows.CallWorkflowID("cl-forged"), "--input", mustJSON(t, map[string]any{"call": map[string]any{
			"id": "cl-forged", "session": "cl-forged", "tool": "shell", "args": shellRecorded("cl-forged", ""), "requester": "agentA"}}))
	require.NoError(t, err, out)
	res, err := tg.Wait(ctx, "cl-forged")
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusError, res.Status)
	assert.True(t, res.InvalidRequest)
	assert.True(t, strings.HasPrefix(res.Reason, "refused: "), res.Reason)

	_, err = tg.Submit(ctx, tgclient.CallRequest{CallID: "cl-wait", Session: "cl-wait", Tool: "shell", Requester: "agent-1", Args: shellRecorded("cl-wait", "")})
	require.NoError(t, err)
	x.waitPending(tg, "cl-wait")
	forged := mustJSON(t, map[string]any{"call_id": "cl-wait", "decision": map[string]any{"kind": "approved", "decided_by": "alice", "decider_groups": []string{"*"}, "channel": "inbox"}})
	out, err = x.stock("workflow", "update", "execute", "--workflow-id", workflows.CallWorkflowID("cl-wait"), "--name", workflows.UpdateDecide, "--input", forged)
	require.Error(t, err, out)
	assert.Contains(t, out, workflows.ErrTypeNoStatement)
	out, err = x.stock("workflow", "signal", "--workflow-id", workflows.CallWorkflowID("cl-wait"), "--name", workflows.SignalDecide, "--input", forged)
	require.NoError(t, err, out)
	assert.Eventually(t, func() bool { return strings.Contains(c.Logs(1<<20), `"message": "decide signal"`) }, 30*time.Second, 200*time.Millisecond,
		"the worker logs the refused signal")
	st, err := tg.Status(ctx, "cl-wait")
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusPending, st.State.Status, "nothing decided the call")
	assert.NotContains(t, runs(), "cl-")

	_, err = tg.Decide(ctx, "cl-wait", policy.Decision{Kind: policy.Approved, DecidedBy: "carol", DeciderGroups: []string{"*"}, Channel: "cli"})
	require.NoError(t, err, "the cluster's door decides")
	res, err = tg.Wait(ctx, "cl-wait")
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusOK, res.Status, res.Reason)
	assert.Equal(t, "cl-wait\n", runs(), "only the door's decision ran a tool")
}

// insiderDev is toolgate dev under insiderPolicy, a project directory
// whose .toolgate is dev's data directory (as when dev runs there), and
// the stock temporal CLI.
type insiderDev struct {
	*devEnv
	proj, temporalCLI string
}

func startInsiderDev(t *testing.T) *insiderDev {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cli, err := cluster.BuildCLI(ctx)
	require.NoError(t, err)
	d := startDevWithPolicy(t, insiderPolicy)
	proj := t.TempDir()
	require.NoError(t, os.Symlink(d.dataDir, filepath.Join(proj, ".toolgate")))
	return &insiderDev{devEnv: d, proj: proj, temporalCLI: cli}
}

func (x *insiderDev) as(name string) apiClient {
	return apiClient{t: x.t, base: "http://" + x.httpAddr, token: "token-" + name}
}

// stock runs the stock temporal CLI against dev.
func (x *insiderDev) stock(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args = append(args, "--address", x.address(), "--namespace", "default")
	out, err := exec.CommandContext(ctx, x.temporalCLI, args...).CombinedOutput()
	return string(out), err
}

// tg runs toolgate in dir, reaching dev over Temporal, with env added.
func (x *insiderDev) tg(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "TEMPORAL_ADDRESS="+x.address(), "TEMPORAL_NAMESPACE=default",
		"TOOLGATE_KEYS=", "TOOLGATE_DOOR_KEY=", "TOOLGATE_LEDGER=", "TOOLGATE_API="), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		exitErr, ok := err.(*exec.ExitError)
		require.True(t, ok, "run toolgate %v: %v", args, err)
		r.code = exitErr.ExitCode()
	}
	return r
}

// refusedUpdate sends an update with the stock CLI and asserts that the
// workflow refused it for its statement: the CLI fails naming
// StatementRefused, the refusal is counted under message and logged by
// dev with why.
func (x *insiderDev) refusedUpdate(t *testing.T, workflowID, name string, input any, message, why string) {
	t.Helper()
	before := x.refused(t, message)
	out, err := x.stock("workflow", "update", "execute", "--workflow-id", workflowID, "--name", name, "--input", mustJSON(t, input))
	require.Error(t, err, "the stock CLI's %s update was taken: %s", name, out)
	assert.Contains(t, out, workflows.ErrTypeNoStatement, "the %s update is refused for its statement", name)
	x.assertCounted(t, message, before)
	x.assertLogged(t, strings.TrimPrefix(strings.TrimPrefix(workflowID, "toolgate/call/"), "toolgate/session/"), why)
}

var refusedMetric = regexp.MustCompile(`(?m)^toolgate_statements_refused\{([^}]*)\} (\S+)$`)

// refused is dev's toolgate_statements_refused for message.
func (x *insiderDev) refused(t *testing.T, message string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + x.httpAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	sum := 0.0
	for _, m := range refusedMetric.FindAllStringSubmatch(b.String(), -1) {
		if strings.Contains(m[1], `message="`+message+`"`) {
			v, err := strconv.ParseFloat(m[2], 64)
			require.NoError(t, err)
			sum += v
		}
	}
	return sum
}

func (x *insiderDev) assertCounted(t *testing.T, message string, before float64) {
	t.Helper()
	assert.Eventually(t, func() bool { return x.refused(t, message) > before }, 15*time.Second, 100*time.Millisecond,
		"toolgate_statements_refused{message=%q} did not grow from %v", message, before)
}

// assertLogged asserts that dev logged a refusal about subject with why.
func (x *insiderDev) assertLogged(t *testing.T, subject, why string) {
	t.Helper()
	found := func() bool {
		for _, line := range strings.Split(x.dev.out.String(), "\n") {
			if strings.Contains(line, "without a valid statement from a toolgate door") &&
				strings.Contains(line, `"`+subject+`"`) && strings.Contains(line, why) {
				return true
			}
		}
		return false
	}
	assert.Eventually(t, found, 15*time.Second, 100*time.Millisecond, "no refusal of %s logged with %q", subject, why)
}

// status is `toolgate status --json` of the call, from the dev's directory.
func (x *insiderDev) status(t *testing.T, callID string) map[string]any {
	t.Helper()
	r := x.tg(t, x.proj, nil, "status", callID, "--json")
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), "toolgate status %s: %s %s", callID, r.stdout, r.stderr)
	return st
}

func (x *insiderDev) waitStatus(t *testing.T, callID, want string) {
	t.Helper()
	var st map[string]any
	require.Eventually(t, func() bool { st = x.status(t, callID); return st["status"] == want }, 30*time.Second, 100*time.Millisecond,
		"call %s never reached %s: %v", callID, want, st)
}

// submitWaiting submits a call as agent-1 over the API and waits until it
// waits for a person.
func (x *insiderDev) submitWaiting(t *testing.T, session, callID, tool string, args map[string]any) {
	t.Helper()
	r := x.as("agent-1").do("POST", "/v1/calls?wait=100ms", map[string]any{"session": session, "call_id": callID, "tool": tool, "args": args})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	x.waitStatus(t, callID, "pending")
}

// ledgerEntries are the call's entries, as `toolgate audit show --json`
// prints them in the dev's directory.
func (x *insiderDev) ledgerEntries(t *testing.T, callID string) []ledger.Entry {
	t.Helper()
	r := x.tg(t, x.proj, nil, "audit", "show", callID, "--json")
	require.Equal(t, 0, r.code, "audit show %s: %s %s", callID, r.stdout, r.stderr)
	var entries []ledger.Entry
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var e struct {
			Entry ledger.Entry `json:"entry"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &e), line)
		entries = append(entries, e.Entry)
	}
	return entries
}

// decided is the decision of the call's call.decided entry, or nil.
func (x *insiderDev) decided(t *testing.T, callID string) *ledger.Decision {
	t.Helper()
	for _, e := range x.ledgerEntries(t, callID) {
		if e.Kind == ledger.KindCallDecided {
			return e.Decision
		}
	}
	return nil
}

// assertNothingRan asserts that the call left no file at path in the
// workspace and no call.decided in the ledger.
func (x *insiderDev) assertNothingRan(t *testing.T, callID, path string) {
	t.Helper()
	_, err := os.Stat(filepath.Join(x.workspace, path))
	assert.True(t, os.IsNotExist(err), "%s exists in the workspace: the tool ran", path)
	assert.Nil(t, x.decided(t, callID), "call %s has a call.decided entry in the ledger", callID)
}

// assertDecidedAtTheDoor asserts that the call ran (path holds content)
// and that its ledger decision carries dev's statement, which verifies
// against dev's doors file and names the call and by.
func (x *insiderDev) assertDecidedAtTheDoor(t *testing.T, callID, by, path, content string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(x.workspace, path))
	require.NoError(t, err)
	assert.Equal(t, content, string(b))
	var d *ledger.Decision
	require.Eventually(t, func() bool { d = x.decided(t, callID); return d != nil }, 20*time.Second, 200*time.Millisecond)
	assert.Equal(t, by, d.DecidedBy)
	require.NotNil(t, d.Statement, "the ledger's decision of %s carries its statement", callID)
	doors, err := statement.LoadDoors(filepath.Join(x.dataDir, "doors.json"))
	require.NoError(t, err)
	st, err := doors.Verify(d.Statement)
	require.NoError(t, err)
	assert.Equal(t, statement.Decide, st.Kind)
	assert.Equal(t, callID, st.Call)
	assert.Equal(t, by, st.By)
	assert.Equal(t, "dev", st.Door)
}

// acceptedDecision is the first decide request the call's workflow
// accepted, read from its history with dev's keyring.
func (x *insiderDev) acceptedDecision(t *testing.T, callID string) workflows.DecideRequest {
	t.Helper()
	tc := x.temporal()
	defer tc.Close()
	it := tc.GetWorkflowHistory(context.Background(), workflows.CallWorkflowID(callID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		in := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
		if in.GetName() != workflows.UpdateDecide {
			continue
		}
		var req workflows.DecideRequest
		require.NoError(t, keyring.DataConverter(x.keyring()).FromPayloads(in.GetArgs(), &req))
		return req
	}
	t.Fatalf("no decide update was accepted by call %s", callID)
	return workflows.DecideRequest{}
}

// signedDecision is carol's approval of the waiting call, signed by s as
// a door would sign it (naming the call's run).
func (x *insiderDev) signedDecision(t *testing.T, s *statement.Signer, session, callID string, args map[string]any) workflows.DecideRequest {
	t.Helper()
	tc := x.temporal()
	defer tc.Close()
	desc, err := tc.DescribeWorkflowExecution(context.Background(), workflows.CallWorkflowID(callID), "")
	require.NoError(t, err)
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	d := policy.Decision{Kind: policy.Approved, DecidedBy: "carol", DeciderGroups: []string{"*"}, Channel: "temporal-cli"}
	st := policy.DecisionStatement(policy.Call{ID: callID, Session: session, Tool: "write_file", Args: raw}, d, "")
	st.Run = desc.GetWorkflowExecutionInfo().GetFirstRunId()
	d.Statement, err = s.Sign(st)
	require.NoError(t, err)
	return workflows.DecideRequest{CallID: callID, Decision: d}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// An insider completes an agent-executed call's report step with the
// stock CLI, saying what the agent's run printed: the report comes
// without its door's statement, so toolgate records none of it, counts
// and logs the refusal, and the call ends unknown. The agent's own report
// through the API, afterwards, finds the call ended.
func TestInsiderCompletesAReportWithTheStockCLI(t *testing.T) {
	x := startInsiderDev(t)
	agent := x.as("agent-1")
	r := agent.do("POST", "/v1/calls", map[string]any{"session": "reports", "tool": "deploy", "call_id": "forged-report",
		"args": map[string]any{"env": "prod"}, "execution": "agent"})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	x.waitStatus(t, "forged-report", "approved")

	before := x.refused(t, "report")
	out, err := x.stock("activity", "complete", "--workflow-id", workflows.CallWorkflowID("forged-report"),
		"--activity-id", workflows.ReportActivityID, "--result", `{"deployed":"nothing to see"}`)
	require.NoError(t, err, out)

	x.waitStatus(t, "forged-report", "unknown")
	st := x.status(t, "forged-report")
	assert.Contains(t, str(st["reason"]), "came without a valid statement from a toolgate door")
	assert.Nil(t, st["output"], "what the insider said the run printed is not recorded")
	x.assertCounted(t, "report", before)
	x.assertLogged(t, "forged-report", "no statement")

	r = agent.do("POST", "/v1/calls/forged-report/report", map[string]any{"output": map[string]any{"deployed": "prod"}})
	assert.Equal(t, http.StatusConflict, r.status, r.raw)
}
