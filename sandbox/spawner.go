package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A Spawner starts commands in one sandbox, set once: a helper process (the
// launcher in its spawner role) confines itself to the Spawner's policy
// when it starts, then forks each command it is sent. A command then costs
// what it costs unconfined (a fork and an exec), not a Go program's start
// as well, and everything the helper starts inherits its confinement.
//
// Each command is born in a sandbox of its own, nested in the helper's
// (Spec.Policy, or the Spawner's policy again): it cannot trace or signal
// the helper or another command, so it cannot read another's output or
// environment, or end it. The helper is not dumpable either.
//
// The helper talks over a socket pair: each request carries the command
// and, beside it, its stdout and stderr (SCM_RIGHTS); the helper answers
// with the process's ID, then its exit. It exits when the socket closes,
// so it never outlives the process that started it; what it started lives
// on in the caller's process group until the caller kills the group.
type Spawner struct {
	policy Policy

	mu      sync.Mutex
	conn    *net.UnixConn
	helper  *exec.Cmd
	next    uint64
	waiting map[uint64]chan spawnReply
	writeMu sync.Mutex
}

// NewSpawner returns a Spawner for p; its helper starts on first use.
func NewSpawner(p Policy) *Spawner { return &Spawner{policy: p} }

// Spec is one command for a Spawner.
type Spec struct {
	Path string   `json:"path"` // absolute
	Args []string `json:"args"` // Args[0] included
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
	// Pgid is the process group the command joins (it must exist).
	Pgid int `json:"pgid"`
	// Policy, when set, is this command's own sandbox, nested in the
	// Spawner's: it can narrow the Spawner's policy, never widen it.
	Policy *Policy `json:"policy,omitempty"`
	// Stdout and Stderr receive its output; stdin is /dev/null.
	Stdout, Stderr *os.File `json:"-"`
}

// Exit is how a spawned command ended.
type Exit struct {
	// Code is its exit status, or 128+N for a command killed by signal N
	// (as shells say it).
	Code int `json:"code"`
	// Err is set when the helper could not wait for it.
	Err string `json:"err,omitempty"`
	// Lost: the helper ended while the command ran, so how it ended is
	// not known (the caller's kill of its group ends it).
	Lost bool `json:"-"`
}

// ErrLost is the error of a Start whose request reached the helper, which
// then ended before answering: the command may or may not have started.
var ErrLost = errors.New("sandbox: the spawner ended before it said whether the command started")

// SendError: the request never reached the helper (it had ended), so the
// command did not start; a Start again starts a new helper.
type SendError struct{ Err error }

func (e *SendError) Error() string { return "sandbox: the spawner is gone: " + e.Err.Error() }
func (e *SendError) Unwrap() error { return e.Err }

// spawnRequest and spawnReply are the socket's messages.
type spawnRequest struct {
	ID   uint64 `json:"id"`
	Spec Spec   `json:"spec"`
}

type spawnReply struct {
	ID      uint64 `json:"id"`
	Started bool   `json:"started,omitempty"` // the start's answer; else the exit
	Pid     int    `json:"pid,omitempty"`
	Err     string `json:"err,omitempty"` // the start failed
	Exit    *Exit  `json:"exit,omitempty"`
	lost    bool   // made by fail: the helper is gone
}

// maxMessage bounds a request (its command and environment).
const maxMessage = 4 << 20

// Start starts the command described by spec in the sandbox, returning
// its process ID and a channel that receives its exit.
func (s *Spawner) Start(spec Spec) (pid int, exited <-chan Exit, err error) {
	if spec.Stdout == nil || spec.Stderr == nil {
		return 0, nil, errors.New("sandbox: a spawned command needs its stdout and stderr")
	}
	replies, id, err := s.send(spec)
	if err != nil {
		return 0, nil, err
	}
	start := <-replies
	switch {
	case start.lost:
		return 0, nil, ErrLost
	case !start.Started:
		return 0, nil, fmt.Errorf("sandbox: start %s: %s", spec.Path, start.Err)
	}
	done := make(chan Exit, 1)
	go func() {
		r := <-replies
		if r.Exit == nil {
			r.Exit = &Exit{Code: -1, Err: r.Err, Lost: r.lost}
		}
		done <- *r.Exit
		s.forget(id)
	}()
	return start.Pid, done, nil
}

// send sends spec with its output files, starting the helper if needed.
func (s *Spawner) send(spec Spec) (chan spawnReply, uint64, error) {
	s.mu.Lock()
	if s.conn == nil {
		if err := s.startHelper(); err != nil {
			s.mu.Unlock()
			return nil, 0, err
		}
	}
	s.next++
	id, conn := s.next, s.conn
	replies := make(chan spawnReply, 2)
	s.waiting[id] = replies
	s.mu.Unlock()

	b, err := json.Marshal(spawnRequest{ID: id, Spec: spec})
	if err != nil || len(b) > maxMessage {
		s.forget(id)
		return nil, 0, fmt.Errorf("sandbox: the command is too large to send (%d bytes)", len(b))
	}
	rights := syscall.UnixRights(int(spec.Stdout.Fd()), int(spec.Stderr.Fd()))
	s.writeMu.Lock()
	_, _, err = conn.WriteMsgUnix(b, rights, nil)
	s.writeMu.Unlock()
	if err != nil {
		// Not sent, so not started: the next Start starts a new helper.
		s.forget(id)
		s.fail(conn, errors.New("sandbox: the spawner is gone"))
		return nil, 0, &SendError{err}
	}
	return replies, id, nil
}

// startHelper starts the helper process. s.mu is held.
func (s *Spawner) startHelper() error {
	launcher, _, err := Launcher()
	if err != nil {
		return err
	}
	if ABI() == 0 {
		return ErrNoLandlock
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: socket pair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner-helper")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close() // FileConn holds a copy
	if err != nil {
		return fmt.Errorf("sandbox: socket: %w", err)
	}
	b, _ := json.Marshal(s.policy)
	helper := exec.Command(launcher, spawnerRole, string(b))
	helper.ExtraFiles = []*os.File{theirs} // fd 3
	helper.Env = []string{}
	helper.Stderr = os.Stderr
	// A group of its own: a terminal's Ctrl-C or a signal to the worker's
	// group does not end it under running commands; it ends when the
	// worker's end closes the socket.
	helper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := helper.Start(); err != nil {
		fc.Close()
		return fmt.Errorf("sandbox: start the spawner: %w", err)
	}
	s.conn, s.helper, s.waiting = fc.(*net.UnixConn), helper, map[uint64]chan spawnReply{}
	go s.read(s.conn, helper)
	return nil
}

// read hands the helper's replies to their requests until it is gone.
func (s *Spawner) read(conn *net.UnixConn, helper *exec.Cmd) {
	buf := make([]byte, 64<<10)
	for {
		n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			break
		}
		var r spawnReply
		if json.Unmarshal(buf[:n], &r) != nil {
			continue
		}
		s.mu.Lock()
		ch := s.waiting[r.ID]
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	_ = helper.Wait()
	s.fail(conn, errors.New("sandbox: the spawner exited"))
}

// fail ends the helper behind conn: every command waiting on it hears
// so, and the next Start starts a new one.
func (s *Spawner) fail(conn *net.UnixConn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != conn {
		return
	}
	conn.Close()
	for id, ch := range s.waiting {
		for range 2 { // the start's answer and the exit, as far as unsent
			select {
			case ch <- spawnReply{ID: id, Err: err.Error(), lost: true}:
			default:
			}
		}
	}
	s.conn, s.waiting = nil, nil
}

func (s *Spawner) forget(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, id)
}

// Close stops the helper; commands it started are not killed.
func (s *Spawner) Close() {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		s.fail(conn, errors.New("sandbox: the spawner was closed"))
	}
}

