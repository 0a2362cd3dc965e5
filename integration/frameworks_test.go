package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The TypeScript client's framework adapters, each proven with its
// framework from npm (testdata/npm/package.json pins them): the examples in
// clients/typescript/examples run as a user would run them, with the
// framework's own stand-in for a model, against `toolgate dev`.

// framework is one adapter's example and how to run it.
type framework struct {
	name    string
	example string
	// deploy and lookup are the tool names the framework gives toolgate.
	deploy, lookup string
	// env adds what each run of the example needs besides toolgate.
	env func(t *testing.T) []string
	// model is the model API the example's agent calls, if not in-process.
	model *anthropicStandIn
}

// scriptedCall is one tool call the stand-in model makes in its first turn.
type scriptedCall struct {
	ID   string         `json:"id"`
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
}

// onAttempt is the script as the model makes it on an agent process's
// attempt-th start: a real model names its calls anew each time it is
// asked, so an agent that lost its state on a restart would ask calls
// toolgate has not seen (as the examples' harness.mjs does).
func onAttempt(script []scriptedCall, attempt int) []scriptedCall {
	if attempt == 1 {
		return script
	}
	renamed := make([]scriptedCall, len(script))
	for i, c := range script {
		c.ID = fmt.Sprintf("%s-attempt%d", c.ID, attempt)
		renamed[i] = c
	}
	return renamed
}

