package integration

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notOwnerOnly names the files and directories under root that group or
// others may use (a file beyond 0600, a directory beyond 0700), but for
// skip, the tools' workspace, and what the tools wrote there.
func notOwnerOnly(t *testing.T, root, skip string) []string {
	t.Helper()
	var loose []string
	require.NoError(t, filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == skip {
			return filepath.SkipDir
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		limit := fs.FileMode(0o600)
		if info.IsDir() {
			limit = 0o700
		}
		if info.Mode().Perm()&^limit != 0 {
			rel, _ := filepath.Rel(root, path)
			loose = append(loose, fmt.Sprintf("%s %#o", rel, info.Mode().Perm()))
		}
		return nil
	}))
	return loose
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return info.Mode().Perm()
}

// widestUmask sets the umask to 0 for the processes the test starts (what
// toolgate makes is then as open as its code asks), and restores it when
// the test ends. The tests of this package run one at a time.
func widestUmask(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
}

// Every file toolgate makes is 0600 and every directory 0700: dev's data
// dir and all in it but the tools' workspace (databases and their side
// files, keys, tokens), the ledger's checkpoints file, an export and a
// receipt.
func TestFileModesOfWhatToolgateMakes(t *testing.T) {
	out := t.TempDir() // the test's, for toolgate's files
	widestUmask(t)
	d := &devEnv{t: t, dataDir: filepath.Join(t.TempDir(), "data"), port: freePort(t)}
	d.httpAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	d.workspace = filepath.Join(d.dataDir, "workspace")
	checkpoints := filepath.Join(out, "checkpoints")
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", strconv.Itoa(d.port), "--http", d.httpAddr,
		"--ledger-checkpoints", checkpoints)

	call := d.callJSON(0, "--session", "s-modes", "echo", `{"x":1}`)
	callID := call["call_id"].(string)
	db, key := filepath.Join(d.dataDir, "ledger.db"), filepath.Join(d.dataDir, "ledger.key")
	export := filepath.Join(out, "ledger.jsonl")
	r := d.cli("audit", "export", "--ledger", db, "--ledger-key", key, "-o", export)
	require.Equal(t, 0, r.code, r.stderr)
	receipt := filepath.Join(out, callID+".receipt")
	require.Eventually(t, func() bool {
		r = d.cli("audit", "proof", callID, "--ledger", db, "--ledger-key", key, "-o", receipt)
		return r.code == 0
	}, 30*time.Second, 200*time.Millisecond, "no checkpoint holds the call: %s", r.stderr)
	require.Eventually(t, func() bool {
		_, err := os.Stat(checkpoints)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "no checkpoint was appended to %s", checkpoints)

	for _, f := range []string{"temporal.db", "temporal.db-wal", "ledger.db", "ledger.db-wal", "ledger.key", "keys.json", "door-key.json", "tokens.json"} {
		assert.FileExists(t, filepath.Join(d.dataDir, f), "the walk below checks it")
	}
	assert.Empty(t, notOwnerOnly(t, d.dataDir, d.workspace), "group or others may use these of toolgate's files in its data dir")
	for _, f := range []string{checkpoints, export, receipt} {
		assert.Equal(t, fs.FileMode(0o600), mode(t, f), f)
	}
	assert.NotContains(t, d.dev.out.String(), "Tightened the permissions", "nothing was there to tighten")
}

// An older toolgate's data dir, databases and checkpoints file, made with
// the umask's modes, are tightened when dev starts, and each is logged.
func TestFileModesLooserOnesAreTightenedAtStart(t *testing.T) {
	out := t.TempDir() // the test's, for toolgate's files
	widestUmask(t)
	d := &devEnv{t: t, dataDir: filepath.Join(t.TempDir(), "data"), port: freePort(t)}
	d.httpAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	d.workspace = filepath.Join(d.dataDir, "workspace")
	require.NoError(t, os.Mkdir(d.dataDir, 0o755))
	checkpoints := filepath.Join(out, "checkpoints")
	// Empty files are new databases to SQLite (and to the Temporal server).
	for _, f := range []string{filepath.Join(d.dataDir, "temporal.db"), filepath.Join(d.dataDir, "ledger.db"), checkpoints} {
		require.NoError(t, os.WriteFile(f, nil, 0o644))
	}
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", strconv.Itoa(d.port), "--http", d.httpAddr,
		"--ledger-checkpoints", checkpoints)
	d.callJSON(0, "--session", "s-modes", "echo", `{"x":1}`)

	assert.Empty(t, notOwnerOnly(t, d.dataDir, d.workspace))
	assert.Equal(t, fs.FileMode(0o600), mode(t, checkpoints))
	logs := d.dev.out.String()
	for _, f := range []string{d.dataDir, filepath.Join(d.dataDir, "temporal.db"), filepath.Join(d.dataDir, "ledger.db"), checkpoints} {
		assert.True(t, tightenedIn(logs, f), "the tightening of %s is logged:\n%s", f, logs)
	}
}

// tightenedIn reports whether logs has the line saying file was tightened
// from 0644 or 0755.
func tightenedIn(logs, file string) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "Tightened the permissions of toolgate's") && strings.Contains(line, `"file": "`+file+`"`) &&
			(strings.Contains(line, `"from": "0644", "to": "0600"`) || strings.Contains(line, `"from": "0755", "to": "0700"`)) {
			return true
		}
	}
	return false
}
