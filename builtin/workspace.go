// Package builtin holds built-in tools and the default policy, confined to
// a workspace directory.
//
// Every path an agent names is resolved by Workspace.Resolve, which refuses
// paths that leave the workspace root lexically (".."), by being absolute
// elsewhere, or through a symlink. The tools work on the resolved path, so
// what is checked is what is opened.
package builtin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideWorkspace is wrapped by the errors of paths that escape the
// workspace; test for it with errors.Is.
var ErrOutsideWorkspace = errors.New("outside the workspace")

// maxSymlinks bounds how many dangling symlinks Resolve follows by hand,
// like the kernel's ELOOP limit.
const maxSymlinks = 40

// Workspace is the directory the built-in tools are confined to.
type Workspace struct {
	// Root is the workspace directory. It must exist; it may be relative
	// (to the worker's working directory) or a symlink.
	Root string
}

// root returns the absolute, symlink-free workspace root.
func (w Workspace) root() (string, error) {
	if w.Root == "" {
		return "", errors.New("workspace root is not set")
	}
	abs, err := filepath.Abs(w.Root)
	if err != nil {
		return "", fmt.Errorf("workspace root %q: %w", w.Root, err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace root %q: %w", w.Root, err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("workspace root %q: %w", w.Root, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workspace root %q is not a directory", w.Root)
	}
	return resolved, nil
}

// Resolve turns p (relative to Root, or absolute) into an absolute path
// whose existing part contains no symlinks, and refuses it when it is not
// Root or below. The path need not exist: symlinks are resolved on its
// longest existing prefix, and a dangling symlink is followed to where it
// points, so creating the path cannot land outside the workspace either.
// A refusal wraps ErrOutsideWorkspace and names p.
func (w Workspace) Resolve(p string) (string, error) {
	root, err := w.root()
	if err != nil {
		return "", err
	}
	return resolveIn(root, p)
}

// resolveIn is Resolve with the root already resolved.
func resolveIn(root, p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	candidate := p
	if !filepath.IsAbs(candidate) {
		candidate = filepath.Join(root, candidate)
	}
	resolved, err := resolveExisting(filepath.Clean(candidate), 0)
	if err != nil {
		return "", fmt.Errorf("resolve path %q: %w", p, err)
	}
	if !within(root, resolved) {
		return "", fmt.Errorf("path %q is %w", p, ErrOutsideWorkspace)
	}
	return resolved, nil
}

// resolveExisting resolves the symlinks of the longest existing prefix of
// the absolute, clean path p and appends the rest, which does not exist and
// so holds no symlink. A dangling symlink on the way is followed by hand.
func resolveExisting(p string, links int) (string, error) {
	dir, rest := p, ""
	for {
		resolved, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(resolved, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		// dir itself exists but does not resolve: a dangling symlink (its
		// parents resolve, or Lstat would have failed too).
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if links >= maxSymlinks {
				return "", errors.New("too many levels of symbolic links")
			}
			target, err := os.Readlink(dir)
			if err != nil {
				return "", err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(dir), target)
			}
			return resolveExisting(filepath.Join(target, rest), links+1)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			// Only reached if "/" itself does not resolve.
			return filepath.Join(dir, rest), nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// within reports whether the clean absolute path p is root or below it.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// relTo names the resolved path p for outputs: relative to root, with
// slashes, "." for the root itself. Outputs never show the host's layout.
func relTo(root, p string) string {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(rel)
}
