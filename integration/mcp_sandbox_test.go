package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/sandbox"
)

// toolgate dev's MCP stdio servers run in the Landlock sandbox: they read
// and write their roots, and dev's keys (keys.json, beside the workspace
// in the data dir) are out of their reach. Two servers are asked for
// them: the reference filesystem server from npm, and a Go server
// (testdata/mcp-reader) that reads whatever path it is given.

// mcpReader builds testdata/mcp-reader into a directory of its own.
func mcpReader(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-reader")
	build := exec.Command("go", "build", "-o", bin, "./testdata/mcp-reader")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build mcp-reader: %s", out)
	return bin
}

// mcpSandboxServers is an MCP servers file, in a directory of its own,
// with servers (command and args; roots for those that have them).
func mcpSandboxServers(t *testing.T, servers map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"mcpServers": servers})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	return file
}

// mcpSandboxDev starts toolgate dev whose workspace holds notes.txt and
// link, a symlink to ../keys.json (dev's keys), with the MCP servers
// servers(dataDir, workspace) and flags.
func mcpSandboxDev(t *testing.T, servers func(dataDir, workspace string) map[string]any, flags ...string) *devEnv {
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	require.NoError(t, os.MkdirAll(d.workspace, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d.workspace, "notes.txt"), []byte("from the workspace"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join("..", "keys.json"), filepath.Join(d.workspace, "link")))
	file := mcpSandboxServers(t, servers(d.dataDir, d.workspace))
	d.dev = start(t, devReady, append([]string{"dev", "--data-dir", d.dataDir, "--temporal-port", strconv.Itoa(d.port),
		"--http", d.httpAddr, "--mcp", file}, flags...)...)
	return d
}

