package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/signin"
	"github.com/toolgate/toolgate/websession"
)

// InboxChannel is the channel the web inbox records on its decisions.
const InboxChannel = "inbox"

// inbox is the web inbox: server-rendered pages for approvers, signed in
// with their token (see inboxauth.go), plus two read-only JSON endpoints
// the page script polls for live updates.
type inbox struct {
	calls    *tgclient.Client
	tokens   *Tokens
	logger   *zap.Logger
	errs     *api // maps client errors exactly as the JSON API does
	sessions *inboxSessions
	now      func() time.Time
	// ledger is the decision ledger a call's page shows the call's
	// entries from; nil: the deployment keeps none.
	ledger *ledger.Ledger
	// secureCookies marks cookies Secure on every request, not only on
	// those that came over TLS: the public URL is https, so a proxy in
	// front terminates TLS.
	secureCookies bool
	// signIn is sign-in through the identity provider; nil: tokens only.
	signIn *SignIn
	flows  *authFlows
	people *people
	// passkeys are the account pages' registry and relying party.
	passkeys *passkeyPages
}

func newInbox(cfg Config, people *people) *inbox {
	sessions := cfg.Sessions
	if sessions == nil {
		sessions = websession.NewMemory(nil)
	}
	secure := isHTTPS(cfg.Notify.PublicURL)
	if cfg.SignIn != nil {
		secure = secure || isHTTPS(cfg.SignIn.PublicURL)
	}
	return &inbox{
		signIn:        cfg.SignIn,
		flows:         &authFlows{store: sessions},
		people:        people,
		calls:         cfg.Calls,
		tokens:        cfg.Tokens,
		logger:        cfg.Logger,
		errs:          &api{calls: cfg.Calls, tokens: cfg.Tokens, logger: cfg.Logger, passkeyRP: cfg.PasskeyRP.ID},
		sessions:      &inboxSessions{store: sessions, tokens: cfg.Tokens},
		now:           time.Now,
		ledger:        cfg.Ledger,
		secureCookies: secure,
		passkeys:      newPasskeyPages(cfg),
	}
}

// isHTTPS reports whether a public URL is an https one.
func isHTTPS(publicURL string) bool {
	u, err := url.Parse(publicURL)
	return err == nil && strings.EqualFold(u.Scheme, "https")
}

// inboxRoute is one inbox endpoint.
type inboxRoute struct {
	method, pattern string
	handler         http.Handler
}

func (i *inbox) table() []inboxRoute {
	return append([]inboxRoute{
		{"GET", "/login", http.HandlerFunc(i.loginPage)},
		{"POST", "/login", crossOrigin.Handler(http.HandlerFunc(i.login))},
		{"GET", "/auth/login", http.HandlerFunc(i.signInStart)},
		{"GET", signin.CallbackPath, http.HandlerFunc(i.signInCallback)},
		{"POST", "/logout", i.form(i.logout)}, // an auditor signs out too: it changes no call
		{"GET", "/{$}", i.page(i.listPage)},
		{"GET", "/calls/{call_id}", i.page(i.callPage)},
		{"GET", "/calls/{call_id}/receipt", i.page(i.receipt)},
		{"POST", "/calls/{call_id}/decision", i.change(i.decide)},
		{"POST", "/calls/{call_id}/passkey-challenge", i.change(i.passkeyChallenge)},
		{"GET", "/sessions/{session}", i.page(i.sessionPage)},
		{"POST", "/sessions/{session}/revoke", i.change(i.revoke)},
		{"POST", "/sessions/{session}/end", i.change(i.endSession)},
		{"GET", "/audit", i.page(i.auditPage)},
		{"GET", "/stats", i.page(i.statsPage)},
		{"GET", "/inbox/pending.json", i.json(i.pendingJSON)},
		{"GET", "/inbox/state.json", i.json(i.stateJSON)},
		{"GET", "/static/", staticFiles},
	}, i.accountRoutes()...)
}

func (i *inbox) routes(mux *http.ServeMux) {
	for _, r := range i.table() {
		mux.Handle(r.method+" "+r.pattern, secureHeadersFor(r.handler, i.formTargets()))
	}
}

// formTargets are the origins besides this one a form may lead to: the
// provider's sign-out page, where the sign-out form redirects (a browser
// holds a form's redirects to the page's form-action too).
func (i *inbox) formTargets() string {
	if i.signIn == nil {
		return ""
	}
	return i.signIn.Provider.EndSessionOrigin()
}

