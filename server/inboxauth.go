package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Inbox sign-in. A signed-in approver holds a random session ID, signed
// with a key of this process, in an HttpOnly cookie (SameSite=Strict for a
// token sign-in, Lax for one through the identity provider, whose redirect
// back is a cross-site navigation); no token is ever put in a cookie.
// Sessions live in memory only: restarting the server signs everybody
// out, which is also how a token removed from the tokens file (read once,
// at start) stops working in the inbox.
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
}

// inboxSessions is the in-memory session store.
type inboxSessions struct {
	mu   sync.Mutex
	byID map[string]*inboxSession
	now  func() time.Time
	// key signs the session cookies: a cookie this process did not make
	// is refused before any lookup.
	key []byte
}

func newInboxSessions(now func() time.Time) *inboxSessions {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &inboxSessions{byID: map[string]*inboxSession{}, now: now, key: key}
}

// create signs p in with a token, for InboxSessionTTL.
func (s *inboxSessions) create(p Principal) *inboxSession {
	return s.createUntil(p, s.now().Add(InboxSessionTTL), nil)
}

// createUntil signs p in until expires, forgetting expired sessions on
// the way so the map only grows with live sign-ins.
func (s *inboxSessions) createUntil(p Principal, expires time.Time, o *oidcSession) *inboxSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for id, old := range s.byID {
		if !now.Before(old.expires) {
			delete(s.byID, id)
		}
	}
	sess := &inboxSession{id: rand.Text(), principal: p, csrf: rand.Text(), expires: expires, oidc: o}
	s.byID[sess.id] = sess
	cp := *sess
	return &cp
}

// cookie is the session cookie's value: the ID and its signature.
func (s *inboxSessions) cookie(sess *inboxSession) string {
	return sess.id + "." + s.sign(sess.id)
}

func (s *inboxSessions) sign(id string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// get returns a copy of the live session of a cookie value.
func (s *inboxSessions) get(cookie string) (*inboxSession, bool) {
	id, sig, ok := strings.Cut(cookie, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(s.sign(id))) {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	if !s.now().Before(sess.expires) {
		delete(s.byID, id)
		return nil, false
	}
	cp := *sess
	return &cp, true
}

// setPrincipal replaces the principal of a live session (a renewal read
// the person's groups anew).
func (s *inboxSessions) setPrincipal(id string, p Principal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess, ok := s.byID[id]; ok {
		sess.principal = p
	}
}

func (s *inboxSessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// session returns the request's live session; one through the identity
// provider is renewed first when it is due, and ends if it cannot be.
func (i *inbox) session(r *http.Request) (*inboxSession, bool) {
	c, err := r.Cookie(InboxSessionCookie)
	if err != nil || c.Value == "" {
		return nil, false
	}
	s, ok := i.sessions.get(c.Value)
	if !ok || s.oidc == nil {
		return s, ok
	}
	if !i.renew(r.Context(), s) {
		return nil, false
	}
	return i.sessions.get(c.Value)
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
	p, ok := i.tokens.Lookup(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		i.logger.Info("Inbox sign-in refused: unknown token")
		i.renderLogin(w, r, http.StatusUnauthorized, next, "That token is not valid.", "")
		return
	}
	if p.Role != RoleApprover && p.Role != RoleAdmin && p.Role != RoleAuditor {
		i.logger.Info("Inbox sign-in refused: not an approver", zap.String("approver", p.Name), zap.String("role", string(p.Role)))
		i.renderLogin(w, r, http.StatusForbidden, next,
			fmt.Sprintf("%s holds a token with role %s: only approver, admin and auditor tokens may sign in to the inbox.", p.Name, p.Role), "")
		return
	}
	if old, ok := i.session(r); ok {
		i.sessions.remove(old.id)
	}
	sess := i.sessions.create(p)
	i.setCookie(w, r, InboxSessionCookie, i.sessions.cookie(sess), InboxSessionTTL)
	i.setCookie(w, r, inboxLoginCookie, "", 0)
	i.logger.Info("Inbox sign-in", zap.String("approver", p.Name))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (i *inbox) logout(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	i.sessions.remove(s.id)
	i.setCookie(w, r, InboxSessionCookie, "", 0)
	i.logger.Info("Inbox sign-out", zap.String("approver", s.principal.Name))
	signedOut := "/login?signed_out=1"
	if s.oidc != nil {
		// Sign out at the provider too, so the next "Sign in with …" asks
		// again; it sends the browser back to the sign-in page.
		s.oidc.mu.Lock()
		idToken := s.oidc.idToken
		s.oidc.mu.Unlock()
		if u := i.signIn.Provider.EndSessionURL(idToken, strings.TrimSuffix(i.signIn.PublicURL, "/")+signedOut); u != "" {
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
