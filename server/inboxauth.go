package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/websession"
)

// Inbox sign-in. A signed-in approver holds a random session ID in an
// HttpOnly cookie (SameSite=Strict for a token sign-in, Lax for one
// through the identity provider, whose redirect back is a cross-site
// navigation); no token is ever put in a cookie. The session itself is
// kept in Config.Sessions (package websession): in this process's memory,
// or in a database every replica shares, where it outlives a restart and
// signing out on one replica ends it on all. A token sign-in keeps the
// token's hash, not its principal: each request reads the principal from
// the tokens this process loaded, so a token removed from the tokens file
// stops working in the inbox when the process restarts with the file.
const (
	// InboxSessionCookie names the session cookie.
	InboxSessionCookie = "toolgate_session"
	// InboxSessionTTL is how long a sign-in lasts, from the moment it is
	// made; it is not extended by use.
	InboxSessionTTL = 12 * time.Hour
	// inboxLoginCookie carries the sign-in form's CSRF token (double submit):
	// there is no session yet to keep it in.
	inboxLoginCookie = "toolgate_login"
	inboxLoginTTL    = time.Hour
	// sessionIDPrefix and flowIDPrefix keep the store's two kinds of
	// entries apart: a sign-in's state never reads as a session's ID.
	sessionIDPrefix = "session/"
	flowIDPrefix    = "signin/"
)

// inboxSession is one signed-in browser.
type inboxSession struct {
	id        string
	principal Principal
	// csrf is sent back by every form; a post without it is refused.
	csrf    string
	expires time.Time
	// oidc is set for a sign-in through the identity provider.
	oidc *oidcSession
	// tokenSHA256 is set for a token sign-in: HashToken of the token.
	tokenSHA256 string
	// version is the stored session's, for a compare-and-swap update.
	version int64
}

// sessionRecord is a session as the store keeps it (sealed, in a
// database).
type sessionRecord struct {
	// TokenSHA256 names the token of a token sign-in; its principal is
	// read from the tokens in force at each request.
	TokenSHA256 string `json:"token_sha256,omitempty"`
	// Principal is a provider sign-in's person, as of its last renewal.
	Principal *Principal   `json:"principal,omitempty"`
	CSRF      string       `json:"csrf"`
	OIDC      *oidcSession `json:"oidc,omitempty"`
}

// errNoSession: the request carries no live session.
var errNoSession = errors.New("not signed in")

// errTokenWithdrawn ends a token sign-in whose token is no longer one that
// signs in to the inbox (removed from the tokens file, or its role
// changed).
var errTokenWithdrawn = fmt.Errorf("%w: its token is no longer in the tokens file with a role that signs in to the inbox", errNoSession)

// inboxSessions are the inbox's sessions in their store.
type inboxSessions struct {
	store websession.Store
	// tokens are the tokens in force, that token sign-ins are read from.
	tokens *Tokens
}

// start stores sess as a new session, giving it its ID and CSRF token.
func (s *inboxSessions) start(ctx context.Context, sess *inboxSession) error {
	sess.id, sess.csrf = rand.Text(), rand.Text()
	data, err := sess.record()
	if err != nil {
		return err
	}
	if err := s.store.Create(ctx, sessionIDPrefix+sess.id, data, sess.expires); err != nil {
		return err
	}
	sess.version = websession.FirstVersion
	return nil
}

func (sess *inboxSession) record() ([]byte, error) {
	rec := sessionRecord{TokenSHA256: sess.tokenSHA256, CSRF: sess.csrf, OIDC: sess.oidc}
	if sess.tokenSHA256 == "" {
		p := sess.principal
		rec.Principal = &p
	}
	return json.Marshal(rec)
}

// lookup returns the live session of a cookie's value: errNoSession when
// there is none (unknown, ended, expired, or its token no longer one that
// may sign in), another error when the store failed.
func (s *inboxSessions) lookup(ctx context.Context, id string) (*inboxSession, error) {
	if id == "" {
		return nil, errNoSession
	}
	stored, err := s.store.Get(ctx, sessionIDPrefix+id)
	if errors.Is(err, websession.ErrNotFound) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	var rec sessionRecord
	if err := json.Unmarshal(stored.Data, &rec); err != nil {
		return nil, fmt.Errorf("read a stored session: %w", err)
	}
	sess := &inboxSession{id: id, csrf: rec.CSRF, expires: stored.Expires, oidc: rec.OIDC, tokenSHA256: rec.TokenSHA256, version: stored.Version}
	switch {
	case rec.TokenSHA256 != "":
		var p Principal
		ok := false
		if s.tokens != nil {
			p, ok = s.tokens.byHash[rec.TokenSHA256]
		}
		if !ok || !inboxRole(p.Role) {
			// The sign-in ends here, for every replica.
			return nil, errors.Join(errTokenWithdrawn, s.end(ctx, id))
		}
		sess.principal = p
	case rec.Principal != nil:
		sess.principal = *rec.Principal
	default:
		return nil, errors.New("read a stored session: it names nobody")
	}
	return sess, nil
}

