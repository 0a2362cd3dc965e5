package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/workflows"
)

// HookFigures is a coding agent's PreToolUse for an auto-allowed tool,
// end to end as the agent sees it: the event in, the allow out (the
// call submitted, decided and claimed). HTTP: Claude Code's HTTP hook
// posting to toolgate. Command: a fresh toolgate-hook process per event,
// as the agent runs a command hook, forwarding to the same endpoint.
// Baseline: the bare workflow, timed in the same rounds.
type HookFigures struct {
	HTTP     Latency `json:"http"`
	Command  Latency `json:"command"`
	Baseline Latency `json:"baseline"`
	// CommandMissing says why the command case was not measured (no
	// toolgate-hook binary found); empty when it was.
	CommandMissing string `json:"command_missing,omitempty"`
	// AutoAPI: an auto-approved call over the HTTP API (POST /v1/calls
	// with ?wait=, an agent token, until its Result); BaselineAPI: the
	// bare workflow started and waited for through the same HTTP server,
	// its token checked the same way, by a handler beside the API's.
	AutoAPI     Latency `json:"auto_api"`
	BaselineAPI Latency `json:"baseline_api"`
}

// hookAgentToken is the bench's agent token for the hook endpoint.
const hookAgentToken = "bench-agent-token"

// hookBench serves toolgate's hook endpoint on a local port.
type hookBench struct {
	url     string
	command string // the toolgate-hook binary; empty: not found
	stop    func()
}

func startHookBench(calls *tgclient.Client, tc client.Client, stateDir, command string) (*hookBench, error) {
	tokens, err := server.NewTokens([]server.TokenEntry{{Name: benchAgent, Role: server.RoleAgent, SHA256: server.HashToken(hookAgentToken)}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", server.New(server.Config{Calls: calls, Tokens: tokens, HookStateDir: stateDir}))
	mux.Handle("POST "+baselineAPIPath, baselineOverHTTP(tc, tokens))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &hookBench{url: "http://" + ln.Addr().String(), command: command, stop: func() { _ = srv.Close() }}, nil
}

// baselineAPIPath is where the bench's HTTP server starts a bare workflow.
const baselineAPIPath = "/bench/baseline"

// baselineOverHTTP starts BaselineWorkflow with the request's JSON body as
// its arguments and answers its result: what POST /v1/calls?wait= does for
// a call, less toolgate (the token is looked up, the body read and
// checked, the answer written as JSON).
func baselineOverHTTP(tc client.Client, tokens *server.Tokens) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := tokens.Lookup(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); !ok {
			http.Error(w, "unknown token", http.StatusUnauthorized)
			return
		}
		var in json.RawMessage
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		run, err := tc.ExecuteWorkflow(r.Context(), client.StartWorkflowOptions{TaskQueue: baselineQueue}, BaselineWorkflow, in)
		var out json.RawMessage
		if err == nil {
			err = run.Get(r.Context(), &out)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "output": out})
	})
}

// postAPI posts body to path with the agent token and reads a 200 answer.
func (h *hookBench) postAPI(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+hookAgentToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("POST %s answered %s: %s", path, resp.Status, answer)
	}
	return answer, err
}

// autoOverAPI submits an auto-approved call over the HTTP API and waits
// for its Result in the same request.
func (b *runner) autoOverAPI(h *hookBench) func(context.Context) error {
	return func(ctx context.Context) error {
		body, _ := json.Marshal(map[string]any{"session": b.session("api"), "tool": toolEcho, "args": args})
		answer, err := h.postAPI(ctx, "/v1/calls?wait=30s", body)
		if err != nil {
			return err
		}
		var res struct{ Status string }
		if err := json.Unmarshal(answer, &res); err != nil || res.Status != "ok" {
			return fmt.Errorf("an auto-approved call over the API did not end ok: %s", bytes.TrimSpace(answer))
		}
		return nil
	}
}

// baselineOverAPI is the bare workflow through the same HTTP server.
func (b *runner) baselineOverAPI(h *hookBench) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := h.postAPI(ctx, baselineAPIPath, args)
		return err
	}
}

// findHookCommand is toolgate-hook next to this executable, or on PATH.
func findHookCommand(given string) string {
	if given != "" {
		return given
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "toolgate-hook"); isFile(p) {
			return p
		}
	}
	p, _ := exec.LookPath("toolgate-hook")
	return p
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// hookEvent is a PreToolUse (or PostToolUse) of the echo tool; n makes
// each event a new tool use with its own arguments, so each is a call.
func (b *runner) hookEvent(event string, n int) []byte {
	ev := map[string]any{"hook_event_name": event, "session_id": b.session("hook"), "tool_name": toolEcho,
		"tool_input": map[string]any{"n": n}, "tool_use_id": fmt.Sprintf("tu-%d", n), "cwd": os.TempDir()}
	if event == "PostToolUse" {
		ev["tool_response"] = map[string]any{"ok": true}
	}
	raw, _ := json.Marshal(ev)
	return raw
}

