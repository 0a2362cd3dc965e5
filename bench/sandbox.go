package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/builtin"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/sandbox"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

// sandboxQueue is the task queue of the bench's toolgate worker that runs
// the built-in shell tool, and toolShellUnsandboxed the name it gives the
// shell tool that runs without the sandbox (--unsandboxed-tools).
const (
	sandboxQueue         = "toolgate-bench-sandbox"
	toolShellUnsandboxed = "shell_unsandboxed"
)

// SandboxCost is what the Landlock sandbox adds to the built-in shell
// tool: the same command as an auto-approved call, sandboxed and
// unsandboxed, interleaved in one run; and the sandbox's fixed cost per
// command, through a sandbox set once, as the shell tool's.
type SandboxCost struct {
	// LandlockABI is the ABI the kernel offers; with 0 nothing was
	// measured and Skipped says why.
	LandlockABI int    `json:"landlock_abi"`
	Skipped     string `json:"skipped,omitempty"`
	// Sandboxed and Unsandboxed: an auto-approved call of the shell tool
	// running `echo hi`, from submission to result.
	Sandboxed       Latency `json:"sandboxed"`
	Unsandboxed     Latency `json:"unsandboxed"`
	SandboxedMean   float64 `json:"sandboxed_mean_ms"`
	UnsandboxedMean float64 `json:"unsandboxed_mean_ms"`
	// Start: /bin/true started and awaited through a sandbox.Spawner set
	// once (as the shell tool starts its commands); Exec: /bin/true
	// started and awaited directly.
	Start Latency `json:"start"`
	Exec  Latency `json:"exec"`
}

// shellArgs is the command both sides run.
var shellArgs = json.RawMessage(`{"command":"echo hi"}`)

// sandboxCost times the shell tool sandboxed against unsandboxed through
// a worker of its own, then the sandbox's start against a bare exec.
func (b *runner) sandboxCost(ctx context.Context, r *Report) error {
	s := &r.Sandbox
	if s.LandlockABI = sandbox.ABI(); s.LandlockABI == 0 {
		s.Skipped = sandbox.ErrNoLandlock.Error()
		return nil
	}
	root, err := os.MkdirTemp("", "toolgate-bench-workspace")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	stop, err := startSandboxWorker(b.tc, root)
	if err != nil {
		return err
	}
	defer stop()
	calls := tgclient.New(b.tc, sandboxQueue).WithDoor(benchDoor)
	shell := func(name string) func(context.Context) error {
		return func(ctx context.Context) error { return b.shellCall(ctx, calls, name) }
	}
	cases := []func(context.Context) error{shell(builtin.ShellTool), shell(toolShellUnsandboxed)}
	if _, err := rotated(ctx, 5, cases, nil); err != nil { // warm up
		return err
	}
	samples, err := rotated(ctx, b.o.Runs, cases, nil)
	if err != nil {
		return err
	}
	s.SandboxedMean, s.UnsandboxedMean = mean(samples[0]), mean(samples[1])
	s.Sandboxed, s.Unsandboxed = summarise(samples[0]), summarise(samples[1])

	spawner := sandbox.NewSpawner(sandbox.Policy{ReadWrite: []string{root}})
	defer spawner.Close()
	starts := []func(context.Context) error{
		func(context.Context) error { return spawnQuiet(spawner, root) },
		func(context.Context) error { return runQuiet(exec.Command("/bin/true")) },
	}
	samples, err = rotated(ctx, b.o.Runs, starts, nil)
	if err != nil {
		return err
	}
	s.Start, s.Exec = summarise(samples[0]), summarise(samples[1])
	return nil
}

// startSandboxWorker starts a toolgate worker with the built-in shell tool
// confined to root, sandboxed, and beside it the same tool unsandboxed.
func startSandboxWorker(tc client.Client, root string) (func(), error) {
	tools := tool.NewRegistry()
	for _, ws := range []builtin.Workspace{{Root: root}, {Root: root, Unsandboxed: true}} {
		for _, t := range builtin.Tools(ws) {
			if t.Name != builtin.ShellTool {
				continue
			}
			if ws.Unsandboxed {
				t.Name = toolShellUnsandboxed
			}
			tools.MustRegister(t)
		}
	}
	w, err := worker.New(tc, worker.Options{TaskQueue: sandboxQueue, Policy: benchPolicy{}, Tools: tools, Doors: benchDoors})
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, err
	}
	return w.Stop, nil
}

// shellCall runs `echo hi` with the shell tool name and checks that the
// command ran and printed hi: a sandbox that failed to start exits 126.
func (b *runner) shellCall(ctx context.Context, calls *tgclient.Client, name string) error {
	r, err := calls.Call(ctx, tgclient.CallRequest{Requester: benchAgent, Session: b.session("sandbox"), Tool: name, Args: shellArgs})
	if err != nil {
		return err
	}
	if r.Status != workflows.StatusOK {
		return fmt.Errorf("call %s: %s: %s", r.CallID, r.Status, r.Reason)
	}
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	if err := json.Unmarshal(r.Output, &out); err != nil {
		return fmt.Errorf("call %s: read the shell's output: %w", r.CallID, err)
	}
	if out.ExitCode != 0 || out.Stdout != "hi\n" {
		return fmt.Errorf("call %s (%s): exit %d, stdout %q, stderr %q", r.CallID, name, out.ExitCode, out.Stdout, out.Stderr)
	}
	return nil
}

// spawnQuiet runs /bin/true through spawner and fails if it does not
// exit 0.
func spawnQuiet(spawner *sandbox.Spawner, dir string) error {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	_, exited, err := spawner.Start(sandbox.Spec{Path: "/bin/true", Args: []string{"/bin/true"}, Dir: dir, Stdout: null, Stderr: null})
	if err != nil {
		return err
	}
	if e := <-exited; e.Code != 0 || e.Err != "" {
		return fmt.Errorf("/bin/true through the sandbox: exit %d %s", e.Code, e.Err)
	}
	return nil
}

// runQuiet runs cmd and fails if it does not exit 0.
func runQuiet(cmd *exec.Cmd) error {
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", cmd.Path, err, out)
	}
	return nil
}

// mean is the mean of ds in milliseconds.
func mean(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var total time.Duration
	for _, d := range ds {
		total += d
	}
	return float64(total.Microseconds()) / 1000 / float64(len(ds))
}

func printSandbox(w io.Writer, s SandboxCost, ratio float64) {
	if s.Skipped != "" {
		fmt.Fprintf(w, "shell tool sandboxed / unsandboxed: not measured (%s)\n", s.Skipped)
		return
	}
	fmt.Fprintf(w, "shell tool `echo hi`, auto-approved call (p50 / mean): sandboxed (Landlock ABI %d) %.1f / %.1f ms; unsandboxed %.1f / %.1f ms; ratio %.2f (p50)\n",
		s.LandlockABI, s.Sandboxed.P50, s.SandboxedMean, s.Unsandboxed.P50, s.UnsandboxedMean, ratio)
	fmt.Fprintf(w, "the sandbox's start, /bin/true through the worker's sandbox, set once (p50 / p95): %.1f / %.1f ms; /bin/true alone %.1f / %.1f ms\n",
		s.Start.P50, s.Start.P95, s.Exec.P50, s.Exec.P95)
}
