package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The verdicts an agent reaches on a PreToolUse hook run.
const (
	verdictBlock      = "block"       // the tool does not run
	verdictAllow      = "allow"       // the hook allowed it
	verdictNoDecision = "no decision" // the agent's own permissions decide: it may run unseen
)

// hookExit is what an agent sees of one hook run.
type hookExit struct {
	code     int  // -1 when killed by a signal
	timedOut bool // the agent's hook timeout ran out and it killed the hook
	stdout   string
	stderr   string
}

// claudeCodeVerdict is Claude Code 2.1.332's reading of a PreToolUse
// command hook (its hooks reference, and the strings in its binary):
// exit 0 reads stdout as the JSON answer (anything else is plain text, no
// decision); exit 2 blocks; any other end (another exit code, a signal,
// the timeout) is a non-blocking error, turned into a block by
// "onFailure": "block" on the hook.
func claudeCodeVerdict(onFailure string, e hookExit) string {
	failure := verdictNoDecision
	if onFailure == "block" {
		failure = verdictBlock
	}
	switch {
	case e.timedOut, e.code != 0 && e.code != 2:
		return failure
	case e.code == 2:
		return verdictBlock
	}
	var out struct {
		HookSpecificOutput struct {
			PermissionDecision string `json:"permissionDecision"`
		} `json:"hookSpecificOutput"`
	}
	if json.Unmarshal([]byte(e.stdout), &out) != nil {
		return verdictNoDecision
	}
	switch out.HookSpecificOutput.PermissionDecision {
	case "deny":
		return verdictBlock
	case "allow":
		return verdictAllow
	}
	return verdictNoDecision
}

// agentHook is a hook command line as the agent runs it: through sh -c,
// the event on stdin (closed at its end), killed with its process group at
// the hook's timeout.
type agentHook struct {
	shell   string // sh when empty
	command string
	timeout time.Duration
	env     []string
}

// run runs the hook; kill, when set, is called with the hook's shell once
// it started and may kill what it likes.
func (h agentHook) run(t *testing.T, event string, kill func(shellPID int)) hookExit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	shell := h.shell
	if shell == "" {
		shell = "sh"
	}
	cmd := exec.CommandContext(ctx, shell, "-c", h.command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(append(os.Environ(), "TOOLGATE_API=", "TOOLGATE_TOKEN=", "TEMPORAL_ADDRESS=", "TEMPORAL_NAMESPACE=", "TOOLGATE_KEYS="+spareKeys), h.env...)
	cmd.Stdin = strings.NewReader(event)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	if kill != nil {
		kill(cmd.Process.Pid)
	}
	err := cmd.Wait()
	e := hookExit{stdout: stdout.String(), stderr: stderr.String(), timedOut: ctx.Err() != nil}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		e.code = exitErr.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return e
}

