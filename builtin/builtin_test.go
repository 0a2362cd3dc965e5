package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/rules"
	"github.com/toolgate/toolgate/sandbox"
	"github.com/toolgate/toolgate/tool"
)

// newWorkspace returns a workspace in a temporary directory, with its
// resolved root and a sibling directory outside it.
func newWorkspace(t *testing.T) (ws Workspace, root, outside string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	root = filepath.Join(base, "ws")
	outside = filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(root, 0o755))
	require.NoError(t, os.MkdirAll(outside, 0o755))
	return Workspace{Root: root}, root, outside
}

// run runs the named built-in tool with args (a value encoded to JSON).
func run(t *testing.T, ws Workspace, name, callID string, args any) (json.RawMessage, error) {
	t.Helper()
	return runCtx(t, context.Background(), ws, name, callID, args)
}

func runCtx(t *testing.T, ctx context.Context, ws Workspace, name, callID string, args any) (json.RawMessage, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	for _, tl := range Tools(ws) {
		if tl.Name == name {
			return tl.Run(ctx, tool.Input{CallID: callID, Session: "s1", Args: raw})
		}
	}
	t.Fatalf("no tool %q", name)
	return nil, nil
}

// decode unmarshals a tool's output into a T.
func decode[T any](t *testing.T, out json.RawMessage) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(out, &v), "output: %s", out)
	return v
}

func requirePermanent(t *testing.T, err error) {
	t.Helper()
	var pe *tool.PermanentError
	require.ErrorAs(t, err, &pe)
}

func TestResolve(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub", "deep"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "sub", "f.txt"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "new.txt"), filepath.Join(root, "dangling")))
	require.NoError(t, os.Symlink("sub", filepath.Join(root, "inside")))
	require.NoError(t, os.Symlink("sub/later.txt", filepath.Join(root, "dangling-inside")))
	require.NoError(t, os.Symlink("../../outside", filepath.Join(root, "sub", "up")))
	require.NoError(t, os.Symlink("loop", filepath.Join(root, "loop")))

	tests := []struct {
		name    string
		path    string
		want    string // relative to root, for allowed paths
		outside bool
		errText string // for other errors
	}{
		{name: "file", path: "sub/f.txt", want: "sub/f.txt"},
		{name: "root", path: ".", want: "."},
		{name: "nested new path", path: "a/b/c/new.txt", want: "a/b/c/new.txt"},
		{name: "dot dot staying inside", path: "sub/deep/../f.txt", want: "sub/f.txt"},
		{name: "absolute inside", path: filepath.Join(root, "sub", "f.txt"), want: "sub/f.txt"},
		{name: "symlink inside", path: "inside/f.txt", want: "sub/f.txt"},
		{name: "dangling symlink inside", path: "dangling-inside", want: "sub/later.txt"},
		{name: "dot dot", path: "../outside/x", outside: true},
		{name: "dot dot deep", path: "sub/../../x", outside: true},
		{name: "absolute outside", path: "/etc/passwd", outside: true},
		{name: "absolute sibling with root prefix", path: root + "-other/x", outside: true},
		{name: "symlink escape", path: "escape", outside: true},
		{name: "through symlink escape", path: "escape/new/file.txt", outside: true},
		{name: "dangling symlink escape", path: "dangling", outside: true},
		{name: "relative symlink escape", path: "sub/up/x", outside: true},
		{name: "empty", path: "", errText: "path is empty"},
		{name: "symlink loop", path: "loop", errText: "too many"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ws.Resolve(tc.path)
			switch {
			case tc.outside:
				require.ErrorIs(t, err, ErrOutsideWorkspace)
				assert.ErrorContains(t, err, tc.path)
				assert.ErrorContains(t, err, "outside the workspace")
			case tc.errText != "":
				require.ErrorContains(t, err, tc.errText)
				assert.NotErrorIs(t, err, ErrOutsideWorkspace)
			default:
				require.NoError(t, err)
				assert.Equal(t, filepath.Join(root, filepath.FromSlash(tc.want)), got)
			}
		})
	}
}

func TestResolveSymlinkedRoot(t *testing.T) {
	_, root, _ := newWorkspace(t)
	link := filepath.Join(filepath.Dir(root), "link-to-ws")
	require.NoError(t, os.Symlink(root, link))
	ws := Workspace{Root: link}

	got, err := ws.Resolve(filepath.Join(link, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "a.txt"), got)

	_, err = ws.Resolve("../x")
	require.ErrorIs(t, err, ErrOutsideWorkspace)

	_, err = Workspace{Root: filepath.Join(root, "missing")}.Resolve("a")
	require.Error(t, err)
}

func TestEcho(t *testing.T) {
	ws, _, _ := newWorkspace(t)
	args := map[string]any{"a": 1.0, "b": []any{"x", true}, "c": map[string]any{"d": nil}}
	out, err := run(t, ws, EchoTool, "c1", args)
	require.NoError(t, err)
	assert.Equal(t, args, decode[map[string]any](t, out))
}

