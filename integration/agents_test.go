package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The real Claude Code and Codex, from npm (testdata/npm/package.json
// pins them; scripts/test installs them), each talking to a local stand-in
// for its model API that asks for one shell command. Only the hook stands
// between the model and the command: Claude Code runs in
// bypassPermissions, Codex with approval_policy "never" and no sandbox.

// npmModules is where scripts/test installs the npm software the tests
// run: TOOLGATE_NPM_DIR, else ~/.cache/toolgate/npm, and node_modules in
// it.
func npmModules() string {
	d := os.Getenv("TOOLGATE_NPM_DIR")
	if d == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		d = filepath.Join(cache, "toolgate", "npm")
	}
	return filepath.Join(d, "node_modules")
}

// npmFile finds a file of the installed npm software, or fails the test
// saying how to install it.
func npmFile(t *testing.T, pattern string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(npmModules(), pattern))
	if len(matches) == 0 {
		t.Fatalf("this test needs %s from npm under %s: run scripts/test, or npm install --prefix %s with integration/testdata/npm/package.json", pattern, npmModules(), filepath.Dir(npmModules()))
	}
	return matches[0]
}

// agentBinary finds an installed agent's native binary and checks that it
// is the pinned version.
func agentBinary(t *testing.T, pattern, version string) string {
	t.Helper()
	matches := []string{npmFile(t, pattern)}
	out, err := exec.Command(matches[0], "--version").CombinedOutput()
	require.NoError(t, err, "%s --version: %s", matches[0], out)
	require.Contains(t, string(out), version, "%s is not the pinned version", matches[0])
	return matches[0]
}

// modelStandIn answers an agent's model requests: the first asks for one
// shell command, every later one ends the turn. It keeps what the agent
// told the model about the command.
type modelStandIn struct {
	command, callID string
	mu              sync.Mutex
	told            []string
}

func (m *modelStandIn) toldModel() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.told, "\n")
}

func writeSSE(w http.ResponseWriter, events []map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
	}
}

