package server

import (
	"context"
	"encoding/json"
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
	"github.com/toolgate/toolgate/websession"
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
	// maxAuthFlows bounds the sign-ins in progress one process started.
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

// oidcSession is what an inbox sign-in through the provider keeps, in the
// session store (sealed there, in a database), to renew itself and to
// sign out at the provider.
type oidcSession struct {
	// IDToken is the sign-in's own ID token, kept through renewals as the
	// hint of the provider's sign-out: a renewed one may lack the session
	// ID (sid) the provider's sign-out needs (Ory Hydra's refreshed tokens
	// do), and providers take an expired hint.
	IDToken      string `json:"id_token"`
	RefreshToken string `json:"refresh_token,omitempty"`
	// RefreshAt is when the sign-in is renewed next; zero: it has no
	// refresh token and ends at its expiry.
	RefreshAt time.Time `json:"refresh_at,omitzero"`
	// RenewingUntil: a request (on any replica) is renewing the sign-in
	// until then, and no other may spend the refresh token, which the
	// provider may rotate.
	RenewingUntil time.Time `json:"renewing_until,omitzero"`
}

// renewLease bounds a renewal: a replica that took one and stopped
// (killed, or the provider never answered) leaves it to another after
// this. The provider's HTTP client gives up well before (10 s).
const renewLease = 30 * time.Second

// renewPoll is how often a request waiting for another's renewal looks at
// the session again.
const renewPoll = 50 * time.Millisecond

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
	if err := i.flows.add(r.Context(), f, next, i.now()); errors.Is(err, errTooManyFlows) {
		i.renderLogin(w, r, http.StatusTooManyRequests, next, "Too many sign-ins are in progress; try again in a few minutes.", "")
		return
	} else if err != nil {
		i.logger.Error("Inbox sign-in failed: the sign-in in progress could not be stored", zap.Error(err))
		i.renderLogin(w, r, http.StatusServiceUnavailable, next, "Signing in failed: toolgate could not store the sign-in (see the server log). Try again shortly.", "")
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
	f, next, err := i.flows.take(r.Context(), state)
	if errors.Is(err, websession.ErrNotFound) {
		refuse(http.StatusBadRequest, "this sign-in expired or was already used; start again from the sign-in page")
		return
	} else if err != nil {
		i.logger.Error("Inbox sign-in failed: the sign-in in progress could not be read", zap.Error(err))
		refuse(http.StatusServiceUnavailable, "toolgate could not read the sign-in in progress (see the server log); start again from the sign-in page")
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
	i.endOld(r)
	now := i.now()
	expires := now.Add(i.signIn.SessionMax)
	o := &oidcSession{IDToken: tokens.IDToken, RefreshToken: tokens.RefreshToken}
	if o.RefreshToken != "" {
		o.RefreshAt = earliest(now.Add(i.signIn.RefreshEvery), tokens.Expiry)
	} else {
		expires = earliest(expires, tokens.Expiry)
	}
	sess := &inboxSession{principal: p, expires: expires, oidc: o}
	if err := i.sessions.start(r.Context(), sess); err != nil {
		i.logger.Error("Inbox sign-in failed: the session could not be stored", zap.String("approver", p.Name), zap.Error(err))
		refuse(http.StatusServiceUnavailable, "toolgate could not store the session (see the server log); try again shortly")
		return
	}
	i.setCookieMode(w, r, InboxSessionCookie, sess.id, sess.expires.Sub(now), http.SameSiteLaxMode)
	i.setCookieMode(w, r, authFlowCookie, "", 0, http.SameSiteLaxMode)
	i.logger.Info("Inbox sign-in", zap.String("approver", p.Name), zap.String("role", string(p.Role)),
		zap.String("iss", p.Identity.Issuer), zap.String("sub", p.Identity.Subject), zap.Strings("groups", p.Groups))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// renew refreshes a provider sign-in once it is due: the person's groups
// are read anew, and a refusal (the person left, the refresh token was
// revoked, a required group is gone) ends the session, on every replica.
// One request renews, whichever replica it reached: it marks the session
// as renewing (a compare-and-swap in the store), and the others wait for
// its outcome. It returns the session to serve the request with, or
// errNoSession.
func (i *inbox) renew(ctx context.Context, s *inboxSession) (*inboxSession, error) {
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		o := s.oidc
		now := i.now()
		if o.RefreshAt.IsZero() || now.Before(o.RefreshAt) {
			return s, nil
		}
		if now.Before(o.RenewingUntil) {
			wait.Reset(renewPoll)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-wait.C:
			}
		} else {
			claimed := *s
			c := *o
			c.RenewingUntil = now.Add(renewLease)
			claimed.oidc = &c
			err := i.sessions.save(ctx, &claimed)
			if err == nil {
				return i.refresh(ctx, &claimed)
			}
			if !errors.Is(err, websession.ErrStale) {
				return nil, err
			}
		}
		// Renewed, taken or ended by another request: look again.
		var err error
		if s, err = i.sessions.lookup(ctx, s.id); err != nil {
			return nil, err
		}
	}
}

// refresh renews s, which this request claimed, with the provider. It
// goes on if the browser goes away: the refresh token may be spent.
func (i *inbox) refresh(ctx context.Context, s *inboxSession) (*inboxSession, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renewLease)
	defer cancel()
	tokens, err := i.signIn.Provider.Refresh(ctx, s.oidc.RefreshToken)
	if err == nil {
		var p Principal
		if p, err = i.signIn.principal(tokens.Person, i.tokens); err == nil && p.Identity.Subject != s.principal.Identity.Subject {
			err = errors.New("the provider renewed the sign-in for another person")
		}
		if err == nil {
			renewed := *s
			renewed.principal = p
			renewed.oidc = &oidcSession{IDToken: s.oidc.IDToken, RefreshToken: tokens.RefreshToken,
				RefreshAt: earliest(i.now().Add(i.signIn.RefreshEvery), tokens.Expiry)}
			if err := i.sessions.save(ctx, &renewed); errors.Is(err, websession.ErrStale) {
				// Signed out while the provider answered (never brought
				// back), or the lease ran out and another request renewed
				// it: the session is as the store has it.
				return i.sessions.lookup(ctx, s.id)
			} else if err != nil {
				return nil, err
			}
			i.people.saw(p.Name, *p.Identity)
			return &renewed, nil
		}
	}
	i.logger.Info("Inbox sign-in ended: the identity provider did not renew it", zap.String("approver", s.principal.Name), zap.String("reason", err.Error()))
	return nil, errors.Join(errNoSession, i.sessions.end(ctx, s.id))
}

