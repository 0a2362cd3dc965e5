package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The events as Gemini CLI 0.61.0 writes them on the hook's stdin.
const geminiSession = "9c4f1a2b-5d6e-4f70-8a9b-1c2d3e4f5a6b"

func beforeTool(tool, input string) string {
	return fmt.Sprintf(`{"session_id":%q,"transcript_path":"/home/u/.gemini/tmp/p/chats/session.json","cwd":"/home/u/repo","hook_event_name":"BeforeTool","timestamp":"2026-12-06T10:00:00.000Z","tool_name":%q,"tool_input":%s}`, geminiSession, tool, input)
}

func afterTool(tool, input, response string) string {
	return fmt.Sprintf(`{"session_id":%q,"cwd":"/home/u/repo","hook_event_name":"AfterTool","timestamp":"2026-12-06T10:00:01.000Z","tool_name":%q,"tool_input":%s,"tool_response":%s}`, geminiSession, tool, input, response)
}

func newGeminiEnv(t *testing.T) *hookEnv {
	e := newHookEnv(t)
	e.cfg.Dialect = GeminiCLI
	e.cfg.Requester = "gemini-cli"
	return e
}

// geminiAnswerOf decodes a BeforeTool answer, which comes with exit 0.
func (e *hookEnv) geminiAnswerOf(event string) geminiOutput {
	e.t.Helper()
	r := e.run(event)
	require.Equal(e.t, 0, r.code, "stderr: %s", r.stderr)
	var out geminiOutput
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &out), "stdout: %q", r.stdout)
	return out
}

func TestGeminiAllowRunsOnceAndItsAfterToolIsReported(t *testing.T) {
	e := newGeminiEnv(t)
	input := `{"command":"ls -la","description":"List files"}`
	out := e.geminiAnswerOf(beforeTool("run_shell_command", input))
	assert.Equal(t, "allow", out.Decision)
	assert.Empty(t, out.Reason, "an allow's reason is shown to the user, not the model")
	assert.Contains(t, out.SystemMessage, "allowed by policy")
	assert.Nil(t, out.HookSpecificOutput, "nothing edited: Gemini CLI keeps the model's input")

	subs := e.agent.submitted()
	require.Len(t, subs, 1)
	req := subs[0]
	assert.Equal(t, geminiSession, req.Session)
	assert.Equal(t, "run_shell_command", req.Tool)
	assert.Equal(t, "gemini-cli", req.Requester)
	assert.Equal(t, policy.ExecutionAgent, req.Execution)
	assert.Regexp(t, `^gm-[0-9a-f]{20}-0$`, req.CallID)
	claims := e.agent.claimsOf(req.CallID)
	require.Len(t, claims, 1)
	assert.Regexp(t, `^gm-run-[0-9a-f]{24}$`, claims[0].Run, "Gemini CLI names no tool use: the hook names the run")

	// Keys in another order are the same input: the report finds its run.
	r := e.run(afterTool("run_shell_command", `{"description":"List files","command":"ls -la"}`,
		`{"llmContent":"Command: ls -la\nOutput: main.go","returnDisplay":"main.go","error":null}`))
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stdout, "AfterTool has nothing to say: the tool's result stays the model's")
	rep, ok := e.agent.report(req.CallID)
	require.True(t, ok, "the outcome is reported to the call that allowed it")
	assert.Equal(t, claims[0].Run, rep.Run, "the report comes from the run that took the approval")
	assert.JSONEq(t, `{"llmContent":"Command: ls -la\nOutput: main.go","returnDisplay":"main.go"}`, string(rep.Output))
	assert.Equal(t, workflows.StatusOK, e.agent.result(req.CallID).Status)

	// The run is reported once: a second AfterTool finds nothing.
	e.run(afterTool("run_shell_command", input, `{"llmContent":"again","returnDisplay":"again"}`))
	rep, _ = e.agent.report(req.CallID)
	assert.NotContains(t, string(rep.Output), "again")
}

