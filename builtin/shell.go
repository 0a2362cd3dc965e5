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

	// Our own pipes, not cmd.Stdout = writer: Wait then returns when the
	// shell exits, instead of waiting for every process holding the pipe.
	cmd, tmp, err := w.shellCommand(root, args.Command, in.Sandbox)
	if err != nil {
		closeAll(stdoutW, stderrW)
		return nil, tool.Permanent(err)
	}
	defer os.RemoveAll(tmp)
	cmd.Dir = root
	cmd.Env = append(shellEnv(root), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	err = cmd.Start()
	closeAll(stdoutW, stderrW) // the child has its copies
	if err != nil {
		return nil, fmt.Errorf("shell: start: %w", err)
	}

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
	waitErr := cmd.Wait()
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
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return nil, fmt.Errorf("shell: wait: %w", waitErr)
	}
	out := shellOutput{
		ExitCode:  exitCode(cmd.ProcessState),
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

// exitCode reports a process's exit status the way shells do: 128+signal
// for a process killed by a signal.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// shellCommand is the command that runs a shell command in the workspace
// root, with a private temporary directory (tmp, removed by the caller):
// confined by the sandbox to both, to the system's directories and to
// what the call's rule grants, or, with Unsandboxed, not at all.
func (w Workspace) shellCommand(root, command string, grant *policy.SandboxGrant) (cmd *exec.Cmd, tmp string, err error) {
	tmp, err = os.MkdirTemp("", "toolgate-shell-")
	if err != nil {
		return nil, "", fmt.Errorf("shell: make its temporary directory: %w", err)
	}
	if w.Unsandboxed {
		return exec.Command("/bin/sh", "-c", command), tmp, nil
	}
	p := sandbox.Policy{ReadWrite: []string{root, tmp}}
	if grant != nil {
		p.ReadWrite = append(p.ReadWrite, grant.Write...)
		p.ReadOnly, p.NoNetwork = grant.Read, grant.NoNetwork
	}
	cmd, err = sandbox.Command(p, "/bin/sh", "-c", command)
	if errors.Is(err, sandbox.ErrNoLandlock) {
		err = fmt.Errorf("shell: %w; toolgate runs no command unconfined unless its worker was started with --unsandboxed-tools", err)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, "", err
	}
	return cmd, tmp, nil
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