func TestFrameworkAdapters(t *testing.T) {
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the framework examples need node (scripts/test installs Debian's nodejs)")
	app := frameworkApp(t)

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(`default: ask
rules:
  - name: lookups
    tool: lookup
    action: allow
  - name: claude-lookups
    tool: mcp__ops__lookup
    action: allow
  - name: deploys
    tool: deploy
    action: ask
    message: a deploy needs a person
  - name: claude-deploys
    tool: mcp__ops__deploy
    action: ask
    message: a deploy needs a person
`), 0o600))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", writeTokensFile(t, t.TempDir()), "--policy", policy)
	base := "http://" + d.httpAddr
	bob := apiClient{t: t, base: base, token: "token-bob"}

	claude := &anthropicStandIn{}
	claudeSrv := httptest.NewServer(claude)
	t.Cleanup(claudeSrv.Close)
	frameworks := []framework{
		{name: "ai-sdk", example: "ai-sdk.mjs", deploy: "deploy", lookup: "lookup"},
		{name: "openai-agents", example: "openai-agents.mjs", deploy: "deploy", lookup: "lookup"},
		{name: "langgraph", example: "langgraph.mjs", deploy: "deploy", lookup: "lookup"},
		{name: "claude-agent-sdk", example: "claude-agent-sdk.mjs", deploy: "mcp__ops__deploy", lookup: "mcp__ops__lookup", model: claude,
			env: func(t *testing.T) []string {
				home := t.TempDir()
				return []string{"HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
					"ANTHROPIC_BASE_URL=" + claudeSrv.URL, "ANTHROPIC_API_KEY=stand-in",
					"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1"}
			}},
	}

	t.Run("typed errors from the real server", func(t *testing.T) { typedErrorsStep(t, node, app, base, bob) })
	t.Run("a derived call ID another agent took first does not stop the victim's gate", func(t *testing.T) {
		squattedStep(t, node, app, base, bob)
	})

	for _, fw := range frameworks {
		t.Run(fw.name, func(t *testing.T) {
			ex := func(t *testing.T, session string, script []scriptedCall) *exampleRun {
				return newExampleRun(t, node, app, fw, base, session, script)
			}
			deploy := func(id, env string) scriptedCall {
				return scriptedCall{ID: id, Tool: fw.deploy, Args: map[string]any{"service": "web", "env": env}}
			}

			step(t, "an auto-allowed tool runs; an asked one waits, is approved, runs once and reports ok", func(t *testing.T) {
				session := fw.name + "-approve"
				r := ex(t, session, []scriptedCall{{ID: "call-look", Tool: fw.lookup, Args: map[string]any{"service": "web"}}, deploy("call-deploy", "prod")})
				r.start()
				r.waitForWaiting()
				deployID := frameworkCallID(session, "call-deploy")
				assert.Equal(t, "pending", bob.do("GET", "/v1/calls/"+deployID, nil).body["status"])
				assert.Equal(t, []effect{{"lookup", map[string]any{"service": "web"}}}, r.effects(), "the auto-allowed lookup ran, the deploy did not")
				decide(t, bob, deployID, map[string]any{"decision": "approve"})
				told := r.finish()
				assert.Equal(t, []effect{{"lookup", map[string]any{"service": "web"}}, {"deploy", map[string]any{"service": "web", "env": "prod"}}}, r.effects())
				assert.Contains(t, flatten(told["call-look"]), "status:healthy")
				assert.Contains(t, flatten(told["call-deploy"]), "deployed:web")
				res := bob.do("GET", "/v1/calls/"+deployID, nil)
				assert.Equal(t, "ok", res.body["status"], res.raw)
				assert.Equal(t, "bob", res.body["decided_by"])
				assert.Contains(t, flatten(res.body["output"]), "deployed:web", "the report carries the tool's output")
				assert.Equal(t, "ok", bob.do("GET", "/v1/calls/"+frameworkCallID(session, "call-look"), nil).body["status"])
			})

			step(t, "a denied tool's reason is what the model receives", func(t *testing.T) {
				session := fw.name + "-deny"
				r := ex(t, session, []scriptedCall{deploy("call-deny", "prod")})
				r.start()
				r.waitForWaiting()
				decide(t, bob, frameworkCallID(session, "call-deny"), map[string]any{"decision": "deny", "reason": "prod is frozen until Monday"})
				told := r.finish()
				assert.Contains(t, flatten(told["call-deny"]), "prod is frozen until Monday")
				assert.Empty(t, r.effects(), "a denied tool never runs")
			})

			step(t, "an approval with edited arguments runs the edit", func(t *testing.T) {
				session := fw.name + "-edit"
				r := ex(t, session, []scriptedCall{deploy("call-edit", "prod")})
				r.start()
				r.waitForWaiting()
				decide(t, bob, frameworkCallID(session, "call-edit"), map[string]any{"decision": "approve", "args": map[string]any{"service": "web", "env": "staging"}})
				told := r.finish()
				assert.Equal(t, []effect{{"deploy", map[string]any{"service": "web", "env": "staging"}}}, r.effects())
				assert.Contains(t, flatten(told["call-edit"]), "env:staging", "the model learns what ran")
				res := bob.do("GET", "/v1/calls/"+frameworkCallID(session, "call-edit"), nil)
				assert.Equal(t, map[string]any{"service": "web", "env": "prod"}, res.body["original_args"])
			})

			step(t, "SIGKILL while the call waits: restarted, it rejoins the call and runs the tool once", func(t *testing.T) {
				session := fw.name + "-kill"
				r := ex(t, session, []scriptedCall{deploy("call-kill", "prod")})
				r.start()
				r.waitForWaiting()
				r.kill()
				r.start()
				r.waitForWaiting()
				calls := bob.do("GET", "/v1/calls?session="+session, nil)
				assert.EqualValues(t, 1, calls.body["total"], "the restarted agent asked no second call: %s", calls.raw)
				decide(t, bob, frameworkCallID(session, "call-kill"), map[string]any{"decision": "approve"})
				told := r.finish()
				assert.Contains(t, flatten(told["call-kill"]), "deployed:web")
				assert.Equal(t, []effect{{"deploy", map[string]any{"service": "web", "env": "prod"}}}, r.effects(), "the tool ran once")
				assert.EqualValues(t, 1, bob.do("GET", "/v1/calls?session="+session, nil).body["total"])
			})

			step(t, "approve-for-session covers the next call of the tool", func(t *testing.T) {
				session := fw.name + "-sticky"
				first := ex(t, session, []scriptedCall{deploy("call-first", "prod")})
				first.start()
				first.waitForWaiting()
				decide(t, bob, frameworkCallID(session, "call-first"), map[string]any{"decision": "approve_for_session"})
				first.finish()
				second := ex(t, session, []scriptedCall{deploy("call-second", "prod")})
				second.start()
				told := second.finish() // no person decides
				assert.Contains(t, flatten(told["call-second"]), "deployed:web")
				assert.Len(t, second.effects(), 1)
				res := bob.do("GET", "/v1/calls/"+frameworkCallID(session, "call-second"), nil)
				assert.Equal(t, "ok", res.body["status"], res.raw)
				assert.Equal(t, "bob", res.body["decided_by"], "the sticky decision stays bob's")
			})
		})
	}
}