func TestGeminiAfterToolWithAnErrorReportsTheFailure(t *testing.T) {
	e := newGeminiEnv(t)
	input := `{"command":"ls /nope"}`
	require.Equal(t, "allow", e.geminiAnswerOf(beforeTool("run_shell_command", input)).Decision)
	e.run(afterTool("run_shell_command", input, `{"llmContent":"Exit Code: 2","returnDisplay":"","error":{"message":"Command exited with code 2","type":"shell_execute_error"}}`))
	rep, ok := e.agent.report(e.agent.submitted()[0].CallID)
	require.True(t, ok)
	assert.Equal(t, "Command exited with code 2 (shell_execute_error)", rep.Error)
}

func TestGeminiDenialsReasonReachesTheModel(t *testing.T) {
	e := newGeminiEnv(t)
	out := e.geminiAnswerOf(beforeTool("run_shell_command", `{"command":"rm -rf /"}`))
	assert.Equal(t, "deny", out.Decision)
	assert.Contains(t, out.Reason, "no recursive deletes")
	assert.Contains(t, out.Reason, e.agent.submitted()[0].CallID)
}

func TestGeminiEditIsTheToolInputAndTheReportComparesIt(t *testing.T) {
	e := newGeminiEnv(t)
	e.cfg.Wait = 5 * time.Second
	asked := `{"command":"git push origin main"}`
	edited := `{"command":"git push --dry-run origin main"}`
	done := make(chan geminiOutput, 1)
	go func() { done <- e.geminiAnswerOf(beforeTool("run_shell_command", asked)) }()
	require.Eventually(t, func() bool { return len(e.agent.submitted()) == 1 }, 5*time.Second, time.Millisecond)
	id := e.agent.submitted()[0].CallID
	e.agent.decide(id, policy.Decision{Kind: policy.ApprovedWithEdits, EditedArgs: json.RawMessage(edited), DecidedBy: "alice", Channel: "inbox"})
	out := <-done
	assert.Equal(t, "allow", out.Decision)
	require.NotNil(t, out.HookSpecificOutput)
	assert.Equal(t, EventBeforeTool, out.HookSpecificOutput.HookEventName)
	assert.JSONEq(t, edited, string(out.HookSpecificOutput.ToolInput))
	assert.Contains(t, out.SystemMessage, "alice")

	// Gemini CLI's AfterTool carries the input that ran: the edited one.
	e.run(afterTool("run_shell_command", edited, `{"llmContent":"dry run","returnDisplay":"dry run"}`))
	rep, ok := e.agent.report(id)
	require.True(t, ok)
	assert.Empty(t, rep.Unknown)
	assert.Contains(t, string(rep.Output), "dry run")
}

func TestGeminiStillWaitingIsADenialThatSaysHowToRetry(t *testing.T) {
	e := newGeminiEnv(t)
	input := `{"file_path":"/home/u/repo/main.go","content":"package main"}`
	out := e.geminiAnswerOf(beforeTool("write_file", input))
	id := e.agent.submitted()[0].CallID
	assert.Equal(t, "deny", out.Decision)
	assert.Contains(t, out.Reason, id+" is waiting for a person")
	assert.Contains(t, out.Reason, "Try the same action again later")

	e.agent.decide(id, policy.Decision{Kind: policy.Approved, DecidedBy: "alice", Channel: "inbox"})
	assert.Equal(t, "allow", e.geminiAnswerOf(beforeTool("write_file", input)).Decision, "the retry gets the decision taken meanwhile")
	require.Len(t, e.agent.submitted(), 2)
	assert.Equal(t, id, e.agent.submitted()[1].CallID, "the retry is the same call: nobody is asked twice")
	assert.Len(t, e.agent.claimsOf(id), 1)
}