func TestWriteThenRead(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	content := "hello <world> & ünïcode\n"

	out, err := run(t, ws, WriteFileTool, "w1", map[string]any{"path": "notes/today/a.txt", "content": content})
	require.NoError(t, err)
	w := decode[writeOutput](t, out)
	assert.Equal(t, writeOutput{Path: "notes/today/a.txt", BytesWritten: len(content)}, w)

	out, err = run(t, ws, ReadFileTool, "r1", map[string]any{"path": "notes/today/a.txt"})
	require.NoError(t, err)
	assert.NotContains(t, string(out), `\u003c`, "output is not HTML-escaped")
	r := decode[readOutput](t, out)
	assert.Equal(t, readOutput{Path: "notes/today/a.txt", Content: content, Size: int64(len(content))}, r)

	// Overwrite replaces atomically and leaves no temporary file behind.
	_, err = run(t, ws, WriteFileTool, "w2", map[string]any{"path": "notes/today/a.txt", "content": "short"})
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "notes", "today", "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "short", string(b))
	entries, err := os.ReadDir(filepath.Join(root, "notes", "today"))
	require.NoError(t, err)
	assert.Len(t, entries, 1)
}

func TestReadFile(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "big.txt"), []byte(strings.Repeat("é", 10)), 0o644)) // 20 bytes
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin"), []byte{0xff, 0x00, 0xfe}, 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "secret-link")))

	t.Run("truncated on a rune boundary", func(t *testing.T) {
		out, err := run(t, ws, ReadFileTool, "r", map[string]any{"path": "big.txt", "max_bytes": 5})
		require.NoError(t, err)
		r := decode[readOutput](t, out)
		assert.True(t, r.Truncated)
		assert.Equal(t, "éé", r.Content) // 5 bytes cut to 4: no half rune
		assert.Equal(t, int64(20), r.Size)
	})
	t.Run("binary as base64", func(t *testing.T) {
		out, err := run(t, ws, ReadFileTool, "r", map[string]any{"path": "bin"})
		require.NoError(t, err)
		r := decode[readOutput](t, out)
		assert.Equal(t, "base64", r.Encoding)
		assert.Equal(t, "/wD+", r.Content)
	})

	errs := []struct {
		name string
		args map[string]any
		want string
	}{
		{name: "directory", args: map[string]any{"path": "dir"}, want: "is a directory"},
		{name: "missing", args: map[string]any{"path": "nope.txt"}, want: "no such file"},
		{name: "outside", args: map[string]any{"path": "../outside/secret"}, want: "outside the workspace"},
		{name: "symlink outside", args: map[string]any{"path": "secret-link"}, want: "outside the workspace"},
		{name: "max_bytes too big", args: map[string]any{"path": "big.txt", "max_bytes": MaxReadBytes + 1}, want: "max_bytes"},
		{name: "unknown field", args: map[string]any{"path": "big.txt", "x": 1}, want: "unknown field"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, ws, ReadFileTool, "r", tc.args)
			require.ErrorContains(t, err, tc.want)
			requirePermanent(t, err)
			assert.NotContains(t, err.Error(), root, "errors do not show host paths")
		})
	}
}