// typedErrors is a program of the client's users: each refusal of the real
// server, and toolgate unreachable, as the typed error it must be. The
// test approves the call while the program waits for it.
const typedErrors = `
import { Toolgate } from '@toolgate/client';
const url = process.env.TOOLGATE_URL;
const agent = new Toolgate({ url, token: 'token-agent-1' });
const other = new Toolgate({ url, token: 'token-agent-2' });
const out = {};
async function refusal(name, f) {
  try {
    await f();
    out[name] = 'no error';
  } catch (e) {
    out[name] = { class: e.constructor.name, status: e.status, code: e.code, message: e.apiMessage ?? e.message };
  }
}
await refusal('bad token', () => new Toolgate({ url, token: 'token-nobody' }).tools());
await refusal('unreachable', () => new Toolgate({ url: 'http://127.0.0.1:9', token: 't', retryFor: 300 }).tools());
await agent.submit({ session: 'ts-errors', tool: 'deploy', args: { service: 'web' }, call_id: 'tc-ts-errors', execution: 'agent' });
await refusal('not your session', () => other.submit({ session: 'ts-errors', tool: 'lookup', args: { service: 'web' }, execution: 'agent' }));
await refusal('bad arguments', () => agent.submit({ session: 'ts-errors', tool: 'deploy', args: 'not an object', execution: 'agent' }));
await agent.wait('tc-ts-errors', { untilApproved: true });
await agent.claim('tc-ts-errors', { run: 'first' });
await refusal('claimed twice', () => agent.claim('tc-ts-errors', { run: 'second' }));
await agent.report('tc-ts-errors', { output: 'done', run: 'first' });
console.log(JSON.stringify(out));
`

// runApproving runs a program of the client's in app, approves callID
// as bob once it waits, and returns what the program printed.
func runApproving(t *testing.T, node, app, base, program, callID string, bob apiClient) string {
	t.Helper()
	cmd := exec.Command(node, "--input-type=module", "-e", program)
	cmd.Dir, cmd.Env = app, append(os.Environ(), "TOOLGATE_URL="+base)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	require.Eventually(t, func() bool {
		return bob.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending"
	}, time.Minute, 50*time.Millisecond, "call %s waits; stderr:\n%s", callID, &stderr)
	decide(t, bob, callID, map[string]any{"decision": "approve"})
	select {
	case err := <-done:
		require.NoError(t, err, "stderr:\n%s", &stderr)
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the program did not finish\nstderr:\n%s", &stderr)
	}
	return stdout.String()
}

func typedErrorsStep(t *testing.T, node, app, base string, bob apiClient) {
	out := runApproving(t, node, app, base, typedErrors, "tc-ts-errors", bob)
	var got map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	expect := map[string][3]any{ // class, status, code
		"bad token":        {"UnauthorizedError", 401.0, "unauthorized"},
		"unreachable":      {"UnreachableError", 0.0, "unreachable"},
		"not your session": {"ForbiddenError", 403.0, "not_your_session"},
		"bad arguments":    {"InvalidRequestError", 400.0, "invalid_request"},
		"claimed twice":    {"ConflictError", 409.0, "already_claimed"},
	}
	for name, want := range expect {
		e := got[name]
		require.NotNil(t, e, "%s: %s", name, out)
		assert.Equal(t, want[0], e["class"], name)
		assert.Equal(t, want[1], e["status"], name)
		assert.Equal(t, want[2], e["code"], name)
		assert.NotEmpty(t, e["message"], "%s carries the API's message", name)
	}
	res := bob.do("GET", "/v1/calls/tc-ts-errors", nil)
	assert.Equal(t, "ok", res.body["status"], "the first claim's run was reported: %s", res.raw)
}

// squatted is a victim's gate() whose derived call ID another agent, who
// knows the session and the tool-call ID, submitted first.
const squatted = `
import { Toolgate, deriveCallId } from '@toolgate/client';
const url = process.env.TOOLGATE_URL;
const attacker = new Toolgate({ url, token: 'token-agent-2' });
await attacker.submit({ session: 'squat-attacker', tool: 'lookup', args: {}, call_id: await deriveCallId('squat-victim', 'tool-1') });
const victim = new Toolgate({ url, token: 'token-agent-1', pollSeconds: 1 });
let runs = 0;
const outcome = await victim.gate({ session: 'squat-victim', tool: 'deploy', args: { env: 'qa' }, toolCallId: 'tool-1' },
  async (args) => { runs++; return { deployed: args.env }; });
console.log(JSON.stringify({ callId: outcome.callId, status: outcome.status, runs }));
`

