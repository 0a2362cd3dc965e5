package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The real Gemini CLI (@google/gemini-cli, pinned in testdata/npm), run
// headless in YOLO mode against a stand-in for the Gemini API: only
// toolgate's BeforeTool hook stands between the model and the tool.

// geminiStandIn is the Gemini API as Gemini CLI 0.61.0 uses it: each
// model turn asks for the next of calls (a tool and its arguments), one
// per turn, then ends with text. It keeps what the CLI told the model of
// each call.
type geminiStandIn struct {
	calls []geminiCall
	mu    sync.Mutex
	told  []string
	seen  int // tool results told so far
	paths []string
}

type geminiCall struct {
	tool string
	args map[string]any
}

func (m *geminiStandIn) toldModel() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.told, "\n")
}

func (m *geminiStandIn) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.paths = append(m.paths, r.Method+" "+r.URL.Path)
	m.mu.Unlock()
	switch {
	case strings.HasSuffix(r.URL.Path, ":countTokens"):
		fmt.Fprint(w, `{"totalTokens":10}`)
		return
	case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"), strings.HasSuffix(r.URL.Path, ":generateContent"):
	default:
		http.Error(w, `{"error":{"code":404,"message":"stand-in","status":"NOT_FOUND"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text             string          `json:"text"`
				FunctionResponse json.RawMessage `json:"functionResponse"`
			} `json:"parts"`
		} `json:"contents"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	// The tool results since the user's prompt say which turn this is (a
	// resumed session's history holds the earlier runs' too).
	var since []json.RawMessage
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			switch {
			case len(p.FunctionResponse) > 0:
				since = append(since, p.FunctionResponse)
			case c.Role == "user" && p.Text != "":
				since = nil
			}
		}
	}
	answered := len(since)
	m.mu.Lock()
	for _, r := range since[min(len(since), m.seen):] {
		m.told = append(m.told, string(r))
	}
	m.seen = max(m.seen, len(since))
	m.mu.Unlock()
	part := map[string]any{"text": "done"}
	if len(req.Tools) > 0 && answered < len(m.calls) {
		c := m.calls[answered]
		part = map[string]any{"functionCall": map[string]any{"name": c.tool, "args": c.args}}
	} else if len(req.Tools) == 0 {
		// A side request (the next-speaker check, a summary): JSON that
		// says the user speaks next.
		part = map[string]any{"text": `{"reasoning":"the turn is over","next_speaker":"user"}`}
	}
	chunk, _ := json.Marshal(map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{part}}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
		"modelVersion":  "gemini-2.5-pro",
	})
	if strings.HasSuffix(r.URL.Path, ":generateContent") {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(chunk)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: %s\n\n", chunk)
}

// runGemini runs the real Gemini CLI once, headless and in YOLO mode, in
// project with the hook settings in home's ~/.gemini/settings.json.
func runGemini(t *testing.T, home, project, hooks string, env []string, model *geminiStandIn, extra ...string) string {
	t.Helper()
	bin := npmFile(t, "@google/gemini-cli/bundle/gemini.js")
	srv := httptest.NewServer(http.HandlerFunc(model.serve))
	defer srv.Close()
	var settings map[string]any
	require.NoError(t, json.Unmarshal([]byte(hooks), &settings))
	settings["security"] = map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}}
	settings["privacy"] = map[string]any{"usageStatisticsEnabled": false}
	settings["telemetry"] = map[string]any{"enabled": false}
	settings["general"] = map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true}
	b, err := json.MarshalIndent(settings, "", "  ")
	require.NoError(t, err)
	dir := filepath.Join(home, ".gemini")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "settings.json"), b, 0o600))
	args := append([]string{bin, "-p", "run the scripted tools", "--yolo", "-m", "gemini-2.5-pro", "--output-format", "json", "--skip-trust"}, extra...)
	return runAgent(t, project, append(env, "HOME="+home, "GEMINI_API_KEY=stand-in", "GOOGLE_GEMINI_BASE_URL="+srv.URL,
		"TERM=dumb", "SHELL=/bin/bash", "NO_COLOR=1"), "node", args...)
}

