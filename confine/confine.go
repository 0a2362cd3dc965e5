// Package confine keeps file access inside a workspace directory.
//
// It works in two steps. Resolve judges a path by its name: lexically
// ("..", absolute paths elsewhere) and through the symlinks that exist when
// it is called. That is all a policy can do before a call runs, and it
// gives clear refusals. But the tree may change between that check and the
// moment a tool opens the file (a process in the workspace can swap a
// directory for a symlink), so a Dir opens every file through os.Root,
// which refuses any path component, symlinks included, that leads out of
// the directory, whatever happens meanwhile. After opening, a Dir also
// reports where the file really is, read from the open descriptor rather
// than from its name, so that a caller can check that path once more
// (say, against protected paths) right before it acts.
//
// Where a file really is comes from /proc/self/fd, so Dir works on Linux
// only; elsewhere opening fails, and nothing is read or written.
package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrOutside is wrapped by the errors of paths that lead out of the
// workspace; test for it with errors.Is.
var ErrOutside = errors.New("outside the workspace")

// maxSymlinks bounds how many dangling symlinks Resolve follows by hand,
// like the kernel's ELOOP limit.
const maxSymlinks = 40

// Resolve turns p (relative to root, or absolute) into an absolute path
// whose existing part contains no symlinks, and refuses it when it is not
// root or below. root must be absolute and free of symlinks. The path need
// not exist: symlinks are resolved on its longest existing prefix, and a
// dangling symlink is followed to where it points, so creating the path
// cannot land outside root either. A refusal wraps ErrOutside and names p.
//
// Resolve reads the tree as it is now; open files through a Dir, which
// stays inside root even if the tree changes afterwards.
func Resolve(root, p string) (string, error) {
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
	if _, inside := Rel(root, resolved); !inside {
		return "", fmt.Errorf("path %q is %w", p, ErrOutside)
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

// Rel returns the clean absolute path p relative to root, with slashes
// ("." for root itself), and whether p is root or below it. It only
// compares names.
func Rel(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// Dir is an open directory of a workspace: the workspace root (Open) or a
// directory below it (OpenDir). Its methods never reach outside the
// workspace root, even while other processes change the tree. Close it
// when done.
type Dir struct {
	root *os.Root
	top  string // the workspace root's real path
	rel  string // this directory's real path relative to top, with slashes
}

// Open opens the workspace root dir, which may be relative or a symlink.
func Open(dir string) (*Dir, error) {
	if dir == "" {
		return nil, errors.New("workspace root is not set")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", dir, unwrapPath(err))
	}
	self, err := root.Open(".")
	if err == nil {
		var top string
		top, err = realPath(self)
		self.Close()
		if err == nil {
			return &Dir{root: root, top: top, rel: "."}, nil
		}
	}
	root.Close()
	return nil, fmt.Errorf("workspace root %q: %w", dir, err)
}

// Close releases the directory.
func (d *Dir) Close() error { return d.root.Close() }

// Top returns the real path of the workspace root: absolute, no symlinks.
func (d *Dir) Top() string { return d.top }

// Rel returns where this directory really is, relative to the workspace
// root with slashes; "." for the root.
func (d *Dir) Rel() string { return d.rel }

// Abs returns the absolute path of rel, a path relative to the workspace
// root such as Rel or OpenFile return.
func (d *Dir) Abs(rel string) string { return filepath.Join(d.top, filepath.FromSlash(rel)) }

// Resolve is Resolve on the workspace root, returning the path relative
// to the root with slashes, ready for the root's OpenFile or OpenDir.
func (d *Dir) Resolve(p string) (string, error) {
	abs, err := Resolve(d.top, p)
	if err != nil {
		return "", err
	}
	rel, _ := Rel(d.top, abs)
	return rel, nil
}

// Root returns the os.Root of the directory, for operations that need no
// check of where they land beyond staying in the workspace (Lstat,
// MkdirAll, Rename, Remove, ReadFile). Names given to it are relative to
// this directory; a plain name (no slash) cannot be redirected by changes
// to the tree above it.
func (d *Dir) Root() *os.Root { return d.root }

// MkdirAll creates the directory name (relative to this directory) and
// its missing parents, like os.MkdirAll, inside the workspace.
func (d *Dir) MkdirAll(name string, perm fs.FileMode) error {
	return outsideErr(d.root.MkdirAll(name, perm))
}

// OpenFile opens name (relative to this directory) like os.OpenFile, but
// never outside the workspace, and returns the file with where it really
// is, relative to the workspace root with slashes. Pass O_NONBLOCK when
// the file could be a FIFO, and check the type on the opened file.
func (d *Dir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, string, error) {
	f, err := d.root.OpenFile(name, flag, perm)
	if err != nil {
		return nil, "", outsideErr(err)
	}
	rel, err := d.locate(f)
	if err != nil {
		f.Close()
		return nil, "", err
	}
	return f, rel, nil
}

// OpenDir opens the directory name (relative to this directory). The
// result works on the directory that was opened, whatever later happens to
// its name.
func (d *Dir) OpenDir(name string) (*Dir, error) {
	// O_DIRECTORY refuses anything else at once; a FIFO would block.
	f, rel, err := d.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The descriptor's /proc entry opens the very directory that f is, not
	// whatever its name leads to by now.
	sub, err := os.OpenRoot(procPath(f))
	if err != nil {
		return nil, fmt.Errorf("open directory: %w", unwrapPath(err))
	}
	return &Dir{root: sub, top: d.top, rel: rel}, nil
}

// locate returns where the open file f really is, relative to the
// workspace root, and refuses it when that is outside.
func (d *Dir) locate(f *os.File) (string, error) {
	p, err := realPath(f)
	if err != nil {
		return "", err
	}
	rel, inside := Rel(d.top, p)
	if !inside {
		return "", ErrOutside
	}
	return rel, nil
}

// realPath returns where the open file f is now, read from its descriptor.
func realPath(f *os.File) (string, error) {
	p, err := os.Readlink(procPath(f))
	if err != nil {
		return "", fmt.Errorf("find where the opened file is: %w", unwrapPath(err))
	}
	if !filepath.IsAbs(p) {
		// Not a path in this file system (say, a socket); it has no place
		// in the workspace.
		return "", fmt.Errorf("find where the opened file is: %q is not a path", p)
	}
	return p, nil
}

// procPath names f's descriptor under /proc/self/fd.
func procPath(f *os.File) string {
	var fd uintptr
	// Control, unlike Fd, leaves the descriptor's blocking mode alone.
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Control(func(d uintptr) { fd = d })
	}
	if err != nil {
		return "/proc/self/fd/-1" // f is closed; opening this fails
	}
	return path.Join("/proc/self/fd", fmt.Sprint(fd))
}

// outsideErr turns os.Root's refusal of a path that leaves the root into
// ErrOutside, keeping the operation. os does not export its error.
func outsideErr(err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent" {
		return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: ErrOutside}
	}
	return err
}

// unwrapPath drops the host path an os error carries.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
