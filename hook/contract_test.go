package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The agents' real contracts. testdata/codex holds the hook JSON schemas
// embedded in Codex CLI 0.171.0's binary (npm @openai/codex), extracted
// as they are. Claude Code's events are built field by field from its
// Agent SDK 0.3.332 type declarations (sdk.d.ts: BaseHookInput,
// PreToolUseHookInput, PostToolUseHookInput, PostToolUseFailureHookInput,
// PermissionDeniedHookInput, PreToolUseHookSpecificOutput).

func codexSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "codex", name+".schema.json"))
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(name, doc))
	s, err := c.Compile(name)
	require.NoError(t, err)
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, doc string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	require.NoError(t, err)
	require.NoError(t, s.Validate(v), "document: %s", doc)
}

// codexEvent is a Codex hook event with every field its schema has.
func codexEvent(event, tool, toolUseID, input, response string) string {
	ev := map[string]any{
		"session_id": "019ad3c2-5b7e-7c10-9e4f-2a6b8c0d1e3f", "turn_id": "019ad3c2-6000-7000-8000-000000000001",
		"transcript_path": nil, "cwd": "/home/dev/shop", "hook_event_name": event, "model": "gpt-5.5",
		"permission_mode": "bypassPermissions", "tool_name": tool, "tool_input": json.RawMessage(input),
		"tool_use_id": toolUseID, "agent_id": "019ad3c2-7000-7000-8000-000000000002", "agent_type": "worker",
	}
	if response != "" {
		ev["tool_response"] = json.RawMessage(response)
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// checkCodexPreOutput holds a PreToolUse answer to what Codex accepts: its
// schema (no unknown keys), and its parser's rules: deny needs a
// non-empty reason, allow needs updatedInput, ask is unsupported. An
// empty answer is "no decision".
func checkCodexPreOutput(t *testing.T, s *jsonschema.Schema, stdout string) (decision string) {
	t.Helper()
	if strings.TrimSpace(stdout) == "" {
		return ""
	}
	validate(t, s, stdout)
	var out preToolUseOutput
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	d := out.HookSpecificOutput
	switch d.PermissionDecision {
	case "deny":
		assert.NotEmpty(t, strings.TrimSpace(d.PermissionDecisionReason), "Codex refuses a deny without a reason")
	case "allow":
		assert.NotEmpty(t, d.UpdatedInput, "Codex refuses allow without updatedInput")
	default:
		t.Errorf("Codex does not support permissionDecision %q", d.PermissionDecision)
	}
	return d.PermissionDecision
}

func TestCodexEventsAndAnswersFollowCodexSchemas(t *testing.T) {
	preIn, postIn, preOut := codexSchema(t, "pre-tool-use.command.input"), codexSchema(t, "post-tool-use.command.input"), codexSchema(t, "pre-tool-use.command.output")
	e := newHookEnv(t)
	e.cfg.Dialect, e.cfg.Requester = Codex, "codex"
	e.cfg.Wait = time.Second

	allowed := codexEvent("PreToolUse", "Bash", "call_ls", `{"command":"ls src"}`, "")
	denied := codexEvent("PreToolUse", "Bash", "call_rm", `{"command":"rm -rf build"}`, "")
	waiting := codexEvent("PreToolUse", "apply_patch", "call_patch", `{"command":"*** Begin Patch\n*** Add File: b.txt\n+hi\n*** End Patch\n"}`, "")
	for _, ev := range []string{allowed, denied, waiting} {
		validate(t, preIn, ev)
	}
	r := e.run(allowed)
	assert.Equal(t, 0, r.code)
	assert.Equal(t, "", checkCodexPreOutput(t, preOut, r.stdout), "a plain allow is no output")
	assert.Equal(t, "deny", checkCodexPreOutput(t, preOut, e.run(denied).stdout))
	assert.Equal(t, "deny", checkCodexPreOutput(t, preOut, e.run(waiting).stdout), "still waiting for a person")

	// An approver's edit is the one allow Codex takes.
	done := make(chan hookRun, 1)
	e.cfg.Wait = 5 * time.Second
	go func() {
		done <- e.run(codexEvent("PreToolUse", "Bash", "call_push", `{"command":"git push origin main"}`, ""))
	}()
	require.Eventually(t, func() bool { return len(e.agent.submitted()) == 4 }, 5*time.Second, time.Millisecond)
	e.agent.decide(e.agent.submitted()[3].CallID, policy.Decision{Kind: policy.ApprovedWithEdits, EditedArgs: json.RawMessage(`{"command":"git push --dry-run origin main"}`), DecidedBy: "alice", Channel: "inbox"})
	assert.Equal(t, "allow", checkCodexPreOutput(t, preOut, (<-done).stdout))

	// Failures and refusals are denials Codex accepts.
	down := newHookEnv(t)
	down.cfg.Dialect = Codex
	down.cfg.Connect = func(context.Context) (client.Agent, func(), error) { return nil, nil, errors.New("connection refused") }
	assert.Equal(t, "deny", checkCodexPreOutput(t, preOut, down.run(allowed).stdout))
	assert.Equal(t, "deny", checkCodexPreOutput(t, preOut, down.run("garbage").stdout))
	var refused bytes.Buffer
	Refuse(strings.NewReader(allowed), &refused, "toolgate hook: unknown agent")
	assert.Equal(t, "deny", checkCodexPreOutput(t, preOut, refused.String()))

	// PostToolUse, in Codex's shapes.
	callOf := func(i int) string { return e.agent.submitted()[i].CallID }
	bash := codexEvent("PostToolUse", "Bash", "call_ls", `{"command":"ls src"}`, `"main.go\nls: cannot access 'x': No such file or directory\n"`)
	validate(t, postIn, bash)
	assert.Equal(t, 0, e.run(bash).code)
	rep, ok := e.agent.report(callOf(0))
	require.True(t, ok)
	assert.Equal(t, codexUnsure, rep.Unknown, "Codex gives no exit status: the call ends unknown, not ok")
	assert.JSONEq(t, `"main.go\nls: cannot access 'x': No such file or directory\n"`, string(rep.Output))
}

func TestCodexPostToolUseShapes(t *testing.T) {
	for name, c := range map[string]struct {
		tool, response string
		want           client.Report
	}{
		"a command's output, no exit status": {"Bash", `"out\n"`, client.Report{Output: json.RawMessage(`"out\n"`), Unknown: codexUnsure}},
		"apply_patch that worked":            {"apply_patch", `"Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nA b.txt\n"`, client.Report{Output: json.RawMessage(`"Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nA b.txt\n"`)}},
		"apply_patch that failed":            {"apply_patch", `"Exit code: 1\nWall time: 0 seconds\nOutput:\nerror: no such file\n"`, client.Report{Error: "apply_patch failed with exit code 1: Exit code: 1\nWall time: 0 seconds\nOutput:\nerror: no such file\n"}},
		"an MCP result":                      {"mcp__tg__echo", `{"content":[{"type":"text","text":"hi"}],"structuredContent":{"text":"hi"}}`, client.Report{Output: json.RawMessage(`{"content":[{"type":"text","text":"hi"}],"structuredContent":{"text":"hi"}}`)}},
		"another tool's string":              {"list_mcp_resources", `"{\"resources\":[]}"`, client.Report{Output: json.RawMessage(`"{\"resources\":[]}"`)}},
	} {
		t.Run(name, func(t *testing.T) {
			ev, err := ParseEvent([]byte(codexEvent("PostToolUse", c.tool, "call_1", `{}`, c.response)))
			require.NoError(t, err)
			assert.Equal(t, c.want, reportOf(Codex, ev))
		})
	}
}

// claudeBase is BaseHookInput with every optional field set.
func claudeBase(event string) map[string]any {
	return map[string]any{
		"session_id": session, "transcript_path": "/home/u/.claude/projects/-home-u-repo/" + session + ".jsonl",
		"cwd": "/home/u/repo", "prompt_id": "5b1f2e3d-0000-4000-8000-00000000000a", "permission_mode": "auto",
		"agent_id": "agent-a1b2c3", "agent_type": "general-purpose", "effort": map[string]any{"level": "high"},
		"hook_event_name": event,
	}
}

func claudeEvent(event, tool, toolUseID string, more map[string]any) string {
	ev := claudeBase(event)
	ev["tool_name"], ev["tool_use_id"] = tool, toolUseID
	ev["mcp_server"] = map[string]any{"name": "github", "source": "project"}
	for k, v := range more {
		ev[k] = v
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// checkClaudePreOutput holds a PreToolUse answer to Claude Code's
// SyncHookJSONOutput with a PreToolUseHookSpecificOutput.
func checkClaudePreOutput(t *testing.T, stdout string) string {
	t.Helper()
	var out map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	for k := range out {
		assert.Contains(t, []string{"continue", "suppressOutput", "stopReason", "decision", "systemMessage", "reason", "hookSpecificOutput"}, k)
	}
	var spec map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(out["hookSpecificOutput"], &spec))
	for k := range spec {
		assert.Contains(t, []string{"hookEventName", "permissionDecision", "permissionDecisionReason", "updatedInput", "additionalContext"}, k)
	}
	var d preToolUseDecision
	require.NoError(t, json.Unmarshal(out["hookSpecificOutput"], &d))
	assert.Equal(t, "PreToolUse", d.HookEventName)
	assert.Contains(t, []string{"allow", "deny", "ask", "defer"}, d.PermissionDecision)
	if len(d.UpdatedInput) > 0 {
		var obj map[string]any
		assert.NoError(t, json.Unmarshal(d.UpdatedInput, &obj), "updatedInput is a Record<string, unknown>")
	}
	return d.PermissionDecision
}

func TestClaudeCodeEventsWithEveryFieldOfTheSDKTypes(t *testing.T) {
	e := newHookEnv(t)
	input := map[string]any{"command": "ls -la", "description": "List files", "timeout": 120000, "run_in_background": false}
	assert.Equal(t, "allow", checkClaudePreOutput(t, e.run(claudeEvent("PreToolUse", "Bash", "toolu_1", map[string]any{"tool_input": input})).stdout))
	callID := e.agent.submitted()[0].CallID
	assert.Equal(t, session, e.agent.submitted()[0].Session)

	failure := claudeEvent("PostToolUseFailure", "Bash", "toolu_1", map[string]any{
		"tool_input": input, "error": "Command failed with exit code 2", "is_interrupt": false, "duration_ms": 41,
	})
	assert.Equal(t, 0, e.run(failure).code)
	rep, ok := e.agent.report(callID)
	require.True(t, ok)
	assert.Equal(t, "Command failed with exit code 2", rep.Error)
	assert.Equal(t, "toolu_1", rep.Run, "only the run that took the approval reports it")

	assert.Equal(t, "deny", checkClaudePreOutput(t, e.run(claudeEvent("PreToolUse", "Bash", "toolu_2", map[string]any{"tool_input": map[string]any{"command": "rm -rf /"}})).stdout))
	assert.Equal(t, "deny", checkClaudePreOutput(t, e.run(claudeEvent("PreToolUse", "Edit", "toolu_3", map[string]any{"tool_input": map[string]any{"file_path": "/home/u/repo/a.go", "old_string": "a", "new_string": "b", "replace_all": false}})).stdout), "waiting")
	var refused bytes.Buffer
	Refuse(strings.NewReader(claudeEvent("PreToolUse", "Bash", "toolu_4", map[string]any{"tool_input": input})), &refused, "toolgate hook: no agent named")
	assert.Equal(t, "deny", checkClaudePreOutput(t, refused.String()))
}

// In auto mode Claude Code may refuse a tool use after toolgate allowed
// it; its PermissionDenied event tells the call that the tool did not run.
func TestAutoModeRefusalAfterAnAllowIsRecorded(t *testing.T) {
	e := newHookEnv(t)
	input := map[string]any{"command": "ls /etc"}
	require.Equal(t, "allow", checkClaudePreOutput(t, e.run(claudeEvent("PreToolUse", "Bash", "toolu_1", map[string]any{"tool_input": input})).stdout))
	r := e.run(claudeEvent("PermissionDenied", "Bash", "toolu_1", map[string]any{"tool_input": input, "reason": "reads outside the project"}))
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stdout)
	rep, ok := e.agent.report(e.agent.submitted()[0].CallID)
	require.True(t, ok)
	assert.Equal(t, "it did not run: Claude Code's auto mode refused it after toolgate allowed it (reads outside the project)", rep.Error)
	st, err := e.agent.Status(context.Background(), e.agent.submitted()[0].CallID)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusError, st.Result.Status)
}

func TestTheSettingsBlockWhenTheHookFails(t *testing.T) {
	var settings struct {
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct {
				Type, Command, OnFailure string
				Timeout                  int
			} `json:"hooks"`
		} `json:"hooks"`
	}
	require.NoError(t, json.Unmarshal(ClaudeCodeSettings("toolgate hook claude-code"), &settings))
	pre := settings.Hooks[EventPreToolUse][0].Hooks[0]
	assert.Equal(t, "block", pre.OnFailure)
	assert.Equal(t, "command", pre.Type)
	assert.Greater(t, pre.Timeout*int(time.Second/time.Millisecond), int((DefaultWait+answerSlack)/time.Millisecond))
	for _, ev := range []string{EventPostToolUse, EventPostToolUseFailure, EventPermissionDenied} {
		require.Len(t, settings.Hooks[ev], 1, ev)
		assert.Empty(t, settings.Hooks[ev][0].Hooks[0].OnFailure, "the tool already ran (or never will): nothing to block")
	}
	for _, ev := range []string{EventUserPromptSubmit, EventStop, EventSessionEnd} {
		require.Len(t, settings.Hooks[ev], 1, ev)
		h := settings.Hooks[ev][0].Hooks[0]
		assert.Empty(t, h.OnFailure, ev)
		assert.Equal(t, "toolgate hook claude-code || true", h.Command, "%s only records: it never blocks the prompt or the stop", ev)
	}
	codex := CodexConfig("toolgate hook codex")
	assert.Contains(t, codex, `timeout = 600`)
	assert.NotContains(t, codex, "timeoutSec", "Codex 0.171.0 ignores timeoutSec")
}
