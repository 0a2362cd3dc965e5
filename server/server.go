// Package server is toolgate's HTTP listener: health, the JSON API under
// /v1 for agents and approvers, Claude Code's HTTP hooks, the web inbox,
// and the Slack and email-link decision endpoints.
package server

import (
	"context"
	_ "embed"
	"net/http"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/registry"
	"github.com/toolgate/toolgate/websession"
)

// Config configures the HTTP handler.
type Config struct {
	// Calls talks to Temporal. Required.
	Calls *tgclient.Client
	// Tokens authenticates API requests and inbox sign-ins. Required.
	Tokens *Tokens
	// Logger; nil means no logs.
	Logger *zap.Logger
	// Notify holds the Slack and email settings (notify.FromEnv). With
	// Slack configured, POST /slack/interactions takes button clicks; with
	// email, /email/decide takes signed links. Both decide as the approvers
	// of Notify.Approvers. Optional: the zero value serves neither.
	Notify notify.Config
	// MCP, when set, is served at /mcp: the MCP gateway over streamable
	// HTTP (mcpgate.Gateway.HTTPHandler with Tokens.Agent), which checks
	// the agent token itself. Optional.
	MCP http.Handler
	// Ready reports whether Temporal can take calls now (toolgate's search
	// attributes usable in the namespace). Until it returns nil, /readyz
	// answers 503 and submissions a retryable 503; once it has, it is not
	// asked again. Optional: nil means ready.
	Ready func(context.Context) error
	// Ledger is the decision ledger, read by /v1/audit/* and the inbox's
	// call pages. Optional: nil means the deployment keeps none, and the
	// audit routes answer 404 no_ledger.
	Ledger *ledger.Ledger
	// Codec, when set, is served at /codec/{Namespace}/encode and /decode
	// (Temporal's codec-server protocol) for the temporal CLI and the Web
	// UI: decode for approvers, admins and auditors, encode for admins.
	// Optional.
	Codec converter.PayloadCodec
	// Namespace is the Temporal namespace Calls talks to; the codec serves
	// it alone. Default "default".
	Namespace string
	// CodecCORSOrigins are the origins (e.g. the Web UI's,
	// "http://localhost:8233") whose pages may read the codec's answers.
	// Optional: none.
	CodecCORSOrigins []string
	// CodecRate is how many decode requests one person (name and role)
	// may make of the codec per minute; past it they get 429 rate_limited
	// until the minute ends. Default DefaultCodecRate.
	CodecRate int
	// SignIn, when set, signs people in through the company's OpenID
	// provider: the inbox's "Sign in with …" and the API's acceptance of
	// the provider's JWT access tokens. Optional: tokens only.
	SignIn *SignIn
	// Sessions keeps the inbox's sign-ins and the sign-ins through the
	// identity provider in progress. Optional: nil keeps them in this
	// process's memory, where they end with it and no other replica sees
	// them; a websession.DB shares them between replicas and restarts.
	Sessions websession.Store
	// HookStateDir is where the HTTP hooks (POST /hooks/claude-code) keep
	// their per-session state, one directory per agent token. Default
	// hook.DefaultStateDir()/http.
	HookStateDir string
	// Passkeys is the registry of people's passkeys, which the inbox's
	// /account/passkeys pages register and remove. Optional: nil (or a
	// zero PasskeyRP) turns passkeys off, and the pages say what they
	// need.
	Passkeys *registry.Registry
	// PasskeyRP is the relying party passkeys are made for: the public
	// URL's host name (never an IP address) and its origin.
	PasskeyRP passkey.RelyingParty
	// Tools says in words how the processes this process's worker starts
	// for tools run (sandboxed, refused without Landlock, or unsandboxed),
	// for /readyz. Empty when it runs no worker.
	Tools string
}

// Agent names the holder of a bearer token and the person running it
// (mcpgate.AgentAuth): known
// says toolgate knows the token, agent that its role (agent or admin) may
// submit calls (an auditor's may not).
func (t *Tokens) Agent(token string) (name, owner string, known, agent bool) {
	p, known := t.Lookup(token)
	if !known {
		return "", "", false, false
	}
	return p.Name, p.Owner, true, p.Role == RoleAgent || p.Role == RoleAdmin
}

// Handler is toolgate's HTTP handler (New).
type Handler struct {
	http.Handler
	codec *codecEndpoint
}

// Close writes to the ledger what the handler holds in memory: the
// codec's decodes counted in the current minute. Call it once the HTTP
// server has shut down; a decode after it is written to the ledger on its
// own. What the ledger does not take is logged.
func (h *Handler) Close() {
	if h.codec != nil {
		h.codec.tally.close()
	}
}

// New returns the HTTP handler.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	mux := http.NewServeMux()
	ready := &readiness{probe: cfg.Ready, logger: cfg.Logger}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if _, err := cfg.Calls.Temporal().CheckHealth(ctx, nil); err != nil {
			cfg.Logger.Warn("Temporal not reachable", zap.Error(err))
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "temporal is not reachable"})
			return
		}
		if err := ready.check(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
			return
		}
		ok := map[string]string{"status": "ready"}
		if cfg.Tools != "" {
			ok["tools"] = cfg.Tools
		}
		if cfg.Ledger != nil {
			if f := cfg.Ledger.Refused(); f != nil {
				// Calls still run; the ledger's signer has stopped.
				ok["status"], ok["ledger"] = "degraded", f.Error()
			}
		}
		writeJSON(w, http.StatusOK, ok)
	})
	if cfg.SignIn != nil {
		s := *cfg.SignIn
		if s.SessionMax <= 0 {
			s.SessionMax = InboxSessionTTL
		}
		if s.RefreshEvery <= 0 {
			s.RefreshEvery = DefaultRefreshEvery
		}
		cfg.SignIn = &s
	}
	signedIn := &people{}
	authn := &authenticator{tokens: cfg.Tokens, signIn: cfg.SignIn, people: signedIn, logger: cfg.Logger}
	(&api{calls: cfg.Calls, tokens: cfg.Tokens, logger: cfg.Logger, ready: ready, ledger: cfg.Ledger, authn: authn, passkeyRP: cfg.PasskeyRP.ID}).routes(mux)
	newHTTPHooks(cfg, authn, ready).routes(mux)
	in := newInbox(cfg, signedIn)
	in.routes(mux)
	codec := newCodecEndpoint(cfg, in, authn)
	if codec != nil {
		codec.routes(mux)
	}
	if s := newSlackInteractions(cfg, signedIn); s != nil {
		s.routes(mux)
	}
	if e := newEmailLinks(cfg, signedIn); e != nil {
		e.routes(mux)
	}
	if cfg.MCP != nil {
		mux.Handle("/mcp", cfg.MCP)
	}
	return &Handler{Handler: withCallerTrace(mux), codec: codec}
}

//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// readiness remembers that Temporal became ready, so the probe (a
// visibility request) runs only until it first passes.
type readiness struct {
	probe  func(context.Context) error
	logger *zap.Logger
	ready  atomic.Bool
}

// errNotReady is the answer to a submission before Temporal can take it.
var errNotReady = &apiError{http.StatusServiceUnavailable, errTemporalUnavailable.code,
	"toolgate is starting: the namespace's search attributes are not usable yet; try again shortly"}

// check returns nil once the probe has passed, else errNotReady.
func (r *readiness) check(ctx context.Context) error {
	if r == nil || r.probe == nil || r.ready.Load() {
		return nil
	}
	if err := r.probe(ctx); err != nil {
		r.logger.Warn("Not ready for calls yet", zap.Error(err))
		return errNotReady
	}
	r.ready.Store(true)
	return nil
}
