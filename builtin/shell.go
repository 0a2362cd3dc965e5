package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/sandbox"
	"github.com/toolgate/toolgate/tool"
)

// Limits of the shell tool.
const (
	// DefaultShellTimeout applies when timeout_seconds is not given.
	DefaultShellTimeout = 30 * time.Second
	// MaxShellTimeout is the largest timeout_seconds accepted.
	MaxShellTimeout = 600 * time.Second
	// MaxShellOutput caps stdout and stderr, each; the rest is dropped and
	// the output says "truncated".
	MaxShellOutput = 64 << 10
)

// drainGrace is how long the shell tool waits, once the command's process
// group is gone, for output pipes still held by processes that left the
// group (setsid, daemons) before giving up on them.
const drainGrace = 2 * time.Second

// shellOutput is the shell tool's result.
type shellOutput struct {
	// ExitCode is the command's exit status, or 128+signal when it was
	// killed by a signal (as shells report it).
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timed_out"`
}

// runShell runs the command with /bin/sh -c in the workspace root, in a
// process group of its own. On timeout or cancellation the whole group is
// killed; when the shell exits, whatever it left running in the group is
// killed too, so no call leaves processes behind; and if the worker dies,
// even by SIGKILL, the group's sentinel kills the group. The environment is
// minimal (PATH, HOME=workspace root, PWD): the worker's own variables,
// which may hold credentials, are not passed on.
func (w Workspace) runShell(ctx context.Context, in tool.Input) (json.RawMessage, error) {
	var args struct {
		Command        string `json:"command"`
		TimeoutSeconds *int   `json:"timeout_seconds"`
	}
	if err := decodeArgs(in.Args, &args); err != nil {
		return nil, err
	}
	if args.Command == "" {
		return nil, tool.Permanent(errors.New("decode arguments: command is required"))
	}
	timeout := DefaultShellTimeout
	if args.TimeoutSeconds != nil {
		t := time.Duration(*args.TimeoutSeconds) * time.Second
		if t < time.Second || t > MaxShellTimeout {
			return nil, tool.Permanent(fmt.Errorf("timeout_seconds %d is not between 1 and %d", *args.TimeoutSeconds, int(MaxShellTimeout/time.Second)))
		}
		timeout = t
	}
	root, err := w.root()
	if err != nil {
		return nil, tool.Permanent(err)
	}

	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("shell: create pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return nil, fmt.Errorf("shell: create pipe: %w", err)
	}
	closeAll := func(files ...*os.File) {
		for _, f := range files {
			_ = f.Close() // a second close only reports os.ErrClosed
		}
	}
	defer closeAll(stdoutR, stderrR)

	pgid, stopSentinel, err := startSentinel()
	if err != nil {
		closeAll(stdoutW, stderrW)
		return nil, fmt.Errorf("shell: start the process group: %w", err)
	}
	defer stopSentinel()
	killGroup := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

	// Our own pipes, not cmd.Stdout = writer: the wait then returns when
	// the shell exits, instead of waiting for every process holding them.
	sh := shellStart{root: root, command: args.Command, pgid: pgid, stdout: stdoutW, stderr: stderrW}
	wait, tmp, err := w.startShell(sh, in.Sandbox)
	closeAll(stdoutW, stderrW) // the child has its copies
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	var stdout, stderr cappedBuffer
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(&stdout, stdoutR) })
	readers.Go(func() { _, _ = io.Copy(&stderr, stderrR) })

	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var killed atomic.Bool
	exited := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-tctx.Done():
			killed.Store(true)
			killGroup()
		case <-exited:
		}
	}()
	code, waitErr := wait()
	close(exited)
	<-watcherDone
	// Kill what the command left running in its group.
	killGroup()

	drained := make(chan struct{})
	go func() {
		readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		closeAll(stdoutR, stderrR) // unblocks the readers
		<-drained
	}

	if killed.Load() && ctx.Err() != nil {
		return nil, fmt.Errorf("shell: %w", context.Cause(ctx))
	}
	if waitErr != nil {
		return nil, fmt.Errorf("shell: wait: %w", waitErr)
	}
	out := shellOutput{
		ExitCode:  code,
		Stdout:    stdout.String(),
		Stderr:    stderr.String(),
		Truncated: stdout.truncated || stderr.truncated,
		TimedOut:  killed.Load(),
	}
	return marshal(out)
}

