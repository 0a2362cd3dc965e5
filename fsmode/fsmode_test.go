//go:build unix

package fsmode

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

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return info.Mode().Perm()
}

func TestTightenClearsWhatPermLacksAndLogsIt(t *testing.T) {
	for _, c := range []struct {
		from, perm, want fs.FileMode
		changed          bool
	}{
		{0o644, File, 0o600, true},
		{0o666, File, 0o600, true},
		{0o600, File, 0o600, false},
		{0o400, File, 0o400, false}, // tighter already: left so
		{0o755, Dir, 0o700, true},
	} {
		log, logs := observed()
		path := filepath.Join(t.TempDir(), "f")
		require.NoError(t, os.WriteFile(path, nil, 0o600))
		require.NoError(t, os.Chmod(path, c.from))
		changed, err := Tighten(log, path, c.perm)
		require.NoError(t, err)
		assert.Equal(t, c.changed, changed, "%#o", c.from)
		assert.Equal(t, c.want, mode(t, path), "%#o", c.from)
		if !c.changed {
			assert.Zero(t, logs.Len(), "%#o: nothing changed, nothing logged", c.from)
			continue
		}
		require.Equal(t, 1, logs.Len())
		e := logs.All()[0]
		assert.Equal(t, zapcore.WarnLevel, e.Level)
		assert.Equal(t, "Tightened the permissions of toolgate's file", e.Message)
		assert.Equal(t, map[string]any{"file": path, "from": "0" + octalDigits(c.from), "to": "0" + octalDigits(c.want)}, e.ContextMap())
	}
}

func octalDigits(m fs.FileMode) string { return octal(m)[1:] }

func TestTightenLeavesAMissingFileMissing(t *testing.T) {
	log, logs := observed()
	path := filepath.Join(t.TempDir(), "none")
	changed, err := Tighten(log, path, File)
	require.NoError(t, err)
	assert.False(t, changed)
	assert.NoFileExists(t, path)
	assert.Zero(t, logs.Len())
}

func TestTightenWithoutLoggerStillTightens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	require.NoError(t, os.Chmod(path, 0o644))
	changed, err := Tighten(nil, path, File)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, File, mode(t, path))
}

func TestMkdirAllCreatesOwnerOnlyAndTightensAnExistingDir(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0)) // the widest umask: modes are toolgate's alone
	log, logs := observed()
	dir := filepath.Join(t.TempDir(), "a", "b")
	require.NoError(t, MkdirAll(log, dir))
	assert.Equal(t, Dir, mode(t, dir))
	assert.Equal(t, Dir, mode(t, filepath.Dir(dir)), "missing parents too")
	assert.Zero(t, logs.Len(), "a new directory is no change")

	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, MkdirAll(log, dir))
	assert.Equal(t, Dir, mode(t, dir))
	require.Equal(t, 1, logs.Len())
	assert.Equal(t, "Tightened the permissions of toolgate's directory", logs.All()[0].Message)
	assert.Equal(t, "0755", logs.All()[0].ContextMap()["from"])
}

func TestSQLiteCreatesTheFileAndTightensItAndItsSideFiles(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0))
	log, logs := observed()
	path := filepath.Join(t.TempDir(), "x.db")
	require.NoError(t, SQLite(log, path))
	assert.Equal(t, File, mode(t, path))
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Zero(t, info.Size(), "an empty file is an empty database")
	assert.Zero(t, logs.Len())

	require.NoError(t, os.WriteFile(path, []byte("data"), 0o600))
	for _, name := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		require.NoError(t, os.WriteFile(name, []byte("data"), 0o644))
		require.NoError(t, os.Chmod(name, 0o644))
	}
	require.NoError(t, SQLite(log, path))
	for _, name := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		assert.Equal(t, File, mode(t, name), name)
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "data", string(b), "an existing database is kept")
	assert.Equal(t, 4, logs.Len())
}
