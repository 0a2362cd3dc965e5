package mcpgate_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/mcpgate/mcptest"
	"github.com/toolgate/toolgate/sandbox"
	"github.com/toolgate/toolgate/tool"
)

const secret = "PRIVATE+KEY+toolgate/dev+sk-7e1b0a"

// dataDir is a toolgate data dir with its keys.json, and a workspace in
// it, as toolgate dev lays them out.
func dataDir(t *testing.T) (keys, workspace string) {
	t.Helper()
	data := t.TempDir()
	keys = filepath.Join(data, "keys.json")
	require.NoError(t, os.WriteFile(keys, []byte(`{"key":"`+secret+`"}`), 0o600))
	workspace = filepath.Join(data, "workspace")
	require.NoError(t, os.Mkdir(workspace, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "notes.txt"), []byte("from the workspace"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join("..", "keys.json"), filepath.Join(workspace, "link")))
	return keys, workspace
}

// readerServer is mcptest's reader (this test binary) with roots.
func readerServer(t *testing.T, roots ...string) mcpgate.UpstreamServer {
	s := stdioServer(t)
	s.Name = "reader"
	s.Env = map[string]string{mcptest.EnvStdio: mcptest.StdioReader}
	s.Roots = roots
	return s
}

// startReader starts s and returns its tools.
func startReader(t *testing.T, o mcpgate.UpstreamOptions, s mcpgate.UpstreamServer) map[string]tool.Tool {
	t.Helper()
	_, reg := startPinned(t, newMemPins(), o, s)
	tools := map[string]tool.Tool{}
	for _, name := range []string{"reader__" + mcptest.ReadFile, "reader__" + mcptest.Crash} {
		tt, ok := reg.Lookup(name)
		require.True(t, ok, name)
		tools[name] = tt
	}
	return tools
}

// read asks the reader for path: the file's text, or the reason it could
// not read it.
func read(t *testing.T, tools map[string]tool.Tool, path string) (string, error) {
	t.Helper()
	b, err := json.Marshal(map[string]string{"path": path})
	require.NoError(t, err)
	out, err := run(t, tools["reader__"+mcptest.ReadFile], string(b))
	return string(out), err
}

func TestASandboxedStdioUpstreamReachesItsRootsAndNotToolgatesFiles(t *testing.T) {
	require.NotZero(t, sandbox.ABI(), "this machine's kernel offers Landlock")
	keys, workspace := dataDir(t)
	elsewhere := filepath.Join(t.TempDir(), "elsewhere.txt")
	require.NoError(t, os.WriteFile(elsewhere, []byte(secret), 0o600))
	escapes := map[string]string{
		"keys.json by absolute path": keys,
		"keys.json by ../keys.json":  workspace + "/../keys.json",
		"keys.json by a symlink":     filepath.Join(workspace, "link"),
		"a file in the worker's tmp": elsewhere, // its TMPDIR is its own
	}

	// The control: unconfined, the same server leaks the keys.
	open := startReader(t, mcpgate.UpstreamOptions{Unsandboxed: true, Own: []string{keys}}, readerServer(t, workspace))
	out, err := read(t, open, keys)
	require.NoError(t, err)
	assert.Contains(t, out, secret, "the control leaks: the test can fail")

	tools := startReader(t, mcpgate.UpstreamOptions{Own: []string{keys}}, readerServer(t, workspace))
	refused := func(t *testing.T) {
		out, err := read(t, tools, filepath.Join(workspace, "notes.txt"))
		require.NoError(t, err, "the server reads its root")
		assert.Contains(t, out, "from the workspace")
		for how, path := range escapes {
			out, err := read(t, tools, path)
			require.Error(t, err, how)
			assert.Contains(t, err.Error(), "permission denied", "%s: the kernel refuses", how)
			assert.NotContains(t, out+err.Error(), secret, how)
		}
	}
	refused(t)

	t.Run("a restarted server runs in the same sandbox", func(t *testing.T) {
		_, err := run(t, tools["reader__"+mcptest.Crash], `{}`)
		require.Error(t, err)
		require.Eventually(t, func() bool {
			_, err := read(t, tools, filepath.Join(workspace, "notes.txt"))
			return err == nil
		}, 20*time.Second, 100*time.Millisecond, "the server restarts")
		refused(t)
	})
}

func TestAStdioUpstreamWhoseGrantsReachToolgatesFilesIsRefused(t *testing.T) {
	keys, workspace := dataDir(t)
	data := filepath.Dir(keys)
	self, err := os.Executable()
	require.NoError(t, err)
	cases := []struct {
		name string
		edit func(*mcpgate.UpstreamServer)
		own  []string
		want string
	}{
		{"a root that holds them", func(s *mcpgate.UpstreamServer) { s.Roots = []string{data} }, []string{keys},
			`MCP server "reader": root ` + data + ` overlaps toolgate's own files`},
		{"a read grant inside them", func(s *mcpgate.UpstreamServer) { s.Sandbox.Read = []string{workspace} }, []string{data},
			`MCP server "reader": sandbox.read ` + workspace + ` overlaps toolgate's own files`},
		{"a program among them", func(*mcpgate.UpstreamServer) {}, []string{filepath.Dir(self)},
			`MCP server "reader": program directory ` + filepath.Dir(self) + ` overlaps toolgate's own files`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := readerServer(t)
			c.edit(&s)
			_, err := mcpgate.StartUpstreams(context.Background(), &mcpgate.UpstreamConfig{Servers: []mcpgate.UpstreamServer{s}}, mcpgate.UpstreamOptions{Own: c.own})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestWithoutLandlockAStdioUpstreamStartsOnlyUnsandboxed(t *testing.T) {
	t.Setenv(sandbox.NoLandlockVar, "1")
	_, err := mcpgate.StartUpstreams(context.Background(), &mcpgate.UpstreamConfig{Servers: []mcpgate.UpstreamServer{stdioServer(t)}}, mcpgate.UpstreamOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `MCP server "local": this kernel offers no Landlock`)
	assert.Contains(t, err.Error(), "--unsandboxed-tools")

	_, tools := startWith(t, mcpgate.UpstreamOptions{Unsandboxed: true}, stdioServer(t), httpServer(t))
	out, err := run(t, tools["local__lookup"], `{"key":"k"}`)
	require.NoError(t, err, "--unsandboxed-tools: it runs as before")
	assert.Contains(t, string(out), "value of k")
}

func TestAnHTTPUpstreamNeedsNoSandbox(t *testing.T) {
	t.Setenv(sandbox.NoLandlockVar, "1")
	_, tools := startWith(t, mcpgate.UpstreamOptions{}, httpServer(t))
	_, err := run(t, tools["web__lookup"], `{"key":"k"}`)
	require.NoError(t, err, "toolgate starts no process for it")
}
