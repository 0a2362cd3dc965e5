package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write_file call through a symlink shows the file the link leads to,
// and writes only that one: a link re-pointed between the preview and the
// approval makes the approved call a refusal, and the file it now leads
// to is untouched.
func TestWriteFileThroughALinkWritesOnlyThePreviewedFile(t *testing.T) {
	d, as := newAPIDev(t)
	agent, bob := as("agent-1"), as("bob")
	require.NoError(t, os.MkdirAll(d.workspace, 0o755))
	file := func(name string) string { return filepath.Join(d.workspace, name) }
	require.NoError(t, os.WriteFile(file("target.txt"), []byte("old\n"), 0o644))
	require.NoError(t, os.WriteFile(file("important.txt"), []byte("keep\n"), 0o644))
	require.NoError(t, os.Symlink("target.txt", file("link.txt")))
	submit := func(id string) map[string]any {
		r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "ln1", "call_id": id, "tool": "write_file",
			"args": map[string]any{"path": "link.txt", "content": "new\n"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool { return bob.do("GET", "/v1/calls/"+id, nil).body["status"] == "pending" }, 30*time.Second, 50*time.Millisecond)
		preview, _ := bob.do("GET", "/v1/calls/"+id, nil).body["preview"].(map[string]any)
		require.NotNil(t, preview)
		return preview
	}
	repoint := func(to string) {
		require.NoError(t, os.Remove(file("link.txt")))
		require.NoError(t, os.Symlink(to, file("link.txt")))
	}
	approve := func(id string) apiResponse {
		r := bob.do("POST", "/v1/calls/"+id+"/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		final := bob.do("GET", "/v1/calls/"+id+"?wait=20s", nil)
		require.Equal(t, http.StatusOK, final.status, "the Result: %s", final.raw)
		return final
	}
	read := func(name string) string {
		b, err := os.ReadFile(file(name))
		require.NoError(t, err)
		return string(b)
	}

	preview := submit("ln-1")
	assert.Equal(t, "link.txt -> target.txt (through a symlink): this call writes target.txt\n"+
		"--- a/target.txt\n+++ b/target.txt\n@@ -1 +1 @@\n-old\n+new\n", preview["text"])
	assert.Equal(t, map[string]any{"path": "link.txt", "file": "target.txt", "link": true}, preview["target"])
	out := d.cli("pending", "--preview", "--session", "ln1")
	require.Equal(t, 0, out.code, out.stderr)
	assert.Contains(t, out.stdout, "ln-1 (write_file) — What it changes:\nlink.txt -> target.txt (through a symlink): this call writes target.txt\n--- a/target.txt\n")

	repoint("important.txt") // between the preview and the approval
	final := approve("ln-1")
	assert.Equal(t, "error", final.body["status"], final.raw)
	assert.Equal(t, "bob", final.body["decided_by"])
	assert.Contains(t, final.body["reason"], `write "link.txt": the preview showed "target.txt", but the path now leads to "important.txt" (a symlink on it changed since the preview); toolgate writes only the file the preview showed, so nothing was written`)
	assert.Equal(t, "keep\n", read("important.txt"), "the file the preview never showed is untouched")
	assert.Equal(t, "old\n", read("target.txt"))

	// Left alone, the link is written through, to the file shown.
	repoint("target.txt")
	submit("ln-2")
	final = approve("ln-2")
	assert.Equal(t, "ok", final.body["status"], final.raw)
	assert.Equal(t, "new\n", read("target.txt"))
	assert.Equal(t, "keep\n", read("important.txt"))
	dest, err := os.Readlink(file("link.txt"))
	require.NoError(t, err)
	assert.Equal(t, "target.txt", dest, "the link stays a link")
}
