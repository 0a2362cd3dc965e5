package builtin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// writePreviewed runs write_file with args, as a call whose previews
// showed previews (the approvers' first, then an edit's), the way the
// worker runs it.
func writePreviewed(t *testing.T, ws Workspace, args any, previews ...policy.Preview) (json.RawMessage, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	in := tool.Input{CallID: "w1", Session: "s1", Args: raw}
	for _, p := range previews {
		require.NotNil(t, p.Target, "a write_file preview records its file")
		in.Previewed = append(in.Previewed, *p.Target)
	}
	for _, tl := range Tools(ws) {
		if tl.Name == WriteFileTool {
			return tl.Run(context.Background(), in)
		}
	}
	t.Fatal("no write_file")
	return nil, nil
}

func readText(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

// repoint makes link point to target, as a process in the workspace would.
func repoint(t *testing.T, link, target string) {
	t.Helper()
	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(target, link))
}

func TestWriteFilePreviewNamesTheFileALinkLeadsTo(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "target.txt"), []byte("old\n"), 0o644))
	require.NoError(t, os.Symlink("target.txt", filepath.Join(root, "link.txt")))

	p, err := preview(t, ws, WriteFileTool, map[string]any{"path": "link.txt", "content": "new\n"})
	require.NoError(t, err)
	assert.Equal(t, policy.PreviewDiff, p.Kind)
	assert.Equal(t, "link.txt -> target.txt (through a symlink): this call writes target.txt\n"+
		"--- a/target.txt\n+++ b/target.txt\n@@ -1 +1 @@\n-old\n+new\n", p.Text)
	assert.Equal(t, &policy.PreviewTarget{Path: "link.txt", File: "target.txt", Link: true}, p.Target)

	// A directory on the way that is a link.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "real"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "real", "f.txt"), []byte("a\n"), 0o644))
	require.NoError(t, os.Symlink("real", filepath.Join(root, "dir")))
	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "dir/f.txt", "content": "b\n"})
	require.NoError(t, err)
	assert.Equal(t, "dir/f.txt -> real/f.txt (through a symlink): this call writes real/f.txt\n"+
		"--- a/real/f.txt\n+++ b/real/f.txt\n@@ -1 +1 @@\n-a\n+b\n", p.Text)
	assert.Equal(t, &policy.PreviewTarget{Path: "dir/f.txt", File: "real/f.txt", Link: true}, p.Target)

	// A dangling link: the file it names is created.
	require.NoError(t, os.Symlink("later.txt", filepath.Join(root, "dangling.txt")))
	p, err = preview(t, ws, WriteFileTool, map[string]any{"path": "dangling.txt", "content": "x\n"})
	require.NoError(t, err)
	assert.Equal(t, "dangling.txt -> later.txt (through a symlink): this call writes later.txt\n"+
		"new file later.txt\n--- /dev/null\n+++ b/later.txt\n@@ -0,0 +1 @@\n+x\n", p.Text)

	// A plain file, named any way that is no link, is shown as before.
	require.NoError(t, os.WriteFile(filepath.Join(root, "plain.txt"), []byte("1\n"), 0o644))
	for _, name := range []string{"plain.txt", "./plain.txt", "real/../plain.txt", filepath.Join(root, "plain.txt")} {
		p, err = preview(t, ws, WriteFileTool, map[string]any{"path": name, "content": "2\n"})
		require.NoError(t, err)
		assert.Equal(t, "--- a/"+name+"\n+++ b/"+name+"\n@@ -1 +1 @@\n-1\n+2\n", p.Text, name)
		assert.Equal(t, &policy.PreviewTarget{Path: name, File: "plain.txt"}, p.Target, name)
	}
}