// secureHeaders: no inline script or style, no framing, no referrer (call
// IDs and session names are in URLs), nothing cached but the assets.
func secureHeaders(h http.Handler) http.Handler { return secureHeadersFor(h, "") }

// secureHeadersFor is secureHeaders with forms also allowed to lead to
// formTarget (an origin; "" for none).
func secureHeadersFor(h http.Handler, formTarget string) http.Handler {
	formAction := "'self'"
	if formTarget != "" {
		formAction += " " + formTarget
	}
	csp := "default-src 'self'; base-uri 'none'; form-action " + formAction + "; frame-ancestors 'none'"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Content-Type-Options", "nosniff")
		if strings.HasPrefix(r.URL.Path, "/static/") {
			hd.Set("Cache-Control", "no-cache")
		} else {
			hd.Set("Cache-Control", "no-store")
		}
		h.ServeHTTP(w, r)
	})
}

// crossOrigin refuses cross-site POSTs by their Sec-Fetch-Site or Origin
// header, before the CSRF token is even looked at (defence in depth).
var crossOrigin = func() *http.CrossOriginProtection {
	c := http.NewCrossOriginProtection()
	c.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		renderForbidden(w, "This form was sent from another site; nothing was done.")
	}))
	return c
}()

type inboxHandler func(http.ResponseWriter, *http.Request, *inboxSession)

// page serves a GET page to a signed-in approver; anyone else is sent to
// the sign-in page, and back here after it.
func (i *inbox) page(h inboxHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := i.sessionOrError(r)
		if errors.Is(err, errNoSession) {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err != nil {
			renderUnavailable(w)
			return
		}
		if e := checkPathIDs(r); e != nil {
			i.renderError(w, s, e.status, e.message)
			return
		}
		h(w, r, s)
	})
}

// form serves a POST from a signed-in approver whose csrf field matches
// the session's token. A post without it is refused before anything is
// read from or sent to Temporal.
func (i *inbox) form(h inboxHandler) http.Handler {
	return crossOrigin.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := i.sessionOrError(r)
		if errors.Is(err, errNoSession) {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		if err != nil {
			renderUnavailable(w)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		if err := r.ParseForm(); err != nil {
			i.renderError(w, s, http.StatusBadRequest, "The form could not be read: it is over the size limit or malformed.")
			return
		}
		if !validCSRF(r.PostFormValue("csrf"), s.csrf) {
			i.logger.Warn("Inbox form refused: missing or wrong CSRF token", zap.String("approver", s.principal.Name), zap.String("path", r.URL.Path))
			renderForbidden(w, "This form did not come from an inbox page (its CSRF token is missing or wrong); nothing was done. Reload the page and try again.")
			return
		}
		if e := checkPathIDs(r); e != nil {
			i.renderError(w, s, e.status, e.message)
			return
		}
		h(w, r, s)
	}))
}

// change is form for a post that changes something (decides, revokes,
// ends): an auditor is refused before anything is read from or sent to
// Temporal. Every such post of the table goes through it.
func (i *inbox) change(h inboxHandler) http.Handler {
	return i.form(func(w http.ResponseWriter, r *http.Request, s *inboxSession) {
		if s.principal.Role == RoleAuditor {
			i.logger.Info("Inbox post refused: auditors read only", zap.String("approver", s.principal.Name), zap.String("path", r.URL.Path))
			i.renderError(w, s, http.StatusForbidden, errReadOnly(s.principal.Name).message+". Nothing was done.")
			return
		}
		h(w, r, s)
	})
}

// json serves a read-only JSON endpoint to a signed-in approver; others
// get 401, which the page script shows as "signed out".
func (i *inbox) json(h inboxHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := i.sessionOrError(r)
		if errors.Is(err, errNoSession) {
			writeError(w, &apiError{http.StatusUnauthorized, "unauthorized", "sign in to the inbox first"})
			return
		}
		if err != nil {
			writeError(w, errSessionsUnavailable)
			return
		}
		h(w, r, s)
	})
}

func (i *inbox) listPage(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	view, err := i.pending(r, s.principal)
	if err != nil {
		e := asAPIError(i.errs.mapError(err))
		i.renderError(w, s, e.status, e.message)
		return
	}
	i.render(w, http.StatusOK, "list", i.pageData(s, "Waiting", view))
}