// messagesRequest is what the stand-ins read of a Messages API request.
type messagesRequest struct {
	Model    string `json:"model"`
	Tools    []struct{ Name string }
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// readMessagesRequest answers what Claude Code asks besides messages
// (token counts, other routes) and reports false, or decodes a messages
// request.
func readMessagesRequest(w http.ResponseWriter, r *http.Request) (messagesRequest, bool) {
	var req messagesRequest
	if strings.Contains(r.URL.Path, "count_tokens") {
		fmt.Fprint(w, `{"input_tokens":10}`)
		return req, false
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/messages") {
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"stand-in"}}`, http.StatusNotFound)
		return req, false
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return req, false
	}
	return req, true
}

// anthropic is the Messages API, as Claude Code 2.1.332 uses it.
func (m *modelStandIn) anthropic(w http.ResponseWriter, r *http.Request) {
	req, ok := readMessagesRequest(w, r)
	if !ok {
		return
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(req.Messages[len(req.Messages)-1].Content, &blocks)
	answered := false
	for _, b := range blocks {
		if b.Type == "tool_result" {
			answered = true
			m.mu.Lock()
			m.told = append(m.told, string(b.Content))
			m.mu.Unlock()
		}
	}
	offersBash := false
	for _, tool := range req.Tools {
		offersBash = offersBash || tool.Name == "Bash"
	}
	usage := map[string]any{"input_tokens": 10, "output_tokens": 5}
	events := []map[string]any{{"type": "message_start", "message": map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": req.Model, "content": []any{}, "usage": usage}}}
	stop := "end_turn"
	if offersBash && !answered {
		input, _ := json.Marshal(map[string]string{"command": m.command, "description": "the scripted command"})
		events = append(events,
			map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "tool_use", "id": m.callID, "name": "Bash", "input": map[string]any{}}},
			map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}},
			map[string]any{"type": "content_block_stop", "index": 0})
		stop = "tool_use"
	} else {
		events = append(events,
			map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}},
			map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "done"}},
			map[string]any{"type": "content_block_stop", "index": 0})
	}
	events = append(events,
		map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop}, "usage": map[string]any{"output_tokens": 5}},
		map[string]any{"type": "message_stop"})
	writeSSE(w, events)
}

// responses is the Responses API, as Codex 0.171.0 uses it.
func (m *modelStandIn) responses(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
		fmt.Fprint(w, `{"object":"list","data":[]}`)
		return
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Input []struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	answered := false
	for _, in := range req.Input {
		if in.Type == "function_call_output" {
			answered = true
			m.mu.Lock()
			m.told = append(m.told, string(in.Output))
			m.mu.Unlock()
		}
	}
	item := map[string]any{"type": "message", "role": "assistant", "id": "msg_1", "content": []any{map[string]any{"type": "output_text", "text": "done"}}}
	if !answered {
		args, _ := json.Marshal(map[string]string{"cmd": m.command})
		item = map[string]any{"type": "function_call", "id": "fc_1", "call_id": m.callID, "name": "exec_command", "arguments": string(args)}
	}
	writeSSE(w, []map[string]any{
		{"type": "response.created", "response": map[string]any{"id": "resp_1"}},
		{"type": "response.output_item.done", "output_index": 0, "item": item},
		{"type": "response.completed", "response": map[string]any{"id": "resp_1", "usage": map[string]any{"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}},
	})
}

// realAgent runs one agent once against a stand-in with the given hook
// settings.
type realAgent struct {
	name      string // claude-code or codex
	requester string
	// run runs the agent once in home and project with the hook settings
	// and the environment env; it returns what the agent printed.
	run func(t *testing.T, home, project, settings string, env []string, model *modelStandIn) string
}

func claudeCodeAgent(t *testing.T) realAgent {
	bin := agentBinary(t, "@anthropic-ai/claude-code-linux-x64/claude", "2.1.332")
	return realAgent{name: "claude-code", requester: "claude-code",
		run: func(t *testing.T, home, project, settings string, env []string, model *modelStandIn) string {
			srv := httptest.NewServer(http.HandlerFunc(model.anthropic))
			defer srv.Close()
			config := filepath.Join(home, ".claude")
			require.NoError(t, os.MkdirAll(config, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(config, "settings.json"), []byte(settings), 0o600))
			return runAgent(t, project, append(env, "HOME="+home, "CLAUDE_CONFIG_DIR="+config,
				"ANTHROPIC_BASE_URL="+srv.URL, "ANTHROPIC_API_KEY=stand-in",
				"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
				"IS_SANDBOX=1"), // bypassPermissions refuses root otherwise
				bin, "-p", "run the scripted command", "--output-format", "stream-json", "--verbose",
				"--permission-mode", "bypassPermissions", "--model", "claude-sonnet-4-5")
		}}
}

func codexAgent(t *testing.T) realAgent {
	bin := agentBinary(t, "@openai/codex-linux-x64/vendor/*/bin/codex", "0.171.0")
	return realAgent{name: "codex", requester: "codex",
		run: func(t *testing.T, home, project, settings string, env []string, model *modelStandIn) string {
			srv := httptest.NewServer(http.HandlerFunc(model.responses))
			defer srv.Close()
			codexHome := filepath.Join(home, ".codex")
			require.NoError(t, os.MkdirAll(codexHome, 0o700))
			config := fmt.Sprintf(`model = "gpt-5.5"
model_provider = "stand-in"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.stand-in]
name = "stand-in"
base_url = "%s/v1"
wire_api = "responses"
supports_websockets = false

`, srv.URL) + settings
			require.NoError(t, os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600))
			// --dangerously-bypass-hook-trust stands for the user's review of
			// the hooks (/hooks): codex exec skips untrusted hooks silently.
			return runAgent(t, project, append(env, "HOME="+home, "CODEX_HOME="+codexHome, "TERM=dumb", "SHELL=/bin/bash"),
				bin, "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", "run it")
		}}
}

// runAgent runs an agent to its end, in a bare environment, and returns
// what it printed.
func runAgent(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "the agent did not finish: %s", out)
	_ = err // a blocked tool may end the agent's run with a non-zero status; the marker file tells
	return string(out)
}

// TestRealAgentsRunAToolOnlyWhenToolgateAllowsIt drives the real Claude
// Code and Codex through toolgate's printed hook settings: a command the
// policy allows runs, and every way the hook can fail to decide blocks it,
// while the same failure without the settings' protection lets it run.
func TestRealAgentsRunAToolOnlyWhenToolgateAllowsIt(t *testing.T) {
	cc, cx := claudeCodeAgent(t), codexAgent(t)

	marks := t.TempDir()
	d := startDevWithPolicy(t, fmt.Sprintf(`
default: deny
rules:
  - name: allowed-touch
    tool: Bash
    when: args.command.startsWith('touch %s/ran-allowed-')
    action: allow
  - name: asked-touch
    tool: Bash
    when: args.command.startsWith('touch %s/ran-asked-')
    action: ask