// geminiPolicy is the policy the Gemini CLI tests run under; MARKS is
// where the tools leave their marks.
const geminiPolicy = `
default: deny
rules:
  - {name: reads, tools: [read_file], action: allow}
  - name: allowed-touch
    tool: run_shell_command
    when: args.command.startsWith('touch MARKS/ran-')
    action: allow
  - name: no-recursive-deletes
    tool: run_shell_command
    when: args.command.contains('rm -rf')
    action: deny
    reason: recursive deletes are not allowed here, remove the files one by one
  - {name: appends, tool: run_shell_command, when: "args.command.startsWith('echo ')", action: ask}
  - {name: writes, tool: write_file, action: ask}
`

// geminiRun is one run of the real Gemini CLI in a home and a project.
type geminiRun struct {
	t             *testing.T
	home, project string
	env           []string
}

func newGeminiRun(t *testing.T, env ...string) geminiRun {
	home := t.TempDir()
	return geminiRun{t: t, home: home, project: t.TempDir(),
		env: append([]string{"XDG_STATE_HOME=" + filepath.Join(home, "state")}, env...)}
}

// run runs the CLI once; the model asks for calls, one per turn.
func (g geminiRun) run(settings string, calls []geminiCall, extra ...string) (*geminiStandIn, string) {
	model := &geminiStandIn{calls: calls}
	out := runGemini(g.t, g.home, g.project, settings, g.env, model, extra...)
	return model, out
}

func shell(command string) geminiCall {
	return geminiCall{tool: "run_shell_command", args: map[string]any{"command": command, "description": "the scripted command"}}
}