// keySecrets are the key material of dev's keys.json: its strings of 16
// characters or more.
func keySecrets(t *testing.T, d *devEnv) []string {
	t.Helper()
	b, err := os.ReadFile(d.keysFile())
	require.NoError(t, err)
	var doc any
	require.NoError(t, json.Unmarshal(b, &doc))
	var secrets []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if len(v) >= 16 {
				secrets = append(secrets, v)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	require.NotEmpty(t, secrets, "keys.json holds key material: %s", b)
	return secrets
}

// mcpRead calls tool (a server's read_file or read_text_file) for path
// and returns the call's JSON answer as text; wantCode is toolgate call's
// exit code (0: ok, 4: the tool failed).
func mcpRead(t *testing.T, d *devEnv, wantCode int, tool, path string) string {
	t.Helper()
	args, err := json.Marshal(map[string]string{"path": path})
	require.NoError(t, err)
	out := d.in(t).callJSON(wantCode, "--session", "mcp-sandbox", tool, string(args))
	b, err := json.Marshal(out)
	require.NoError(t, err)
	return string(b)
}

// noSecret asserts that none of dev's key material is in out.
func noSecret(t *testing.T, secrets []string, out, what string) {
	t.Helper()
	for _, s := range secrets {
		assert.NotContains(t, out, s, "%s leaked dev's keys", what)
	}
}

func TestMCPSandboxKeepsDevsKeysFromStdioServers(t *testing.T) {
	require.NotZero(t, sandbox.ABI(), "this machine's kernel offers Landlock")
	reader := mcpReader(t)
	filesystem := npmFile(t, "@modelcontextprotocol/server-filesystem/dist/index.js")
	node, err := exec.LookPath("node")
	require.NoError(t, err, "this test needs node (scripts/test installs it)")
	servers := func(dataDir, workspace string) map[string]any {
		return map[string]any{
			// The workspace as their root: all the sandbox opens them.
			"reader": map[string]any{"command": reader, "toolgate": map[string]any{"roots": []string{workspace}}},
			"files":  map[string]any{"command": node, "args": []string{filesystem}, "toolgate": map[string]any{"roots": []string{workspace}}},
			// The filesystem server told it may read the whole data dir:
			// only the kernel stands between it and the keys.
			"wide": map[string]any{"command": node, "args": []string{filesystem, dataDir}},
		}
	}

	t.Run("unsandboxed, the servers read dev's keys: the control", func(t *testing.T) {
		d := mcpSandboxDev(t, servers, "--unsandboxed-tools")
		secrets := keySecrets(t, d)
		for _, tool := range []string{"reader__read_file", "wide__read_text_file"} {
			out := mcpRead(t, d, 0, tool, d.keysFile())
			assert.Contains(t, out, secrets[0], "%s leaks unconfined: the test can fail", tool)
		}
		d.dev.stop()
	})

	d := mcpSandboxDev(t, servers)
	secrets := keySecrets(t, d)
	keys := d.keysFile()
	escapes := map[string]string{"by absolute path": keys, "by ../keys.json": d.workspace + "/../keys.json", "by a symlink in the root": filepath.Join(d.workspace, "link")}

	t.Run("the servers read their root", func(t *testing.T) {
		for _, tool := range []string{"reader__read_file", "files__read_text_file"} {
			assert.Contains(t, mcpRead(t, d, 0, tool, filepath.Join(d.workspace, "notes.txt")), "from the workspace", tool)
		}
	})

	t.Run("the Go server, which checks nothing, is refused by the kernel", func(t *testing.T) {
		for how, path := range escapes {
			out := mcpRead(t, d, 4, "reader__read_file", path)
			assert.Contains(t, out, "permission denied", how)
			noSecret(t, secrets, out, "reader "+how)
		}
	})

	t.Run("the filesystem server allowed the data dir is refused by the kernel", func(t *testing.T) {
		out := mcpRead(t, d, 4, "wide__read_text_file", keys)
		assert.Contains(t, out, "EACCES", "the server let it through; the kernel did not")
		noSecret(t, secrets, out, "wide")
	})

	t.Run("the filesystem server with the workspace as root leaks nothing", func(t *testing.T) {
		for how, path := range escapes {
			for _, tool := range []string{"files__read_text_file", "files__read_file"} {
				out := mcpRead(t, d, 4, tool, path)
				noSecret(t, secrets, out, tool+" "+how)
			}
		}
	})
}

// devFails runs toolgate dev with the MCP servers file and env added,
// which must fail; it returns its output.
func devFails(t *testing.T, dataDir, mcpFile string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "dev", "--data-dir", dataDir, "--temporal-port", fmt.Sprint(freePort(t)),
		"--http", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--mcp", mcpFile)
	cmd.Env = append(append(os.Environ(), "TEMPORAL_ADDRESS=", "TEMPORAL_NAMESPACE="), env...)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "toolgate dev must not start: %s", out)
	return string(out)
}

func TestMCPSandboxRefusesAServerWhoseRootOverlapsDevsFiles(t *testing.T) {
	reader := mcpReader(t)
	dataDir := t.TempDir()
	file := mcpSandboxServers(t, map[string]any{
		"leaky": map[string]any{"command": reader, "toolgate": map[string]any{"roots": []string{dataDir}}},
	})
	out := devFails(t, dataDir, file)
	assert.Contains(t, out, `MCP server "leaky": root `+dataDir+` overlaps toolgate's own files`)
}

func TestMCPSandboxWithoutLandlockAStdioServerStopsTheWorker(t *testing.T) {
	reader := mcpReader(t)
	dataDir := t.TempDir()
	workspace := filepath.Join(dataDir, "workspace")
	file := mcpSandboxServers(t, map[string]any{
		"reader": map[string]any{"command": reader, "toolgate": map[string]any{"roots": []string{workspace}}},
	})
	out := devFails(t, dataDir, file, sandbox.NoLandlockVar+"=1")
	assert.Contains(t, out, `MCP server "reader": this kernel offers no Landlock`)
	assert.True(t, strings.Contains(out, "--unsandboxed-tools"), "the reason says how to run it unconfined: %s", out)
}
