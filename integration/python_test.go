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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPythonAgentExample runs examples/python/agent_loop.py (with its
// single-file client, toolgate.py) with python3 against `toolgate dev`:
// a toolgate-executed call, then agent-executed calls that a person
// approves, denies with a reason, approves with edited arguments, approves
// for a function that fails (reported as an error), and approves after a
// kill -9 and restart of toolgate while the loop waits.
func TestPythonAgentExample(t *testing.T) {
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "the Python example needs python3")
	dir, err := filepath.Abs(filepath.Join("..", "examples", "python"))
	require.NoError(t, err)
	client, loop := filepath.Join(dir, "toolgate.py"), filepath.Join(dir, "agent_loop.py")

	compile := exec.Command(python, "-m", "py_compile", client, loop)
	compile.Env = append(os.Environ(), "PYTHONPYCACHEPREFIX="+t.TempDir()) // nothing written beside the sources
	out, err := compile.CombinedOutput()
	require.NoError(t, err, "py_compile: %s", out)

	tokens := writeTokensFile(t, t.TempDir())
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	startDev := func() {
		d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir,
			"--temporal-port", fmt.Sprint(d.port), "--http", d.httpAddr, "--tokens", tokens)
	}
	startDev()
	base := "http://" + d.httpAddr
	agent, bob := apiClient{t: t, base: base, token: "token-agent-1"}, apiClient{t: t, base: base, token: "token-bob"}

	notes := t.TempDir()
	plan := []map[string]any{
		{"tool": "echo", "args": map[string]any{"text": "hi"}, "call_id": "py-echo"},
		{"tool": "write_note", "args": map[string]any{"path": "plan.md", "text": "draft"}, "call_id": "py-approve"},
		{"tool": "write_note", "args": map[string]any{"path": "secrets.md", "text": "x"}, "call_id": "py-deny"},
		{"tool": "write_note", "args": map[string]any{"path": "a.md", "text": "first"}, "call_id": "py-edit"},
		{"tool": "run_command", "args": map[string]any{"command": "false"}, "call_id": "py-fail"},
		{"tool": "write_note", "args": map[string]any{"path": "crash.md", "text": "survived"}, "call_id": "py-kill"},
	}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	raw, err := json.Marshal(plan)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(planFile, raw, 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, loop, "--url", base, "--token", "token-agent-1",
		"--session", "py-s", "--notes", notes, "--plan", planFile)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "TOOLGATE_TOKEN=", "TOOLGATE_URL=")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines, exited := jsonLines(cmd, stdout)
	t.Cleanup(func() {
		cancel()
		for range lines { // let the reader finish
		}
	})
	next := func(callID string) map[string]any {
		t.Helper()
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the loop exited before %s: %v\nstderr:\n%s", callID, <-exited, stderr.String())
			}
			require.Equal(t, callID, line["call_id"], "%v", line)
			return line
		case <-time.After(90 * time.Second):
			t.Fatalf("no outcome of %s from the loop after 90s\nstderr:\n%s", callID, stderr.String())
		}
		return nil
	}
	waitPending := func(callID string) {
		t.Helper()
		require.Eventually(t, func() bool {
			return bob.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending"
		}, 60*time.Second, 50*time.Millisecond, "call %s never waited for a person\nloop stderr:\n%s", callID, stderr.String())
	}
	decide := func(callID string, body map[string]any) {
		t.Helper()
		r := bob.do("POST", "/v1/calls/"+callID+"/decision", body)
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}
	note := func(name string) string {
		data, err := os.ReadFile(filepath.Join(notes, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(data)
	}

	step(t, "a toolgate-executed call runs without asking", func(t *testing.T) {
		line := next("py-echo")
		assert.Equal(t, "ok", line["status"])
		assert.Equal(t, map[string]any{"text": "hi"}, line["output"])
		assert.Nil(t, line["execution"])
	})

	step(t, "approved: the function runs and its return value is the output", func(t *testing.T) {
		waitPending("py-approve")
		r := bob.do("GET", "/v1/calls/py-approve", nil)
		assert.Equal(t, "agent", r.body["execution"])
		assert.Contains(t, r.body["message"], `its own tool "write_note"`, "the default policy asks about agent-executed tools")
		decide("py-approve", map[string]any{"decision": "approve"})
		line := next("py-approve")
		assert.Equal(t, "ok", line["status"])
		assert.Equal(t, map[string]any{"path": "plan.md", "bytes": 5.0}, line["output"])
		assert.Equal(t, "draft", note("plan.md"))

		res := agent.do("GET", "/v1/calls/py-approve", nil)
		require.Equal(t, http.StatusOK, res.status, res.raw)
		assert.Equal(t, "ok", res.body["status"])
		assert.Equal(t, map[string]any{"path": "plan.md", "bytes": 5.0}, res.body["output"], "the reported output is the Result's")
		assert.Equal(t, "bob", res.body["decided_by"])

		again := agent.do("POST", "/v1/calls/py-approve/report", map[string]any{"output": "twice"})
		assert.Equal(t, http.StatusConflict, again.status, "a call is reported once: %s", again.raw)
	})

	step(t, "denied with a reason: the reason reaches the loop", func(t *testing.T) {
		waitPending("py-deny")
		decide("py-deny", map[string]any{"decision": "deny", "reason": "no notes about secrets"})
		line := next("py-deny")
		assert.Equal(t, "denied", line["status"])
		assert.Contains(t, line["reason"], "no notes about secrets")
		assert.Contains(t, line["model_message"], "no notes about secrets", "the model is told why")
		assert.NoFileExists(t, filepath.Join(notes, "secrets.md"), "a denied function never runs")
	})

	step(t, "approved with edited arguments: the function runs on the edit", func(t *testing.T) {
		waitPending("py-edit")
		decide("py-edit", map[string]any{"decision": "approve", "args": map[string]any{"path": "b.md", "text": "edited"}})
		line := next("py-edit")
		assert.Equal(t, "ok", line["status"])
		assert.Equal(t, map[string]any{"path": "b.md", "bytes": 6.0}, line["output"])
		assert.Equal(t, "edited", note("b.md"))
		assert.NoFileExists(t, filepath.Join(notes, "a.md"))
		res := agent.do("GET", "/v1/calls/py-edit", nil)
		assert.Equal(t, map[string]any{"path": "b.md", "text": "edited"}, res.body["args"])
		assert.Equal(t, map[string]any{"path": "a.md", "text": "first"}, res.body["original_args"])
	})

	step(t, "the function fails: its error is reported", func(t *testing.T) {
		waitPending("py-fail")
		decide("py-fail", map[string]any{"decision": "approve"})
		line := next("py-fail")
		assert.Equal(t, "error", line["status"])
		assert.Contains(t, line["reason"], "CalledProcessError")
		assert.Contains(t, line["reason"], "exit status 1")
		res := agent.do("GET", "/v1/calls/py-fail", nil)
		assert.Equal(t, "error", res.body["status"])
		assert.Contains(t, res.body["model_message"], "exit status 1")
	})

	step(t, "kill -9 of toolgate while the call waits", func(t *testing.T) {
		waitPending("py-kill")
		d.dev.kill()
		startDev()
		decide("py-kill", map[string]any{"decision": "approve"})
		line := next("py-kill")
		assert.Equal(t, "ok", line["status"], "%v\nstderr:\n%s", line, stderr.String())
		assert.Equal(t, "survived", note("crash.md"))
	})

	last, ok := <-lines
	require.True(t, ok, "the loop ends with a summary")
	assert.Equal(t, true, last["done"], "%v", last)
	assert.Len(t, last["transcript"], len(plan), "the model was told about every call")
	require.NoError(t, <-exited, "stderr:\n%s", stderr.String())
	assert.Empty(t, bytes.TrimSpace([]byte(stderr.String())), "the loop wrote nothing to stderr")
}

// step runs a subtest and stops the test when it fails: the steps follow
// one another in the loop's plan, so the next would only wait in vain.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}
