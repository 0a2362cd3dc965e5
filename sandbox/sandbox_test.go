package sandbox

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary plays toolgate's: Command starts it in its sandbox role.
func TestMain(m *testing.M) {
	Enter()
	os.Exit(m.Run())
}

const secret = "PRIVATE+KEY+toolgate/dev+sk-4f9d2c"

// keysBeside is a toolgate data dir with a key file, and a workspace in
// it, as toolgate dev lays them out.
func keysBeside(t *testing.T) (keys, workspace string) {
	t.Helper()
	data := t.TempDir()
	keys = filepath.Join(data, "ledger.key")
	require.NoError(t, os.WriteFile(keys, []byte(secret), 0o600))
	workspace = filepath.Join(data, "workspace")
	require.NoError(t, os.Mkdir(workspace, 0o700))
	return keys, workspace
}

func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, _ := cmd.CombinedOutput()
	return string(out)
}

func TestASandboxedCommandReachesItsWorkspaceAndNotToolgatesKeys(t *testing.T) {
	require.NotZero(t, ABI(), "this machine's kernel offers Landlock")
	keys, workspace := keysBeside(t)
	require.NoError(t, os.Symlink(keys, filepath.Join(workspace, "link")))
	script := "cat ../ledger.key; cat link; sh -c 'cat ../ledger.key'; echo made > out.txt; ls /usr/bin >/dev/null && echo listed"

	// The control: unconfined, the same command leaks the key.
	control := exec.Command("sh", "-c", script)
	control.Dir = workspace
	assert.Contains(t, run(t, control), secret, "the control leaks: the test can fail")
	require.NoError(t, os.Remove(filepath.Join(workspace, "out.txt")))

	cmd, err := Command(Policy{ReadWrite: []string{workspace}}, "sh", "-c", script)
	require.NoError(t, err)
	cmd.Dir = workspace
	out := run(t, cmd)
	assert.NotContains(t, out, secret)
	assert.Equal(t, 3, strings.Count(out, "Permission denied"), out)
	assert.Contains(t, out, "listed", "the system's directories are readable")
	made, err := os.ReadFile(filepath.Join(workspace, "out.txt"))
	require.NoError(t, err, out)
	assert.Equal(t, "made\n", string(made), "the workspace is writable")
}

func TestWithoutLandlockNothingStartsUnconfined(t *testing.T) {
	_, err := configFor(0)
	assert.ErrorIs(t, err, ErrNoLandlock)
	cfg, err := configFor(99)
	require.NoError(t, err, "a newer kernel gets the newest ABI known")
	assert.Equal(t, configs[len(configs)-1].String(), cfg.String())
}

func TestAGrantOverlappingToolgatesFilesIsRefused(t *testing.T) {
	data := t.TempDir()
	keys := filepath.Join(data, "keys.json")
	require.NoError(t, os.WriteFile(keys, []byte("{}"), 0o600))
	own := []string{data, keys}
	for _, p := range []Policy{
		{ReadWrite: []string{data}},                             // the data dir itself
		{ReadOnly: []string{filepath.Dir(data)}},                // a directory holding it
		{ReadWrite: []string{filepath.Join(data, "workspace")}}, // inside it
		{ReadOnly: []string{data + "/../" + filepath.Base(data)}},
	} {
		err := p.Overlap(own)
		require.Error(t, err, "%+v", p)
		assert.Contains(t, err.Error(), "overlaps toolgate's own files")
	}
	link := filepath.Join(t.TempDir(), "innocent")
	require.NoError(t, os.Symlink(data, link))
	assert.Error(t, Policy{ReadWrite: []string{link}}.Overlap(own), "a symlink to the data dir is the data dir")
	assert.NoError(t, Policy{ReadWrite: []string{t.TempDir()}, ReadOnly: []string{"/usr/share"}}.Overlap(own))
	assert.NoError(t, Policy{ReadWrite: []string{data + "-other"}}.Overlap(own), "a sibling whose name begins alike is not inside")
}

func TestNoNetworkRefusesTCP(t *testing.T) {
	require.GreaterOrEqual(t, ABI(), NetworkABI, "this machine's kernel has Landlock's TCP rules")
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
	script := "echo hi > /dev/tcp/127.0.0.1/" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + " && echo connected"
	workspace := t.TempDir()

	open, err := Command(Policy{ReadWrite: []string{workspace}}, "bash", "-c", script)
	require.NoError(t, err)
	assert.Contains(t, run(t, open), "connected", "the default allows the network: the test can fail")

	closed, err := Command(Policy{ReadWrite: []string{workspace}, NoNetwork: true}, "bash", "-c", script)
	require.NoError(t, err)
	out := run(t, closed)
	assert.NotContains(t, out, "connected")
	assert.Contains(t, out, "Permission denied", out)
}

