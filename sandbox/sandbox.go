// Package sandbox runs a process toolgate starts for a tool (the shell
// tool's command, an MCP upstream) confined by Linux's Landlock: it reads
// and writes its workspace, reads and executes the system's directories
// and its own program, and reaches nothing else: not toolgate's data
// directory, keyring, ledger key, tokens or databases, not the user's home.
// The confinement holds for the process and everything it starts, without
// root.
//
// Landlock confines the process that asks, so the worker does not confine
// itself: Command starts a small program in the sandbox role (Enter),
// which confines itself with the highest Landlock ABI the kernel offers
// and then becomes the tool's program (execve). That program is
// toolgate-sandbox beside toolgate's binary when it is there (it starts
// in a millisecond), or else toolgate's own binary (which starts in
// hundreds: it links the embedded Temporal server).
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Policy is what a sandboxed process may reach.
type Policy struct {
	// ReadWrite are directories it reads and writes (the workspace).
	ReadWrite []string `json:"read_write,omitempty"`
	// ReadOnly are directories it reads and executes, beside System.
	ReadOnly []string `json:"read_only,omitempty"`
	// NoNetwork refuses it every TCP connect and bind (Landlock ABI 4 and
	// later; on an older kernel the process does not start). The default
	// allows the network: builds fetch their dependencies.
	NoNetwork bool `json:"no_network,omitempty"`
}

// NetworkABI is the first Landlock ABI with TCP rules.
const NetworkABI = 4

// Overlap returns an error naming the first path of p that is, holds or
// lies inside one of own (toolgate's own files and directories): a grant
// that would hand a tool toolgate's authority. Paths are compared after
// cleaning and resolving symlinks where they exist.
func (p Policy) Overlap(own []string) error {
	for _, g := range append(append([]string(nil), p.ReadWrite...), p.ReadOnly...) {
		for _, o := range own {
			if o == "" {
				continue
			}
			if Within(Resolved(g), Resolved(o)) || Within(Resolved(o), Resolved(g)) {
				return fmt.Errorf("%s overlaps toolgate's own files: a tool given it could read toolgate's keys or databases", g)
			}
		}
	}
	return nil
}

// Resolved is path made absolute and clean, its symlinks resolved when it
// exists.
func Resolved(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	return abs
}

// Within reports whether path is dir or lies inside it (both absolute
// and clean, as Resolved makes them).
func Within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// System are the directories every sandboxed process reads and executes:
// programs, libraries, configuration, and the kernel's views of itself.
// Those that do not exist are skipped.
var System = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys"}

// devices a sandboxed process may read and write.
// Not /dev/tty: a tool has no terminal to talk to, and the worker's own
// could be fed keystrokes.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// NoLandlockVar, set to 1, makes ABI report 0 as a kernel without
// Landlock would: the tests' way to see toolgate refuse to run tools
// unconfined. It can only take the sandbox away from tools, never run
// them unconfined.
const NoLandlockVar = "TOOLGATE_TEST_NO_LANDLOCK"

// ABI is the Landlock ABI the kernel offers; 0: none (an old kernel,
// Landlock disabled, not Linux).
func ABI() int {
	if os.Getenv(NoLandlockVar) == "1" {
		return 0
	}
	v, err := llsyscall.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// ErrNoLandlock: the kernel offers no Landlock, so nothing can be
// confined.
var ErrNoLandlock = errors.New("this kernel offers no Landlock: a tool's process cannot be confined")

// role is the argument that starts toolgate's binary as the sandbox, and
// policyVar the environment variable that hands it its policy.
const (
	role      = "__toolgate-sandbox"
	policyVar = "TOOLGATE_SANDBOX_POLICY"
)

// Command returns the command that runs name with args inside p: toolgate's
// own binary in its sandbox role, which confines itself, then runs name.
// The caller sets its directory, environment and pipes as for any command.
func Command(p Policy, name string, args ...string) (*exec.Cmd, error) {
	if ABI() == 0 {
		return nil, ErrNoLandlock
	}
	launcher, _, err := Launcher()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(launcher, append([]string{role, string(b), "--", name}, args...)...)
	return cmd, nil
}

// LauncherName is the small program, beside toolgate's binary, that
// Command starts in the sandbox role when it is there.
const LauncherName = "toolgate-sandbox"

var launcher struct {
	once  sync.Once
	path  string
	small bool
	err   error
}

// Launcher is the program Command starts in the sandbox role: small says
// it is toolgate-sandbox, found beside this process's binary (never on
// PATH, where a tool could put one), rather than this binary itself.
func Launcher() (path string, small bool, err error) {
	launcher.once.Do(func() {
		self, err := os.Executable()
		if err != nil {
			launcher.err = fmt.Errorf("sandbox: find toolgate's own program: %w", err)
			return
		}
		launcher.path, launcher.small = launcherFor(self)
	})
	return launcher.path, launcher.small, launcher.err
}

// launcherFor is the launcher of the program self: the executable
// toolgate-sandbox beside it, or self.
func launcherFor(self string) (path string, small bool) {
	beside := filepath.Join(filepath.Dir(self), LauncherName)
	if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return beside, true
	}
	return self, false
}