// killToolgate waits for the toolgate process the shell shellPID runs
// (the shell itself once it exec'd it, else its child), lets it start its
// work, and kills it with SIGKILL, as the OOM killer would.
func killToolgate(t *testing.T) func(int) {
	return func(shellPID int) {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for _, pid := range append([]int{shellPID}, childrenOf(shellPID)...) {
				if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == binary {
					time.Sleep(500 * time.Millisecond)
					require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no toolgate process under shell %d", shellPID)
	}
}

func childrenOf(pid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// blackhole accepts connections and never answers: a toolgate that hangs.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

// printedSettings runs `toolgate hook AGENT --print-settings [flags]`
// in a directory that is not toolgate's, with none of its variables set.
func printedSettings(t *testing.T, agent string, flags ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"hook", agent, "--print-settings"}, flags...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "TOOLGATE_API=", "TOOLGATE_TOKEN=", "TOOLGATE_KEYS=", "TEMPORAL_ADDRESS=")
	out, err := cmd.Output()
	require.NoError(t, err)
	return string(out)
}

// claudeCodeHandler is a command hook of Claude Code's settings.
type claudeCodeHandler struct {
	Command   string `json:"command"`
	Timeout   int    `json:"timeout"`
	OnFailure string `json:"onFailure"`
}

// claudeCodePreToolUse is the PreToolUse hook of the printed settings.
func claudeCodePreToolUse(t *testing.T) claudeCodeHandler {
	t.Helper()
	var settings struct {
		Hooks map[string][]struct {
			Matcher string              `json:"matcher"`
			Hooks   []claudeCodeHandler `json:"hooks"`
		} `json:"hooks"`
	}
	require.NoError(t, json.Unmarshal([]byte(printedSettings(t, "claude-code")), &settings))
	pre := settings.Hooks["PreToolUse"]
	require.Len(t, pre, 1)
	require.Len(t, pre[0].Hooks, 1)
	for _, event := range []string{"PostToolUse", "PostToolUseFailure", "PermissionDenied"} {
		require.Len(t, settings.Hooks[event], 1, "the settings report %s too", event)
	}
	return pre[0].Hooks[0]
}

// failClosedCases are the ways a hook can fail to decide, each with the
// hook line's environment and what breaks.
type failClosedCase struct {
	name    string
	command func(cmd string) string // the hook line, changed
	env     []string
	event   string
	kill    bool
	timeout time.Duration
	// outsideToolgate: toolgate cannot answer at all (not found, killed,
	// killed at the agent's timeout); the agent's setting must block.
	outsideToolgate bool
	// reason, when set, is what the block must say (what is missing, not
	// that toolgate is unreachable).
	reason string
}

// failClosedCases are the printed hook line's failures, over the HTTP API
// as the printed settings connect: toolgateUp are the flags that reach d
// (a later --api overrides the printed one), the agent token is in the
// hook's environment.
func failClosedCases(t *testing.T, agent string, d *devEnv, event string) []failClosedCase {
	env := []string{"PATH=" + filepath.Dir(binary) + ":" + os.Getenv("PATH"), "TOOLGATE_TOKEN=token-agent-1"}
	toolgateUp := "--api http://" + d.httpAddr + " --state-dir " + t.TempDir()
	same := func(cmd string) string { return cmd }
	hang := blackhole(t)
	cases := []failClosedCase{
		{name: "binary not on PATH", command: same, env: []string{"PATH=/usr/bin:/bin"}, event: event, outsideToolgate: true},
		{name: "hook killed", command: func(cmd string) string { return cmd + " --wait 60s " + toolgateUp }, env: env, event: event, kill: true, outsideToolgate: true},
		{name: "toolgate hangs past the agent's timeout", command: func(cmd string) string { return cmd + " --wait 60s --api http://" + hang }, env: env, event: event, timeout: 5 * time.Second, outsideToolgate: true},
		{name: "toolgate hangs", command: func(cmd string) string { return cmd + " --wait 2s --api http://" + hang }, env: env, event: event},
		{name: "garbage on stdin", command: same, env: env, event: "\x00\x01 not an event"},
		{name: "no agent name", command: func(string) string { return "toolgate hook" }, env: env, event: event},
		{name: "unknown agent name", command: func(cmd string) string { return strings.Replace(cmd, "hook "+agent, "hook claude", 1) }, env: env, event: event},
		{name: "toolgate down", command: func(cmd string) string {
			return cmd + fmt.Sprintf(" --wait 5s --api http://127.0.0.1:%d", freePort(t))
		}, env: env, event: event},
		{name: "no agent token", command: func(cmd string) string { return cmd + " --wait 5s " + toolgateUp }, env: []string{env[0]}, event: event, reason: "the agent token is missing"},
		// The Temporal path, which operators print with --temporal, fails
		// closed the same way.
		{name: "over Temporal, no keyring", command: func(cmd string) string {
			return "cd " + t.TempDir() + " && toolgate hook " + agent + " --wait 5s --temporal-address " + d.address()
		}, env: append(env, "TOOLGATE_KEYS="), event: event, reason: "no payload keys"},
		{name: "over Temporal, toolgate down", command: func(cmd string) string {
			return "toolgate hook " + agent + fmt.Sprintf(" --wait 5s --keys %s --temporal-address 127.0.0.1:%d", d.keysFile(), freePort(t))
		}, env: env, event: event},
	}
	return cases
}

// TestClaudeCodeHookFailsClosed runs the PreToolUse hook line of
// `toolgate hook claude-code --print-settings` as Claude Code runs it, and
// breaks it every way a hook breaks: each ends in a block.
func TestClaudeCodeHookFailsClosed(t *testing.T) {
	handler := claudeCodePreToolUse(t)
	assert.Equal(t, "block", handler.OnFailure, "a hook that cannot run blocks")
	assert.Equal(t, "toolgate hook claude-code --api http://127.0.0.1:7700", handler.Command, "over the HTTP API: no keyring on the agent's machine")
	assert.Greater(t, time.Duration(handler.Timeout)*time.Second, 560*time.Second, "above --wait's default (540s) and the hook's own slack")

	d := startDevForHooks(t)
	event := hookEvent(t, "pre-edit.json", "cc-fail-closed")
	for _, c := range failClosedCases(t, "claude-code", d, event) {
		t.Run(c.name, func(t *testing.T) {
			timeout := c.timeout
			if timeout == 0 {
				timeout = time.Duration(handler.Timeout) * time.Second
			}
			h := agentHook{command: c.command(handler.Command), timeout: timeout, env: c.env}
			var kill func(int)
			if c.kill {
				kill = killToolgate(t)
			}
			e := h.run(t, c.event, kill)
			assert.Equal(t, verdictBlock, claudeCodeVerdict(handler.OnFailure, e), "exit %d, stdout %q, stderr %q", e.code, e.stdout, e.stderr)
			if c.reason != "" {
				assert.Contains(t, e.stdout, c.reason)
				assert.NotContains(t, e.stdout, "unreachable", "toolgate was up; something was missing")
			}
			if c.outsideToolgate {
				assert.Equal(t, verdictNoDecision, claudeCodeVerdict("", e), "toolgate never answered: only onFailure blocks this one")
			} else {
				assert.Equal(t, verdictBlock, claudeCodeVerdict("", e), "toolgate itself blocks, whatever the setting: exit %d, stdout %q", e.code, e.stdout)
			}
		})
	}
}

// startDevForHooks starts toolgate dev with the hook policy.
func startDevForHooks(t *testing.T) *devEnv { return startDevWithPolicy(t, hookPolicy) }

// codexVerdict is Codex CLI 0.171.0's reading of a PreToolUse command hook
// (its output parser's messages, and runs of the real binary): a deny
// with a non-empty reason on exit 0, or exit 2 with a non-empty reason on
// stderr, blocks; an allow with updatedInput rewrites the input; every
// other end (no output, any other exit, a signal, the timeout, JSON that
// is invalid or has an unknown key) fails, and a failed hook lets the tool
// run.
func codexVerdict(e hookExit) string {
	switch {
	case e.timedOut:
		return verdictNoDecision
	case e.code == 2 && strings.TrimSpace(e.stderr) != "":
		return verdictBlock
	case e.code != 0 || strings.TrimSpace(e.stdout) == "":
		return verdictNoDecision
	}
	dec := json.NewDecoder(strings.NewReader(e.stdout))
	dec.DisallowUnknownFields()
	var out struct {
		HookSpecificOutput struct {
			HookEventName            string          `json:"hookEventName"`
			PermissionDecision       string          `json:"permissionDecision"`
			PermissionDecisionReason string          `json:"permissionDecisionReason"`
			UpdatedInput             json.RawMessage `json:"updatedInput"`
			AdditionalContext        string          `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if dec.Decode(&out) != nil {
		return verdictNoDecision
	}
	switch d := out.HookSpecificOutput; {
	case d.PermissionDecision == "deny" && strings.TrimSpace(d.PermissionDecisionReason) != "":
		return verdictBlock
	case d.PermissionDecision == "allow" && len(d.UpdatedInput) > 0:
		return verdictAllow
	}
	return verdictNoDecision
}

// codexPreToolUseCommand is the PreToolUse command line of
// `toolgate hook codex --print-settings`, and its timeout.
func codexPreToolUseCommand(t *testing.T) (string, time.Duration) {
	t.Helper()
	printed := printedSettings(t, "codex")
	pre, _, found := strings.Cut(printed, "[[hooks.PostToolUse]]")
	require.True(t, found, printed)
	command := regexp.MustCompile(`(?m)^command = '(.*)'$`).FindStringSubmatch(pre)
	require.NotNil(t, command, pre)
	timeout := regexp.MustCompile(`(?m)^timeout = (\d+)$`).FindStringSubmatch(pre)
	require.NotNil(t, timeout, pre)
	secs, err := strconv.Atoi(timeout[1])
	require.NoError(t, err)
	return command[1], time.Duration(secs) * time.Second
}

// TestCodexHookFailsClosed runs the PreToolUse line of
// `toolgate hook codex --print-settings` as Codex runs it (bash -c), and
// breaks it every way a hook breaks: each ends in a block, except the one
// no hook line can prevent, Codex's own timeout, which the hook's own
// deadline stays below.
func TestCodexHookFailsClosed(t *testing.T) {
	command, timeout := codexPreToolUseCommand(t)
	assert.True(t, strings.HasPrefix(command, "toolgate hook codex --api http://127.0.0.1:7700 || "), command)
	assert.Greater(t, timeout, 560*time.Second, "above --wait's default (540s) and the hook's own slack")

	d := startDevForHooks(t)
	event := `{"session_id":"019ad3c2-5b7e-7c10-9e4f-2a6b8c0d1e3f","turn_id":"1","transcript_path":null,"cwd":"/home/dev/shop","hook_event_name":"PreToolUse","model":"gpt-5.5","permission_mode":"default","tool_name":"apply_patch","tool_input":{"command":"*** Begin Patch\n*** Add File: b.txt\n+hi\n*** End Patch\n"},"tool_use_id":"call_patch"}`
	printed, _, _ := strings.Cut(command, " || ")
	for _, c := range failClosedCases(t, "codex", d, event) {
		t.Run(c.name, func(t *testing.T) {
			withFlags := c.command(printed)
			line := strings.Replace(command, printed, withFlags, 1)
			h := agentHook{shell: "bash", command: line, timeout: timeout, env: c.env}
			if c.timeout != 0 {
				h.timeout = c.timeout
			}
			var kill func(int)
			if c.kill {
				kill = killToolgate(t)
			}
			e := h.run(t, c.event, kill)
			want := verdictBlock
			if e.timedOut {
				want = verdictNoDecision // Codex's own timeout: no hook line can block then
			}
			assert.Equal(t, want, codexVerdict(e), "exit %d, stdout %q, stderr %q", e.code, e.stdout, e.stderr)
			if c.reason != "" {
				assert.Contains(t, e.stdout, c.reason)
				assert.NotContains(t, e.stdout, "unreachable", "toolgate was up; something was missing")
			}
			if c.outsideToolgate && !e.timedOut {
				bare := h
				bare.command = withFlags
				if c.kill {
					kill = killToolgate(t)
				}
				assert.Equal(t, verdictNoDecision, codexVerdict(bare.run(t, c.event, kill)), "without the line's fallback Codex would run the tool")
			}
		})
	}
}