// TestRealGeminiCLIRunsAToolOnlyWhenToolgateAllowsIt drives the real Gemini
// CLI through the settings `toolgate hook gemini-cli --print-settings`
// prints, from a project directory that is not toolgate's, with only the
// agent token: what the policy allows runs, a person's approval and edit
// are what runs, a denial's reason reaches the model, and every way the
// hook can fail blocks the tool.
func TestRealGeminiCLIRunsAToolOnlyWhenToolgateAllowsIt(t *testing.T) {
	marks := t.TempDir()
	d := startDevWithPolicy(t, strings.ReplaceAll(geminiPolicy, "MARKS", marks))
	c := d.client()
	const requester = "agent-1" // the token's name
	onPath := "PATH=" + filepath.Dir(binary) + ":/usr/local/bin:/usr/bin:/bin"
	token := "TOOLGATE_TOKEN=token-agent-1"
	printed := printedSettings(t, "gemini-cli", "--api", "http://"+d.httpAddr)
	require.Contains(t, printed, `"command": "toolgate hook gemini-cli --api http://`+d.httpAddr+` --log-level warn || {`)

	t.Run("an allowed read runs and is reported", func(t *testing.T) {
		g := newGeminiRun(t, onPath, token)
		notes := filepath.Join(g.project, "notes.txt")
		require.NoError(t, os.WriteFile(notes, []byte("the notes say hello"), 0o600))
		before := callsOf(t, c, requester)
		model, out := g.run(printed, []geminiCall{{tool: "read_file", args: map[string]any{"file_path": notes}}})
		assert.Contains(t, model.toldModel(), "the notes say hello", "the agent printed:\n%s", tail(out, 3000))
		r := finalOf(t, c, requester, before)
		assert.Equal(t, workflows.StatusOK, r.Status, "AfterTool reported the outcome: %+v", r)
		assert.Equal(t, "reads", r.Rule)
		assert.Contains(t, string(r.Output), "the notes say hello")
	})

	t.Run("a write waits, is approved, and runs", func(t *testing.T) {
		g := newGeminiRun(t, onPath, token)
		target := filepath.Join(g.project, "out.txt")
		before := callsOf(t, c, requester)
		approved := make(chan string, 1)
		go func() { approved <- approveWhenAsked(c, requester, before) }()
		_, out := g.run(printed, []geminiCall{{tool: "write_file", args: map[string]any{"file_path": target, "content": "written after approval"}}})
		require.Empty(t, <-approved)
		assert.Equal(t, "written after approval", fileText(t, target), "the agent printed:\n%s", tail(out, 3000))
		r := finalOf(t, c, requester, before)
		assert.Equal(t, workflows.StatusOK, r.Status)
		assert.Equal(t, "bob", r.DecidedBy)
	})

	t.Run("a denial's reason reaches the model", func(t *testing.T) {
		g := newGeminiRun(t, onPath, token)
		build := filepath.Join(g.project, "build")
		require.NoError(t, os.Mkdir(build, 0o700))
		before := callsOf(t, c, requester)
		model, out := g.run(printed, []geminiCall{shell("rm -rf " + build)})
		assert.DirExists(t, build, "the agent printed:\n%s", tail(out, 3000))
		assert.Contains(t, model.toldModel(), "recursive deletes are not allowed here, remove the files one by one")
		assert.Equal(t, workflows.StatusDenied, finalOf(t, c, requester, before).Status)
	})

	t.Run("an approver's edit is what runs", func(t *testing.T) {
		g := newGeminiRun(t, onPath, token)
		log := filepath.Join(g.project, "edit.log")
		edited, _ := json.Marshal(map[string]string{"command": "echo edited >> " + log, "description": "the scripted command"})
		before := callsOf(t, c, requester)
		decided := make(chan string, 1)
		go func() {
			decided <- decideWhenAsked(c, requester, before, policy.Decision{Kind: policy.ApprovedWithEdits, EditedArgs: edited, DecidedBy: "bob", Channel: "cli"})
		}()
		_, out := g.run(printed, []geminiCall{shell("echo asked >> " + log)})
		require.Empty(t, <-decided)
		assert.Equal(t, "edited\n", fileText(t, log), "the agent printed:\n%s", tail(out, 3000))
		r := finalOf(t, c, requester, before)
		assert.Equal(t, workflows.StatusOK, r.Status, "AfterTool's input is the edited one: %+v", r)
	})

	t.Run("through toolgate-hook an allowed command runs", func(t *testing.T) {
		fast := printedSettings(t, "gemini-cli", "--fast", "--api", "http://"+d.httpAddr)
		require.Contains(t, fast, `"command": "toolgate-hook gemini-cli --api http://`+d.httpAddr+` || {`)
		g := newGeminiRun(t, onPath, token)
		mark := filepath.Join(marks, "ran-fast")
		before := callsOf(t, c, requester)
		_, out := g.run(fast, []geminiCall{shell("touch " + mark)})
		assert.FileExists(t, mark, "the agent printed:\n%s", tail(out, 3000))
		r := finalOf(t, c, requester, before)
		assert.Equal(t, workflows.StatusOK, r.Status, "AfterTool reported through toolgate-hook: %+v", r)
		assert.Equal(t, "allowed-touch", r.Rule)
	})

	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, "<html>not toolgate</html>")
	}))
	defer garbage.Close()
	withWait := func(settings, wait string) string {
		return strings.ReplaceAll(settings, "toolgate hook gemini-cli", "toolgate hook gemini-cli --wait "+wait)
	}
	for _, tc := range []struct{ name, settings, path, token string }{
		{"toolgate down", printedSettings(t, "gemini-cli", "--api", fmt.Sprintf("http://127.0.0.1:%d", freePort(t))), onPath, token},
		{"toolgate down under toolgate-hook", printedSettings(t, "gemini-cli", "--fast", "--api", fmt.Sprintf("http://127.0.0.1:%d", freePort(t))), onPath, token},
		{"a bad token", printed, onPath, "TOOLGATE_TOKEN=not-a-token"},
		{"a garbage answer", printedSettings(t, "gemini-cli", "--api", garbage.URL), onPath, token},
		{"no answer in time", withWait(printedSettings(t, "gemini-cli", "--api", "http://"+blackhole(t)), "2s"), onPath, token},
		{"toolgate not on the hook's PATH", printed, "PATH=/usr/local/bin:/usr/bin:/bin", token},
		{"a typo in the hook line", strings.ReplaceAll(printed, "hook gemini-cli", "hook gemini"), onPath, token},
	} {
		t.Run(tc.name+" blocks the tool", func(t *testing.T) {
			g := newGeminiRun(t, tc.path, tc.token)
			mark := filepath.Join(marks, "ran-"+strings.ReplaceAll(tc.name, " ", "-"))
			model, out := g.run(tc.settings, []geminiCall{shell("touch " + mark)})
			assert.NoFileExists(t, mark, "the tool ran; the agent printed:\n%s", tail(out, 3000))
			assert.Contains(t, model.toldModel(), "Tool execution blocked", "the model hears the tool was blocked")
		})
	}

	// A toolgate killed by a signal (an OOM kill, say) leaves Gemini CLI
	// no exit status and no output: without the printed wrapper the tool
	// runs; with it, it is blocked.
	killed := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(killed, "toolgate"), []byte("#!/bin/sh\nkill -KILL $$\n"), 0o755))
	killedPath := "PATH=" + killed + ":/usr/local/bin:/usr/bin:/bin"
	i := strings.Index(printed, " || {")
	j := strings.Index(printed[i:], `}"`)
	unprotected := printed[:i] + printed[i+j+1:]
	for _, tc := range []struct {
		name, settings string
		runs           bool
	}{
		{"toolgate killed, with the printed settings", printed, false},
		{"toolgate killed, without the wrapper", unprotected, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGeminiRun(t, killedPath, token)
			mark := filepath.Join(marks, "ran-"+strings.NewReplacer(" ", "-", ",", "").Replace(tc.name))
			_, out := g.run(tc.settings, []geminiCall{shell("touch " + mark)})
			_, err := os.Stat(mark)
			assert.Equal(t, tc.runs, err == nil, "the tool ran: %v; the agent printed:\n%s", err == nil, tail(out, 3000))
		})
	}
}