// pending reads the page of ?page_token= (the first page without it) of
// the calls p may decide (an auditor: every waiting call), oldest first.
func (i *inbox) pending(r *http.Request, p Principal) (pendingView, error) {
	token := r.URL.Query().Get("page_token")
	decider := p.viewer()
	page, err := i.calls.Pending(r.Context(), tgclient.ListFilter{DecidableBy: &decider}, tgclient.PageRequest{Token: token})
	if err != nil {
		return pendingView{}, err
	}
	return newPendingView(page, token, i.now()), nil
}

func (i *inbox) pendingJSON(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	view, err := i.pending(r, s.principal)
	if err != nil {
		writeError(w, i.errs.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, view)
}

func (i *inbox) callPage(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	i.renderCall(w, r, s, http.StatusOK, r.PathValue("call_id"), "", decisionForm{})
}

// renderCall renders a call's page with status and an optional message
// (a refused decision); form keeps what the approver typed. The page shows
// the call's ledger entries, and shows the call from them alone once
// Temporal no longer has it (its retention passed, or it was deleted).
func (i *inbox) renderCall(w http.ResponseWriter, r *http.Request, s *inboxSession, status int, callID, msg string, form decisionForm) {
	st, err := i.calls.Status(r.Context(), callID)
	if err != nil {
		if gone := errors.Is(err, tgclient.ErrUnknownCall) || errors.Is(err, tgclient.ErrNoResult); gone && i.ledger != nil {
			if lv, entries := i.ledgerView(r.Context(), callID); len(entries) > 0 {
				view := newLedgerCallView(callID, entries, i.ledger.Read)
				view.Ledger = lv
				d := i.pageData(s, "Call "+callID, view)
				d.Error = msg
				i.render(w, status, "call", d)
				return
			}
		}
		e := asAPIError(i.errs.mapError(err))
		if msg == "" {
			msg = e.message
		}
		i.renderError(w, s, e.status, msg)
		return
	}
	view := newCallView(st, s.principal, i.now(), form)
	view.Ledger, _ = i.ledgerView(r.Context(), callID)
	d := i.pageData(s, "Call "+callID, view)
	d.Error = msg
	i.render(w, status, "call", d)
}

func (i *inbox) stateJSON(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	callID := r.URL.Query().Get("call")
	if callID == "" {
		writeError(w, badRequest("call", "is required"))
		return
	}
	st, err := i.calls.Status(r.Context(), callID)
	if err != nil {
		writeError(w, i.errs.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, newCallView(st, s.principal, i.now(), decisionForm{}).live())
}

// decisionForm is what the call page's form sends.
type decisionForm struct {
	Decision string
	Reason   string
	Args     string
}

// decide applies the form's decision through Decide, as every channel
// does. A refusal (already decided, not allowed, unknown call, invalid
// edit) renders the call page with the refusal's message and status.
func (i *inbox) decide(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	callID := r.PathValue("call_id")
	form := decisionForm{Decision: r.PostFormValue("decision"), Reason: strings.TrimSpace(r.PostFormValue("reason")), Args: r.PostFormValue("args")}
	req, err := form.request()
	if err == nil {
		req.WebAuthn, err = formAssertion(r.PostFormValue("webauthn"))
	}
	if err == nil {
		var applied policy.Decision
		if applied, err = Decide(r.Context(), i.calls, s.principal, callID, req, InboxChannel); err == nil {
			i.logger.Info("Decision", zap.String("callID", callID), zap.Stringer("decision", applied.Kind), zap.String("approver", s.principal.Name), zap.String("channel", InboxChannel))
			http.Redirect(w, r, callURL(callID), http.StatusSeeOther)
			return
		}
	}
	e := asAPIError(i.errs.mapError(err))
	i.renderCall(w, r, s, e.status, callID, e.message, form)
}

// request turns the form into the API's decision request. The edited
// arguments were checked by the page script; they are checked again here.
func (f decisionForm) request() (decisionRequest, error) {
	switch f.Decision {
	case "approve", "approve_for_session":
		return decisionRequest{Decision: f.Decision}, nil
	case "deny", "deny_always":
		return decisionRequest{Decision: f.Decision, Reason: f.Reason}, nil
	case "approve_edited":
		args, err := editedArgs(f.Args)
		return decisionRequest{Decision: "approve", Args: args}, err
	}
	return decisionRequest{}, badRequest("decision", "must be one of the page's buttons")
}

// editedArgs checks and compacts the editor's text: a JSON object within
// the client's size limit.
func editedArgs(text string) (json.RawMessage, error) {
	if len(text) > tgclient.MaxArgsBytes {
		return nil, badRequest("edited arguments", fmt.Sprintf("are over the %d-byte limit", tgclient.MaxArgsBytes))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil || obj == nil {
		return nil, badRequest("edited arguments", "must be a JSON object, e.g. {\"path\": \"notes.txt\"}")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(text)); err != nil {
		return nil, badRequest("edited arguments", "are not valid JSON")
	}
	return buf.Bytes(), nil
}

func (i *inbox) sessionPage(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	q := r.URL.Query()
	notice := ""
	switch {
	case q.Has("revoked"):
		notice = fmt.Sprintf("Revoked the sticky decision for %s: its next call asks again.", q.Get("revoked"))
	case q.Has("ended"):
		notice = fmt.Sprintf("Session ended; %s waiting call(s) denied.", q.Get("ended"))
	}
	i.renderSession(w, r, s, http.StatusOK, r.PathValue("session"), "", notice)
}

func (i *inbox) renderSession(w http.ResponseWriter, r *http.Request, s *inboxSession, status int, session, msg, notice string) {
	view, err := i.calls.SessionFor(r.Context(), session, s.principal.viewer())
	if err != nil {
		e := asAPIError(i.errs.mapError(err))
		i.renderError(w, s, e.status, e.message)
		return
	}
	sv := newSessionView(view, i.now())
	sv.ReadOnly = s.principal.Role == RoleAuditor
	d := i.pageData(s, "Session "+session, sv)
	d.Error, d.Notice = msg, notice
	i.render(w, status, "session", d)
}

func (i *inbox) revoke(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	session, key := r.PathValue("session"), r.PostFormValue("key")
	if err := i.calls.Revoke(r.Context(), session, key, s.principal.approver()); err != nil {
		e := asAPIError(i.errs.mapError(err))
		i.renderSession(w, r, s, e.status, session, e.message, "")
		return
	}
	i.logger.Info("Sticky decision revoked", zap.String("session", session), zap.String("tool", key), zap.String("approver", s.principal.Name), zap.String("channel", InboxChannel))
	http.Redirect(w, r, sessionURL(session)+"?revoked="+url.QueryEscape(key), http.StatusSeeOther)
}

func (i *inbox) endSession(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	session := r.PathValue("session")
	denied, err := i.calls.EndSession(r.Context(), session, s.principal.approver())
	if err != nil {
		e := asAPIError(i.errs.mapError(err))
		i.renderSession(w, r, s, e.status, session, e.message, "")
		return
	}
	i.logger.Info("Session ended", zap.String("session", session), zap.Int("deniedCalls", denied), zap.String("approver", s.principal.Name), zap.String("channel", InboxChannel))
	http.Redirect(w, r, sessionURL(session)+"?ended="+strconv.Itoa(denied), http.StatusSeeOther)
}

// auditLimit caps the audit page read from Temporal; filter by session or
// tool for more.
const auditLimit = 200

// auditPage lists the decided calls: from the decision ledger, of any
// age, a page below ?before=INDEX at a time; without a ledger the newest
// auditLimit that Temporal still has.
func (i *inbox) auditPage(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	q := r.URL.Query()
	f := tgclient.ListFilter{Status: "decided", Session: q.Get("session"), Tool: q.Get("tool"), Limit: auditLimit}
	if i.ledger != nil {
		i.ledgerAuditPage(w, r, s, f)
		return
	}
	calls, err := i.calls.List(r.Context(), f)
	if err != nil {
		e := asAPIError(i.errs.mapError(err))
		i.renderError(w, s, e.status, e.message)
		return
	}
	i.render(w, http.StatusOK, "audit", i.pageData(s, "Audit", newAuditView(calls, f, i.now())))
}

// callURL and sessionURL are the inbox pages of a call and a session.
func callURL(callID string) string { return "/calls/" + url.PathEscape(callID) }

func sessionURL(session string) string { return "/sessions/" + url.PathEscape(session) }
