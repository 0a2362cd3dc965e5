package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// preview runs the named built-in tool's preview with args.
func preview(t *testing.T, ws Workspace, name string, args any) (policy.Preview, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	for _, tl := range Tools(ws) {
		if tl.Name == name {
			require.NotNil(t, tl.Preview, "%s has a preview", name)
			return tl.Preview(context.Background(), raw)
		}
	}
	t.Fatalf("no tool %q", name)
	return policy.Preview{}, nil
}

func TestWriteFilePreviewIsTheDiffOfWhatTheCallChanges(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "config.yaml"), []byte("port: 80\nhost: a\n"), 0o644))

	p, err := preview(t, ws, WriteFileTool, map[string]any{"path": "config.yaml", "content": "port: 8080\nhost: a\n"})
	require.NoError(t, err)
	assert.Equal(t, policy.PreviewDiff, p.Kind)
	assert.Equal(t, "--- a/config.yaml\n+++ b/config.yaml\n@@ -1,2 +1,2 @@\n-port: 80\n+port: 8080\n host: a\n", p.Text)

	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "config.yaml", "content": "debug: true\n", "append": true})
	require.NoError(t, err)
	assert.Contains(t, p.Text, " host: a\n+debug: true\n", "an append adds to what is there")

	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "notes/new.md", "content": "# Hi\n"})
	require.NoError(t, err)
	assert.Equal(t, "new file notes/new.md\n--- /dev/null\n+++ b/notes/new.md\n@@ -0,0 +1 @@\n+# Hi\n", p.Text)

	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "config.yaml", "content": "port: 80\nhost: a\n"})
	require.NoError(t, err)
	assert.Equal(t, policy.PreviewText, p.Kind)
	assert.Contains(t, p.Text, "no change")

	require.NoError(t, os.WriteFile(filepath.Join(root, "logo.png"), []byte("\x89PNG\x00\x01"), 0o644))
	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "logo.png", "content": "x"})
	require.NoError(t, err)
	assert.Equal(t, "logo.png: binary content, 6 bytes now, 1 bytes after this call", p.Text)

	require.NoError(t, os.WriteFile(filepath.Join(root, "big.log"), []byte(strings.Repeat("x\n", maxDiffedFile)), 0o644))
	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "big.log", "content": "y", "append": true})
	require.NoError(t, err)
	assert.Contains(t, p.Text, "too large to diff")

	// Confinement holds for previews: nothing outside the workspace is
	// read, and the preview says why it shows nothing.
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link")))
	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "../outside/secret", "content": "x"})
	require.NoError(t, err)
	assert.Equal(t, `toolgate could not tell what this call will change: path "../outside/secret" is outside the workspace`, p.Text)
	assert.Equal(t, &policy.PreviewTarget{Path: "../outside/secret"}, p.Target, "it leads to no file of the workspace")
	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "link", "content": "x"})
	require.NoError(t, err)
	assert.Equal(t, `toolgate could not tell what this call will change: path "link" is outside the workspace`, p.Text,
		"a symlink out of the workspace is not followed")
	assert.NotContains(t, p.Text, "s3cret")
	assert.Equal(t, &policy.PreviewTarget{Path: "link"}, p.Target)
}

func TestWriteFilePreviewDoesNotShowAProtectedFile(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, ".env"), []byte("TOKEN=abc\n"), 0o644))
	ws.Guard = func(abs string) error {
		if filepath.Base(abs) == ".env" {
			return errors.New("protected path")
		}
		return nil
	}
	p, err := preview(t, ws, WriteFileTool, map[string]any{"path": ".env", "content": "TOKEN=x\n"})
	require.NoError(t, err)
	assert.Equal(t, policy.PreviewText, p.Kind)
	assert.Equal(t, `toolgate could not tell what this call will change: read ".env": protected path`, p.Text)
	assert.NotContains(t, p.Text, "TOKEN=abc")
}

func TestShellPreviewShowsTheCommandWhereItRuns(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	p, err := preview(t, ws, ShellTool, map[string]any{"command": "rm -rf build", "timeout_seconds": 90})
	require.NoError(t, err)
	assert.Equal(t, policy.PreviewCommand, p.Kind)
	assert.Equal(t, "$ rm -rf build\nin "+root+", with /bin/sh -c, killed after 1m30s", p.Text)
}

// BenchmarkWriteFilePreview measures what a write_file preview adds to the
// evaluation of a call that asks a person: reading the file through the
// confined workspace and diffing it (a 64 KiB file, one line changed),
// against the baseline of reading the same file alone.
func BenchmarkWriteFilePreview(b *testing.B) {
	base, err := filepath.EvalSymlinks(b.TempDir())
	require.NoError(b, err)
	ws := Workspace{Root: base}
	var sb strings.Builder
	for i := 0; sb.Len() < 64<<10; i++ {
		sb.WriteString("line " + strings.Repeat("x", 40) + "\n")
	}
	old := sb.String()
	require.NoError(b, os.WriteFile(filepath.Join(base, "big.txt"), []byte(old), 0o644))
	changed := strings.Replace(old, "line", "LINE", 1)
	args, _ := json.Marshal(map[string]any{"path": "big.txt", "content": changed})
	b.Run("baseline_read", func(b *testing.B) {
		for b.Loop() {
			dir, rel, err := ws.open("big.txt")
			if err != nil {
				b.Fatal(err)
			}
			if _, _, _, err := ws.readForPreview(dir, rel, "big.txt"); err != nil {
				b.Fatal(err)
			}
			dir.Close()
		}
	})
	b.Run("preview", func(b *testing.B) {
		for b.Loop() {
			if _, err := ws.previewWrite(context.Background(), args); err != nil {
				b.Fatal(err)
			}
		}
	})
}