func TestNoLandlockVarReportsABIZero(t *testing.T) {
	t.Setenv(NoLandlockVar, "1")
	assert.Zero(t, ABI())
	_, err := Command(Policy{}, "true")
	assert.ErrorIs(t, err, ErrNoLandlock)
}

func TestTheLauncherIsToolgateSandboxBesideTheBinaryOrTheBinaryItself(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "toolgate")
	path, small := launcherFor(self)
	assert.Equal(t, self, path, "none beside it: toolgate's own binary")
	assert.False(t, small)

	beside := filepath.Join(dir, LauncherName)
	require.NoError(t, os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o644))
	_, small = launcherFor(self)
	assert.False(t, small, "one that cannot be executed is not taken")
	require.NoError(t, os.Chmod(beside, 0o755))
	path, small = launcherFor(self)
	assert.Equal(t, beside, path)
	assert.True(t, small)
}

// spawn runs script through s in workspace and returns its output and exit.
func spawn(t *testing.T, s *Spawner, workspace, script string) (string, Exit) {
	t.Helper()
	return spawnWith(t, s, workspace, script, nil)
}

// A Spawner's helper is confined once; every command it starts is held
// to the same sandbox, however many run, and a helper that dies is
// replaced.
func TestASpawnersCommandsAreConfinedOnce(t *testing.T) {
	keys, workspace := keysBeside(t)
	s := NewSpawner(Policy{ReadWrite: []string{workspace}})
	defer s.Close()

	out, exit := spawn(t, s, workspace, "cat ../ledger.key; sh -c 'cat ../ledger.key'; echo made > out.txt; ls /usr/bin >/dev/null && echo listed")
	assert.NotContains(t, out, secret)
	assert.Equal(t, 2, strings.Count(out, "Permission denied"), out)
	assert.Contains(t, out, "listed")
	assert.Zero(t, exit.Code)
	made, err := os.ReadFile(filepath.Join(workspace, "out.txt"))
	require.NoError(t, err)
	assert.Equal(t, "made\n", string(made))

	_, exit = spawn(t, s, workspace, "exit 3")
	assert.Equal(t, 3, exit.Code)
	_, exit = spawn(t, s, workspace, "kill -9 $$")
	assert.Equal(t, 128+9, exit.Code, "killed by a signal, as shells say it")

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			out, exit := spawn(t, s, workspace, "cat "+keys+" 2>&1; echo n"+strconv.Itoa(i))
			assert.NotContains(t, out, secret)
			assert.Contains(t, out, "n"+strconv.Itoa(i))
			assert.Zero(t, exit.Code, out)
		})
	}
	wg.Wait()

	s.mu.Lock()
	helper := s.helper
	s.mu.Unlock()
	require.NoError(t, helper.Process.Kill())
	require.Eventually(t, func() bool {
		out, _ := spawnOnce(s, workspace, "echo again")
		return strings.Contains(out, "again")
	}, 5*time.Second, 50*time.Millisecond, "a new helper takes over")
	out, _ = spawn(t, s, workspace, "cat ../ledger.key")
	assert.NotContains(t, out, secret, "and is confined the same")
}

// spawnOnce is spawn for a poll: errors are results.
func spawnOnce(s *Spawner, workspace, script string) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	_, exited, err := s.Start(Spec{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", script}, Dir: workspace, Stdout: w, Stderr: w})
	w.Close()
	if err != nil {
		return "", err
	}
	out, _ := io.ReadAll(r)
	<-exited
	return string(out), nil
}

func TestASpawnerWhoseSandboxCannotBeSetRefusesEveryCommand(t *testing.T) {
	s := NewSpawner(Policy{ReadOnly: []string{"/no/such/dir"}})
	defer s.Close()
	_, err := spawnOnce(s, t.TempDir(), "echo ran")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the sandbox cannot be set")

	t.Setenv(NoLandlockVar, "1")
	_, err = spawnOnce(NewSpawner(Policy{}), t.TempDir(), "echo ran")
	assert.ErrorIs(t, err, ErrNoLandlock)
}