func TestWriteFileWritesTheFileItsPreviewShowed(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "target.txt"), []byte("old\n"), 0o644))
	require.NoError(t, os.Symlink("target.txt", filepath.Join(root, "link.txt")))
	args := map[string]any{"path": "link.txt", "content": "new\n"}
	p, err := preview(t, ws, WriteFileTool, args)
	require.NoError(t, err)

	out, err := writePreviewed(t, ws, args, p)
	require.NoError(t, err)
	assert.Equal(t, writeOutput{Path: "target.txt", BytesWritten: 4}, decode[writeOutput](t, out))
	assert.Equal(t, "new\n", readText(t, filepath.Join(root, "target.txt")))
	dest, err := os.Readlink(filepath.Join(root, "link.txt"))
	require.NoError(t, err)
	assert.Equal(t, "target.txt", dest, "the link stays a link")

	// A plain file previewed is written as before.
	plain := map[string]any{"path": "notes/a.txt", "content": "a\n"}
	p, err = preview(t, ws, WriteFileTool, plain)
	require.NoError(t, err)
	_, err = writePreviewed(t, ws, plain, p)
	require.NoError(t, err)
	assert.Equal(t, "a\n", readText(t, filepath.Join(root, "notes", "a.txt")))
}

func TestWriteFileRefusesWhenTheLinkWasRepointedSinceThePreview(t *testing.T) {
	for _, appendTo := range []bool{false, true} {
		ws, root, _ := newWorkspace(t)
		require.NoError(t, os.WriteFile(filepath.Join(root, "target.txt"), []byte("old\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(root, "important.txt"), []byte("keep\n"), 0o644))
		link := filepath.Join(root, "link.txt")
		require.NoError(t, os.Symlink("target.txt", link))
		args := map[string]any{"path": "link.txt", "content": "new\n", "append": appendTo}
		p, err := preview(t, ws, WriteFileTool, args)
		require.NoError(t, err)

		repoint(t, link, "important.txt")
		_, err = writePreviewed(t, ws, args, p)
		require.Error(t, err, "append %v", appendTo)
		requirePermanent(t, err)
		assert.Equal(t, `write "link.txt": the preview showed "target.txt", but the path now leads to "important.txt" (a symlink on it changed since the preview); toolgate writes only the file the preview showed, so nothing was written`, err.Error())
		assert.Equal(t, "keep\n", readText(t, filepath.Join(root, "important.txt")), "append %v", appendTo)
		assert.Equal(t, "old\n", readText(t, filepath.Join(root, "target.txt")), "append %v", appendTo)
		_, err = os.Stat(filepath.Join(root, MarkerDir))
		assert.ErrorIs(t, err, os.ErrNotExist, "no append marker either")
	}
}

func TestWriteFileRefusesWhenThePathChangedShapeSinceThePreview(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(content), 0o644))
	}
	write("important.txt", "keep\n")
	require.NoError(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(root, "e"), 0o755))

	cases := []struct {
		name, path string
		before     func() // the tree the preview sees
		change     func() // what happens before the approval
		showed     string
		now        string
	}{
		{"a file replaced by a link", "a.txt",
			func() { write("a.txt", "a\n") },
			func() { repoint(t, filepath.Join(root, "a.txt"), "important.txt") }, "a.txt", "important.txt"},
		{"a new file's name taken by a link", "new.txt",
			func() {},
			func() { require.NoError(t, os.Symlink("important.txt", filepath.Join(root, "new.txt"))) }, "new.txt", "important.txt"},
		{"a directory on the way replaced by a link", "d/f.txt",
			func() {},
			func() {
				require.NoError(t, os.Remove(filepath.Join(root, "d")))
				require.NoError(t, os.Symlink("e", filepath.Join(root, "d")))
			}, "d/f.txt", "e/f.txt"},
		{"a link replaced by the file it was not", "l.txt",
			func() {
				write("l-target.txt", "t\n")
				require.NoError(t, os.Symlink("l-target.txt", filepath.Join(root, "l.txt")))
			},
			func() { require.NoError(t, os.Remove(filepath.Join(root, "l.txt"))); write("l.txt", "plain\n") }, "l-target.txt", "l.txt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.before()
			args := map[string]any{"path": c.path, "content": "x\n"}
			p, err := preview(t, ws, WriteFileTool, args)
			require.NoError(t, err)
			require.Equal(t, c.showed, p.Target.File)
			c.change()
			before, _ := os.ReadFile(filepath.Join(root, c.now))
			_, err = writePreviewed(t, ws, args, p)
			require.Error(t, err)
			requirePermanent(t, err)
			assert.Contains(t, err.Error(), `the preview showed "`+c.showed+`", but the path now leads to "`+c.now+`"`)
			assert.Equal(t, "keep\n", readText(t, filepath.Join(root, "important.txt")))
			after, _ := os.ReadFile(filepath.Join(root, c.now))
			assert.Equal(t, string(before), string(after), "%s is untouched", c.now)
			_, err = os.Stat(filepath.Join(root, "e", "f.txt"))
			assert.ErrorIs(t, err, os.ErrNotExist, "nothing was created through the directory's link")
		})
	}

	t.Run("a link out of the workspace, re-pointed inside", func(t *testing.T) {
		link := filepath.Join(root, "out.txt")
		require.NoError(t, os.Symlink(filepath.Join(outside, "x"), link))
		args := map[string]any{"path": "out.txt", "content": "x\n"}
		p, err := preview(t, ws, WriteFileTool, args)
		require.NoError(t, err)
		assert.Contains(t, p.Text, "outside the workspace")

		// Still outside: refused as before, the preview or not.
		_, err = writePreviewed(t, ws, args, p)
		require.ErrorIs(t, err, ErrOutsideWorkspace)
		requirePermanent(t, err)
		_, err = run(t, ws, WriteFileTool, "w", args)
		require.ErrorIs(t, err, ErrOutsideWorkspace)
		_, err = os.Stat(filepath.Join(outside, "x"))
		assert.ErrorIs(t, err, os.ErrNotExist)

		repoint(t, link, "important.txt")
		_, err = writePreviewed(t, ws, args, p)
		require.Error(t, err)
		requirePermanent(t, err)
		assert.Contains(t, err.Error(), `when the call was previewed this path led to no file of the workspace, and now it leads to "important.txt"`)
		assert.Equal(t, "keep\n", readText(t, filepath.Join(root, "important.txt")))
	})
}

