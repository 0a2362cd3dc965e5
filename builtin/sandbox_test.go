package builtin

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// An approved shell command reaches its workspace, and none of toolgate's
// files beside it: not directly, through a symlink, from a child process,
// nor by searching the disk. Unsandboxed (the control), it does.
func TestAShellCommandCannotReachToolgatesFiles(t *testing.T) {
	data := t.TempDir()
	for name, content := range map[string]string{"keys.json": `{"keys":"aes-secret"}`, "ledger.key": "PRIVATE+KEY+toolgate/dev+x", "tokens.json": `{"approver":"tok-secret"}`} {
		require.NoError(t, os.WriteFile(filepath.Join(data, name), []byte(content), 0o600))
	}
	root := filepath.Join(data, "workspace")
	require.NoError(t, os.Mkdir(root, 0o700))
	require.NoError(t, os.Symlink(filepath.Join(data, "keys.json"), filepath.Join(root, "keys-link")))
	command := "cat ../keys.json ../ledger.key ../tokens.json; cat keys-link; sh -c 'cat ../ledger.key'; " +
		"echo appended >> ../ledger.key; find " + data + " -name keys.json; echo $HOME; git init -q . && echo repo; echo ok > made.txt"

	leaked := func(out string) bool { return anyIn(out, "aes-secret", "PRIVATE+KEY", "tok-secret") }
	control, err := run(t, Workspace{Root: root, Unsandboxed: true}, ShellTool, "c0", map[string]any{"command": command})
	require.NoError(t, err)
	assert.True(t, leaked(string(control)), "the control leaks: the test can fail")
	require.NoError(t, os.WriteFile(filepath.Join(data, "ledger.key"), []byte("PRIVATE+KEY+toolgate/dev+x"), 0o600))
	require.NoError(t, os.RemoveAll(filepath.Join(root, ".git")))

	out, err := run(t, Workspace{Root: root}, ShellTool, "c1", map[string]any{"command": command})
	require.NoError(t, err)
	assert.False(t, leaked(string(out)), string(out))
	assert.Contains(t, string(out), "Permission denied")
	key, err := os.ReadFile(filepath.Join(data, "ledger.key"))
	require.NoError(t, err)
	assert.Equal(t, "PRIVATE+KEY+toolgate/dev+x", string(key), "nothing appended")
	assert.Contains(t, string(out), "repo", "ordinary work runs: git init in the workspace")
	made, err := os.ReadFile(filepath.Join(root, "made.txt"))
	require.NoError(t, err)
	assert.Equal(t, "ok\n", string(made))
}

// anyIn reports whether s holds any of subs.
func anyIn(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A rule's grant reaches the command's sandbox: a directory it may read,
// one it may write, and the network taken away. Without the grant the
// same command is refused the extra directories and reaches the network.
func TestARulesGrantWidensOrNarrowsTheShellsSandbox(t *testing.T) {
	root, tools, cache := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tools, "version"), []byte("toolchain-1.2"), 0o644))
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	command := "cat " + tools + "/version; echo built > " + cache + "/out && echo wrote; " +
		"bash -c 'echo > /dev/tcp/127.0.0.1/" + port + "' && echo connected"
	shell := func(grant *policy.SandboxGrant) string {
		raw, err := json.Marshal(map[string]any{"command": command})
		require.NoError(t, err)
		for _, tl := range Tools(Workspace{Root: root}) {
			if tl.Name == ShellTool {
				out, err := tl.Run(context.Background(), tool.Input{CallID: "g", Session: "s1", Args: raw, Sandbox: grant})
				require.NoError(t, err)
				return string(out)
			}
		}
		t.Fatal("no shell tool")
		return ""
	}

	def := shell(nil)
	assert.NotContains(t, def, "toolchain-1.2", "by default only the workspace is reached")
	assert.NotContains(t, def, "wrote")
	assert.Contains(t, def, "connected", "the default allows the network")

	granted := shell(&policy.SandboxGrant{Read: []string{tools}, Write: []string{cache}, NoNetwork: true})
	assert.Contains(t, granted, "toolchain-1.2", granted)
	assert.Contains(t, granted, "wrote", granted)
	assert.NotContains(t, granted, "connected", "network: false holds")
	made, err := os.ReadFile(filepath.Join(cache, "out"))
	require.NoError(t, err)
	assert.Equal(t, "built\n", string(made))
}

// Two shell calls running at once in one workspace share a sandbox, but
// neither reaches the other's temporary directory nor ends the other.
// Unsandboxed (the control), one reads the other's.
func TestConcurrentShellCallsCannotReachEachOther(t *testing.T) {
	for _, unsandboxed := range []bool{true, false} {
		root := t.TempDir()
		ws := Workspace{Root: root, Unsandboxed: unsandboxed}
		first := make(chan string, 1)
		go func() {
			out, err := run(t, ws, ShellTool, "a", map[string]any{"command": "echo its-secret > $TMPDIR/f; echo $TMPDIR > a-tmp; echo $$ > a-pid; sleep 3; echo a-finished"})
			assert.NoError(t, err)
			first <- string(out)
		}()
		require.Eventually(t, func() bool { b, _ := os.ReadFile(filepath.Join(root, "a-pid")); return len(b) > 0 }, 10*time.Second, 20*time.Millisecond)
		out, err := run(t, ws, ShellTool, "b", map[string]any{"command": "cat $(cat a-tmp)/f; ls $(dirname $(cat a-tmp)); kill -9 $(cat a-pid) || echo not-killed"})
		require.NoError(t, err)
		a := <-first
		if unsandboxed {
			assert.Contains(t, string(out), "its-secret", "the control reads the other call's file: the test can fail")
			continue
		}
		assert.NotContains(t, string(out), "its-secret", string(out))
		assert.Contains(t, string(out), "cannot open directory", "nor lists its neighbours' directories")
		assert.Contains(t, string(out), "not-killed")
		assert.Contains(t, a, "a-finished", "the other call ran to its end")
	}
}

// A shell command whose sandbox's helper ends under it has an unknown
// outcome: toolgate does not run it again.
func TestAShellCommandWhoseSandboxHelperEndsHasAnUnknownOutcome(t *testing.T) {
	root := t.TempDir()
	done := make(chan error, 1)
	go func() {
		_, err := run(t, Workspace{Root: root}, ShellTool, "lost", map[string]any{"command": "echo $PPID > helper-pid; sleep 30"})
		done <- err
	}()
	var helper int
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(root, "helper-pid"))
		helper, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return helper > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, syscall.Kill(helper, syscall.SIGKILL))
	err := <-done
	var unknown *tool.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown)
	assert.Contains(t, err.Error(), "may or may not have had its effect")
}

// When the worker stops, the shell's sandboxes end and leave no temporary
// directories; a call after that starts a new one.
func TestClosingTheSandboxesLeavesNoTemporaryRoot(t *testing.T) {
	root := t.TempDir()
	_, err := run(t, Workspace{Root: root}, ShellTool, "c1", map[string]any{"command": "true"})
	require.NoError(t, err)
	var tmps []string
	shellSpawners.mu.Lock()
	for _, sp := range shellSpawners.byPolicy {
		tmps = append(tmps, sp.tmp)
	}
	shellSpawners.mu.Unlock()
	require.NotEmpty(t, tmps)

	CloseSandboxes()
	for _, tmp := range tmps {
		assert.NoDirExists(t, tmp)
	}
	out, err := run(t, Workspace{Root: root}, ShellTool, "c2", map[string]any{"command": "echo after"})
	require.NoError(t, err)
	assert.Contains(t, string(out), "after")
}
