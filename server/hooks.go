package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"

	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/hook"
)

// Where hook events are posted: Claude Code's HTTP hooks, and the
// toolgate-hook command (cmd/toolgate-hook), which forwards a command
// hook's event for any of the agents.
const (
	ClaudeCodeHookPath = "/hooks/claude-code"
	CodexHookPath      = "/hooks/codex"
	GeminiCLIHookPath  = "/hooks/gemini-cli"
)

// httpHooks answers Claude Code's HTTP hooks with the command hook's
// semantics (hook.Config): PreToolUse submits, waits, claims and answers;
// the other events report. The agent token comes in the Authorization
// header the printed settings name; its name is the requester and its
// owner the acting user, as over the API. Each token keeps its hook state
// under its own directory, so one agent never finds another's calls.
type httpHooks struct {
	calls    *tgclient.Client
	authn    *authenticator
	ready    *readiness
	stateDir string
	logger   *zap.Logger
}

func newHTTPHooks(cfg Config, authn *authenticator, ready *readiness) *httpHooks {
	dir := cfg.HookStateDir
	if dir == "" {
		dir = filepath.Join(hook.DefaultStateDir(), "http")
	}
	return &httpHooks{calls: cfg.Calls, authn: authn, ready: ready, stateDir: dir, logger: cfg.Logger.Named("http-hook")}
}

func (h *httpHooks) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+ClaudeCodeHookPath, func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, hook.ClaudeCode) })
	mux.HandleFunc("POST "+CodexHookPath, func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, hook.Codex) })
	mux.HandleFunc("POST "+GeminiCLIHookPath, func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, hook.GeminiCLI) })
}

// serve answers one hook event of the agent whose protocol dialect is.
func (h *httpHooks) serve(w http.ResponseWriter, r *http.Request, dialect hook.Dialect) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, hook.MaxEventBytes+1))
	if err != nil {
		h.refuse(w, nil, http.StatusBadRequest, "the hook event could not be read: "+err.Error())
		return
	}
	p, refused := h.authn.bearer(r)
	if refused != nil {
		h.refuse(w, raw, refused.status, "toolgate refused the HTTP hook's token ("+refused.message+"); set the agent token in TOOLGATE_TOKEN where Claude Code runs, so this tool use is blocked")
		return
	}
	if !roleIn(p.Role, []Role{RoleAgent, RoleAdmin}) {
		h.refuse(w, raw, http.StatusForbidden, fmt.Sprintf("%s holds a token with role %s; the HTTP hook needs an agent token, so this tool use is blocked", p.Name, p.Role))
		return
	}
	cfg := hook.Config{
		Dialect: dialect,
		Connect: func(ctx context.Context) (tgclient.Agent, func(), error) {
			if err := h.ready.check(ctx); err != nil {
				return nil, nil, err
			}
			return h.calls, func() {}, nil
		},
		Requester:  p.Name,
		ActingUser: p.Owner,
		StateDir:   filepath.Join(h.stateDir, p.Name),
		Logger:     h.logger.With(zap.String("agent", p.Name)),
	}
	w.Header().Set("Content-Type", "application/json")
	var answer bytes.Buffer
	cfg.Run(r.Context(), bytes.NewReader(raw), &answer, io.Discard)
	if answer.Len() == 0 && dialect == hook.ClaudeCode {
		// Every event but PreToolUse has nothing to say; Claude Code reads
		// an empty object as "no output". (Codex reads nothing as that.)
		answer.WriteString("{}\n")
	}
	_, _ = w.Write(answer.Bytes())
}

// refuse answers a hook request toolgate will not serve. A PreToolUse
// event gets a denial with the reason (the model reads it); anything else
// the status, which Claude Code counts as the hook's failure.
func (h *httpHooks) refuse(w http.ResponseWriter, raw []byte, status int, reason string) {
	h.logger.Info("HTTP hook refused", zap.Int("status", status), zap.String("reason", reason))
	if answer := hook.Denial(raw, "toolgate: "+reason); answer != nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		return
	}
	writeError(w, &apiError{status, "hook_refused", reason})
}
