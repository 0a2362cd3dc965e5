package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/signin"
)

// SignIn is sign-in with the company's OpenID provider: the inbox's
// "Sign in with …" button and the API's acceptance of the person's own
// JWT access token. The provider vouches for who the person is and for
// their groups; toolgate maps them onto its roles here.
type SignIn struct {
	Provider *signin.Provider
	// PublicURL is where browsers reach toolgate (the provider sends them
	// back to PublicURL/auth/callback). Required.
	PublicURL string
	// AdminGroup's members are admins; AuditorGroup's auditors (read
	// only). Empty: no one is, through the provider.
	AdminGroup, AuditorGroup string
	// RequiredGroups, when set, limit sign-in to members of at least one.
	RequiredGroups []string
	// SessionMax is the longest an inbox sign-in lasts, renewed or not.
	// Default InboxSessionTTL.
	SessionMax time.Duration
	// RefreshEvery is how often an inbox sign-in is renewed with its
	// refresh token, reading the person's groups anew. Default
	// DefaultRefreshEvery.
	RefreshEvery time.Duration
	// NoTokenSignIn removes the inbox's token form: people sign in
	// through the provider only.
	NoTokenSignIn bool
}

// DefaultRefreshEvery is how often an inbox sign-in is renewed: a person
// the provider removes from a group loses it within this time.
const DefaultRefreshEvery = 5 * time.Minute

// authFlowCookie binds a sign-in in progress to the browser that started
// it (its value is the flow's state). SameSite=Lax: the provider sends the
// browser back with a cross-site navigation, which a Strict cookie misses.
const (
	authFlowCookie = "toolgate_auth"
	authFlowTTL    = 10 * time.Minute
	// maxAuthFlows bounds the sign-ins in progress kept in memory.
	maxAuthFlows = 10000
)

// errSignIn is a refusal of a sign-in or an IdP token, with its reason.
type errSignIn struct {
	status int
	reason string
}

func (e *errSignIn) Error() string { return e.reason }

// principal maps a person the provider vouches for onto a principal, or
// refuses them: not in a required group, or named like a toolgate token
// or toolgate itself (two people never share a name).
func (s *SignIn) principal(person signin.Person, tokens *Tokens) (Principal, error) {
	if len(s.RequiredGroups) > 0 && !slices.ContainsFunc(person.Groups, func(g string) bool { return slices.Contains(s.RequiredGroups, g) }) {
		return Principal{}, &errSignIn{http.StatusForbidden, fmt.Sprintf(
			"%s is not in a group that may sign in to toolgate (%s); ask for one at your identity provider", person.Name, strings.Join(s.RequiredGroups, ", "))}
	}
	if policy.IsReservedName(person.Name) {
		return Principal{}, &errSignIn{http.StatusForbidden, fmt.Sprintf("%q is a name toolgate keeps for itself; no person signs in as it", person.Name)}
	}
	if tokens.HasName(person.Name) {
		return Principal{}, &errSignIn{http.StatusForbidden, fmt.Sprintf(
			"%s is also the name of a toolgate token: two people may not share a name in decisions; rename or remove that token", person.Name)}
	}
	id := person.Identity
	p := Principal{Name: person.Name, Role: RoleApprover, Identity: &id}
	switch {
	case s.AdminGroup != "" && slices.Contains(person.Groups, s.AdminGroup):
		p.Role = RoleAdmin
	case s.AuditorGroup != "" && slices.Contains(person.Groups, s.AuditorGroup):
		p.Role = RoleAuditor
	default:
		// "*" is toolgate's "every group"; the provider grants that only
		// through the admin group.
		p.Groups = slices.DeleteFunc(slices.Clone(person.Groups), func(g string) bool { return g == "*" })
	}
	return p, nil
}

// people remembers the identity of everyone signed in through the
// provider since the process started, by name (case-insensitive), so a
// Slack or email approver of the same address records the same identity.
type people struct {
	mu     sync.Mutex
	byName map[string]policy.Identity
}

func (p *people) saw(name string, id policy.Identity) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName == nil {
		p.byName = map[string]policy.Identity{}
	}
	p.byName[strings.ToLower(name)] = id
}

// identity returns the identity of whoever signed in as name, if anyone.
func (p *people) identity(name string) *policy.Identity {
	if p == nil || name == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.byName[strings.ToLower(name)]
	if !ok {
		return nil
	}
	return &id
}

