package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The real opencode (opencode-ai from npm, pinned in
// testdata/npm/package.json) with the TypeScript client's plugin,
// @toolgate/client/opencode, installed as docs/coding-agents.md says: a
// .opencode/plugin/toolgate.js that re-exports it. opencode's model is a
// local stand-in for an OpenAI-compatible endpoint that asks for one tool
// call per prompt. opencode's own permissions allow every tool, so only the
// plugin stands between the model and the tool.

const opencodeVersion = "1.18.33"

// opencodeModel is the stand-in: a chat completions endpoint that answers
// each new prompt with one call of tool (ID callID, arguments args) and
// everything else with "done". It keeps what opencode told it of each tool
// call.
type opencodeModel struct {
	tool, callID string
	args         map[string]any
	mu           sync.Mutex
	told         []string
}

func (m *opencodeModel) toldModel() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.told, "\n")
}

func (m *opencodeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Function struct{ Name string } `json:"function"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	// What the tool calls since the last prompt came to.
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != "user"; i-- {
		if req.Messages[i].Role == "tool" {
			var text string
			if json.Unmarshal(req.Messages[i].Content, &text) != nil {
				text = string(req.Messages[i].Content)
			}
			m.mu.Lock()
			m.told = append(m.told, text)
			m.mu.Unlock()
		}
	}
	offered := false
	for _, tool := range req.Tools {
		offered = offered || tool.Function.Name == m.tool
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	var events []map[string]any
	if offered && req.Messages[len(req.Messages)-1].Role == "user" {
		args, _ := json.Marshal(m.args)
		events = []map[string]any{
			chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": m.callID, "type": "function",
				"function": map[string]any{"name": m.tool, "arguments": string(args)}}}}, nil),
			chunk(map[string]any{}, "tool_calls"),
		}
	} else {
		events = []map[string]any{chunk(map[string]any{"role": "assistant", "content": "done"}, nil), chunk(map[string]any{}, "stop")}
	}
	events[len(events)-1]["usage"] = map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// opencodeAgent is one opencode installation: a home (config, data with
// its sessions, cache) and a project with the plugin, talking to model.
type opencodeAgent struct {
	t             *testing.T
	bin           string
	home, project string
	model         *opencodeModel
	env           []string
}

// newOpencodeAgent installs opencode's config and the plugin so that
// nothing is fetched when it runs: each config directory opencode would
// `npm install` @opencode-ai/plugin into already lists it in a lock file,
// with node_modules from the npm cache; models.dev, updates and default
// plugins are off; any other request to the internet meets a dead proxy,
// and npm is offline.
func newOpencodeAgent(t *testing.T, model *opencodeModel, toolgateEnv ...string) *opencodeAgent {
	t.Helper()
	bin := agentBinary(t, "opencode-ai/bin/opencode.exe", opencodeVersion)
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	o := &opencodeAgent{t: t, bin: bin, home: t.TempDir(), project: t.TempDir(), model: model}

	config, err := json.Marshal(map[string]any{
		"$schema":     "https://opencode.ai/config.json",
		"model":       "stand-in/model",
		"small_model": "stand-in/model",
		"autoupdate":  false,
		"share":       "disabled",
		"permission":  map[string]any{"*": "allow"},
		"provider": map[string]any{"stand-in": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "stand-in",
			"options": map[string]any{"baseURL": srv.URL + "/v1", "apiKey": "stand-in"},
			"models":  map[string]any{"model": map[string]any{"name": "model", "tool_call": true}},
		}},
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(o.project, "opencode.json"), config, 0o644))

	dotOpencode := filepath.Join(o.project, ".opencode")
	require.NoError(t, os.MkdirAll(filepath.Join(dotOpencode, "plugin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dotOpencode, "plugin", "toolgate.js"),
		[]byte("export { ToolgatePlugin } from '@toolgate/client/opencode';\n"), 0o644))
	client, err := filepath.Abs(filepath.Join("..", "clients", "typescript"))
	require.NoError(t, err)
	installed := filepath.Join(dotOpencode, "node_modules", "@toolgate", "client")
	require.NoError(t, os.CopyFS(filepath.Join(installed, "src"), os.DirFS(filepath.Join(client, "src"))))
	pkg, err := os.ReadFile(filepath.Join(client, "package.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(installed, "package.json"), pkg, 0o644))
	installedDeps(t, dotOpencode, "@toolgate/client")
	installedDeps(t, filepath.Join(o.home, ".config", "opencode"))

	o.env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + o.home, "SHELL=/bin/bash", "TERM=dumb",
		"XDG_CONFIG_HOME=" + filepath.Join(o.home, ".config"), "XDG_DATA_HOME=" + filepath.Join(o.home, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(o.home, ".cache"), "XDG_STATE_HOME=" + filepath.Join(o.home, ".local", "state"),
		"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_SHARE=1",
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost", "npm_config_offline=true",
	}, toolgateEnv...)
	return o
}

// installedDeps makes dir a config directory whose dependencies opencode
// finds installed: @opencode-ai/plugin (which opencode adds to each) from
// the npm cache, and the packages in node_modules already.
func installedDeps(t *testing.T, dir string, more ...string) {
	t.Helper()
	modules := filepath.Join(dir, "node_modules", "@opencode-ai")
	require.NoError(t, os.MkdirAll(modules, 0o755))
	require.NoError(t, os.Symlink(filepath.Dir(npmFile(t, "@opencode-ai/plugin/package.json")), filepath.Join(modules, "plugin")))
	deps := map[string]string{"@opencode-ai/plugin": opencodeVersion}
	for _, name := range more {
		deps[name] = "*"
	}
	pkg, err := json.Marshal(map[string]any{"dependencies": deps})
	require.NoError(t, err)
	lock, err := json.Marshal(map[string]any{"lockfileVersion": 3, "packages": map[string]any{"": map[string]any{"dependencies": deps}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "package.json"), pkg, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "package-lock.json"), lock, 0o644))
}

// opencodeRun is one `opencode run` in its own process group.
type opencodeRun struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// start runs `opencode run` with args in the project.
func (o *opencodeAgent) start(args ...string) *opencodeRun {
	o.t.Helper()
	r := &opencodeRun{cmd: exec.Command(o.bin, append([]string{"run", "--print-logs"}, args...)...), out: &syncBuffer{}, exited: make(chan struct{})}
	r.cmd.Dir, r.cmd.Env = o.project, o.env
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(o.t, r.cmd.Start())
	go func() {
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	o.t.Cleanup(r.kill)
	return r
}

// finish waits for the run's end and returns what opencode printed.
func (r *opencodeRun) finish(t *testing.T) string {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(3 * time.Minute):
		r.kill()
		t.Fatalf("opencode did not finish:\n%s", tail(r.out.String(), 4000))
	}
	out := r.out.String()
	require.NotContains(t, out, "dependency install failed", "opencode tried to download what the test installed")
	return out
}

// kill is SIGKILL of opencode and whatever it started.
func (r *opencodeRun) kill() {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.exited
}

// run runs `opencode run` to its end.
func (o *opencodeAgent) run(args ...string) string {
	o.t.Helper()
	return o.start(args...).finish(o.t)
}

// opencodeWaitingCall finds the call of tool that waits for a person with args
// containing what: its call ID and session (opencode's session ID).
func opencodeWaitingCall(t *testing.T, bob apiClient, tool, what string) (callID, session string) {
	t.Helper()
	require.Eventually(t, func() bool {
		r := bob.do("GET", "/v1/pending?tool="+url.QueryEscape(tool), nil)
		calls, _ := r.body["calls"].([]any)
		for _, c := range calls {
			call, _ := c.(map[string]any)
			args, _ := json.Marshal(call["args"])
			if strings.Contains(string(args), what) {
				callID, _ = call["call_id"].(string)
				session, _ = call["session"].(string)
				return true
			}
		}
		return false
	}, 2*time.Minute, 200*time.Millisecond, "no %s call with %q waits for a person", tool, what)
	return callID, session
}

// opencodeCall finds the call of tool made for opencode's tool call
// toolCallID, in whichever session (the listing is eventually consistent).
func opencodeCall(t *testing.T, bob apiClient, tool, toolCallID string) (callID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		r := bob.do("GET", "/v1/calls?tool="+url.QueryEscape(tool), nil)
		calls, _ := r.body["calls"].([]any)
		for _, c := range calls {
			call, _ := c.(map[string]any)
			id, _ := call["call_id"].(string)
			session, _ := call["session"].(string)
			if id == frameworkCallID(session, toolCallID) {
				callID = id
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "no %s call for opencode's %s", tool, toolCallID)
	return callID
}

func fileText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	return string(data)
}

func TestOpencodeRunsAToolOnlyWhenToolgateAllowsIt(t *testing.T) {
	d := startDevWithPolicy(t, `
default: deny
rules:
  - {name: reads, tool: read, action: allow}
  - {name: writes, tool: write, action: ask}
  - {name: touches, tool: bash, when: "args.command.startsWith('touch ')", action: allow}
`)
	base := "http://" + d.httpAddr
	bob := apiClient{t: t, base: base, token: "token-bob"}
	agent := []string{"TOOLGATE_URL=" + base, "TOOLGATE_TOKEN=token-agent-1"}

	step(t, "an auto-allowed read runs", func(t *testing.T) {
		model := &opencodeModel{tool: "read", callID: "call_read"}
		o := newOpencodeAgent(t, model, agent...)
		model.args = map[string]any{"filePath": filepath.Join(o.project, "notes.txt")}
		require.NoError(t, os.WriteFile(filepath.Join(o.project, "notes.txt"), []byte("the secret word is marmalade\n"), 0o644))
		out := o.run("read the notes")
		assert.Contains(t, model.toldModel(), "marmalade", "the model got the file; opencode printed:\n%s", tail(out, 4000))
		res := bob.do("GET", "/v1/calls/"+opencodeCall(t, bob, "read", "call_read")+"?wait=30s", nil)
		assert.Equal(t, "ok", res.body["status"], "tool.execute.after reported the run: %s", res.raw)
	})

	step(t, "a tool that fails is reported as its error", func(t *testing.T) {
		model := &opencodeModel{tool: "read", callID: "call_missing"}
		o := newOpencodeAgent(t, model, agent...)
		model.args = map[string]any{"filePath": filepath.Join(o.project, "missing.txt")}
		out := o.run("read the notes")
		callID := opencodeCall(t, bob, "read", "call_missing")
		res := bob.do("GET", "/v1/calls/"+callID+"?wait=30s", nil)
		assert.Equal(t, "error", res.body["status"], "opencode printed:\n%s\nthe call: %s", tail(out, 4000), res.raw)
		assert.Contains(t, fmt.Sprint(res.body["reason"]), "missing.txt", "the report carries opencode's error: %s", res.raw)
	})

	step(t, "a write waits, is approved, runs once and is reported", func(t *testing.T) {
		model := &opencodeModel{tool: "write", callID: "call_write"}
		o := newOpencodeAgent(t, model, agent...)
		target := filepath.Join(o.project, "approved.txt")
		model.args = map[string]any{"filePath": target, "content": "approved content\n"}
		run := o.start("write the file")
		callID, _ := opencodeWaitingCall(t, bob, "write", "approved.txt")
		assert.Empty(t, fileText(t, target), "nothing is written while the call waits")
		decide(t, bob, callID, map[string]any{"decision": "approve"})
		out := run.finish(t)
		assert.Equal(t, "approved content\n", fileText(t, target), "opencode printed:\n%s", tail(out, 4000))
		res := bob.do("GET", "/v1/calls/"+callID+"?wait=30s", nil)
		assert.Equal(t, "ok", res.body["status"], "tool.execute.after reported the run: %s", res.raw)
		assert.Equal(t, "bob", res.body["decided_by"])
		assert.Contains(t, flatten(res.body["output"]), "Wrote file successfully", "the report carries what the model was told")
	})

	step(t, "a denial's reason reaches the model, and the tool never runs", func(t *testing.T) {
		model := &opencodeModel{tool: "write", callID: "call_deny"}
		o := newOpencodeAgent(t, model, agent...)
		target := filepath.Join(o.project, "denied.txt")
		model.args = map[string]any{"filePath": target, "content": "x"}
		run := o.start("write the file")
		callID, _ := opencodeWaitingCall(t, bob, "write", "denied.txt")
		decide(t, bob, callID, map[string]any{"decision": "deny", "reason": "that file belongs to finance"})
		out := run.finish(t)
		assert.NoFileExists(t, target)
		assert.Contains(t, model.toldModel(), "that file belongs to finance", "opencode printed:\n%s", tail(out, 4000))
	})

	step(t, "an approver's edited arguments are the ones that run", func(t *testing.T) {
		model := &opencodeModel{tool: "write", callID: "call_edit"}
		o := newOpencodeAgent(t, model, agent...)
		target := filepath.Join(o.project, "edited.txt")
		model.args = map[string]any{"filePath": target, "content": "DROP TABLE users;\n"}
		run := o.start("write the file")
		callID, _ := opencodeWaitingCall(t, bob, "write", "edited.txt")
		decide(t, bob, callID, map[string]any{"decision": "approve", "args": map[string]any{"filePath": target, "content": "SELECT 1;\n"}})
		out := run.finish(t)
		assert.Equal(t, "SELECT 1;\n", fileText(t, target), "opencode printed:\n%s", tail(out, 4000))
		told := model.toldModel()
		assert.Contains(t, told, "toolgate: an approver changed the arguments to", "the model learns what ran")
		assert.Contains(t, told, `"content":"SELECT 1;\n"`)
		res := bob.do("GET", "/v1/calls/"+callID+"?wait=30s", nil)
		assert.Equal(t, "ok", res.body["status"], res.raw)
		assert.Equal(t, map[string]any{"filePath": target, "content": "DROP TABLE users;\n"}, res.body["original_args"])
	})

	// The same command, which the policy allows, with toolgate reachable
	// and with each way of failing to hear from it.
	stopHanging := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stopHanging:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(stopHanging) }) // runs first
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<html>a captive portal</html>")
	}))
	t.Cleanup(garbage.Close)
	for _, tc := range []struct {
		name string
		env  []string
		runs bool
		told string
	}{
		{name: "toolgate reachable", env: agent, runs: true},
		{name: "toolgate down", env: []string{fmt.Sprintf("TOOLGATE_URL=http://127.0.0.1:%d", freePort(t)), "TOOLGATE_TOKEN=token-agent-1", "TOOLGATE_WAIT_SECONDS=3"}, told: "did not answer"},
		{name: "a bad token", env: []string{"TOOLGATE_URL=" + base, "TOOLGATE_TOKEN=token-nobody"}, told: "bash was not run"},
		{name: "a garbage answer", env: []string{"TOOLGATE_URL=" + garbage.URL, "TOOLGATE_TOKEN=token-agent-1"}, told: "not JSON"},
		{name: "no answer in time", env: []string{"TOOLGATE_URL=" + hung.URL, "TOOLGATE_TOKEN=token-agent-1", "TOOLGATE_WAIT_SECONDS=3"}, told: "no decision from toolgate within 3 s"},
		{name: "no token configured", env: []string{"TOOLGATE_URL=" + base}, told: "not configured"},
	} {
		step(t, tc.name, func(t *testing.T) {
			model := &opencodeModel{tool: "bash", callID: "call_touch"}
			o := newOpencodeAgent(t, model, tc.env...)
			mark := filepath.Join(o.project, "touched")
			model.args = map[string]any{"command": "touch " + mark, "description": "touch a file"}
			out := o.run("touch it")
			_, err := os.Stat(mark)
			assert.Equal(t, tc.runs, err == nil, "the tool ran: %v; the model was told %q; opencode printed:\n%s", err == nil, model.toldModel(), tail(out, 4000))
			if !tc.runs {
				assert.Contains(t, model.toldModel(), tc.told, "the model hears why the tool did not run")
			}
		})
	}
}

// TestOpencodeRestartedDoesNotRunAnApprovalTwice kills opencode while its
// call waits, approves the call, and resumes the session twice, the
// stand-in model replaying the same tool call each time: the approval runs
// the command once.
func TestOpencodeRestartedDoesNotRunAnApprovalTwice(t *testing.T) {
	d := startDevWithPolicy(t, "default: deny\nrules:\n  - {name: shell, tool: bash, action: ask}\n")
	base := "http://" + d.httpAddr
	bob := apiClient{t: t, base: base, token: "token-bob"}
	model := &opencodeModel{tool: "bash", callID: "call_append"}
	o := newOpencodeAgent(t, model, "TOOLGATE_URL="+base, "TOOLGATE_TOKEN=token-agent-1")
	ledger := filepath.Join(o.project, "runs.txt")
	model.args = map[string]any{"command": "echo ran >> " + ledger, "description": "append a line"}

	first := o.start("append the line")
	callID, session := opencodeWaitingCall(t, bob, "bash", "runs.txt")
	require.Equal(t, frameworkCallID(session, "call_append"), callID, "the call ID comes from opencode's session and tool-call IDs")
	first.kill()
	decide(t, bob, callID, map[string]any{"decision": "approve"})

	out := o.run("--session", session, "go on")
	assert.Equal(t, "ran\n", fileText(t, ledger), "the restarted opencode runs the approved call; it printed:\n%s", tail(out, 4000))
	res := bob.do("GET", "/v1/calls/"+callID+"?wait=30s", nil)
	assert.Equal(t, "ok", res.body["status"], res.raw)

	out = o.run("--session", session, "go on again")
	assert.Equal(t, "ran\n", fileText(t, ledger), "replayed once more, the call does not run again; opencode printed:\n%s", tail(out, 4000))
	assert.Contains(t, model.toldModel(), "already ran")
	calls := bob.do("GET", "/v1/calls?session="+url.QueryEscape(session), nil)
	assert.EqualValues(t, 1, calls.body["total"], "one tool call, one toolgate call: %s", calls.raw)
}