// save writes sess back if nobody changed it since it was read
// (websession.ErrStale otherwise), and takes the new version.
func (s *inboxSessions) save(ctx context.Context, sess *inboxSession) error {
	data, err := sess.record()
	if err != nil {
		return err
	}
	v, err := s.store.Update(ctx, sessionIDPrefix+sess.id, sess.version, data, sess.expires)
	if err != nil {
		return err
	}
	sess.version = v
	return nil
}

// end signs a session out, on every replica that shares the store.
func (s *inboxSessions) end(ctx context.Context, id string) error {
	return s.store.Delete(ctx, sessionIDPrefix+id)
}

// inboxRole reports whether a token of role r may sign in to the inbox.
func inboxRole(r Role) bool {
	return r == RoleApprover || r == RoleAdmin || r == RoleAuditor
}

// session returns the request's live session; one through the identity
// provider is renewed first when it is due, and ends if it cannot be. A
// store that fails is logged and counts as no session (the pages answer
// it with 503 through sessionOrError).
func (i *inbox) session(r *http.Request) (*inboxSession, bool) {
	s, err := i.sessionOrError(r)
	return s, err == nil
}

// sessionOrError is session with its error: errNoSession, or the store's.
func (i *inbox) sessionOrError(r *http.Request) (*inboxSession, error) {
	c, err := r.Cookie(InboxSessionCookie)
	if err != nil || c.Value == "" {
		return nil, errNoSession
	}
	s, err := i.sessions.lookup(r.Context(), c.Value)
	if err == nil && s.oidc != nil {
		s, err = i.renew(r.Context(), s)
	}
	switch {
	case err == nil, r.Context().Err() != nil:
	case errors.Is(err, errTokenWithdrawn):
		i.logger.Info("Inbox sign-in ended", zap.String("reason", err.Error()))
	case !errors.Is(err, errNoSession):
		i.logger.Error("Inbox sessions could not be read", zap.Error(err))
	}
	return s, err
}

// errSessionsUnavailable answers a request whose session the store could
// not read (the database is down, or a session does not open).
var errSessionsUnavailable = &apiError{http.StatusServiceUnavailable, "unavailable",
	"toolgate could not read its sign-in sessions (see the server log); try again shortly"}

// renderUnavailable is the page of a request whose session could not be
// read; it shows no session data.
func renderUnavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	if err := writePage(w, http.StatusServiceUnavailable, "error", pageData{Title: "Unavailable", Error: errSessionsUnavailable.message}); err != nil {
		http.Error(w, errSessionsUnavailable.message, http.StatusServiceUnavailable)
	}
}

// setCookie writes an HttpOnly, SameSite=Strict cookie.
func (i *inbox) setCookie(w http.ResponseWriter, r *http.Request, name, value string, ttl time.Duration) {
	i.setCookieMode(w, r, name, value, ttl, http.SameSiteStrictMode)
}