`, marks, marks))
	c := d.client()
	withToolgate := "PATH=" + filepath.Dir(binary) + ":/usr/local/bin:/usr/bin:/bin"
	withoutToolgate := "PATH=/usr/local/bin:/usr/bin:/bin"
	// The agent's machine holds only the agent token: the printed settings
	// reach toolgate over its HTTP API, from a project directory that is
	// not toolgate's, with no keyring and no Temporal address.
	token := "TOOLGATE_TOKEN=token-agent-1"
	const requester = "agent-1" // the token's name

	for _, agent := range []realAgent{cc, cx} {
		printed := printedSettings(t, agent.name, "--api", "http://"+d.httpAddr)
		require.Contains(t, printed, "toolgate hook "+agent.name+" --api http://"+d.httpAddr)
		var unprotected string
		if agent.name == "codex" {
			unprotected = strings.Replace(printed, hookFallback(printed), "", 1)
		} else {
			unprotected = withoutOnFailure(t, printed)
		}
		typo := strings.ReplaceAll(printed, "toolgate hook "+agent.name, "toolgate hook claude")
		down := printedSettings(t, agent.name, "--api", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
		for _, tc := range []struct {
			name, settings, path string
			runs, approve        bool
		}{
			{name: "allowed", settings: printed, path: withToolgate, runs: true},
			{name: "asked, then approved", settings: printed, path: withToolgate, runs: true, approve: true},
			{name: "denied by the policy", settings: printed, path: withToolgate},
			{name: "toolgate not on the hook's PATH", settings: printed, path: withoutToolgate},
			{name: "toolgate not on PATH, without the settings' protection", settings: unprotected, path: withoutToolgate, runs: true},
			{name: "toolgate down", settings: down, path: withToolgate},
			{name: "a typo in the hook line", settings: typo, path: withToolgate},
		} {
			t.Run(agent.name+"/"+tc.name, func(t *testing.T) {
				slug := strings.NewReplacer(" ", "-", "'", "", ",", "").Replace(tc.name)
				mark := filepath.Join(marks, "ran-denied-"+agent.name+"-"+slug)
				switch tc.name {
				case "allowed":
					mark = filepath.Join(marks, "ran-allowed-"+agent.name)
				case "asked, then approved":
					mark = filepath.Join(marks, "ran-asked-"+agent.name)
				}
				model := &modelStandIn{command: "touch " + mark, callID: "call_" + agent.name + "_" + slug}
				home, project := t.TempDir(), t.TempDir()
				before := callsOf(t, c, requester)
				approved := make(chan string, 1)
				if tc.approve {
					go func() { approved <- approveWhenAsked(c, requester, before) }()
				}
				out := agent.run(t, home, project, tc.settings, []string{tc.path, token, "XDG_STATE_HOME=" + filepath.Join(home, "state")}, model)
				if tc.approve {
					require.Empty(t, <-approved, "a person approves the asked call while the agent waits")
				}
				_, err := os.Stat(mark)
				ran := err == nil
				assert.Equal(t, tc.runs, ran, "the tool ran: %v; the model was told %q; the agent printed:\n%s", ran, model.toldModel(), tail(out, 4000))
				if !tc.runs {
					assert.NotEmpty(t, model.toldModel(), "the model hears why the tool did not run")
				}
				if tc.name == "allowed" || tc.name == "denied by the policy" || tc.approve {
					want := map[bool]workflows.Status{true: workflows.StatusOK, false: workflows.StatusDenied}[tc.runs]
					if agent.name == "codex" && tc.runs {
						want = workflows.StatusUnknown // Codex reports no exit status
					}
					r := finalOf(t, c, requester, before)
					assert.Equal(t, want, r.Status)
					if tc.approve {
						assert.Equal(t, "bob", r.DecidedBy)
					}
				}
			})
		}
	}
}

// approveWhenAsked approves, as bob, the first call of requester not in
// before that waits for a person; it returns what went wrong, or "".
func approveWhenAsked(c *tgclient.Client, requester string, before map[string]bool) string {
	return decideWhenAsked(c, requester, before, policy.Decision{Kind: policy.Approved, DecidedBy: "bob", Channel: "cli"})
}

// decideWhenAsked decides, with d, the first call of requester not in
// before that waits for a person; it returns what went wrong, or "".
func decideWhenAsked(c *tgclient.Client, requester string, before map[string]bool, d policy.Decision) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		calls, err := c.List(ctx, tgclient.ListFilter{Requester: requester, Status: string(workflows.StatusPending)})
		if err == nil {
			for _, s := range calls {
				if before[s.CallID] {
					continue
				}
				if _, err := c.Decide(ctx, s.CallID, d); err != nil {
					return "decide " + s.CallID + ": " + err.Error()
				}
				return ""
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "no call of " + requester + " waited for a person"
}

// callsOf lists the calls of requester (a listing: eventually consistent,
// which is why finalOf waits for a new one to show).
func callsOf(t *testing.T, c *tgclient.Client, requester string) map[string]bool {
	t.Helper()
	calls, err := c.List(context.Background(), tgclient.ListFilter{Requester: requester})
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, s := range calls {
		ids[s.CallID] = true
	}
	return ids
}

// finalOf waits for the Result of the one call of requester that is not
// in before (the listing finds it; the Result comes from the call itself).
func finalOf(t *testing.T, c *tgclient.Client, requester string, before map[string]bool) workflows.Result {
	t.Helper()
	var fresh []string
	require.Eventually(t, func() bool {
		fresh = fresh[:0]
		for id := range callsOf(t, c, requester) {
			if !before[id] {
				fresh = append(fresh, id)
			}
		}
		return len(fresh) > 0
	}, 30*time.Second, 200*time.Millisecond, "no new call of %s", requester)
	require.Len(t, fresh, 1, "one tool use, one call")
	callID := fresh[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Wait(ctx, callID)
	require.NoError(t, err)
	return r
}

// hookFallback is the fail-closed part of the printed Codex PreToolUse
// line.
func hookFallback(printed string) string {
	i := strings.Index(printed, " || {")
	j := strings.Index(printed[i:], "}'")
	return printed[i : i+j+1]
}

// withoutOnFailure drops "onFailure" from printed Claude Code settings.
func withoutOnFailure(t *testing.T, printed string) string {
	var settings map[string]any
	require.NoError(t, json.Unmarshal([]byte(printed), &settings))
	for _, matchers := range settings["hooks"].(map[string]any) {
		for _, m := range matchers.([]any) {
			for _, h := range m.(map[string]any)["hooks"].([]any) {
				delete(h.(map[string]any), "onFailure")
			}
		}
	}
	b, err := json.Marshal(settings)
	require.NoError(t, err)
	return string(b)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// TestRealClaudeCodeHandsAUserRuleToItsPrompt: a call whose rule lets the
// person running the agent decide is answered "ask", so Claude Code itself
// asks. In a headless run (-p) nobody can answer, Claude Code refuses it,
// and toolgate records that the tool did not run.
func TestRealClaudeCodeHandsAUserRuleToItsPrompt(t *testing.T) {
	cc := claudeCodeAgent(t)
	marks := t.TempDir()
	d := startDevWithPolicy(t, fmt.Sprintf(`
