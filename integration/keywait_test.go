package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/toolgate/toolgate/workflows"
)

// A client that encrypts with a key the workers lack (a newcomer's own
// keyring, or a rotation that reached the client first) starts a call the
// workers cannot read. The call waits, its workflow task retried, and
// `status` says why; it runs once the workers have the key. Its workflow
// never fails.
func TestACallUnderAKeyTheWorkersLackWaitsForIt(t *testing.T) {
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: "127.0.0.1:" + fmt.Sprint(freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	args := []string{"dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port), "--http", d.httpAddr,
		"--tokens", writeTokensFile(t, t.TempDir())}
	d.dev = start(t, devReady, args...)
	root := d

	t.Run("a new keyring, then the worker restarted with its key", func(t *testing.T) {
		d := d.in(t)
		own := filepath.Join(t.TempDir(), "k.json")
		r := d.cli("keys", "new", own)
		require.Equal(t, 0, r.code, r.stderr)
		withOwn := []string{"TOOLGATE_KEYS=" + own}

		r = d.cliWith(withOwn, "call", "--session", "kw", "--id", "kw-1", "--wait", "2s", "echo", `{"v":"kw-1"}`)
		require.Equal(t, 5, r.code, "still waiting, not failed: %s %s", r.stdout, r.stderr)
		assert.NotContains(t, r.stdout+r.stderr, "Encoded failure")
		waitForKeysShown(t, d, withOwn, "kw-1")
		assertRunning(t, d, "kw-1")

		// The workers get the key: merged into their keyring, restarted.
		mergeKeys(t, d.keysFile(), own)
		root.dev.stop()
		root.dev = start(root.t, devReady, args...) // lives past this subtest
		waitOK(t, d, "kw-1", `"v":"kw-1"`)
		assertNeverFailed(t, d, "kw-1")
	})

	t.Run("a rotation that reaches the client first", func(t *testing.T) {
		d := d.in(t)
		rotated := filepath.Join(t.TempDir(), "keys.json")
		raw, err := os.ReadFile(d.keysFile())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(rotated, raw, 0o600))
		r := d.cli("keys", "new", rotated)
		require.Equal(t, 0, r.code, r.stderr)
		withRotated := []string{"TOOLGATE_KEYS=" + rotated}

		r = d.cliWith(withRotated, "call", "--session", "kw", "--id", "kw-2", "--wait", "2s", "echo", `{"v":"kw-2"}`)
		require.Equal(t, 5, r.code, "still waiting, not failed: %s %s", r.stdout, r.stderr)
		waitForKeysShown(t, d, withRotated, "kw-2")

		// The rotated file reaches the worker's machine; the running worker
		// reads it when it meets the new key again: no restart.
		raw, err = os.ReadFile(rotated)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(d.keysFile(), raw, 0o600))
		waitOK(t, d, "kw-2", `"v":"kw-2"`)
		assertNeverFailed(t, d, "kw-2")
	})
}

// waitForKeysShown waits until `status` says the call waits for keys.
func waitForKeysShown(t *testing.T, d *devEnv, env []string, callID string) {
	t.Helper()
	var last result
	require.Eventually(t, func() bool {
		last = d.cliWith(env, "status", callID)
		return last.code == 5 && strings.Contains(last.stdout, "waiting for keys: a payload is encrypted with key ")
	}, 30*time.Second, 250*time.Millisecond, "status of a call under a key the workers lack: %+v", last)
	assert.Contains(t, last.stdout, "status: evaluating")
	assert.NotContains(t, last.stdout, d.dataDir, "names no path of the worker's")
}

// waitOK waits until the call has run and its output holds want.
func waitOK(t *testing.T, d *devEnv, callID, want string) {
	t.Helper()
	var last result
	require.Eventually(t, func() bool {
		last = d.cli("status", callID)
		return strings.Contains(last.stdout, "status: ok")
	}, 90*time.Second, 500*time.Millisecond, "the call runs once the workers hold its key: %+v", last)
	assert.Contains(t, last.stdout, want)
}

func assertRunning(t *testing.T, d *devEnv, callID string) {
	t.Helper()
	desc, err := d.temporal().DescribeWorkflowExecution(context.Background(), workflows.CallWorkflowID(callID), "")
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.GetWorkflowExecutionInfo().GetStatus())
}

// assertNeverFailed checks the call's history: it completed, and no run
// of it failed or was continued after a failure.
func assertNeverFailed(t *testing.T, d *devEnv, callID string) {
	t.Helper()
	it := d.temporal().GetWorkflowHistory(context.Background(), workflows.CallWorkflowID(callID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var types []enumspb.EventType
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		types = append(types, ev.GetEventType())
	}
	assert.NotContains(t, types, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED)
	assert.Contains(t, types, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, "it waited: a workflow task failed for want of the key")
	assert.Equal(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, types[len(types)-1])
}

// mergeKeys adds the keys of the keyring file from to the keyring file
// into, keeping into's current key.
func mergeKeys(t *testing.T, into, from string) {
	t.Helper()
	read := func(path string) map[string]any {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		var ring map[string]any
		require.NoError(t, json.Unmarshal(raw, &ring))
		return ring
	}
	ring, other := read(into), read(from)
	ring["keys"] = append(ring["keys"].([]any), other["keys"].([]any)...)
	b, err := json.Marshal(ring)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(into, b, 0o600))
}