func squattedStep(t *testing.T, node, app, base string, bob apiClient) {
	// The victim's call waits under the next derived ID.
	next := frameworkCallID("squat-victim", "tool-1") + "-1"
	out := runApproving(t, node, app, base, squatted, next, bob)
	var got struct {
		CallID, Status string
		Runs           int
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, next, got.CallID)
	assert.Equal(t, "ok", got.Status)
	assert.Equal(t, 1, got.Runs, "the approved tool ran once")
	squat := bob.do("GET", "/v1/calls/"+frameworkCallID("squat-victim", "tool-1"), nil)
	assert.Equal(t, "squat-attacker", squat.body["session"], "the squatter's call is its own, in its own session")
}

// frameworkCallID is the TypeScript client's deriveCallId: the toolgate
// call of a framework's tool call, in a session.
func frameworkCallID(session, toolCallID string) string {
	sum := sha256.Sum256([]byte(session + "\x00" + toolCallID))
	return "tc-" + hex.EncodeToString(sum[:20])
}

func decide(t *testing.T, approver apiClient, callID string, body map[string]any) {
	t.Helper()
	r := approver.do("POST", "/v1/calls/"+callID+"/decision", body)
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

// frameworkApp is an app folder as a user's would be: the examples, the
// npm software in node_modules, and the client installed as a copy
// (npm install --install-links), not a link to the source tree.
func frameworkApp(t *testing.T) string {
	t.Helper()
	npmFile(t, "ai/package.json") // fails the test, saying how to install, when the npm software is missing
	app := t.TempDir()
	modules := filepath.Join(app, "node_modules")
	entries, err := os.ReadDir(npmModules())
	require.NoError(t, err)
	for _, e := range entries {
		src := filepath.Join(npmModules(), e.Name())
		if !strings.HasPrefix(e.Name(), "@") {
			require.NoError(t, os.MkdirAll(modules, 0o755))
			require.NoError(t, os.Symlink(src, filepath.Join(modules, e.Name())))
			continue
		}
		scoped, err := os.ReadDir(src)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(modules, e.Name()), 0o755))
		for _, s := range scoped {
			require.NoError(t, os.Symlink(filepath.Join(src, s.Name()), filepath.Join(modules, e.Name(), s.Name())))
		}
	}
	client, err := filepath.Abs(filepath.Join("..", "clients", "typescript"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(modules, "@toolgate"), 0o755))
	require.NoError(t, os.CopyFS(filepath.Join(modules, "@toolgate", "client"), os.DirFS(client)))
	examples := filepath.Join(client, "examples")
	files, err := filepath.Glob(filepath.Join(examples, "*.mjs"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(app, filepath.Base(f)), data, 0o644))
	}
	return app
}

// exampleRun is one example's agent: its state and effects files outlive
// the processes that run it.
type exampleRun struct {
	t        *testing.T
	fw       framework
	script   []scriptedCall
	attempt  int
	cmd      *exec.Cmd
	env      []string
	node     string
	app      string
	effectsF string
	lines    chan map[string]any
	stderr   *syncBuffer
	exited   chan error
}

type effect struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
}

func newExampleRun(t *testing.T, node, app string, fw framework, base, session string, script []scriptedCall) *exampleRun {
	dir := t.TempDir()
	raw, err := json.Marshal(script)
	require.NoError(t, err)
	r := &exampleRun{t: t, fw: fw, script: script, node: node, app: app, effectsF: filepath.Join(dir, "effects.jsonl")}
	r.env = append(os.Environ(), "TOOLGATE_URL="+base, "TOOLGATE_TOKEN=token-agent-1", "TOOLGATE_SESSION="+session,
		"EXAMPLE_STATE="+filepath.Join(dir, "state.json"), "EXAMPLE_EFFECTS="+r.effectsF, "EXAMPLE_SCRIPT="+string(raw))
	if fw.env != nil {
		r.env = append(r.env, fw.env(t)...)
	}
	return r
}

// start runs the example in its own process group, so that kill stops
// whatever it started too.
func (r *exampleRun) start() {
	r.t.Helper()
	r.attempt++
	if r.fw.model != nil {
		r.fw.model.setScript(onAttempt(r.script, r.attempt))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	r.cmd = exec.CommandContext(ctx, r.node, r.fw.example)
	r.cmd.Dir, r.cmd.Env = r.app, append(r.env, fmt.Sprintf("EXAMPLE_ATTEMPT=%d", r.attempt))
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.cmd.Cancel = func() error { return syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) }
	r.stderr = &syncBuffer{}
	r.cmd.Stderr = r.stderr
	stdout, err := r.cmd.StdoutPipe()
	require.NoError(r.t, err)
	require.NoError(r.t, r.cmd.Start())
	r.lines, r.exited = jsonLines(r.cmd, stdout)
	lines, cmd := r.lines, r.cmd
	r.t.Cleanup(func() {
		defer cancel()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for range lines {
		}
	})
}

