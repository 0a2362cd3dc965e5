//go:build unix

package main

import (
	"bytes"
	"context"
	"io"
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

func fileMode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return info.Mode().Perm()
}

// tightened are the base names of the files whose tightening was logged.
func tightened(logs *observer.ObservedLogs) []string {
	var names []string
	for _, e := range logs.FilterMessageSnippet("Tightened the permissions of toolgate's").All() {
		names = append(names, filepath.Base(e.ContextMap()["file"].(string)))
	}
	return names
}

func TestDevDataDirIsOwnerOnlyAndItsTemporalDatabaseTightened(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	a := &app{logger: zap.New(core)}
	dir := filepath.Join(t.TempDir(), ".toolgate")
	require.NoError(t, a.devDataDir(dir))
	assert.Equal(t, fs.FileMode(0o700), fileMode(t, dir))
	assert.NoFileExists(t, filepath.Join(dir, "temporal.db"), "the server makes it")
	assert.Zero(t, logs.Len())

	require.NoError(t, os.Chmod(dir, 0o755))
	for _, name := range []string{"temporal.db", "temporal.db-wal"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
		require.NoError(t, os.Chmod(filepath.Join(dir, name), 0o644))
	}
	require.NoError(t, a.devDataDir(dir))
	assert.Equal(t, fs.FileMode(0o700), fileMode(t, dir))
	assert.Equal(t, fs.FileMode(0o600), fileMode(t, filepath.Join(dir, "temporal.db")))
	assert.Equal(t, fs.FileMode(0o600), fileMode(t, filepath.Join(dir, "temporal.db-wal")))
	assert.Equal(t, []string{".toolgate", "temporal.db", "temporal.db-wal"}, tightened(logs))
	for _, e := range logs.All() {
		assert.Equal(t, zapcore.WarnLevel, e.Level)
	}
}

func TestTheLedgerDatabaseAndCheckpointsAreOwnerOnly(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	a := &app{logger: zap.New(core)}
	dir := t.TempDir()
	lf := ledgerFlags{dsn: filepath.Join(dir, "ledger.db"), keyFile: filepath.Join(dir, "ledger.key"), checkpoints: filepath.Join(dir, "checkpoints")}
	l, err := a.openLedger(context.Background(), lf, true, nil)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	for _, f := range []string{lf.dsn, lf.keyFile, lf.checkpoints} {
		assert.Equal(t, fs.FileMode(0o600), fileMode(t, f), f)
	}
	assert.Empty(t, tightened(logs))

	// An older toolgate's: the umask's modes.
	require.NoError(t, os.Chmod(lf.dsn, 0o644))
	require.NoError(t, os.Chmod(lf.checkpoints, 0o644))
	l, err = a.openLedger(context.Background(), lf, true, nil)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	assert.Equal(t, fs.FileMode(0o600), fileMode(t, lf.dsn))
	assert.Equal(t, fs.FileMode(0o600), fileMode(t, lf.checkpoints))
	assert.ElementsMatch(t, []string{"ledger.db", "checkpoints"}, tightened(logs))
}

func TestExportsAndReceiptsAreWrittenOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "export.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
	require.NoError(t, os.Chmod(path, 0o644)) // an older toolgate's
	write := func(w io.Writer) error { _, err := io.WriteString(w, "new\n"); return err }
	require.NoError(t, writeOut(&bytes.Buffer{}, path, write))
	assert.Equal(t, fs.FileMode(0o600), fileMode(t, path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "new\n", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")

	fresh := filepath.Join(dir, "receipt.json")
	require.NoError(t, writeOut(&bytes.Buffer{}, fresh, write))
	assert.Equal(t, fs.FileMode(0o600), fileMode(t, fresh))
}
