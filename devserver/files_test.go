//go:build unix

package devserver

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestFilesAreOwnerOnly: the data dir, temporal.db and its side files are
// made owner-only whatever the umask, and looser ones are tightened and
// logged.
func TestFilesAreOwnerOnly(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0))
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	dir := filepath.Join(t.TempDir(), "data")
	db := filepath.Join(dir, dbFileName)
	mode := func(path string) fs.FileMode {
		info, err := os.Stat(path)
		require.NoError(t, err)
		return info.Mode().Perm()
	}

	_, err := withDefaults(Options{DataDir: dir, Logger: log})
	require.NoError(t, err)
	require.NoError(t, preparePersistence(sqlConfig(db), "default", log))
	assert.Equal(t, fs.FileMode(0o700), mode(dir))
	assert.Equal(t, fs.FileMode(0o600), mode(db))
	side, _ := filepath.Glob(db + "-*")
	require.NotEmpty(t, side, "the database is in WAL mode: -wal and -shm")
	for _, f := range side {
		assert.Equal(t, fs.FileMode(0o600), mode(f), f)
	}
	assert.Zero(t, logs.Len(), "nothing to tighten in new files")

	// An older toolgate's: the umask's modes.
	loose := []string{"data", dbFileName}
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(db, 0o644))
	for _, f := range side {
		if os.Chmod(f, 0o644) == nil {
			loose = append(loose, filepath.Base(f))
		}
	}
	_, err = withDefaults(Options{DataDir: dir, Logger: log})
	require.NoError(t, err)
	require.NoError(t, preparePersistence(sqlConfig(db), "default", log), "the existing schema is kept")
	assert.Equal(t, fs.FileMode(0o700), mode(dir))
	assert.Equal(t, fs.FileMode(0o600), mode(db))
	for _, f := range side {
		if _, err := os.Stat(f); err == nil {
			assert.Equal(t, fs.FileMode(0o600), mode(f), f)
		}
	}
	var tightened []string
	for _, e := range logs.FilterMessageSnippet("Tightened the permissions").All() {
		tightened = append(tightened, filepath.Base(e.ContextMap()["file"].(string)))
	}
	assert.ElementsMatch(t, loose, tightened)
}
