package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write_file call that asks a person shows the diff of what it changes,
// through the API and the CLI; an edit on approval shows what ran and keeps
// what the approver was shown.
func TestAWaitingCallShowsWhatItWillChange(t *testing.T) {
	d, as := newAPIDev(t)
	agent, bob := as("agent-1"), as("bob")
	require.NoError(t, os.MkdirAll(d.workspace, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d.workspace, "config.yaml"), []byte("port: 80\nhost: a\n"), 0o644))

	r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "pv1", "call_id": "pv-1", "tool": "write_file",
		"args": map[string]any{"path": "config.yaml", "content": "port: 8080\nhost: a\n"}})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool { return bob.do("GET", "/v1/calls/pv-1", nil).body["status"] == "pending" }, 30*time.Second, 50*time.Millisecond)

	call := bob.do("GET", "/v1/calls/pv-1", nil)
	preview, _ := call.body["preview"].(map[string]any)
	require.NotNil(t, preview, call.raw)
	assert.Equal(t, "diff", preview["kind"])
	assert.Equal(t, "toolgate", preview["computed_by"])
	assert.Equal(t, "--- a/config.yaml\n+++ b/config.yaml\n@@ -1,2 +1,2 @@\n-port: 80\n+port: 8080\n host: a\n", preview["text"])

	out := d.cli("pending", "--preview", "--session", "pv1")
	require.Equal(t, 0, out.code, out.stderr)
	assert.Contains(t, out.stdout, "pv-1 (write_file) — What it changes:\n--- a/config.yaml\n+++ b/config.yaml\n@@ -1,2 +1,2 @@\n-port: 80\n+port: 8080\n host: a\n")
	out = d.cli("status", "pv-1")
	assert.Contains(t, out.stdout, "What it changes:\n--- a/config.yaml", out.stderr)

	r = bob.do("POST", "/v1/calls/pv-1/decision", map[string]any{"decision": "approve", "args": map[string]any{"path": "config.yaml", "content": "port: 9090\nhost: a\n"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	final := bob.do("GET", "/v1/calls/pv-1?wait=20s", nil)
	require.Equal(t, http.StatusOK, final.status, "the Result: %s", final.raw)
	assert.Equal(t, "ok", final.body["status"])
	ran, _ := final.body["preview"].(map[string]any)
	shown, _ := final.body["preview_shown"].(map[string]any)
	require.NotNil(t, ran, final.raw)
	require.NotNil(t, shown, final.raw)
	assert.Contains(t, ran["text"], "+port: 9090", "the preview of what ran")
	assert.Contains(t, shown["text"], "+port: 8080", "and the one the approver saw")
	b, err := os.ReadFile(filepath.Join(d.workspace, "config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "port: 9090\nhost: a\n", string(b))

	r = agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "pv1", "call_id": "pv-2", "tool": "shell", "args": map[string]any{"command": "make deploy"}})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool {
		p, _ := bob.do("GET", "/v1/calls/pv-2", nil).body["preview"].(map[string]any)
		return p != nil && strings.HasPrefix(p["text"].(string), "$ make deploy\nin ")
	}, 30*time.Second, 50*time.Millisecond, "a shell call shows its command and where it runs")
}
