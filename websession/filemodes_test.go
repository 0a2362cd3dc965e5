//go:build unix

package websession

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestTheSQLiteFileIsOwnerOnly: the sessions database is made 0600, and
// one left 0644 is tightened on open and logged.
func TestTheSQLiteFileIsOwnerOnly(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	ring := newRing(t)
	path := filepath.Join(t.TempDir(), "sessions.db")
	s, err := Open(context.Background(), Options{DSN: path, Sealer: ring, Logger: zap.New(core)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	assert.Zero(t, logs.Len())

	require.NoError(t, os.Chmod(path, 0o644))
	s, err = Open(context.Background(), Options{DSN: path, Sealer: ring, Logger: zap.New(core)})
	require.NoError(t, err)
	defer s.Close()
	info, err = os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	require.Equal(t, 1, logs.FilterMessage("Tightened the permissions of toolgate's file").Len())
}