func TestGeminiFailuresAreDenials(t *testing.T) {
	e := newGeminiEnv(t)
	e.cfg.Connect = func(context.Context) (client.Agent, func(), error) {
		return nil, nil, errors.New("dial tcp 127.0.0.1:7700: connection refused")
	}
	out := e.geminiAnswerOf(beforeTool("run_shell_command", `{"command":"ls"}`))
	assert.Equal(t, "deny", out.Decision)
	assert.Contains(t, out.Reason, "toolgate is unreachable")

	// A broken event is refused in Gemini CLI's shape, before toolgate is asked.
	e = newGeminiEnv(t)
	out = e.geminiAnswerOf(`{"session_id":"s1","hook_event_name":"BeforeTool","tool_input":{"command":"ls"}}`)
	assert.Equal(t, "deny", out.Decision)
	assert.Contains(t, out.Reason, "has no tool_name")
	assert.Zero(t, e.connects.Load())
}

// A BeforeTool event answered by a hook line that names another agent
// still gets Gemini CLI's shape: any other answer reads as no objection
// there.
func TestABeforeToolEventIsAnsweredInGeminiShapeWhateverTheDialect(t *testing.T) {
	e := newHookEnv(t)
	out := e.geminiAnswerOf(beforeTool("run_shell_command", `{"command":"rm -rf /"}`))
	assert.Equal(t, "deny", out.Decision)
	assert.Regexp(t, `^gm-`, e.agent.submitted()[0].CallID)

	denial := Denial([]byte(beforeTool("run_shell_command", `{}`)), "toolgate hook: unknown agent")
	require.NotNil(t, denial)
	assert.JSONEq(t, `{"decision":"deny","reason":"toolgate hook: unknown agent"}`, string(denial))
}

// The printed BeforeTool line blocks the tool whenever the hook command
// itself fails: it exits 2 with a reason on stderr, which Gemini CLI
// reads as a denial (any other exit lets the tool run there).
func TestGeminiSettingsBlockOnEveryFailureOfTheCommand(t *testing.T) {
	var settings struct {
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct {
				Name, Type, Command string
				Timeout             int
			} `json:"hooks"`
		} `json:"hooks"`
	}
	require.NoError(t, json.Unmarshal(GeminiCLISettings("toolgate hook gemini-cli --api http://127.0.0.1:7700"), &settings))
	require.Len(t, settings.Hooks[EventBeforeTool], 1)
	before := settings.Hooks[EventBeforeTool][0]
	assert.Equal(t, "*", before.Matcher)
	require.Len(t, before.Hooks, 1)
	assert.Equal(t, "command", before.Hooks[0].Type)
	assert.Equal(t, PreToolUseTimeout*1000, before.Hooks[0].Timeout, "Gemini CLI's timeouts are in milliseconds")
	assert.Greater(t, time.Duration(before.Hooks[0].Timeout)*time.Millisecond, DefaultWait+answerSlack, "the hook answers before Gemini CLI gives up on it (a timeout runs the tool)")
	after := settings.Hooks[EventAfterTool][0].Hooks[0]
	assert.Equal(t, "toolgate hook gemini-cli --api http://127.0.0.1:7700 || true", after.Command)

	// Run the BeforeTool line with a stand-in for toolgate that fails in
	// each way a process can.
	dir := t.TempDir()
	for name, script := range map[string]string{
		"exits 1":             "exit 1",
		"crashes":             "kill -SEGV $$",
		"prints then exits 3": "echo half; exit 3",
	} {
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(dir, "toolgate")
			require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"+script+"\n"), 0o755))
			line := strings.Replace(before.Hooks[0].Command, "toolgate hook", bin+" hook", 1)
			cmd := exec.Command("/bin/sh", "-c", line)
			cmd.Stdin = strings.NewReader(beforeTool("run_shell_command", `{"command":"ls"}`))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, 2, exit.ExitCode(), "exit 2 is the only failure Gemini CLI blocks on")
			assert.Contains(t, stderr.String(), "so the tool is blocked")
		})
	}
	// A command not found is a failure too.
	cmd := exec.Command("/bin/sh", "-c", strings.Replace(before.Hooks[0].Command, "toolgate hook", filepath.Join(dir, "missing")+" hook", 1))
	cmd.Stdin = strings.NewReader("{}")
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &exit)
	assert.Equal(t, 2, exit.ExitCode())
}
