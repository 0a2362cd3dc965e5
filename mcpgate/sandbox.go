package mcpgate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/sandbox"
)

// A stdio server runs in a Landlock sandbox (package sandbox). It reads
// and writes its roots and "sandbox": {"write"} directories and a private
// TMPDIR; it reads and executes the system's directories (sandbox.System),
// its "sandbox": {"read"} directories and its own program (programDirs);
// it reaches nothing else: not toolgate's files, not the user's home. The
// sandbox is worked out once, when the worker starts the server, and every
// restart runs in the same one.

// box is a stdio server's sandbox.
type box struct {
	policy sandbox.Policy
	tmp    string // its private TMPDIR, removed when the server closes
}

// packageFiles mark a directory as a program's package: the nearest one
// above a program file is what it reads.
var packageFiles = []string{"package.json", "go.mod", "pyproject.toml"}

// pathVars are the variables of a server's "env" whose directories hold
// its program's modules.
var pathVars = []string{"NODE_PATH", "PYTHONPATH"}

// confine works out the sandbox of a stdio server, or refuses to start
// it: a grant that reaches toolgate's own files, a directory that is
// missing, a kernel without Landlock (unless UpstreamOptions.Unsandboxed).
func (u *upstream) confine() error {
	if u.srv.Type != TypeStdio {
		return nil
	}
	if u.opts.Unsandboxed {
		u.logger.Warn("MCP server runs UNSANDBOXED (--unsandboxed-tools): it reaches everything this process's user reaches, toolgate's keys included")
		return nil
	}
	s := u.srv
	programs, err := programDirs(s, stdioEnv(s.Env))
	if err != nil {
		return err
	}
	grants := []struct {
		what string
		dirs []string
	}{{"root", s.Roots}, {"sandbox.write", s.Sandbox.Write}, {"sandbox.read", s.Sandbox.Read}, {"program directory", programs}}
	for _, g := range grants {
		for _, dir := range g.dirs {
			if err := (sandbox.Policy{ReadOnly: []string{dir}}).Overlap(u.opts.Own); err != nil {
				return fmt.Errorf("%s %w", g.what, err)
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s %s is not a directory: its sandbox opens directories that exist", g.what, dir)
			}
		}
	}
	abi := sandbox.ABI()
	switch {
	case abi == 0:
		return fmt.Errorf("%w; toolgate starts no MCP stdio server unconfined unless its worker was started with --unsandboxed-tools", sandbox.ErrNoLandlock)
	case s.Sandbox.NoNetwork && abi < sandbox.NetworkABI:
		return fmt.Errorf(`"network": false needs Landlock ABI %d to turn the network off, and this kernel's is %d`, sandbox.NetworkABI, abi)
	}
	tmp, err := os.MkdirTemp("", "toolgate-mcp-"+s.Name+"-")
	if err != nil {
		return fmt.Errorf("private TMPDIR: %w", err)
	}
	if err := (sandbox.Policy{ReadWrite: []string{tmp}}).Overlap(u.opts.Own); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("private TMPDIR %w", err)
	}
	p := sandbox.Policy{
		ReadWrite: dedupe(slices.Concat(s.Roots, s.Sandbox.Write, []string{tmp})),
		ReadOnly:  dedupe(slices.Concat(s.Sandbox.Read, programs)),
		NoNetwork: s.Sandbox.NoNetwork,
	}
	u.box = &box{policy: p, tmp: tmp}
	u.logger.Info("MCP server sandboxed", zap.Strings("readWrite", p.ReadWrite), zap.Strings("readOnly", p.ReadOnly),
		zap.Bool("network", !p.NoNetwork), zap.Int("landlockABI", abi))
	return nil
}

// command is the process of one connection: the server's command in its
// sandbox (the same for every restart), or unconfined.
func (u *upstream) command() (*exec.Cmd, error) {
	env := stdioEnv(u.srv.Env)
	if u.box == nil {
		cmd := exec.Command(u.srv.Command, u.srv.Args...)
		cmd.Env = env
		return cmd, nil
	}
	cmd, err := sandbox.Command(u.box.policy, u.srv.Command, u.srv.Args...)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(env, "TMPDIR="+u.box.tmp) // the last value of a variable counts
	return cmd, nil
}

