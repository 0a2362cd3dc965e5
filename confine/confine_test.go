package confine

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newTree returns a workspace root and a sibling directory outside it,
// both real paths.
func newTree(t *testing.T) (root, outside string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	root, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "sub", "f"), []byte("inside"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "f"), []byte("secret"), 0o644))
	return root, outside
}

func TestRel(t *testing.T) {
	for _, tc := range []struct {
		p, want string
		inside  bool
	}{
		{"/ws", ".", true},
		{"/ws/a/b", "a/b", true},
		{"/ws-other/a", "", false},
		{"/", "", false},
		{"/ws/../x", "", false},
	} {
		got, inside := Rel("/ws", filepath.Clean(tc.p))
		assert.Equal(t, tc.want, got, tc.p)
		assert.Equal(t, tc.inside, inside, tc.p)
	}
}

// TestDirStaysInside: links that lead out are refused as ErrOutside,
// whichever operation meets them; links inside are followed, and the
// result says where the file really is.
func TestDirStaysInside(t *testing.T) {
	root, outside := newTree(t)
	require.NoError(t, os.Symlink("../outside", filepath.Join(root, "up")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "abs")))
	require.NoError(t, os.Symlink("sub", filepath.Join(root, "link")))

	d, err := Open(root)
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, root, d.Top())
	assert.Equal(t, ".", d.Rel())

	for _, name := range []string{"up/f", "abs/f", "../outside/f"} {
		_, _, err := d.OpenFile(name, os.O_RDONLY, 0)
		assert.ErrorIs(t, err, ErrOutside, name)
	}
	_, err = d.OpenDir("up")
	assert.ErrorIs(t, err, ErrOutside)
	assert.ErrorIs(t, d.MkdirAll("up/new", 0o755), ErrOutside)
	_, err = os.Stat(filepath.Join(outside, "new"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	f, rel, err := d.OpenFile("link/f", os.O_RDONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, "sub/f", rel)
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	assert.Equal(t, "inside", string(b))

	sub, err := d.OpenDir("link")
	require.NoError(t, err)
	defer sub.Close()
	assert.Equal(t, "sub", sub.Rel())
	assert.Equal(t, filepath.Join(root, "sub", "f"), d.Abs("sub/f"))
}

// TestOpenDirKeepsTheDirectory: a Dir works on the directory it opened,
// even after its name is swapped for a link to somewhere else.
func TestOpenDirKeepsTheDirectory(t *testing.T) {
	root, outside := newTree(t)
	d, err := Open(root)
	require.NoError(t, err)
	defer d.Close()
	sub, err := d.OpenDir("sub")
	require.NoError(t, err)
	defer sub.Close()

	require.NoError(t, os.Rename(filepath.Join(root, "sub"), filepath.Join(root, "moved")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "sub")))
	b, err := sub.Root().ReadFile("f")
	require.NoError(t, err)
	assert.Equal(t, "inside", string(b))
	_, rel, err := sub.OpenFile("f", os.O_RDONLY, 0)
	require.NoError(t, err)
	assert.Equal(t, "moved/f", rel, "where the file is now")
}

func TestResolve(t *testing.T) {
	root, outside := newTree(t)
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink("sub/later", filepath.Join(root, "dangling")))

	got, err := Resolve(root, "dangling")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "sub", "later"), got)
	_, err = Resolve(root, "escape/x")
	assert.ErrorIs(t, err, ErrOutside)
	assert.ErrorContains(t, err, `path "escape/x" is outside the workspace`)

	d, err := Open(root)
	require.NoError(t, err)
	defer d.Close()
	rel, err := d.Resolve(filepath.Join(root, "sub", "x"))
	require.NoError(t, err)
	assert.Equal(t, "sub/x", rel)
}

func TestOpenErrors(t *testing.T) {
	root, _ := newTree(t)
	for _, dir := range []string{"", filepath.Join(root, "missing"), filepath.Join(root, "sub", "f")} {
		_, err := Open(dir)
		assert.Error(t, err, dir)
	}
	d, err := Open(root)
	require.NoError(t, err)
	defer d.Close()
	_, err = d.OpenDir("sub/f")
	assert.ErrorIs(t, err, syscall.ENOTDIR)
}
