package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one program of the cluster: a Temporal service, PostgreSQL,
// a toolgate worker or serve. It can be killed with -9 and started again
// with the same arguments, ports and data.
type Process struct {
	// Name says which one it is in logs and errors ("history", "worker-2").
	Name string

	path  string
	args  []string
	env   []string
	dir   string
	cred  *syscall.Credential
	ready func(ctx context.Context, output func() string) error

	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *logBuffer
	exited chan struct{}
}

// readyTimeout bounds a start: the slowest is the first history start on
// an empty database.
const readyTimeout = 2 * time.Minute

// Start runs the program and returns once it is ready. Output of every
// run is kept in one buffer (Output).
func (p *Process) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.out == nil {
		p.out = &logBuffer{}
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Dir, cmd.Env = p.dir, p.env
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// Its own process group, so a kill reaches what it started (PostgreSQL's
	// backends) and a Ctrl-C of the test run is not delivered twice.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	fmt.Fprintf(p.out, "=== %s: start %s %v\n", time.Now().Format(time.TimeOnly), p.path, p.args)
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("%s: start: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	readyErr := make(chan error, 1)
	go func() { readyErr <- p.ready(ctx, p.out.String) }()
	select {
	case err := <-readyErr:
		if err != nil {
			p.Kill()
			return fmt.Errorf("%s not ready: %w\n%s", p.Name, err, p.out.Tail(4000))
		}
		return nil
	case <-exited:
		cancel()
		<-readyErr
		return fmt.Errorf("%s exited before it was ready (%s):\n%s", p.Name, cmd.ProcessState, p.out.Tail(4000))
	}
}

// Kill sends SIGKILL to the process group and waits for the process to
// exit: nothing is flushed or stopped cleanly. Killing a stopped process
// does nothing.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
}

// Stop sends SIGTERM and waits up to a minute for the exit, then kills.
// It returns the exit's error, if any.
func (p *Process) Stop() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		p.Kill()
		return fmt.Errorf("%s did not stop within a minute of SIGTERM", p.Name)
	}
	if !cmd.ProcessState.Success() {
		return fmt.Errorf("%s: %s after SIGTERM", p.Name, cmd.ProcessState)
	}
	return nil
}

// Restart kills the process with -9 and starts it again.
func (p *Process) Restart(ctx context.Context) error {
	p.Kill()
	return p.Start(ctx)
}

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	<-exited
}

// PID is the process ID of the current run, 0 when it is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Output is what every run of the process printed.
func (p *Process) Output() string {
	p.mu.Lock()
	out := p.out
	p.mu.Unlock()
	if out == nil {
		return ""
	}
	return out.String()
}

// logBuffer is a process's output, safe to write and read at once.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail is the last n bytes of the output.
func (l *logBuffer) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// poll calls check every interval until it returns nil or ctx ends.
func poll(ctx context.Context, interval time.Duration, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// printed is a readiness check: the process's current run printed line.
func printed(line string) func(context.Context, func() string) error {
	return func(ctx context.Context, output func() string) error {
		return poll(ctx, pollInterval, func() error {
			// The current run only: a restart prints the line again.
			runs := strings.Split(output(), "=== ")
			if strings.Contains(runs[len(runs)-1], line) {
				return nil
			}
			return errNotYet
		})
	}
}

// errNotYet is a readiness check that has not passed yet.
var errNotYet = errors.New("not ready yet")

// baseEnv is the environment of every process: the test's, without
// Temporal connection settings that would point toolgate elsewhere.
func baseEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TEMPORAL_") && !strings.HasPrefix(kv, "TOOLGATE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