// Enter is the sandbox role: when toolgate's binary was started by
// Command, it confines itself and becomes the tool's program, and never
// returns; otherwise it returns at once. Call it first in main.
func Enter() {
	if len(os.Args) == 3 && os.Args[1] == spawnerRole {
		serveSpawner() // a Spawner's helper; never returns
	}
	if len(os.Args) < 5 || os.Args[1] != role || os.Args[3] != "--" {
		return
	}
	var p Policy
	if err := json.Unmarshal([]byte(os.Args[2]), &p); err != nil {
		fail(fmt.Errorf("read the policy: %w", err))
	}
	name, args := os.Args[4], os.Args[4:]
	path, err := exec.LookPath(name)
	if err != nil {
		fail(err)
	}
	runtime.LockOSThread() // the thread that drops its capabilities executes the tool
	if err := dropCapabilities(); err != nil {
		fail(err)
	}
	if err := restrict(p); err != nil {
		fail(err)
	}
	fail(syscall.Exec(path, args, os.Environ()))
}

// restrict confines this process (every thread) to p, with the highest
// ABI the kernel offers: all of it, or an error.
func restrict(p Policy) error {
	cfg, rules, err := landlockOf(p)
	if err != nil {
		return err
	}
	return cfg.Restrict(rules...)
}

// restrictThread confines the calling thread, only, to p: a Landlock
// domain nested in the process's own, which a process forked from this
// thread is born in. The caller has locked the goroutine to its thread
// (runtime.LockOSThread) and never unlocks it, so the Go runtime ends the
// thread with the goroutine instead of reusing it.
func restrictThread(p Policy) error {
	cfg, rules, err := landlockOf(p)
	if err != nil {
		return err
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	// no_new_privs, which Landlock requires, is already set: threads
	// inherit it from the process's own confinement.
	return llsyscall.LandlockRestrictSelf(fd, flags)
}

// landlockOf is p as Landlock's configuration and rules, at the highest
// ABI the kernel offers. From ABI 6 the sandbox is also scoped: a process
// in it cannot signal, nor reach by an abstract socket, anything outside
// it (the worker, the server, another tool's sandbox). Landlock keeps it
// from tracing those, from ABI 1.
func landlockOf(p Policy) (landlock.Config, []landlock.Rule, error) {
	cfg, err := configFor(ABI())
	if err != nil {
		return cfg, nil, err
	}
	rules := []landlock.Rule{
		landlock.RODirs(System...).IgnoreIfMissing(),
		landlock.RWFiles(devices...).IgnoreIfMissing(),
	}
	if len(p.ReadOnly) > 0 {
		rules = append(rules, landlock.RODirs(p.ReadOnly...))
	}
	if len(p.ReadWrite) > 0 {
		rw := landlock.RWDirs(p.ReadWrite...)
		if ABI() >= 2 {
			rw = rw.WithRefer() // renames and links within the workspace
		}
		rules = append(rules, rw)
	}
	switch {
	case !p.NoNetwork:
		cfg.HandledAccessNet = 0 // the network is not restricted
	case ABI() < NetworkABI:
		return cfg, nil, fmt.Errorf("this kernel's Landlock (ABI %d) cannot turn the network off: ABI %d is needed", ABI(), NetworkABI)
	}
	// No network rules: with NoNetwork, no TCP connect or bind at all.
	return cfg, rules, nil
}

// configs are the Landlock ABIs go-landlock knows, oldest first.
var configs = []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}

// configFor is the configuration of ABI abi (the newest known, for a
// newer kernel).
func configFor(abi int) (landlock.Config, error) {
	switch {
	case abi < 1:
		return landlock.Config{}, ErrNoLandlock
	case abi > len(configs):
		abi = len(configs)
	}
	return configs[abi-1], nil
}

// fail ends the sandbox role: the tool does not run.
func fail(err error) {
	fmt.Fprintln(os.Stderr, "toolgate sandbox:", err)
	os.Exit(126)
}
