package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

func previewFor(t *testing.T, cwd, tool string, input map[string]any) *policy.Preview {
	t.Helper()
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	return previewOf(Event{Cwd: cwd, ToolName: tool, ToolInput: raw})
}

func TestTheHookPreviewsEditsFromTheFilesOnTheAgentsMachine(t *testing.T) {
	repo := t.TempDir()
	main := filepath.Join(repo, "main.go")
	require.NoError(t, os.WriteFile(main, []byte("package main\n\nconst port = 80\n"), 0o644))

	p := previewFor(t, repo, "Edit", map[string]any{"file_path": main, "old_string": "port = 80", "new_string": "port = 8080"})
	require.NotNil(t, p)
	assert.Equal(t, policy.PreviewDiff, p.Kind)
	assert.Equal(t, "--- a/"+main+"\n+++ b/"+main+"\n@@ -1,3 +1,3 @@\n package main\n \n-const port = 80\n+const port = 8080\n", p.Text)

	p = previewFor(t, repo, "Write", map[string]any{"file_path": "docs/new.md", "content": "# New\n"})
	assert.Equal(t, "new file docs/new.md\n--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1 @@\n+# New\n", p.Text, "a relative path is the agent's working directory's")

	p = previewFor(t, repo, "Edit", map[string]any{"file_path": main, "old_string": "nowhere", "new_string": "x"})
	assert.Equal(t, policy.PreviewText, p.Kind)
	assert.Contains(t, p.Text, "the text to replace is not in the file")

	require.NoError(t, os.WriteFile(filepath.Join(repo, "twice.txt"), []byte("a a\n"), 0o644))
	p = previewFor(t, repo, "Edit", map[string]any{"file_path": "twice.txt", "old_string": "a", "new_string": "b"})
	assert.Contains(t, p.Text, "in the file 2 times", "as Claude Code would refuse it")
	p = previewFor(t, repo, "Edit", map[string]any{"file_path": "twice.txt", "old_string": "a", "new_string": "b", "replace_all": true})
	assert.Contains(t, p.Text, "-a a\n+b b\n")

	require.NoError(t, os.WriteFile(filepath.Join(repo, "big.bin"), []byte(strings.Repeat("x", maxPreviewFile+1)), 0o644))
	assert.Equal(t, "big.bin: too large to diff", previewFor(t, repo, "Write", map[string]any{"file_path": "big.bin", "content": ""}).Text)

	p = previewFor(t, repo, "apply_patch", map[string]any{"command": "*** Begin Patch\n*** Add File: b.txt\n+hi\n*** End Patch\n"})
	assert.Equal(t, policy.PreviewText, p.Kind, "Codex's patch, as it is")
	assert.Contains(t, p.Text, "*** Add File: b.txt")

	p = previewFor(t, repo, "NotebookEdit", map[string]any{"notebook_path": "nb.ipynb", "new_source": "print(1)", "edit_mode": "insert"})
	assert.Equal(t, "nb.ipynb: insert a cell with:\nprint(1)", p.Text)

	assert.Nil(t, previewFor(t, repo, "Bash", map[string]any{"command": "ls"}), "toolgate shows a command's arguments as they are")
}

func TestTheHookSendsItsPreviewWithTheCall(t *testing.T) {
	e := newHookEnv(t)
	file := filepath.Join(t.TempDir(), "a.txt")
	require.NoError(t, os.WriteFile(file, []byte("old\n"), 0o644))
	e.decision(pre("toolu_1", "Edit", `{"file_path":`+strconvQuote(file)+`,"old_string":"old","new_string":"new"}`))
	subs := e.agent.submitted()
	require.Len(t, subs, 1)
	require.NotNil(t, subs[0].Preview)
	assert.Contains(t, subs[0].Preview.Text, "-old\n+new\n")
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A file reached through a symlink is named with the file it leads to,
// and diffed as that one; a file named as it is is shown as before.
func TestTheHookPreviewNamesTheFileALinkLeadsTo(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(repo, "target.txt"), []byte("old\n"), 0o644))
	require.NoError(t, os.Symlink("target.txt", filepath.Join(repo, "link.txt")))

	p := previewFor(t, repo, "Write", map[string]any{"file_path": "link.txt", "content": "new\n"})
	require.NotNil(t, p)
	assert.Equal(t, "link.txt -> target.txt (through a symlink): the agent writes target.txt\n"+
		"--- a/target.txt\n+++ b/target.txt\n@@ -1 +1 @@\n-old\n+new\n", p.Text)
	assert.Nil(t, p.Target, "the agent writes the file itself: toolgate records no target it could hold it to")

	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "x.txt"), []byte("a\n"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "x.txt"), filepath.Join(repo, "out.txt")))
	real, err := filepath.EvalSymlinks(filepath.Join(outside, "x.txt"))
	require.NoError(t, err)
	p = previewFor(t, repo, "Edit", map[string]any{"file_path": filepath.Join(repo, "out.txt"), "old_string": "a", "new_string": "b"})
	assert.True(t, strings.HasPrefix(p.Text, filepath.Join(repo, "out.txt")+" -> "+real+" (through a symlink): the agent writes "+real+"\n--- a/"+real+"\n"), p.Text)

	p = previewFor(t, repo, "Write", map[string]any{"file_path": filepath.Join(repo, "target.txt"), "content": "new\n"})
	assert.Equal(t, "--- a/"+filepath.Join(repo, "target.txt")+"\n+++ b/"+filepath.Join(repo, "target.txt")+"\n@@ -1 +1 @@\n-old\n+new\n", p.Text)
}
