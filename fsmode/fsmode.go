// Package fsmode keeps toolgate's own files and directories to their
// owner: it creates them owner-only (File, Dir) and tightens an existing
// one that group or others may use, logging what it changed. Only its
// callers know which files are toolgate's.
package fsmode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"go.uber.org/zap"
)

const (
	// File is the mode of toolgate's files: read and written by their
	// owner alone.
	File fs.FileMode = 0o600
	// Dir is the mode of toolgate's directories.
	Dir fs.FileMode = 0o700
)

// sqliteSideFiles are the suffixes of the files SQLite keeps beside a
// database: they hold its latest commits, and need its mode.
var sqliteSideFiles = []string{"-wal", "-shm", "-journal"}

// Tighten clears the permission bits of path that perm lacks (a mode
// already tighter stays as it is), following a symbolic link, and logs
// the change at Warn on log (nil: not logged). It reports whether it
// changed the mode; a path that does not exist is left so, without error.
// Where permission bits mean nothing (Windows) it does nothing.
func Tighten(log *zap.Logger, path string, perm fs.FileMode) (bool, error) {
	if runtime.GOOS == "windows" {
		return false, nil
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	from := info.Mode().Perm()
	to := from & perm
	if to == from {
		return false, nil
	}
	if err := os.Chmod(path, to); err != nil {
		return false, err
	}
	if log != nil {
		what := "file"
		if info.IsDir() {
			what = "directory"
		}
		log.Warn("Tightened the permissions of toolgate's "+what,
			zap.String("file", path), zap.String("from", octal(from)), zap.String("to", octal(to)))
	}
	return true, nil
}

// MkdirAll creates dir, and its missing parents, mode Dir, or tightens
// dir (not its parents) to Dir when it exists.
func MkdirAll(log *zap.Logger, dir string) error {
	if err := os.MkdirAll(dir, Dir); err != nil {
		return err
	}
	_, err := Tighten(log, dir, Dir)
	return err
}

// SQLite readies the SQLite database file path for opening: it creates
// the file, empty, mode File when it is missing (SQLite would create it
// with the umask's mode, and its side files with the file's mode), and
// tightens it and its side files (-wal, -shm, -journal) to File when they
// exist. Call it again once the database is open: the side files are made
// then.
func SQLite(log *zap.Logger, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, File)
	switch {
	case err == nil:
		if err := f.Close(); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrExist):
		return err
	}
	return TightenSQLite(log, path)
}

// TightenSQLite tightens the SQLite database file path and its side files
// (-wal, -shm, -journal) to File, those that exist, creating none.
func TightenSQLite(log *zap.Logger, path string) error {
	for _, suffix := range append([]string{""}, sqliteSideFiles...) {
		if _, err := Tighten(log, path+suffix, File); err != nil {
			return err
		}
	}
	return nil
}

func octal(m fs.FileMode) string { return fmt.Sprintf("%#o", m.Perm()) }
