package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startSleeper starts a command through s that holds secretEnv in its
// environment and sleeps; it returns its process ID and exit.
func startSleeper(t *testing.T, s *Spawner, workspace, secretEnv string) (int, <-chan Exit) {
	t.Helper()
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer devnull.Close()
	pid, exited, err := s.Start(Spec{Path: "/bin/sleep", Args: []string{"sleep", "60"}, Dir: workspace,
		Env: []string{"PATH=/usr/bin:/bin", secretEnv}, Stdout: devnull, Stderr: devnull})
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid, exited
}

// A command cannot read another command's environment, end it, end the
// helper that started both, or signal toolgate, though all run in one
// Spawner; within its own sandbox, a command does all of that to what it
// started itself.
func TestASpawnersCommandsCannotReachEachOtherTheHelperOrToolgate(t *testing.T) {
	require.GreaterOrEqual(t, ABI(), 6, "this machine's kernel scopes signals (Landlock ABI 6)")
	_, workspace := keysBeside(t)
	s := NewSpawner(Policy{ReadWrite: []string{workspace}})
	defer s.Close()

	// The control: the same reads and signals work within one sandbox.
	out, _ := spawn(t, s, workspace, "SECRET_C=own-child-secret sleep 60 & sleep 0.2; tr '\\0' '\\n' < /proc/$!/environ; kill -9 $! && echo killed-own")
	assert.Contains(t, out, "own-child-secret", "the control reads its own child's environment: the test can fail")
	assert.Contains(t, out, "killed-own")

	neighbour, neighbourExited := startSleeper(t, s, workspace, "SECRET_A=neighbours-secret")
	s.mu.Lock()
	helper := s.helper.Process.Pid
	s.mu.Unlock()
	out, _ = spawn(t, s, workspace, fmt.Sprintf("grep -E '^Cap(Prm|Eff)' /proc/self/status; "+
		"tr '\\0' '\\n' < /proc/%[1]d/environ; kill -9 %[1]d || echo no-kill-neighbour; "+
		"[ $PPID = %[2]d ] && echo parent-is-helper; kill -9 $PPID || echo no-kill-helper; kill -0 %[3]d || echo no-signal-toolgate",
		neighbour, helper, os.Getpid()))
	assert.Contains(t, out, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000", "no capabilities, even when toolgate runs as root")
	assert.NotContains(t, out, "neighbours-secret", out)
	assert.Contains(t, out, "Permission denied", out)
	for _, want := range []string{"no-kill-neighbour", "parent-is-helper", "no-kill-helper", "no-signal-toolgate"} {
		assert.Contains(t, out, want, out)
	}

	select {
	case e := <-neighbourExited:
		t.Fatalf("the neighbour ended: %+v", e)
	default:
	}
	s.mu.Lock()
	assert.Equal(t, helper, s.helper.Process.Pid, "the same helper still serves")
	s.mu.Unlock()
	out, _ = spawn(t, s, workspace, "echo still-here")
	assert.Contains(t, out, "still-here")
}

// A command's own policy narrows the Spawner's (each command its own
// temporary directory) and cannot widen it.
func TestACommandsOwnPolicyNarrowsTheSpawnersAndNeverWidensIt(t *testing.T) {
	_, workspace := keysBeside(t)
	tmp := t.TempDir()
	mine, theirs := filepath.Join(tmp, "call-a"), filepath.Join(tmp, "call-b")
	require.NoError(t, os.Mkdir(mine, 0o700))
	require.NoError(t, os.Mkdir(theirs, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(theirs, "f"), []byte("theirs-secret"), 0o600))
	s := NewSpawner(Policy{ReadWrite: []string{workspace, tmp}})
	defer s.Close()

	script := fmt.Sprintf("cat %s/f; echo mine > %s/f && cat %s/f; cat ../ledger.key", theirs, mine, mine)
	out, _ := spawn(t, s, workspace, script)
	assert.Contains(t, out, "theirs-secret", "the Spawner's own policy reaches both: the test can fail")

	own := Policy{ReadWrite: []string{workspace, mine, filepath.Dir(workspace)}}
	out, _ = spawnWith(t, s, workspace, script, &own)
	assert.NotContains(t, out, "theirs-secret", out)
	assert.Contains(t, out, "mine", "its own directory is writable")
	assert.NotContains(t, out, secret, "its policy named toolgate's data directory: nested, it cannot widen the Spawner's")
}

// A command whose helper ends under it is reported lost: how it ended is
// not known.
func TestACommandWhoseHelperEndsIsReportedLost(t *testing.T) {
	_, workspace := keysBeside(t)
	s := NewSpawner(Policy{ReadWrite: []string{workspace}})
	defer s.Close()
	_, exited := startSleeper(t, s, workspace, "X=1")
	s.mu.Lock()
	helper := s.helper
	s.mu.Unlock()
	require.NoError(t, helper.Process.Kill())
	select {
	case e := <-exited:
		assert.True(t, e.Lost, "%+v", e)
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after the helper ended")
	}
}

// spawnWith is spawn with the command's own policy.
func spawnWith(t *testing.T, s *Spawner, workspace, script string, own *Policy) (string, Exit) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	pid, exited, err := s.Start(Spec{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", script}, Dir: workspace, Env: []string{"PATH=/usr/bin:/bin"},
		Stdout: w, Stderr: w, Policy: own})
	w.Close()
	require.NoError(t, err)
	assert.Positive(t, pid)
	out, _ := io.ReadAll(r)
	return string(out), <-exited
}