// next is the example's next line on stdout.
func (r *exampleRun) next(what string) map[string]any {
	r.t.Helper()
	select {
	case line, ok := <-r.lines:
		if !ok {
			r.t.Fatalf("%s exited before it %s: %v\nstderr:\n%s", r.fw.example, what, <-r.exited, r.stderr)
		}
		return line
	case <-time.After(2 * time.Minute):
		r.t.Fatalf("%s has not %s after 2 minutes\nstderr:\n%s", r.fw.example, what, r.stderr)
	}
	return nil
}

// waitForWaiting waits until the example says it saved its state and
// waits for a person.
func (r *exampleRun) waitForWaiting() {
	r.t.Helper()
	line := r.next("waited for a person")
	require.Equal(r.t, true, line["waiting"], "%v\nstderr:\n%s", line, r.stderr)
}

// finish reads the example's last line: what the model was told of each
// tool call, by its ID.
func (r *exampleRun) finish() map[string]any {
	r.t.Helper()
	line := r.next("finished")
	require.Equal(r.t, true, line["done"], "%v\nstderr:\n%s", line, r.stderr)
	require.NoError(r.t, <-r.exited, "stderr:\n%s", r.stderr)
	told, _ := line["told"].(map[string]any)
	return told
}

// kill is SIGKILL of the example and everything it started.
func (r *exampleRun) kill() {
	r.t.Helper()
	require.NoError(r.t, syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL))
	for range r.lines {
	}
	<-r.exited
}

// effects are the tool runs the example's tools recorded.
func (r *exampleRun) effects() []effect {
	r.t.Helper()
	data, err := os.ReadFile(r.effectsF)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(r.t, err)
	var out []effect
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e effect
		require.NoError(r.t, json.Unmarshal([]byte(l), &e), l)
		out = append(out, e)
	}
	return out
}

// flatten renders what a model was told as "key:value" words, whichever
// framework wrapped it (content parts, JSON in strings), so that tests can
// look for what matters.
func flatten(v any) string {
	switch v := v.(type) {
	case string:
		var inner any
		if t := strings.TrimSpace(v); (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Unmarshal([]byte(t), &inner) == nil {
			return flatten(inner)
		}
		return v
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+":"+flatten(v[k]))
		}
		return strings.Join(parts, " ")
	case []any:
		var parts []string
		for _, e := range v {
			parts = append(parts, flatten(e))
		}
		return strings.Join(parts, " ")
	default:
		return fmt.Sprint(v)
	}
}

// anthropicStandIn is the Messages API for the Claude Agent SDK's Claude
// Code: its first turn makes the script's tool calls; once each has a
// result, it answers with the JSON of what it was told of each.
type anthropicStandIn struct {
	mu     sync.Mutex
	script []scriptedCall
}

func (m *anthropicStandIn) setScript(script []scriptedCall) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script = script
}

func (m *anthropicStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, ok := readMessagesRequest(w, r)
	if !ok {
		return
	}
	told := map[string]json.RawMessage{}
	for _, msg := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(msg.Content, &blocks)
		for _, b := range blocks {
			if b.Type == "tool_result" {
				told[b.ToolUseID] = b.Content
			}
		}
	}
	offered := map[string]bool{}
	for _, tool := range req.Tools {
		offered[tool.Name] = true
	}
	m.mu.Lock()
	script := m.script
	m.mu.Unlock()
	calls := script[:0:0]
	for _, c := range script {
		if _, ok := told[c.ID]; !ok && offered[c.Tool] {
			calls = append(calls, c)
		}
	}
	events := []map[string]any{{"type": "message_start", "message": map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"usage": map[string]any{"input_tokens": 10, "output_tokens": 5}}}}
	stop := "end_turn"
	if len(calls) > 0 && len(told) == 0 {
		for i, c := range calls {
			input, _ := json.Marshal(c.Args)
			events = append(events,
				map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": c.ID, "name": c.Tool, "input": map[string]any{}}},
				map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}},
				map[string]any{"type": "content_block_stop", "index": i})
		}
		stop = "tool_use"
	} else {
		text, _ := json.Marshal(told)
		events = append(events,
			map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}},
			map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": string(text)}},
			map[string]any{"type": "content_block_stop", "index": 0})
	}
	events = append(events,
		map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop}, "usage": map[string]any{"output_tokens": 5}},
		map[string]any{"type": "message_stop"})
	writeSSE(w, events)
}
