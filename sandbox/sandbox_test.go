package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