// authenticator resolves a bearer token: one of toolgate's own, or, with
// sign-in configured, a JWT from the company's provider.
type authenticator struct {
	tokens *Tokens
	signIn *SignIn
	people *people
	logger *zap.Logger
}

// bearer resolves the request's Authorization header.
func (a *authenticator) bearer(r *http.Request) (Principal, *apiError) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return Principal{}, errUnauthorized
	}
	raw = strings.TrimSpace(raw)
	if p, known := a.tokens.Lookup(raw); known {
		return p, nil
	}
	if a.signIn == nil || !signin.LooksLikeJWT(raw) {
		return Principal{}, errUnauthorized
	}
	p, err := a.person(r.Context(), raw)
	if err != nil {
		a.logger.Info("Bearer token refused", zap.String("reason", err.Error()))
		var refused *errSignIn
		if errors.As(err, &refused) && refused.status == http.StatusForbidden {
			return Principal{}, &apiError{http.StatusForbidden, "forbidden", refused.reason}
		}
		return Principal{}, &apiError{http.StatusUnauthorized, "unauthorized", "the bearer token is not valid: " + err.Error()}
	}
	return p, nil
}

// person verifies an access token from the provider and maps its person.
func (a *authenticator) person(ctx context.Context, raw string) (Principal, error) {
	person, err := a.signIn.Provider.VerifyAccessToken(ctx, raw)
	if err != nil {
		return Principal{}, err
	}
	p, err := a.signIn.principal(person, a.tokens)
	if err != nil {
		return Principal{}, err
	}
	a.people.saw(p.Name, *p.Identity)
	return p, nil
}

// oidcSession is what an inbox sign-in through the provider keeps, in
// memory only, to renew itself and to sign out at the provider.
type oidcSession struct {
	mu           sync.Mutex // one renewal at a time: refresh tokens rotate
	idToken      string
	refreshToken string
	refreshAt    time.Time // zero: no refresh token, the session ends at expires
}

// signInStart sends the browser to the provider: a fresh state, nonce
// and PKCE verifier, kept here until the callback, bound to this browser
// by a cookie.
func (i *inbox) signInStart(w http.ResponseWriter, r *http.Request) {
	if i.signIn == nil {
		i.renderLogin(w, r, http.StatusNotFound, "/", "Sign-in through an identity provider is not configured here (--oidc-issuer).", "")
		return
	}
	next := localPath(r.URL.Query().Get("next"))
	f := signin.NewFlow()
	if !i.flows.add(f, next, i.now()) {
		i.renderLogin(w, r, http.StatusTooManyRequests, next, "Too many sign-ins are in progress; try again in a few minutes.", "")
		return
	}
	i.setCookieMode(w, r, authFlowCookie, f.State, authFlowTTL, http.SameSiteLaxMode)
	http.Redirect(w, r, i.signIn.Provider.AuthURL(f), http.StatusFound)
}