func earliest(a, b time.Time) time.Time {
	if b.IsZero() || a.Before(b) {
		return a
	}
	return b
}

// authFlows are the sign-ins in progress, by state, each usable once. They
// are kept in the session store: the provider may send the browser back
// to another replica than the one it started on.
type authFlows struct {
	store websession.Store

	mu sync.Mutex
	// started are the flows this process started and that have not
	// expired, by state: at most maxAuthFlows, so that anonymous requests
	// cannot fill the store.
	started map[string]time.Time
}

// errTooManyFlows refuses a sign-in while maxAuthFlows are in progress.
var errTooManyFlows = errors.New("too many sign-ins in progress")

// flowRecord is a sign-in in progress as the store keeps it.
type flowRecord struct {
	Flow signin.Flow `json:"flow"`
	Next string      `json:"next"`
}

// add keeps f until the callback (authFlowTTL from now).
func (a *authFlows) add(ctx context.Context, f signin.Flow, next string, now time.Time) error {
	if !a.count(f.State, now) {
		return errTooManyFlows
	}
	data, err := json.Marshal(flowRecord{Flow: f, Next: next})
	if err != nil {
		return err
	}
	return a.store.Create(ctx, flowIDPrefix+f.State, data, now.Add(authFlowTTL))
}

// count counts a flow this process starts, dropping those that expired;
// false when too many are in progress.
func (a *authFlows) count(state string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started == nil {
		a.started = map[string]time.Time{}
	}
	for s, expires := range a.started {
		if !now.Before(expires) {
			delete(a.started, s)
		}
	}
	if len(a.started) >= maxAuthFlows {
		return false
	}
	a.started[state] = now.Add(authFlowTTL)
	return true
}

// take returns and ends the flow of state (websession.ErrNotFound when it
// expired, was used, or never was).
func (a *authFlows) take(ctx context.Context, state string) (signin.Flow, string, error) {
	a.mu.Lock()
	delete(a.started, state)
	a.mu.Unlock()
	stored, err := a.store.Take(ctx, flowIDPrefix+state)
	if err != nil {
		return signin.Flow{}, "", err
	}
	var rec flowRecord
	if err := json.Unmarshal(stored.Data, &rec); err != nil {
		return signin.Flow{}, "", fmt.Errorf("read a stored sign-in: %w", err)
	}
	return rec.Flow, rec.Next, nil
}