// spawnerRole is the launcher's argument for the helper.
const spawnerRole = "__toolgate-sandbox-spawner"

// In a sandbox role, the main goroutine keeps the process's main thread
// (a LockOSThread in init holds it through main). Linux checks a signal to
// the process, and much of /proc, against that thread's credentials, so it
// must keep the helper's own sandbox: were a command's thread (runRequest)
// the main thread, that command could signal the helper.
func init() {
	if len(os.Args) > 1 && (os.Args[1] == spawnerRole || os.Args[1] == role) {
		runtime.LockOSThread()
	}
}

// serveSpawner is the helper: it confines itself to the policy in
// os.Args[2], then starts every command sent on fd 3 until it closes.
func serveSpawner() {
	var p Policy
	if err := json.Unmarshal([]byte(os.Args[2]), &p); err != nil {
		fail(fmt.Errorf("read the policy: %w", err))
	}
	syscall.CloseOnExec(3) // the commands never hold the socket
	f := os.NewFile(3, "spawner")
	fc, err := net.FileConn(f)
	if err != nil {
		fail(err)
	}
	conn := fc.(*net.UnixConn)
	// A sandbox that cannot be set refuses every command, saying why.
	refusal := ""
	if err := restrict(p); err != nil {
		refusal = "the sandbox cannot be set: " + err.Error()
	}
	// Not dumpable: nothing of its user's may trace it or read its memory
	// (Landlock already keeps its commands from it; this holds without).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		refusal = "the spawner cannot make itself undumpable: " + err.Error()
	}
	var writeMu sync.Mutex
	reply := func(r spawnReply) {
		b, _ := json.Marshal(r)
		writeMu.Lock()
		defer writeMu.Unlock()
		_, _, _ = conn.WriteMsgUnix(b, nil, nil)
	}
	buf, oob := make([]byte, maxMessage), make([]byte, syscall.CmsgSpace(2*4))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			os.Exit(0) // its starter is gone
		}
		files := receivedFiles(oob[:oobn])
		var req spawnRequest
		if err := json.Unmarshal(buf[:n], &req); err != nil || len(files) != 2 {
			closeFiles(files)
			reply(spawnReply{ID: req.ID, Err: "a malformed request"})
			continue
		}
		if refusal != "" {
			closeFiles(files)
			reply(spawnReply{ID: req.ID, Err: refusal})
			continue
		}
		go runRequest(req, files, p, reply)
	}
}

