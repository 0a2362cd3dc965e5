// Package integration runs the real toolgate binary against its embedded
// Temporal server: CLI verbs with their exit statuses, kill -9 and restart,
// several workers on one task queue. The test binary does not link the
// server; TestMain builds cmd/toolgate once.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/workflows"
)

var binary string

// spareKeys is a keyring for processes that never reach a toolgate of
// this suite (a hook pointed at a server that hangs or is down): they
// must get past their keys to fail for the reason under test.
var spareKeys string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolgate-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "toolgate")
	build := exec.Command("go", "build", "-o", binary, "github.com/toolgate/toolgate/cmd/toolgate")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build toolgate:", err)
		os.Exit(1)
	}
	// The fast hook, next to toolgate, built as docs/coding-agents.md says.
	build = exec.Command("go", "build", "-o", filepath.Join(dir, "toolgate-hook"), "github.com/toolgate/toolgate/cmd/toolgate-hook")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build toolgate-hook:", err)
		os.Exit(1)
	}
	// The sandbox's launcher, next to toolgate, as go install puts it.
	build = exec.Command("go", "build", "-o", filepath.Join(dir, "toolgate-sandbox"), "github.com/toolgate/toolgate/cmd/toolgate-sandbox")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build toolgate-sandbox:", err)
		os.Exit(1)
	}
	spareKeys = filepath.Join(dir, "spare-keys.json")
	if _, _, err := keyring.LoadOrCreate(spareKeys); err != nil {
		fmt.Fprintln(os.Stderr, "keyring:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running toolgate process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// devReady is the last line of toolgate dev's banner: waiting for it, not
// the first, leaves the whole banner in the process's output.
const devReady = "Stop with Ctrl-C."

// start runs the binary with args and waits until its output contains
// ready.
func start(t *testing.T, ready string, args ...string) *proc {
	t.Helper()
	return startIn(t, "", nil, ready, args...)
}

// startIn is start in the directory dir ("": the test's) with env added
// to the environment.
func startIn(t *testing.T, dir string, env []string, ready string, args ...string) *proc {
	t.Helper()
	return startProgram(t, binary, dir, env, ready, args...)
}

// startProgram is startIn for the toolgate binary at bin (a copy beside
// companions the other tests' processes do not have).
func startProgram(t *testing.T, bin, dir string, env []string, ready string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(bin, args...), out: &syncBuffer{}, exited: make(chan struct{})}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	p.cmd.Dir = dir
	p.cmd.Env = append(append(os.Environ(), "TEMPORAL_ADDRESS=", "TEMPORAL_NAMESPACE="), env...)
	require.NoError(t, p.cmd.Start())
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(p.out, sc.Text())
			if strings.Contains(sc.Text(), ready) {
				once.Do(func() { close(seen) })
			}
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		_ = pw.Close()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	select {
	case <-seen:
	case <-p.exited:
		t.Fatalf("toolgate %v exited before it was ready:\n%s", args, p.out)
	case <-time.After(90 * time.Second):
		t.Fatalf("toolgate %v not ready after 90s:\n%s", args, p.out)
	}
	return p
}

// kill sends SIGKILL: nothing is flushed, nothing is stopped cleanly.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("toolgate did not stop on SIGTERM:\n%s", p.out)
	}
	require.Equal(p.t, 0, p.cmd.ProcessState.ExitCode(), "clean exit on SIGTERM:\n%s", p.out)
}

// devEnv is one `toolgate dev` and the means to talk to it.
type devEnv struct {
	t         *testing.T
	dataDir   string
	workspace string
	port      int
	httpAddr  string
	dev       *proc
	// keys is the keyring the processes encrypt with; empty: toolgate
	// dev's, in the data dir. doorKey is the door key clients sign with;
	// empty: toolgate dev's.
	keys, doorKey string
}

// keysFile is the keyring clients need to read what the workers wrote.
func (d *devEnv) keysFile() string {
	if d.keys != "" {
		return d.keys
	}
	return filepath.Join(d.dataDir, "keys.json")
}

// doorKeyFile is toolgate dev's door key, which a serve replica of it and
// an operator's CLI sign with.
func (d *devEnv) doorKeyFile() string {
	if d.doorKey != "" {
		return d.doorKey
	}
	return filepath.Join(d.dataDir, "door-key.json")
}

// doorsFile is the doors file toolgate dev's worker trusts, which another
// worker of it is given.
func (d *devEnv) doorsFile() string {
	return filepath.Join(filepath.Dir(d.doorKeyFile()), "doors.json")
}