// startSentinel starts the leader of a new process group for a shell
// command: a shell that reads a pipe whose only writer is this process
// and, at its end, kills the group. When this process dies, even by
// SIGKILL, the kernel closes the pipe, so the command dies with the worker
// instead of running on. (SysProcAttr.Pdeathsig would only signal the
// shell itself, not what it started.) Until stop reaps the sentinel, pgid
// names this group and no other. stop closes the pipe, kills the group and
// reaps the sentinel.
func startSentinel() (pgid int, stop func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	sentinel := exec.Command("/bin/sh", "-c", "read _; kill -s KILL 0")
	sentinel.Stdin = r
	sentinel.Env = []string{}
	sentinel.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = sentinel.Start()
	r.Close()
	if err != nil {
		w.Close()
		return 0, nil, err
	}
	pgid = sentinel.Process.Pid
	return pgid, func() {
		// Closing w here also keeps it reachable until now: its finalizer
		// would otherwise close it, and kill the command, at any GC.
		w.Close()
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = sentinel.Wait()
	}, nil
}

// shellStart is one shell command to start: in root, joining process
// group pgid, writing to stdout and stderr.
type shellStart struct {
	root, command  string
	pgid           int
	stdout, stderr *os.File
}

// startShell starts a shell command with a private temporary directory
// (tmp, removed by the caller): confined by the sandbox to the workspace,
// tmp, the system's directories and what the call's rule grants, or, with
// Unsandboxed, not at all. wait returns its exit status as shells say it.
func (w Workspace) startShell(sh shellStart, grant *policy.SandboxGrant) (wait func() (int, error), tmp string, err error) {
	argv := []string{"/bin/sh", "-c", sh.command}
	if w.Unsandboxed {
		if tmp, err = os.MkdirTemp("", "toolgate-shell-"); err != nil {
			return nil, "", fmt.Errorf("shell: make its temporary directory: %w", err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = sh.root, append(shellEnv(sh.root), "TMPDIR="+tmp)
		cmd.Stdout, cmd.Stderr = sh.stdout, sh.stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: sh.pgid}
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(tmp)
			return nil, "", fmt.Errorf("shell: start: %w", err)
		}
		return func() (int, error) {
			var exitErr *exec.ExitError
			if err := cmd.Wait(); err != nil && !errors.As(err, &exitErr) {
				return 0, err
			}
			return sandbox.ExitCode(cmd.ProcessState), nil
		}, tmp, nil
	}
	sp, err := shellSpawners.get(sh.root, grant)
	if err == nil {
		tmp, err = os.MkdirTemp(sp.tmp, "call-")
	}
	if err != nil {
		return nil, "", tool.Permanent(fmt.Errorf("shell: make its sandbox: %w", err))
	}
	own := shellPolicy(sh.root, tmp, grant) // its own temporary directory, not its neighbours'
	_, exited, err := sp.Start(sandbox.Spec{Path: argv[0], Args: argv, Dir: sh.root, Env: append(shellEnv(sh.root), "TMPDIR="+tmp),
		Pgid: sh.pgid, Stdout: sh.stdout, Stderr: sh.stderr, Policy: &own})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, "", startError(err)
	}
	return func() (int, error) {
		e := <-exited
		switch {
		case e.Lost:
			return 0, tool.OutcomeUnknown(errors.New("shell: the sandbox's helper ended while the command ran: it may or may not have had its effect"))
		case e.Err != "":
			return 0, errors.New(e.Err)
		}
		return e.Code, nil
	}, tmp, nil
}