// runRequest starts one request's command in a sandbox of its own, nested in
// the helper's, and reports its start and exit. Its thread drops every
// capability and is confined, then ended with it: the command, forked
// from it, is born so.
func runRequest(req spawnRequest, files []*os.File, helper Policy, reply func(spawnReply)) {
	runtime.LockOSThread() // never unlocked: the thread ends with this call
	s, own := req.Spec, helper
	if unix.Gettid() == unix.Getpid() { // never: init holds the main thread
		closeFiles(files)
		reply(spawnReply{ID: req.ID, Err: "the spawner would confine its main thread to one command"})
		return
	}
	if s.Policy != nil {
		own = *s.Policy
	}
	if err := dropCapabilities(); err != nil {
		closeFiles(files)
		reply(spawnReply{ID: req.ID, Err: "the command's capabilities cannot be dropped: " + err.Error()})
		return
	}
	if err := restrictThread(own); err != nil {
		closeFiles(files)
		reply(spawnReply{ID: req.ID, Err: "the command's own sandbox cannot be set: " + err.Error()})
		return
	}
	cmd := &exec.Cmd{Path: s.Path, Args: s.Args, Dir: s.Dir, Env: s.Env, Stdout: files[0], Stderr: files[1],
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pgid: s.Pgid}}
	err := cmd.Start()
	closeFiles(files) // the command has its copies
	if err != nil {
		reply(spawnReply{ID: req.ID, Err: err.Error()})
		return
	}
	reply(spawnReply{ID: req.ID, Started: true, Pid: cmd.Process.Pid})
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		reply(spawnReply{ID: req.ID, Exit: &Exit{Code: -1, Err: err.Error()}})
		return
	}
	reply(spawnReply{ID: req.ID, Exit: &Exit{Code: ExitCode(cmd.ProcessState)}})
}

// receivedFiles are the files an SCM_RIGHTS message carried.
func receivedFiles(oob []byte) []*os.File {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "output"))
		}
	}
	return files
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// ExitCode is a process's exit status as shells say it: 128+N for one
// killed by signal N.
func ExitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