// allowedCall checks that a PreToolUse answer allows the tool and returns
// the call that allowed it, which the answer's reason names ("toolgate
// call ID: allowed by policy").
func allowedCall(answer []byte) (string, error) {
	var out struct {
		HookSpecificOutput struct{ PermissionDecision, PermissionDecisionReason string }
	}
	if err := json.Unmarshal(answer, &out); err != nil || out.HookSpecificOutput.PermissionDecision != "allow" {
		return "", fmt.Errorf("the hook did not allow an auto-allowed tool: %s", bytes.TrimSpace(answer))
	}
	id, _, ok := strings.Cut(strings.TrimPrefix(out.HookSpecificOutput.PermissionDecisionReason, "toolgate call "), ":")
	if !ok || tgclient.ValidateID("call_id", id) != nil {
		return "", fmt.Errorf("the hook's allow names no call: %s", bytes.TrimSpace(answer))
	}
	return id, nil
}

// postHook posts an event as Claude Code's HTTP hook does.
func (h *hookBench) postHook(ctx context.Context, event []byte) ([]byte, error) {
	return h.postAPI(ctx, server.ClaudeCodeHookPath, event)
}

// runHookCommand runs toolgate-hook once with the event on stdin.
func (h *hookBench) runHookCommand(ctx context.Context, event []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, h.command, "claude-code", "--api", h.url)
	cmd.Env = append(os.Environ(), "TOOLGATE_TOKEN="+hookAgentToken)
	cmd.Stdin = bytes.NewReader(event)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", h.command, err, stderr.String())
	}
	return out, nil
}

// reportedEndWait bounds the wait for a reported hook call's end: its
// after-call checks run on the bench's echo output.
const reportedEndWait = 30 * time.Second

// hooks times, in rotating order per round, the bare workflow, the HTTP
// hook's PreToolUse and toolgate-hook's PreToolUse. Each allowed tool use
// is then reported (PostToolUse, untimed), as the agent would, and its
// call's end awaited, so no call is left waiting for its report. Then, in
// rounds of their own, the bare workflow and the auto-approved call over
// the HTTP API: in the hooks' rounds, the server's and toolgate's worker's
// work after each report slowed the API's call more than the bare
// workflow, which has a worker of its own (docs/benchmarks.md).
func (b *runner) hooks(ctx context.Context, r *Report) error {
	stateDir, err := os.MkdirTemp("", "toolgate-bench-hooks")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	h, err := startHookBench(b.calls, b.tc, stateDir, findHookCommand(b.o.HookCommand))
	if err != nil {
		return err
	}
	defer h.stop()
	n, allowedBy := 0, ""
	gate := func(send func(context.Context, []byte) ([]byte, error)) func(context.Context) error {
		return func(ctx context.Context) error {
			n++
			answer, err := send(ctx, b.hookEvent("PreToolUse", n))
			if err == nil {
				allowedBy, err = allowedCall(answer)
			}
			return err
		}
	}
	// The bare workflow, the HTTP hook, toolgate-hook.
	cases := []func(context.Context) error{b.baseline, gate(h.postHook)}
	const commandCase = 2
	if h.command != "" {
		cases = append(cases, gate(h.runHookCommand))
	} else {
		r.Hooks.CommandMissing = "no toolgate-hook next to toolgate or on PATH (CGO_ENABLED=0 go install ./cmd/toolgate-hook)"
	}
	samples, err := rotated(ctx, b.o.Runs, cases, func(ctx context.Context, c int) error {
		if c == 0 {
			return nil
		}
		if _, err := h.postHook(ctx, b.hookEvent("PostToolUse", n)); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, reportedEndWait)
		defer cancel()
		res, err := b.calls.Wait(wctx, allowedBy)
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("call %s, reported by PostToolUse, did not end within %s", allowedBy, reportedEndWait)
		}
		if err == nil && res.Status != workflows.StatusOK {
			err = fmt.Errorf("call %s, reported by PostToolUse, ended %s: %s", allowedBy, res.Status, res.ModelMessage)
		}
		return err
	})
	if err != nil {
		return err
	}
	r.Hooks.Baseline, r.Hooks.HTTP = summarise(samples[0]), summarise(samples[1])
	if len(samples) > commandCase {
		r.Hooks.Command = summarise(samples[commandCase])
	}
	api, err := rotated(ctx, b.o.Runs, []func(context.Context) error{b.baselineOverAPI(h), b.autoOverAPI(h)}, nil)
	if err != nil {
		return err
	}
	r.Hooks.BaselineAPI, r.Hooks.AutoAPI = summarise(api[0]), summarise(api[1])
	return nil
}

func printHooks(w io.Writer, h HookFigures) {
	command := fmt.Sprintf("%.1f / %.1f ms", h.Command.P50, h.Command.P95)
	if h.CommandMissing != "" {
		command = "not measured: " + h.CommandMissing
	}
	fmt.Fprintf(w, "coding-agent PreToolUse, auto-allowed (p50 / p95): HTTP hook %.1f / %.1f ms; command hook (toolgate-hook) %s; bare workflow in the same rounds %.1f / %.1f ms\n",
		h.HTTP.P50, h.HTTP.P95, command, h.Baseline.P50, h.Baseline.P95)
	fmt.Fprintf(w, "over the HTTP API (p50 / p95): auto-approved call %.1f / %.1f ms; bare workflow started and awaited through the same server %.1f / %.1f ms\n",
		h.AutoAPI.P50, h.AutoAPI.P95, h.BaselineAPI.P50, h.BaselineAPI.P95)
}