func TestListDir(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "b.txt"), []byte("12345"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("1"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(root, "c"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "c", "inner"), nil, 0o644))
	require.NoError(t, os.Symlink("a.txt", filepath.Join(root, "0link")))

	out, err := run(t, ws, ListDirTool, "l", map[string]any{})
	require.NoError(t, err)
	l := decode[listOutput](t, out)
	assert.Equal(t, listOutput{Path: ".", Entries: []listEntry{
		{Name: "0link", Type: "symlink"},
		{Name: "a.txt", Type: "file", Size: 1},
		{Name: "b.txt", Type: "file", Size: 5},
		{Name: "c", Type: "dir"},
	}}, l)

	out, err = run(t, ws, ListDirTool, "l", map[string]any{"path": "c"})
	require.NoError(t, err)
	assert.Equal(t, listOutput{Path: "c", Entries: []listEntry{{Name: "inner", Type: "file"}}}, decode[listOutput](t, out))

	require.NoError(t, os.Mkdir(filepath.Join(root, "empty"), 0o755))
	out, err = run(t, ws, ListDirTool, "l", map[string]any{"path": "empty"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"path":"empty","entries":[]}`, string(out))

	for _, p := range []string{"..", outside, "a.txt", "missing"} {
		_, err := run(t, ws, ListDirTool, "l", map[string]any{"path": p})
		require.Error(t, err, p)
		requirePermanent(t, err)
	}
}

// An attempt lost between recording its append and finishing it leaves
// only the intent marker; the retry appends exactly once whatever point
// the lost attempt reached, and refuses to guess when the file changed.
func TestWriteFileAppendRetriedAfterALostAttempt(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	target := filepath.Join(root, "log.txt")
	require.NoError(t, os.WriteFile(target, []byte("old\n"), 0o644))
	intent := func(callID string, offset int64) {
		sum := sha256.Sum256([]byte(callID + "\x00log.txt"))
		require.NoError(t, os.MkdirAll(filepath.Join(root, MarkerDir), 0o755))
		b, _ := json.Marshal(writeMarker{CallID: callID, Path: "log.txt", BytesWritten: 4, Offset: offset})
		require.NoError(t, os.WriteFile(filepath.Join(root, MarkerDir, hex.EncodeToString(sum[:])), b, 0o644))
	}
	args := map[string]any{"path": "log.txt", "content": "new\n", "append": true}
	read := func() string {
		b, err := os.ReadFile(target)
		require.NoError(t, err)
		return string(b)
	}

	intent("lost-before-append", 4) // the attempt died before it appended
	out, err := run(t, ws, WriteFileTool, "lost-before-append", args)
	require.NoError(t, err)
	assert.False(t, decode[writeOutput](t, out).AlreadyApplied)
	assert.Equal(t, "old\nnew\n", read(), "appended once")

	intent("lost-after-append", 4) // it appended, then died before saying so
	out, err = run(t, ws, WriteFileTool, "lost-after-append", args)
	require.NoError(t, err)
	assert.True(t, decode[writeOutput](t, out).AlreadyApplied)
	assert.Equal(t, "old\nnew\n", read(), "not appended twice")

	intent("file-changed", 1) // the file is no longer what the attempt saw
	_, err = run(t, ws, WriteFileTool, "file-changed", args)
	var unknown *tool.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown)
	assert.Contains(t, err.Error(), "has changed since")
	assert.Equal(t, "old\nnew\n", read(), "nothing appended on a guess")
}

func TestWriteFileAppendIdempotent(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	target := filepath.Join(root, "log", "out.txt")
	appendArgs := map[string]any{"path": "log/out.txt", "content": "line\n", "append": true}

	out, err := run(t, ws, WriteFileTool, "call-1", appendArgs)
	require.NoError(t, err)
	assert.Equal(t, writeOutput{Path: "log/out.txt", BytesWritten: 5}, decode[writeOutput](t, out))

	// The same call again (a retry or a replay) does not append twice.
	out, err = run(t, ws, WriteFileTool, "call-1", appendArgs)
	require.NoError(t, err)
	assert.Equal(t, writeOutput{Path: "log/out.txt", BytesWritten: 5, AlreadyApplied: true}, decode[writeOutput](t, out))
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "line\n", string(b))

	// Another call appends.
	_, err = run(t, ws, WriteFileTool, "call-2", appendArgs)
	require.NoError(t, err)
	b, err = os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "line\nline\n", string(b))

	// The same call ID on another path is another write.
	_, err = run(t, ws, WriteFileTool, "call-1", map[string]any{"path": "other.txt", "content": "x", "append": true})
	require.NoError(t, err)
	b, err = os.ReadFile(filepath.Join(root, "other.txt"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(b))

	// An overwrite repeated leaves the same file.
	for range 2 {
		_, err = run(t, ws, WriteFileTool, "call-3", map[string]any{"path": "log/out.txt", "content": "fresh"})
		require.NoError(t, err)
	}
	b, err = os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "fresh", string(b))
}

func TestWriteFileErrors(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	require.NoError(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "new.txt"), filepath.Join(root, "dangling")))

	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{name: "dot dot", args: map[string]any{"path": "../outside/x.txt", "content": "x"}, want: "outside the workspace"},
		{name: "absolute outside", args: map[string]any{"path": filepath.Join(outside, "x.txt"), "content": "x"}, want: "outside the workspace"},
		{name: "through symlink", args: map[string]any{"path": "escape/x.txt", "content": "x"}, want: "outside the workspace"},
		{name: "dangling symlink append", args: map[string]any{"path": "dangling", "content": "x", "append": true}, want: "outside the workspace"},
		{name: "directory", args: map[string]any{"path": "dir", "content": "x"}, want: "is a directory"},
		{name: "marker dir", args: map[string]any{"path": MarkerDir + "/abc", "content": "x"}, want: "reserved"},
		{name: "missing content", args: map[string]any{"path": "a.txt"}, want: "content is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, ws, WriteFileTool, "w", tc.args)
			require.ErrorContains(t, err, tc.want)
			requirePermanent(t, err)
		})
	}
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing was written outside")
}

func TestShell(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "here.txt"), nil, 0o644))

	tests := []struct {
		name string
		args map[string]any
		want shellOutput
	}{
		{
			name: "echo",
			args: map[string]any{"command": "echo hello"},
			want: shellOutput{Stdout: "hello\n"},
		},
		{
			name: "runs in the workspace root",
			args: map[string]any{"command": "ls; echo \"$HOME\" | grep -c ws"},
			want: shellOutput{Stdout: "here.txt\n1\n"},
		},
		{
			name: "non-zero exit is output",
			args: map[string]any{"command": "echo oops >&2; exit 3"},
			want: shellOutput{ExitCode: 3, Stderr: "oops\n"},
		},
		{
			name: "timeout kills the group",
			args: map[string]any{"command": "echo started; sleep 60; echo never", "timeout_seconds": 1},
			want: shellOutput{ExitCode: 128 + 9, Stdout: "started\n", TimedOut: true},
		},
		{
			name: "background leftovers do not hold the call",
			args: map[string]any{"command": "sleep 60 & echo started"},
			want: shellOutput{Stdout: "started\n"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The test deadline is below the commands' sleeps: a call that
			// waited for them would fail here instead of passing.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := runCtx(t, ctx, ws, ShellTool, "sh", tc.args)
			require.NoError(t, err)
			assert.Equal(t, tc.want, decode[shellOutput](t, out))
		})
	}
}

func TestShellKillsLeftovers(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	out, err := run(t, ws, ShellTool, "sh", map[string]any{"command": "sleep 60 & echo $! > bg.pid"})
	require.NoError(t, err)
	assert.Equal(t, shellOutput{}, decode[shellOutput](t, out))
	b, err := os.ReadFile(filepath.Join(root, "bg.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true // gone and reaped
		}
		// After ") " comes the state; Z is dead but not yet reaped.
		_, rest, _ := strings.Cut(string(stat), ") ")
		return strings.HasPrefix(rest, "Z")
	}, 5*time.Second, 10*time.Millisecond, "background process %d still runs", pid)
}

func TestShellEscapedProcessDoesNotHoldTheCall(t *testing.T) {
	_, err := exec.LookPath("setsid")
	require.NoError(t, err, "setsid (Debian's util-linux) is needed to leave the process group")
	ws, root, _ := newWorkspace(t)
	// The child leaves the process group (setsid), so the group kill misses
	// it, and keeps stdout open; the call gives up on the pipe after
	// drainGrace. The shell waits until the child has left the group.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := `setsid sh -c 'echo $$ > esc.pid; exec sleep 10' & while [ ! -s esc.pid ]; do :; done; echo started`
	out, err := runCtx(t, ctx, ws, ShellTool, "sh", map[string]any{"command": cmd})
	b, rerr := os.ReadFile(filepath.Join(root, "esc.pid"))
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); rerr == nil && perr == nil {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	require.NoError(t, err)
	assert.Equal(t, shellOutput{Stdout: "started\n"}, decode[shellOutput](t, out))
}

func TestShellOutputCap(t *testing.T) {
	ws, _, _ := newWorkspace(t)
	out, err := run(t, ws, ShellTool, "sh", map[string]any{"command": "yes abc | head -c 200000; yes err | head -c 10 >&2"})
	require.NoError(t, err)
	s := decode[shellOutput](t, out)
	assert.True(t, s.Truncated)
	assert.Len(t, s.Stdout, MaxShellOutput)
	assert.Equal(t, "err\nerr\ner", s.Stderr)
	assert.Equal(t, 0, s.ExitCode)
}

func TestShellCancel(t *testing.T) {
	ws, _, _ := newWorkspace(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	_, err := runCtx(t, ctx, ws, ShellTool, "sh", map[string]any{"command": "sleep 60"})
	require.ErrorIs(t, err, context.Canceled)
}

func TestShellErrors(t *testing.T) {
	ws, _, _ := newWorkspace(t)
	for _, args := range []map[string]any{
		{"command": "true", "timeout_seconds": 601},
		{"command": ""},
		{"command": "true", "cwd": "/"},
	} {
		_, err := run(t, ws, ShellTool, "sh", args)
		require.Error(t, err, args)
		requirePermanent(t, err)
	}
	_, err := run(t, Workspace{Root: "/does/not/exist"}, ShellTool, "sh", map[string]any{"command": "true"})
	require.Error(t, err)
}

func TestSchemas(t *testing.T) {
	ws, _, _ := newWorkspace(t)
	reg := tool.NewRegistry()
	for _, tl := range Tools(ws) {
		require.NoError(t, reg.Register(tl), tl.Name)
		assert.NotEmpty(t, tl.Description, tl.Name)
	}
	assert.Equal(t, []string{EchoTool, ListDirTool, ReadFileTool, ShellTool, WriteFileTool}, reg.Names())
	sh, _ := reg.Lookup(ShellTool)
	assert.False(t, sh.Options.Idempotent, "a shell command may have any effect: never run twice")
	wf, _ := reg.Lookup(WriteFileTool)
	assert.True(t, wf.Options.Idempotent, "write_file is idempotent by call ID: retried")
	assert.Greater(t, sh.Options.Timeout, MaxShellTimeout, "the command timeout fires before the attempt's")

	tests := []struct {
		tool  string
		args  string
		field string // empty: valid
	}{
		{tool: EchoTool, args: `{"anything":[1,2]}`},
		{tool: EchoTool, args: `[1]`, field: "/"},
		{tool: ReadFileTool, args: `{"path":"a.txt"}`},
		{tool: ReadFileTool, args: `{"path":"a.txt","max_bytes":10}`},
		{tool: ReadFileTool, args: `{}`, field: "path"},
		{tool: ReadFileTool, args: `{"path":"a.txt","extra":1}`, field: "extra"},
		{tool: ReadFileTool, args: `{"path":"a.txt","max_bytes":0}`, field: "max_bytes"},
		{tool: ReadFileTool, args: `{"path":""}`, field: "path"},
		{tool: ListDirTool, args: `{}`},
		{tool: ListDirTool, args: `{"path":"sub"}`},
		{tool: ListDirTool, args: `{"recursive":true}`, field: "recursive"},
		{tool: WriteFileTool, args: `{"path":"a.txt","content":""}`},
		{tool: WriteFileTool, args: `{"path":"a.txt","content":"x","append":true}`},
		{tool: WriteFileTool, args: `{"content":"x"}`, field: "path"},
		{tool: WriteFileTool, args: `{"path":"a.txt"}`, field: "content"},
		{tool: WriteFileTool, args: `{"path":"a.txt","content":"x","mode":"0777"}`, field: "mode"},
		{tool: WriteFileTool, args: `{"path":"a.txt","content":"x","append":"yes"}`, field: "append"},
		{tool: ShellTool, args: `{"command":"ls"}`},
		{tool: ShellTool, args: `{"command":"ls","timeout_seconds":600}`},
		{tool: ShellTool, args: `{}`, field: "command"},
		{tool: ShellTool, args: `{"command":"ls","timeout_seconds":601}`, field: "timeout_seconds"},
		{tool: ShellTool, args: `{"command":"ls","env":{}}`, field: "env"},
	}
	for _, tc := range tests {
		t.Run(tc.tool+" "+tc.args, func(t *testing.T) {
			err := reg.Validate(tc.tool, json.RawMessage(tc.args))
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var ae *tool.ArgumentError
			require.ErrorAs(t, err, &ae)
			assert.Contains(t, ae.Problem, tc.field)
		})
	}
}

func TestDefaultPolicy(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape")))
	p := DefaultPolicy(ws)
	assert.Equal(t, "builtin-default/2", policy.VersionOf(p), "version 2 judges agent-executed and annotated tools")

	tests := []struct {
		name     string
		tool     string
		args     string
		rule     string   // empty: approved without asking
		contains []string // in the ApprovalRequest message
		denied   bool
	}{
		{name: "echo", tool: EchoTool, args: `{"x":1}`},
		{name: "read_file", tool: ReadFileTool, args: `{"path":"a.txt"}`},
		{name: "list_dir", tool: ListDirTool, args: `{}`},
		{name: "write_file asks", tool: WriteFileTool, args: `{"path":"notes/a.txt","content":"hello"}`,
			rule: RuleWriteFile, contains: []string{`"notes/a.txt"`, "5 bytes"}},
		{name: "write_file append asks", tool: WriteFileTool, args: `{"path":"a.txt","content":"hi","append":true}`,
			rule: RuleWriteFile, contains: []string{`"a.txt"`, "2 bytes", "Append"}},
		{name: "write_file dot dot", tool: WriteFileTool, args: `{"path":"../x","content":"x"}`, rule: RuleWriteFile, denied: true},
		{name: "write_file absolute outside", tool: WriteFileTool, args: `{"path":"/etc/passwd","content":"x"}`, rule: RuleWriteFile, denied: true},
		{name: "write_file symlink escape", tool: WriteFileTool, args: `{"path":"escape/x","content":"x"}`, rule: RuleWriteFile, denied: true},
		{name: "shell asks", tool: ShellTool, args: `{"command":"rm -rf build"}`,
			rule: RuleShell, contains: []string{`"rm -rf build"`}},
		{name: "unknown tool asks", tool: "deploy", args: `{}`,
			rule: RuleUnknownTool, contains: []string{`"deploy"`, "No rule matched"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			call := policy.Call{ID: "c1", Session: "s1", Tool: tc.tool, Args: json.RawMessage(tc.args)}
			req, err := p.EvaluateApproval(context.Background(), call)
			switch {
			case tc.denied:
				deny, ok := policy.AsDeny(err)
				require.True(t, ok, "want a denial, got %v", err)
				assert.Nil(t, req)
				assert.Contains(t, deny.Reason, "outside the workspace")
				assert.Equal(t, tc.rule, deny.Rule)
			case tc.rule == "":
				require.NoError(t, err)
				assert.Nil(t, req)
			default:
				require.NoError(t, err)
				require.NotNil(t, req)
				assert.Equal(t, tc.rule, req.Rule)
				for _, s := range tc.contains {
					assert.Contains(t, req.Message, s)
				}
			}
		})
	}

	require.NoError(t, p.BeforeCall(context.Background(), policy.Call{Tool: ShellTool}))
	require.NoError(t, p.AfterCall(context.Background(), policy.Call{Tool: ShellTool}, json.RawMessage(`{}`)))
	_, err := p.EvaluateApproval(context.Background(), policy.Call{Tool: WriteFileTool, Args: json.RawMessage(`[`)})
	_, denied := policy.AsDeny(err)
	assert.True(t, denied, "malformed arguments are refused, got %v", err)
}

// TestDefaultPolicyAgentAndAnnotatedTools: agent-executed calls ask
// whatever their tool's name; registered tools are judged by their hints;
// the built-in tools keep their rules whatever hints they carry.
func TestDefaultPolicyAgentAndAnnotatedTools(t *testing.T) {
	ws, _, _ := newWorkspace(t)
	p := DefaultPolicy(ws)
	agent := policy.ExecutionAgent
	tests := []struct {
		name        string
		tool        string
		execution   policy.Execution
		annotations map[string]any
		rule        string   // empty: approved without asking
		contains    []string // in the ApprovalRequest message
	}{
		{name: "an unknown agent-executed tool asks", tool: "deploy", execution: agent,
			rule: RuleUnknownTool, contains: []string{`its own tool "deploy"`, `{"x":1}`}},
		{name: "an agent-executed echo is not toolgate's", tool: EchoTool, execution: agent,
			rule: RuleUnknownTool, contains: []string{`its own tool "echo"`}},
		{name: "an agent-executed read_file asks", tool: ReadFileTool, execution: agent, rule: RuleUnknownTool},
		{name: "hints of an agent-executed call do not count", tool: "github__get_issue", execution: agent,
			annotations: map[string]any{"readOnlyHint": true}, rule: RuleUnknownTool},
		{name: "a read-only registered tool runs", tool: "github__get_issue",
			annotations: map[string]any{"readOnlyHint": true}},
		{name: "read-only and not destructive runs", tool: "github__get_issue",
			annotations: map[string]any{"readOnlyHint": true, "destructiveHint": false, "title": "Get issue"}},
		{name: "read-only but destructive asks", tool: "github__purge_cache",
			annotations: map[string]any{"readOnlyHint": true, "destructiveHint": true},
			rule:        RuleAnnotatedTool, contains: []string{`"github__purge_cache"`, "may be destructive"}},
		{name: "not read-only asks", tool: "github__create_issue",
			annotations: map[string]any{"readOnlyHint": false, "title": "Create issue"},
			rule:        RuleAnnotatedTool, contains: []string{`"github__create_issue" (Create issue)`, "not marked read-only", `{"x":1}`}},
		{name: "hints without readOnlyHint ask", tool: "github__update_issue",
			annotations: map[string]any{"idempotentHint": true}, rule: RuleAnnotatedTool},
		{name: "a readOnlyHint that is not a boolean asks", tool: "x",
			annotations: map[string]any{"readOnlyHint": "true"}, rule: RuleAnnotatedTool},
		{name: "empty annotations ask", tool: "x", annotations: map[string]any{}, rule: RuleAnnotatedTool},
		{name: "a built-in tool keeps its rule whatever its hints", tool: ShellTool,
			annotations: map[string]any{"readOnlyHint": true}, rule: RuleShell},
		{name: "echo keeps running", tool: EchoTool, annotations: map[string]any{"readOnlyHint": false}},
		{name: "a registered tool without hints asks as before", tool: "deploy",
			rule: RuleUnknownTool, contains: []string{"No rule matched"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			call := policy.Call{ID: "c1", Session: "s1", Tool: tc.tool, Args: json.RawMessage(`{"x": 1}`),
				Execution: tc.execution, Annotations: tc.annotations}
			req, err := p.EvaluateApproval(context.Background(), call)
			require.NoError(t, err)
			if tc.rule == "" {
				assert.Nil(t, req)
				return
			}
			require.NotNil(t, req)
			assert.Equal(t, tc.rule, req.Rule)
			for _, s := range tc.contains {
				assert.Contains(t, req.Message, s)
			}
		})
	}
}

// TestFileToolsSymlinkSwapRace runs the file tools while a process in the
// workspace keeps swapping one of its directories with a symlink to a
// directory outside (renameat2 RENAME_EXCHANGE, so the name always exists).
// A call may fail, but it never reads, lists or writes outside.
func TestFileToolsSymlinkSwapRace(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	swapRace(t, ws, root, outside, 1000)
}

// TestGuardSwapRace is TestFileToolsSymlinkSwapRace with the symlink
// leading to a protected directory inside the workspace, and the policy's
// path check as the tools' Guard: the tools never act on the protected
// directory, which the policy could not see when it judged the call.
func TestGuardSwapRace(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	protected := filepath.Join(root, ".git")
	require.NoError(t, os.Mkdir(protected, 0o755))
	pol, err := rules.Parse("policy.yaml", []byte("guards:\n  protected_paths: [.git/**]\n"), rules.Options{Workspace: root})
	require.NoError(t, err)
	ws.Guard = pol.CheckPath
	swapRace(t, ws, root, protected, 300)
}

// swapRace runs read_file, list_dir and write_file tries times each on
// d/..., while d keeps trading places with a symlink to target, and checks
// that none of them reached target. It creates d, and files f and
// target-only in target.
func swapRace(t *testing.T, ws Workspace, root, target string, tries int) {
	dir := filepath.Join(root, "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("inside"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(target, "f"), []byte("secret"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(target, "target-only"), nil, 0o644))
	// A relative link: os.Root refuses absolute ones outright.
	rel, err := filepath.Rel(root, target)
	require.NoError(t, err)
	link := filepath.Join(root, "swap")
	require.NoError(t, os.Symlink(rel, link))

	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() {
		close(stop)
		<-stopped
	}()

	t.Run("read_file", func(t *testing.T) {
		escapes := 0
		for range tries {
			out, err := run(t, ws, ReadFileTool, "r", map[string]any{"path": "d/f"})
			if err == nil && decode[readOutput](t, out).Content != "inside" {
				escapes++
			}
		}
		assert.Zero(t, escapes, "reads of the target in %d tries", tries)
	})
	t.Run("list_dir", func(t *testing.T) {
		escapes := 0
		for range tries {
			out, err := run(t, ws, ListDirTool, "l", map[string]any{"path": "d"})
			if err == nil && strings.Contains(string(out), "target-only") {
				escapes++
			}
		}
		assert.Zero(t, escapes, "listings of the target in %d tries", tries)
	})
	t.Run("write_file", func(t *testing.T) {
		for i := range tries {
			_, _ = run(t, ws, WriteFileTool, fmt.Sprint("w", i), map[string]any{
				"path": fmt.Sprintf("d/new-%d.txt", i), "content": "x", "append": i%2 == 1,
			})
		}
		entries, err := os.ReadDir(target)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		assert.Equal(t, []string{"f", "target-only"}, names, "files created in the target")
	})
}

// TestGuard: the tools ask Guard (here the policy file's check, as the
// worker wires it) about where the file they opened really is, so a
// symlink in the workspace cannot lead them to a protected path.
func TestGuard(t *testing.T) {
	ws, root, _ := newWorkspace(t)
	require.NoError(t, os.Mkdir(filepath.Join(root, ".git"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, ".git", "config"), []byte("secret"), 0o644))
	require.NoError(t, os.Symlink(".git", filepath.Join(root, "innocent")))
	pol, err := rules.Parse("policy.yaml", []byte("guards:\n  protected_paths: [.git/**]\n"), rules.Options{Workspace: root})
	require.NoError(t, err)
	ws.Guard = pol.CheckPath

	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{ReadFileTool, map[string]any{"path": "innocent/config"}, `read "innocent/config": path ".git/config" is protected (.git/**)`},
		{ListDirTool, map[string]any{"path": "innocent"}, `list "innocent": path ".git" is protected (.git/**)`},
		{WriteFileTool, map[string]any{"path": "innocent/hooks/pre-commit", "content": "x"}, `write "innocent/hooks/pre-commit": path ".git/hooks/pre-commit" is protected (.git/**)`},
		{WriteFileTool, map[string]any{"path": "innocent/config", "content": "x", "append": true}, `write "innocent/config": path ".git/config" is protected (.git/**)`},
	}
	for _, tc := range tests {
		_, err := run(t, ws, tc.tool, "g", tc.args)
		assert.EqualError(t, err, tc.want)
		requirePermanent(t, err)
	}
	b, err := os.ReadFile(filepath.Join(root, ".git", "config"))
	require.NoError(t, err)
	assert.Equal(t, "secret", string(b))
	_, err = os.Stat(filepath.Join(root, ".git", "hooks"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no directory was created either")

	_, err = run(t, ws, WriteFileTool, "g", map[string]any{"path": "notes.txt", "content": "x"})
	require.NoError(t, err, "other paths are fine")
}

// TestWriteFileRefusesHardLinks: a hard link in the workspace to a file
// outside is not written through, by append or by replacement.
func TestWriteFileRefusesHardLinks(t *testing.T) {
	ws, root, outside := newWorkspace(t)
	secret := filepath.Join(outside, "passwd")
	require.NoError(t, os.WriteFile(secret, []byte("original\n"), 0o644))
	require.NoError(t, os.Link(secret, filepath.Join(root, "linked")))

	for _, appendMode := range []bool{true, false} {
		_, err := run(t, ws, WriteFileTool, fmt.Sprint("w-", appendMode), map[string]any{"path": "linked", "content": "evil\n", "append": appendMode})
		require.Error(t, err, "append %v", appendMode)
		assert.ErrorContains(t, err, `"linked"`)
		assert.ErrorContains(t, err, "2 hard links")
		requirePermanent(t, err)
	}
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "original\n", string(b), "the outside file is unchanged")
	b, err = os.ReadFile(filepath.Join(root, "linked"))
	require.NoError(t, err)
	assert.Equal(t, "original\n", string(b), "the link is not replaced either")
}

// shellHelperEnv makes this test binary run shellHelper instead of the
// tests: TestShellDiesWithWorker's stand-in for a worker.
const shellHelperEnv = "TOOLGATE_TEST_SHELL_HELPER_WORKSPACE"

// TestMain runs the shell helper when shellHelperEnv names a workspace,
// and the tests otherwise.
func TestMain(m *testing.M) {
	sandbox.Enter() // the test binary plays toolgate's for the shell's sandbox
	if root := os.Getenv(shellHelperEnv); root != "" {
		shellHelper(root)
		return
	}
	code := m.Run()
	CloseSandboxes() // as the worker does when it stops: no temporary roots left behind
	os.Exit(code)
}

// shellHelper runs a shell call whose command leaves a grandchild running
// (sleep, its pid in sleep.pid) and waits for it; it is killed meanwhile.
func shellHelper(root string) {
	for _, tl := range Tools(Workspace{Root: root}) {
		if tl.Name == ShellTool {
			args := json.RawMessage(`{"command":"sleep 60 & echo $! > sleep.pid; wait","timeout_seconds":120}`)
			_, err := tl.Run(context.Background(), tool.Input{CallID: "helper", Session: "s1", Args: args})
			fmt.Fprintln(os.Stderr, "shell helper: the call returned before it was killed:", err)
		}
	}
	os.Exit(1)
}

// TestShellDiesWithWorker kills (SIGKILL) a process running a shell call:
// the command's processes die with it instead of running on.
func TestShellDiesWithWorker(t *testing.T) {
	_, root, _ := newWorkspace(t)
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), shellHelperEnv+"="+root)
	helper.Stderr = os.Stderr
	require.NoError(t, helper.Start())
	t.Cleanup(func() {
		_ = helper.Process.Kill()
		_ = helper.Wait()
	})

	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(root, "sleep.pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the helper's command did not start")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails

	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 10*time.Millisecond,
		"the command's process %d outlived the worker", pid)
}

// processGone reports whether pid is gone or dead (a zombie not yet
// reaped).
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// After ") " comes the state; Z is dead but not yet reaped.
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

// runRaw runs the named built-in tool with raw JSON arguments.
func runRaw(t *testing.T, ws Workspace, name, args string) (json.RawMessage, error) {
	t.Helper()
	for _, tl := range Tools(ws) {
		if tl.Name == name {
			return tl.Run(context.Background(), tool.Input{CallID: "raw", Session: "s1", Args: json.RawMessage(args)})
		}
	}
	t.Fatalf("no tool %q", name)
	return nil, nil
}

// TestArgumentErrorsInUserTerms: arguments of the wrong shape are refused
// in JSON's terms, never with Go's type names.
func TestArgumentErrorsInUserTerms(t *testing.T) {
	ws, _, _ := newWorkspace(t)
	tests := []struct{ tool, args, want string }{
		{ReadFileTool, `[1]`, "decode arguments: the arguments must be a JSON object, not an array"},
		{ReadFileTool, `"a.txt"`, "decode arguments: the arguments must be a JSON object, not a string"},
		{ReadFileTool, `{"path":5}`, `decode arguments: argument "path" must be a string, not a number`},
		{ReadFileTool, `{"path":"a","max_bytes":1.5}`, `decode arguments: argument "max_bytes" must be a whole number, not 1.5`},
		{WriteFileTool, `{"path":"a","content":"x","append":"yes"}`, `decode arguments: argument "append" must be true or false, not a string`},
		{ShellTool, `{"command":["ls"]}`, `decode arguments: argument "command" must be a string, not an array`},
		{ReadFileTool, `{"path":"a","x":1}`, `decode arguments: unknown field "x"`},
	}
	for _, tc := range tests {
		_, err := runRaw(t, ws, tc.tool, tc.args)
		assert.EqualError(t, err, tc.want, "%s %s", tc.tool, tc.args)
		requirePermanent(t, err)
	}

	p := DefaultPolicy(ws)
	for _, name := range []string{WriteFileTool, ShellTool} {
		_, err := p.EvaluateApproval(context.Background(), policy.Call{Tool: name, Args: json.RawMessage(`[1]`)})
		deny, ok := policy.AsDeny(err)
		require.True(t, ok, "want a denial, got %v", err)
		assert.Equal(t, name+" arguments are not valid: the arguments must be a JSON object, not an array", deny.Reason)
	}
}
