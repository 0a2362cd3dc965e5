package server

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Inbox sign-in. A signed-in approver holds a random session ID in an
// HttpOnly, SameSite=Strict cookie; the token itself is never put in a
// cookie. Sessions live in memory only: restarting the server signs
// everybody out, which is also how a token removed from the tokens file
// (read once, at start) stops working in the inbox.
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
}

// inboxSessions is the in-memory session store.
type inboxSessions struct {
	mu   sync.Mutex
	byID map[string]*inboxSession
	now  func() time.Time
}

func newInboxSessions(now func() time.Time) *inboxSessions {
	return &inboxSessions{byID: map[string]*inboxSession{}, now: now}
}

// create signs p in, forgetting expired sessions on the way so the map
// only grows with live sign-ins.
func (s *inboxSessions) create(p Principal) *inboxSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for id, old := range s.byID {
		if !now.Before(old.expires) {
			delete(s.byID, id)
		}
	}
	sess := &inboxSession{id: rand.Text(), principal: p, csrf: rand.Text(), expires: now.Add(InboxSessionTTL)}
	s.byID[sess.id] = sess
	return sess
}

// get returns the live session of id.
func (s *inboxSessions) get(id string) (*inboxSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[id]
	if ok && !s.now().Before(sess.expires) {
		delete(s.byID, id)
		return nil, false
	}
	return sess, ok
}

func (s *inboxSessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// session returns the request's live session.
func (i *inbox) session(r *http.Request) (*inboxSession, bool) {
	c, err := r.Cookie(InboxSessionCookie)
	if err != nil || c.Value == "" {
		return nil, false
	}
	return i.sessions.get(c.Value)
}

// setCookie writes an HttpOnly, SameSite=Strict cookie; Secure when the
// request came over TLS, or always when the public URL is https (behind a
// TLS-terminating proxy r.TLS is nil).
func (i *inbox) setCookie(w http.ResponseWriter, r *http.Request, name, value string, ttl time.Duration) {
	c := &http.Cookie{
		Name: name, Value: value, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || i.secureCookies,
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

// loginView is the sign-in page.
type loginView struct {
	Next string
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
	i.render(w, status, "login", pageData{Title: "Sign in", CSRF: token, Error: errMsg, Notice: notice, Body: loginView{Next: next}})
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
	i.setCookie(w, r, InboxSessionCookie, sess.id, InboxSessionTTL)
	i.setCookie(w, r, inboxLoginCookie, "", 0)
	i.logger.Info("Inbox sign-in", zap.String("approver", p.Name))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (i *inbox) logout(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	i.sessions.remove(s.id)
	i.setCookie(w, r, InboxSessionCookie, "", 0)
	i.logger.Info("Inbox sign-out", zap.String("approver", s.principal.Name))
	http.Redirect(w, r, "/login?signed_out=1", http.StatusSeeOther)
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