// TestRealGeminiCLIRestartedRunsAnApprovalOnce: a call still waiting when
// the hook must answer is denied for now; approved meanwhile, the resumed
// session's identical retry finds it and runs it; a later identical retry
// is a new call that asks again, so the approval runs the tool once.
func TestRealGeminiCLIRestartedRunsAnApprovalOnce(t *testing.T) {
	d := startDevWithPolicy(t, strings.ReplaceAll(geminiPolicy, "MARKS", t.TempDir()))
	c := d.client()
	const requester = "agent-1"
	settings := strings.ReplaceAll(printedSettings(t, "gemini-cli", "--api", "http://"+d.httpAddr), "toolgate hook gemini-cli", "toolgate hook gemini-cli --wait 3s")
	g := newGeminiRun(t, "PATH="+filepath.Dir(binary)+":/usr/local/bin:/usr/bin:/bin", "TOOLGATE_TOKEN=token-agent-1")
	log := filepath.Join(g.project, "once.log")
	call := shell("echo once >> " + log)

	before := callsOf(t, c, requester)
	model, out := g.run(settings, []geminiCall{call})
	assert.Contains(t, model.toldModel(), "is waiting for a person to approve it", "the agent printed:\n%s", tail(out, 3000))
	assert.Empty(t, fileText(t, log))
	var waiting string
	for id := range callsOf(t, c, requester) {
		if !before[id] {
			waiting = id
		}
	}
	require.NotEmpty(t, waiting)
	_, err := c.Decide(context.Background(), waiting, policy.Decision{Kind: policy.Approved, DecidedBy: "bob", Channel: "cli"})
	require.NoError(t, err)

	// Restarted on the same session: the model tries again.
	_, resumed := g.run(settings, []geminiCall{call}, "--resume", "latest")
	require.Equal(t, sessionOf(t, out), sessionOf(t, resumed), "--resume keeps the session")
	out = resumed
	assert.Equal(t, "once\n", fileText(t, log), "the approval runs the retry; the agent printed:\n%s", tail(out, 3000))
	r, err := c.Wait(context.Background(), waiting)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusOK, r.Status)

	// And again: the approval was used, so the retry asks anew and waits.
	model, out = g.run(settings, []geminiCall{call}, "--resume", "latest")
	assert.Equal(t, "once\n", fileText(t, log), "an approval runs the tool once; the agent printed:\n%s", tail(out, 3000))
	assert.Contains(t, model.toldModel(), "is waiting for a person to approve it")
}

// sessionOf is the session_id of Gemini CLI's JSON output.
func sessionOf(t *testing.T, out string) string {
	t.Helper()
	var printed struct {
		SessionID string `json:"session_id"`
	}
	i := strings.Index(out, "{\n")
	require.GreaterOrEqual(t, i, 0, "no JSON in %q", tail(out, 2000))
	require.NoError(t, json.NewDecoder(strings.NewReader(out[i:])).Decode(&printed))
	require.NotEmpty(t, printed.SessionID)
	return printed.SessionID
}