// setCookieMode writes an HttpOnly cookie; Secure when the request came
// over TLS, or always when the public URL is https (behind a
// TLS-terminating proxy r.TLS is nil).
func (i *inbox) setCookieMode(w http.ResponseWriter, r *http.Request, name, value string, ttl time.Duration, mode http.SameSite) {
	c := &http.Cookie{
		Name: name, Value: value, Path: "/",
		HttpOnly: true, SameSite: mode, Secure: r.TLS != nil || i.secureCookies,
		MaxAge: int(ttl / time.Second),
	}
	if ttl <= 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// validCSRF compares a form's csrf field with the expected token in
// constant time; an empty expected token never matches.
func validCSRF(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// loginView is the sign-in page: the identity provider's button when
// there is one, the token form unless it is turned off.
type loginView struct {
	Next string
	// Provider names the identity provider; "" when none is configured.
	Provider string
	// Tokens: the token form is offered.
	Tokens bool
}

func (i *inbox) loginPage(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	if _, ok := i.session(r); ok {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	notice := ""
	if r.URL.Query().Has("signed_out") {
		notice = "You are signed out."
	}
	i.renderLogin(w, r, http.StatusOK, next, "", notice)
}

// renderLogin renders the sign-in form with a fresh login CSRF token,
// unless the browser holds one already.
func (i *inbox) renderLogin(w http.ResponseWriter, r *http.Request, status int, next, errMsg, notice string) {
	token := ""
	if c, err := r.Cookie(inboxLoginCookie); err == nil && len(c.Value) >= 26 {
		token = c.Value
	} else {
		token = rand.Text()
		i.setCookie(w, r, inboxLoginCookie, token, inboxLoginTTL)
	}
	view := loginView{Next: next, Tokens: i.tokenSignIn()}
	if i.signIn != nil {
		view.Provider = i.signIn.Provider.DisplayName()
	}
	i.render(w, status, "login", pageData{Title: "Sign in", CSRF: token, Error: errMsg, Notice: notice, Body: view})
}

// tokenSignIn reports whether the inbox takes pasted tokens.
func (i *inbox) tokenSignIn() bool {
	return i.signIn == nil || !i.signIn.NoTokenSignIn
}

// login signs an approver, an admin or an auditor in (an auditor reads
// only: the pages show it no buttons and its posts are refused). Agents
// are refused: the inbox decides calls, which agents never may.
func (i *inbox) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		i.renderLogin(w, r, http.StatusBadRequest, "/", "The sign-in form could not be read.", "")
		return
	}
	next := localPath(r.PostFormValue("next"))
	if !i.tokenSignIn() {
		i.renderLogin(w, r, http.StatusForbidden, next, "Token sign-in is turned off here: sign in with your identity provider.", "")
		return
	}
	c, err := r.Cookie(inboxLoginCookie)
	if err != nil || !validCSRF(r.PostFormValue("csrf"), c.Value) {
		i.renderLogin(w, r, http.StatusForbidden, next, "The sign-in form expired or was not sent from this page. Sign in again.", "")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	p, ok := i.tokens.Lookup(token)
	if !ok {
		i.logger.Info("Inbox sign-in refused: unknown token")
		i.renderLogin(w, r, http.StatusUnauthorized, next, "That token is not valid.", "")
		return
	}
	if !inboxRole(p.Role) {
		i.logger.Info("Inbox sign-in refused: not an approver", zap.String("approver", p.Name), zap.String("role", string(p.Role)))
		i.renderLogin(w, r, http.StatusForbidden, next,
			fmt.Sprintf("%s holds a token with role %s: only approver, admin and auditor tokens may sign in to the inbox.", p.Name, p.Role), "")
		return
	}
	i.endOld(r)
	sess := &inboxSession{principal: p, tokenSHA256: HashToken(token), expires: i.now().Add(InboxSessionTTL)}
	if err := i.sessions.start(r.Context(), sess); err != nil {
		i.logger.Error("Inbox sign-in failed: the session could not be stored", zap.String("approver", p.Name), zap.Error(err))
		i.renderLogin(w, r, http.StatusServiceUnavailable, next, "Signing in failed: toolgate could not store the session (see the server log). Try again shortly.", "")
		return
	}
	i.setCookie(w, r, InboxSessionCookie, sess.id, InboxSessionTTL)
	i.setCookie(w, r, inboxLoginCookie, "", 0)
	i.logger.Info("Inbox sign-in", zap.String("approver", p.Name))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// endOld signs out the session the request carries, if any, before a new
// sign-in replaces it.
func (i *inbox) endOld(r *http.Request) {
	if old, ok := i.session(r); ok {
		if err := i.sessions.end(r.Context(), old.id); err != nil {
			i.logger.Warn("The previous inbox session could not be ended", zap.String("approver", old.principal.Name), zap.Error(err))
		}
	}
}

func (i *inbox) logout(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	if err := i.sessions.end(r.Context(), s.id); err != nil {
		i.logger.Error("Inbox sign-out failed: the session could not be ended", zap.String("approver", s.principal.Name), zap.Error(err))
		renderUnavailable(w)
		return
	}
	i.setCookie(w, r, InboxSessionCookie, "", 0)
	i.logger.Info("Inbox sign-out", zap.String("approver", s.principal.Name))
	signedOut := "/login?signed_out=1"
	if s.oidc != nil {
		// Sign out at the provider too, so the next "Sign in with …" asks
		// again; it sends the browser back to the sign-in page.
		if u := i.signIn.Provider.EndSessionURL(s.oidc.IDToken, strings.TrimSuffix(i.signIn.PublicURL, "/")+signedOut); u != "" {
			http.Redirect(w, r, u, http.StatusSeeOther)
			return
		}
	}
	http.Redirect(w, r, signedOut, http.StatusSeeOther)
}

// localPath keeps a post-sign-in redirect on this site: a path, never a
// scheme, a host or a protocol-relative "//host".
func localPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || p == "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, `/\`) || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return p
}