// operatorEnv points a toolgate command at dev as an operator: Temporal,
// the keyring and the door key.
func (d *devEnv) operatorEnv() []string {
	return []string{"TEMPORAL_ADDRESS=" + d.address(), "TEMPORAL_NAMESPACE=default", "TOOLGATE_KEYS=" + d.keysFile(), "TOOLGATE_DOOR_KEY=" + d.doorKeyFile()}
}

// door is the door the Go clients of a test sign as.
func (d *devEnv) door() *statement.Signer {
	d.t.Helper()
	s, err := statement.LoadSigner(d.doorKeyFile())
	require.NoError(d.t, err)
	return s
}

// handedOut holds every port freePort has returned in this test process:
// the kernel may hand a just-closed port out again at once, and a test that
// asked twice (a Temporal port and an HTTP port) must not get one port for
// both.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a port that was free a moment ago and that no earlier
// call in this process returned.
func freePort(t *testing.T) int {
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
}

func newDev(t *testing.T) *devEnv {
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.startDev()
	return d
}

func (d *devEnv) startDev() {
	d.dev = start(d.t, devReady, "dev", "--data-dir", d.dataDir,
		"--temporal-port", strconv.Itoa(d.port), "--http", d.httpAddr)
}

// in returns the environment reporting to a subtest's t.
func (d *devEnv) in(t *testing.T) *devEnv {
	c := *d
	c.t = t
	return &c
}

func (d *devEnv) address() string { return "127.0.0.1:" + strconv.Itoa(d.port) }

// result is one CLI invocation.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs a client verb against the dev server.
func (d *devEnv) cli(args ...string) result {
	d.t.Helper()
	return d.cliWith(nil, args...)
}

// cliWith runs a client verb with extra environment variables.
func (d *devEnv) cliWith(env []string, args ...string) result {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(append(os.Environ(), d.operatorEnv()...), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		exitErr, ok := err.(*exec.ExitError)
		require.True(d.t, ok, "run toolgate %v: %v", args, err)
		r.code = exitErr.ExitCode()
	}
	return r
}

// callJSON runs `toolgate call --json` and decodes the outcome.
func (d *devEnv) callJSON(wantCode int, args ...string) map[string]any {
	d.t.Helper()
	r := d.cli(append([]string{"call", "--json"}, args...)...)
	require.Equal(d.t, wantCode, r.code, "toolgate call %v\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
	var out map[string]any
	require.NoError(d.t, json.Unmarshal([]byte(r.stdout), &out), "stdout: %s", r.stdout)
	return out
}

// client is a Go client for checks the CLI does not print.
func (d *devEnv) client() *tgclient.Client {
	d.t.Helper()
	tc := d.temporal()
	d.t.Cleanup(tc.Close)
	return tgclient.New(tc, workflows.TaskQueue).WithDataConverter(keyring.DataConverter(d.keyring())).WithDoor(d.door())
}

// keyring is the keyring the processes encrypt with.
func (d *devEnv) keyring() *keyring.Keyring {
	d.t.Helper()
	k, err := keyring.Load(d.keysFile())
	require.NoError(d.t, err)
	return k
}

// temporal is a Temporal client that reads what the workers wrote.
func (d *devEnv) temporal() client.Client {
	d.t.Helper()
	opts := client.Options{HostPort: d.address(), Namespace: "default", Logger: quietLogger{}}
	keyring.Configure(&opts, d.keyring())
	tc, err := client.Dial(opts)
	require.NoError(d.t, err)
	return tc
}

// waitPending waits until the call waits for a person.
func (d *devEnv) waitPending(c *tgclient.Client, callID string) {
	d.t.Helper()
	require.Eventually(d.t, func() bool {
		st, err := c.Status(context.Background(), callID)
		return err == nil && st.State != nil && st.State.Status == workflows.StatusPending
	}, 30*time.Second, 20*time.Millisecond, "call %s never waited for a person", callID)
}

type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// startDevWithPolicy starts toolgate dev with the policy file's text, and
// any more flags.
func startDevWithPolicy(t *testing.T, policy string, flags ...string) *devEnv {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(policy), 0o644))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t)}
	d.httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.dev = start(t, devReady, append([]string{"dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", writeTokensFile(t, dir), "--policy", policyFile}, flags...)...)
	return d
}

// jsonLines reads a started command's stdout line by line as JSON objects
// (a line that is not one arrives as {"unparsed": line}); after the last
// line, exited receives the command's exit and lines is closed.
func jsonLines(cmd *exec.Cmd, stdout io.Reader) (lines chan map[string]any, exited chan error) {
	lines, exited = make(chan map[string]any, 16), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				line = map[string]any{"unparsed": sc.Text()}
			}
			lines <- line
		}
		exited <- cmd.Wait()
		close(lines)
	}()
	return lines, exited
}
