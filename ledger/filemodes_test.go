//go:build unix

package ledger

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestFilesAreOwnerOnly: the ledger's key, database and WAL are 0600; a
// database an older toolgate left 0644 is tightened on open, and logged on
// the ledger's logger.
func TestFilesAreOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	dsn := filepath.Join(dir, "ledger.db")
	l, err := Open(context.Background(), Options{DSN: dsn, Keys: keys})
	require.NoError(t, err)
	_, err = l.Append(context.Background(), entry("c1", KindCallSubmitted))
	require.NoError(t, err)
	for _, f := range []string{filepath.Join(dir, "ledger.key"), dsn, dsn + "-wal", dsn + "-shm"} {
		info, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o600), info.Mode().Perm(), f)
	}
	require.NoError(t, l.Close())

	require.NoError(t, os.Chmod(dsn, 0o644))
	core, logs := observer.New(zapcore.DebugLevel)
	l, err = Open(context.Background(), Options{DSN: dsn, Keys: keys, Logger: zap.New(core)})
	require.NoError(t, err)
	defer l.Close()
	info, err := os.Stat(dsn)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), info.Mode().Perm())
	tightened := logs.FilterMessage("Tightened the permissions of toolgate's file").All()
	require.Len(t, tightened, 1)
	assert.Equal(t, map[string]any{"file": dsn, "from": "0644", "to": "0600"}, tightened[0].ContextMap())
}