// startError is the shell tool's error for a sandboxed command that did
// not start: one the helper never received is tried again, in a new
// helper; one it received before it ended may have run; a refusal is
// final.
func startError(err error) error {
	var sent *sandbox.SendError
	switch {
	case errors.As(err, &sent):
		return fmt.Errorf("shell: %w", err)
	case errors.Is(err, sandbox.ErrLost):
		// The command may have started before the helper ended: the
		// same words as a helper lost while the command ran.
		return tool.OutcomeUnknown(fmt.Errorf("shell: %w: it may or may not have had its effect", err))
	case errors.Is(err, sandbox.ErrNoLandlock):
		err = fmt.Errorf("%w; toolgate runs no command unconfined unless its worker was started with --unsandboxed-tools", err)
	}
	return tool.Permanent(fmt.Errorf("shell: %w", err))
}

// shellPolicy is the sandbox of shell commands in root under grant, with
// tmp as their temporary directory.
func shellPolicy(root, tmp string, grant *policy.SandboxGrant) sandbox.Policy {
	p := sandbox.Policy{ReadWrite: []string{root, tmp}}
	if grant != nil {
		p.ReadWrite = append(p.ReadWrite, grant.Write...)
		p.ReadOnly, p.NoNetwork = grant.Read, grant.NoNetwork
	}
	return p
}

// shellSpawners are the sandboxes the shell tool's commands start in, one
// per workspace and grant, each set once for the worker's life
// (sandbox.Spawner): a command then costs a fork and an exec, as
// unconfined. Each command is held, within it, to its own temporary
// directory under the sandbox's temporary root.
var shellSpawners = spawnerSet{byPolicy: map[string]*shellSpawner{}}

type spawnerSet struct {
	mu       sync.Mutex
	byPolicy map[string]*shellSpawner
}

type shellSpawner struct {
	*sandbox.Spawner
	tmp string // the root of its commands' TMPDIRs
}

// get returns the sandbox for commands in root under grant.
func (s *spawnerSet) get(root string, grant *policy.SandboxGrant) (*shellSpawner, error) {
	key, err := json.Marshal(struct {
		Root  string               `json:"root"`
		Grant *policy.SandboxGrant `json:"grant"`
	}{root, grant})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp := s.byPolicy[string(key)]; sp != nil {
		if _, err := os.Stat(sp.tmp); err == nil {
			return sp, nil
		}
		sp.Close() // its temporary root was removed: start afresh
	}
	tmp, err := os.MkdirTemp("", "toolgate-shell-")
	if err != nil {
		return nil, err
	}
	sp := &shellSpawner{Spawner: sandbox.NewSpawner(shellPolicy(root, tmp, grant)), tmp: tmp}
	s.byPolicy[string(key)] = sp
	return sp, nil
}

// CloseSandboxes ends the shell tool's sandbox helpers and removes their
// temporary roots, when the worker stops. Commands still running are not
// killed here: each call's own process group ends them.
func CloseSandboxes() {
	shellSpawners.mu.Lock()
	defer shellSpawners.mu.Unlock()
	for key, sp := range shellSpawners.byPolicy {
		sp.Close()
		_ = os.RemoveAll(sp.tmp)
		delete(shellSpawners.byPolicy, key)
	}
}

// process is how the shell tool's commands run (tool.Process).
func (w Workspace) process() tool.Process {
	if w.Unsandboxed {
		return tool.Unsandboxed
	}
	return tool.Sandboxed
}

// shellEnv is the environment of shell commands.
func shellEnv(root string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	return []string{"PATH=" + path, "HOME=" + root, "PWD=" + root}
}

// cappedBuffer keeps the first MaxShellOutput bytes written to it and
// drops the rest, still accepting them so the writer never blocks.
type cappedBuffer struct {
	buf       []byte
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	room := MaxShellOutput - len(b.buf)
	if len(p) > room {
		b.buf = append(b.buf, p[:room]...)
		b.truncated = true
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

// String returns the kept output; a UTF-8 sequence cut by the cap is
// dropped, other invalid bytes become U+FFFD when encoded.
func (b *cappedBuffer) String() string {
	s := b.buf
	if b.truncated {
		s = trimPartialRune(s)
	}
	return string(s)
}