default: deny
rules:
  - {name: at-the-prompt, tool: Bash, when: "args.command.startsWith('touch %s/')", action: ask, groups: [ops], user: true}
`, marks))
	c := d.client()
	// The operators' Temporal path: the printed line names the keyring by
	// absolute path, so it works from the project directory.
	settings := strings.ReplaceAll(printedSettings(t, cc.name, "--temporal", "--keys", d.keysFile(), "--door-key", d.doorKeyFile(), "--temporal-address", d.address()),
		"toolgate hook claude-code", "toolgate hook claude-code --user dana")
	require.Contains(t, settings, "--keys "+d.keysFile())
	mark := filepath.Join(marks, "asked")
	model := &modelStandIn{command: "touch " + mark, callID: "call_cc_user"}
	home, project := t.TempDir(), t.TempDir()
	before := callsOf(t, c, cc.requester)
	out := cc.run(t, home, project, settings, []string{"PATH=" + filepath.Dir(binary) + ":/usr/local/bin:/usr/bin:/bin",
		"XDG_STATE_HOME=" + filepath.Join(home, "state")}, model)

	_, err := os.Stat(mark)
	assert.True(t, os.IsNotExist(err), "nobody approved at the prompt: the tool did not run; the agent printed:\n%s", tail(out, 4000))
	assert.Contains(t, model.toldModel(), `lets dana, who runs this agent, decide it here`, "the prompt's text, which headless Claude Code hands the model")
	r := finalOf(t, c, cc.requester, before)
	assert.Equal(t, workflows.StatusDenied, r.Status)
	assert.Equal(t, "dana", r.DecidedBy, "the turn ended without the tool: recorded as the user's refusal")
	assert.Equal(t, policy.ChannelClient, r.Channel)
	assert.Contains(t, r.Reason, "did not approve it at Claude Code's permission prompt")
}