// An approver's edit gets its own preview; the tool holds to both: an
// edit that keeps the path cannot move the write to a file the approver
// was not shown, and an edit of the path writes the path it names.
func TestWriteFileHoldsToThePreviewShownBeforeAnEdit(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "target.txt"), []byte("old\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "important.txt"), []byte("keep\n"), 0o644))
	link := filepath.Join(root, "link.txt")
	require.NoError(t, os.Symlink("target.txt", link))
	shown, err := preview(t, ws, WriteFileTool, map[string]any{"path": "link.txt", "content": "new\n"})
	require.NoError(t, err)

	repoint(t, link, "important.txt")
	edited := map[string]any{"path": "link.txt", "content": "newer\n"}
	ran, err := preview(t, ws, WriteFileTool, edited) // made when the approver's edit came
	require.NoError(t, err)
	require.Equal(t, "important.txt", ran.Target.File)
	_, err = writePreviewed(t, ws, edited, shown, ran)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the preview showed "target.txt", but the path now leads to "important.txt"`)
	assert.Equal(t, "keep\n", readText(t, filepath.Join(root, "important.txt")))

	other := map[string]any{"path": "other.txt", "content": "o\n"}
	ran, err = preview(t, ws, WriteFileTool, other)
	require.NoError(t, err)
	_, err = writePreviewed(t, ws, other, shown, ran)
	require.NoError(t, err, "the approver named another file, and its own preview holds")
	assert.Equal(t, "o\n", readText(t, filepath.Join(root, "other.txt")))
}