// signInCallback finishes a sign-in: the state must be this browser's
// and unused, the code is redeemed with the flow's verifier, the ID token
// verified (nonce included) and the person mapped onto a principal.
func (i *inbox) signInCallback(w http.ResponseWriter, r *http.Request) {
	if i.signIn == nil {
		i.renderLogin(w, r, http.StatusNotFound, "/", "Sign-in through an identity provider is not configured here (--oidc-issuer).", "")
		return
	}
	q := r.URL.Query()
	refuse := func(status int, reason string) {
		i.logger.Info("Inbox sign-in refused", zap.String("reason", reason))
		i.setCookieMode(w, r, authFlowCookie, "", 0, http.SameSiteLaxMode)
		i.renderLogin(w, r, status, "/", "Sign-in failed: "+reason, "")
	}
	if e := q.Get("error"); e != "" {
		reason := "the identity provider refused: " + e
		if d := q.Get("error_description"); d != "" {
			reason += " (" + d + ")"
		}
		refuse(http.StatusBadRequest, reason)
		return
	}
	state, code := q.Get("state"), q.Get("code")
	if state == "" || code == "" {
		refuse(http.StatusBadRequest, "the provider's answer has no state or no code; start again from the sign-in page")
		return
	}
	c, err := r.Cookie(authFlowCookie)
	if err != nil || !validCSRF(state, c.Value) {
		refuse(http.StatusBadRequest, "this sign-in was not started in this browser (its state does not match); start again from the sign-in page")
		return
	}
	f, next, ok := i.flows.take(state, i.now())
	if !ok {
		refuse(http.StatusBadRequest, "this sign-in expired or was already used; start again from the sign-in page")
		return
	}
	tokens, err := i.signIn.Provider.Exchange(r.Context(), f, code)
	if err != nil {
		var se *signin.Error
		if errors.As(err, &se) && se.Provider {
			i.logger.Warn("Identity provider unreachable", zap.Error(err))
			refuse(http.StatusBadGateway, se.Reason)
			return
		}
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	p, err := i.signIn.principal(tokens.Person, i.tokens)
	if err != nil {
		var refused *errSignIn
		if errors.As(err, &refused) {
			refuse(refused.status, refused.reason)
			return
		}
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	i.people.saw(p.Name, *p.Identity)
	if old, ok := i.session(r); ok {
		i.sessions.remove(old.id)
	}
	now := i.now()
	expires := now.Add(i.signIn.SessionMax)
	o := &oidcSession{idToken: tokens.IDToken, refreshToken: tokens.RefreshToken}
	if o.refreshToken != "" {
		o.refreshAt = earliest(now.Add(i.signIn.RefreshEvery), tokens.Expiry)
	} else {
		expires = earliest(expires, tokens.Expiry)
	}
	sess := i.sessions.createUntil(p, expires, o)
	i.setCookieMode(w, r, InboxSessionCookie, i.sessions.cookie(sess), sess.expires.Sub(now), http.SameSiteLaxMode)
	i.setCookieMode(w, r, authFlowCookie, "", 0, http.SameSiteLaxMode)
	i.logger.Info("Inbox sign-in", zap.String("approver", p.Name), zap.String("role", string(p.Role)),
		zap.String("iss", p.Identity.Issuer), zap.String("sub", p.Identity.Subject), zap.Strings("groups", p.Groups))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// renew refreshes a provider sign-in once it is due: the person's groups
// are read anew, and a refusal (the person left, the refresh token was
// revoked, a required group is gone) ends the session.
func (i *inbox) renew(ctx context.Context, s *inboxSession) bool {
	o := s.oidc
	o.mu.Lock()
	defer o.mu.Unlock()
	now := i.now()
	if o.refreshAt.IsZero() || now.Before(o.refreshAt) {
		return true
	}
	tokens, err := i.signIn.Provider.Refresh(ctx, o.refreshToken)
	if err == nil {
		var p Principal
		if p, err = i.signIn.principal(tokens.Person, i.tokens); err == nil && p.Identity.Subject != s.principal.Identity.Subject {
			err = errors.New("the provider renewed the sign-in for another person")
		}
		if err == nil {
			i.sessions.setPrincipal(s.id, p)
			o.idToken, o.refreshToken = tokens.IDToken, tokens.RefreshToken
			o.refreshAt = earliest(now.Add(i.signIn.RefreshEvery), tokens.Expiry)
			i.people.saw(p.Name, *p.Identity)
			return true
		}
	}
	i.logger.Info("Inbox sign-in ended: the identity provider did not renew it", zap.String("approver", s.principal.Name), zap.String("reason", err.Error()))
	i.sessions.remove(s.id)
	return false
}

func earliest(a, b time.Time) time.Time {
	if b.IsZero() || a.Before(b) {
		return a
	}
	return b
}

// authFlows are the sign-ins in progress, by state, each usable once.
type authFlows struct {
	mu      sync.Mutex
	byState map[string]authFlow
}

type authFlow struct {
	flow    signin.Flow
	next    string
	expires time.Time
}

// add keeps f until the callback, dropping expired flows; false when too
// many are in progress.
func (a *authFlows) add(f signin.Flow, next string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byState == nil {
		a.byState = map[string]authFlow{}
	}
	for s, old := range a.byState {
		if !now.Before(old.expires) {
			delete(a.byState, s)
		}
	}
	if len(a.byState) >= maxAuthFlows {
		return false
	}
	a.byState[f.State] = authFlow{flow: f, next: next, expires: now.Add(authFlowTTL)}
	return true
}

// take returns and forgets the flow of state.
func (a *authFlows) take(state string, now time.Time) (signin.Flow, string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, ok := a.byState[state]
	delete(a.byState, state)
	if !ok || !now.Before(f.expires) {
		return signin.Flow{}, "", false
	}
	return f.flow, f.next, true
}
