//go:build unix

package sqldb

import (
	"context"
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

// TestSQLiteFilesAreOwnerOnly: a new database, its directory and its WAL
// are owner-only whatever the umask; an existing looser file is tightened
// and logged.
func TestSQLiteFilesAreOwnerOnly(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0))
	core, logs := observer.New(zapcore.DebugLevel)
	o := Options{Schema: "CREATE TABLE IF NOT EXISTS t (k TEXT)", Logger: zap.New(core)}
	mode := func(path string) fs.FileMode {
		info, err := os.Stat(path)
		require.NoError(t, err)
		return info.Mode().Perm()
	}
	path := filepath.Join(t.TempDir(), "new", "x.db")
	db, err := Open(context.Background(), path, o)
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO t (k) VALUES ('a')")
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o700), mode(filepath.Dir(path)))
	files := []string{path, path + "-wal", path + "-shm"}
	for _, f := range files {
		assert.Equal(t, fs.FileMode(0o600), mode(f), f)
	}
	require.NoError(t, db.Close())
	assert.Zero(t, logs.Len())

	// An older toolgate's database, with the umask's mode.
	old := filepath.Join(t.TempDir(), "old.db")
	db, err = Open(context.Background(), old, Options{Schema: o.Schema})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, os.Chmod(old, 0o644))
	db, err = Open(context.Background(), old, o)
	require.NoError(t, err)
	defer db.Close()
	assert.Equal(t, fs.FileMode(0o600), mode(old))
	assert.Equal(t, fs.FileMode(0o600), mode(old+"-wal"), "made with the file's mode")
	require.Equal(t, 1, logs.Len())
	e := logs.All()[0]
	assert.Equal(t, zapcore.WarnLevel, e.Level)
	assert.Equal(t, "Tightened the permissions of toolgate's file", e.Message)
	assert.Equal(t, map[string]any{"file": old, "from": "0644", "to": "0600"}, e.ContextMap())
}
