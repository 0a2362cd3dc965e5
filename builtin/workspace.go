// Package builtin holds built-in tools and the default policy, confined to
// a workspace directory.
//
// Every path an agent names is judged twice. Workspace.Resolve refuses
// paths that leave the workspace root lexically (".."), by being absolute
// elsewhere, or through a symlink; that gives clear refusals. Then the
// tools open the resolved path through the workspace root with package
// confine (os.Root), which cannot leave it even if a process in the
// workspace swaps a directory for a symlink in between, and ask
// Workspace.Guard about where the opened file really is, right before they
// read, list or write it.
package builtin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/confine"
)

// ErrOutsideWorkspace is wrapped by the errors of paths that escape the
// workspace; test for it with errors.Is. It is confine.ErrOutside.
var ErrOutsideWorkspace = confine.ErrOutside

// Workspace is the directory the built-in tools are confined to.
type Workspace struct {
	// Root is the workspace directory. It must exist; it may be relative
	// (to the worker's working directory) or a symlink.
	Root string
	// Guard, when set, is asked about every file and directory the tools
	// read, list or write, right before they do: path is where the opened
	// file really is (absolute, no symlinks), or for a new file where it
	// will be. An error refuses the call and goes back to the model. The
	// worker sets it to the policy file's check of protected paths
	// (rules.Policy.CheckPath), so that a file reached through a symlink
	// swapped in after the policy judged the call is refused too.
	// Optional: nil checks nothing beyond the workspace root.
	Guard func(path string) error
	// Unsandboxed runs the shell tool's commands without the sandbox
	// (package sandbox): they reach whatever the worker's user reaches.
	// Only an operator's explicit --unsandboxed-tools sets it; without it
	// a kernel with no Landlock runs no command.
	Unsandboxed bool
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
// Root or below (see confine.Resolve). A refusal wraps ErrOutsideWorkspace
// and names p.
func (w Workspace) Resolve(p string) (string, error) {
	root, err := w.root()
	if err != nil {
		return "", err
	}
	return confine.Resolve(root, p)
}