// removeTmp removes the server's private TMPDIR once it has stopped.
func (u *upstream) removeTmp() {
	if u.box == nil {
		return
	}
	if err := os.RemoveAll(u.box.tmp); err != nil {
		u.logger.Warn("MCP server's TMPDIR not removed", zap.String("dir", u.box.tmp), zap.Error(err))
	}
}

// programDirs are the directories of a stdio server's own program, which
// its sandbox lets it read and execute:
//   - for its command (found in the PATH of its environment, symlinks
//     resolved) and for each argument that is an existing file (a script
//     such as node's .../server-filesystem/dist/index.js, a settings file),
//     programDir;
//   - the directories of NODE_PATH and PYTHONPATH in its "env".
//
// Files and directories it reaches anyway (the system's directories, its
// roots and grants) add nothing.
func programDirs(s UpstreamServer, env []string) ([]string, error) {
	command, err := lookPath(s.Command, envValue(env, "PATH"))
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", s.Command, err)
	}
	files := []string{command}
	for _, arg := range s.Args {
		if fi, err := os.Stat(arg); err == nil && fi.Mode().IsRegular() {
			files = append(files, arg)
		}
	}
	reached := slices.Concat(sandbox.System, s.Roots, s.Sandbox.Write, s.Sandbox.Read)
	home, _ := os.UserHomeDir()
	var dirs []string
	for _, f := range files {
		f = sandbox.Resolved(f)
		if reaches(reached, f) {
			continue
		}
		dir, err := programDir(f, home)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, dir)
	}
	for _, v := range pathVars {
		for _, dir := range filepath.SplitList(s.Env[v]) {
			if fi, err := os.Stat(dir); err == nil && fi.IsDir() && filepath.IsAbs(dir) && !reaches(reached, sandbox.Resolved(dir)) {
				dirs = append(dirs, sandbox.Resolved(dir))
			}
		}
	}
	return dedupe(dirs), nil
}

// programDir is the directory that holds the program file file: for a
// file in a node_modules directory, the outermost one (the package and the
// dependencies installed beside it); else the nearest directory above it
// with a package file (package.json, go.mod, pyproject.toml); else its own
// directory. It is never the user's home, a directory holding it, or /:
// a program lying directly in one is refused.
func programDir(file, home string) (string, error) {
	if i := strings.Index(file, "/node_modules/"); i >= 0 {
		return file[:i+len("/node_modules")], nil
	}
	tooWide := func(dir string) bool {
		return dir == "/" || (home != "" && sandbox.Within(sandbox.Resolved(home), dir))
	}
	own := filepath.Dir(file)
	for dir := own; !tooWide(dir); dir = filepath.Dir(dir) {
		for _, name := range packageFiles {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return dir, nil
			}
		}
	}
	if tooWide(own) {
		return "", fmt.Errorf("program file %s lies directly in %s, which no sandbox opens: move it into a directory of its own, or grant one with \"sandbox\": {\"read\": [...]}", file, own)
	}
	return own, nil
}

// lookPath finds the program name as the sandbox will (exec.LookPath with
// the server's PATH), absolute.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return executable(name)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if f, err := executable(filepath.Join(dir, name)); err == nil {
			return f, nil
		}
	}
	return "", errors.New("not found in the PATH of its environment")
}

// executable returns file, absolute, if it is an executable file.
func executable(file string) (string, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return "", err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", file)
	}
	return filepath.Abs(file)
}

// envValue is the value of variable name in env (its last).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// reaches reports whether path lies in one of dirs.
func reaches(dirs []string, path string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return sandbox.Within(path, sandbox.Resolved(d)) })
}

// dedupe is list without repeats, in order.
func dedupe(list []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
