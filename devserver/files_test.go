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
	partitions, err := preparePersistence(sqlConfig(db), "default", log)
	require.NoError(t, err)
	assert.Equal(t, 1, partitions, "a database made here has one partition per task queue")
	assert.Equal(t, fs.FileMode(0o700), mode(dir))
	assert.Equal(t, fs.FileMode(0o600), mode(db))
	assert.Equal(t, fs.FileMode(0o600), mode(filepath.Join(dir, partitionsFileName)))
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
	partitions, err = preparePersistence(sqlConfig(db), "default", log)
	require.NoError(t, err, "the existing schema is kept")
	assert.Equal(t, 1, partitions, "as recorded when the database was made")
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

// TestTaskQueuePartitions: a database made here is recorded as having one
// partition per task queue; an existing one keeps what it records, or the
// server's default (0) when it records nothing; a file that holds no
// number stops the start instead of guessing.
func TestTaskQueuePartitions(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, dbFileName)
	file := filepath.Join(dir, partitionsFileName)

	n, err := taskQueuePartitions(nil, db, false)
	require.NoError(t, err)
	assert.Zero(t, n, "made by an older toolgate: the server's default")
	assert.NoFileExists(t, file, "an existing database is not given a file")

	require.NoError(t, os.WriteFile(file, []byte("4\n"), 0o644))
	n, err = taskQueuePartitions(nil, db, true)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a new database replaces what a deleted one left")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "1\n", string(data))
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), info.Mode().Perm())

	require.NoError(t, os.WriteFile(file, []byte("2\n"), 0o600))
	n, err = taskQueuePartitions(nil, db, false)
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	for _, bad := range []string{"", "four", "0", "-1"} {
		require.NoError(t, os.WriteFile(file, []byte(bad), 0o600))
		_, err = taskQueuePartitions(nil, db, false)
		require.ErrorContains(t, err, partitionsFileName+" holds", "%q", bad)
		assert.NotContains(t, err.Error(), dir, "no path in the error")
	}
}
