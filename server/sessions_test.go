package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/signin"
	"github.com/toolgate/toolgate/websession"
	"github.com/toolgate/toolgate/workflows"
)

// create and get are the tests' short ways to a session: a stored one for
// p, and the live session of a cookie's value.
func (s *inboxSessions) create(p Principal) *inboxSession {
	sess := &inboxSession{principal: p, expires: time.Now().Add(InboxSessionTTL)}
	if err := s.start(context.Background(), sess); err != nil {
		panic(err)
	}
	return sess
}

func (s *inboxSessions) get(cookie string) (*inboxSession, bool) {
	sess, err := s.lookup(context.Background(), cookie)
	return sess, err == nil
}

// testClock is a settable time for sessions to expire and renew by.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)} }

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// sharedSessions is one SQLite sessions database, as replicas share it.
func sharedSessions(t *testing.T, c *testClock) websession.Store {
	ring, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	s, err := websession.Open(context.Background(), websession.Options{DSN: filepath.Join(t.TempDir(), "sessions.db"), Sealer: ring, Now: c.now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var replicaTokens = []TokenEntry{
	{Name: "agent-1", Role: RoleAgent, SHA256: HashToken("agent-token")},
	{Name: "alice", Role: RoleApprover, Groups: []string{"ops"}, SHA256: HashToken("approver-token")},
	{Name: "root", Role: RoleAdmin, SHA256: HashToken("admin-token")},
}

// replica is one `toolgate serve` of the tests: its own inbox (its own
// memory) on cfg's Sessions, with tokens (replicaTokens when nil), its
// clock c.
func replica(t *testing.T, cfg Config, c *testClock, tokens []TokenEntry) (*inbox, http.Handler) {
	if tokens == nil {
		tokens = replicaTokens
	}
	var err error
	cfg.Tokens, err = NewTokens(tokens)
	require.NoError(t, err)
	cfg.Logger = zap.NewNop()
	i := newInbox(cfg, &people{})
	i.now = c.now
	mux := http.NewServeMux()
	i.routes(mux)
	return i, mux
}

// signedIn reports whether h takes the session cookie c: its sign-in
// page sends a signed-in browser on.
func signedIn(t *testing.T, h http.Handler, c *http.Cookie) bool {
	t.Helper()
	req := httptest.NewRequest("GET", "/login", nil)
	req.AddCookie(c)
	rec := serve(h, req)
	require.Contains(t, []int{http.StatusOK, http.StatusSeeOther}, rec.Code, rec.Body.String())
	return rec.Code == http.StatusSeeOther
}

// decidingTemporal is waitingTemporal (call c1 waits) that takes
// decisions and remembers them.
type decidingTemporal struct {
	waitingTemporal
	mu      sync.Mutex
	decided []workflows.DecideRequest
}

func (f *decidingTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	req := o.Args[0].(workflows.DecideRequest)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decided = append(f.decided, req)
	return decidedHandle{req.Decision}, nil
}

type decidedHandle struct{ d policy.Decision }

func (h decidedHandle) WorkflowID() string { return "" }
func (h decidedHandle) RunID() string      { return "" }
func (h decidedHandle) UpdateID() string   { return "" }
func (h decidedHandle) Get(_ context.Context, v any) error {
	*v.(*policy.Decision) = h.d
	return nil
}

func TestInboxSessionsExpire(t *testing.T) {
	c := newTestClock()
	i, h := replica(t, Config{Sessions: websession.NewMemory(c.now)}, c, nil)
	cookie := signIn(t, h, "approver-token")
	sess, ok := i.sessions.get(cookie.Value)
	require.True(t, ok)
	assert.NotEqual(t, sess.id, sess.csrf)
	assert.Len(t, cookie.Value, 26, "the cookie is the random ID alone (130 bits)")

	for _, forged := range []string{cookie.Value + ".x", strings.ToLower(cookie.Value), cookie.Value[1:], sess.csrf, "approver-token", HashToken("approver-token")} {
		assert.False(t, signedIn(t, h, &http.Cookie{Name: InboxSessionCookie, Value: forged}), "%q is no session", forged)
	}
	c.add(InboxSessionTTL - time.Second)
	assert.True(t, signedIn(t, h, cookie))
	c.add(time.Second)
	assert.False(t, signedIn(t, h, cookie), "12 hours after sign-in the session is gone")
}

// Two replicas on one sessions database: a person signs in on one and is
// signed in on the other, a restart keeps the session, and signing out on
// one ends it on both.
func TestInboxSessionsSpanReplicasAndRestarts(t *testing.T) {
	c := newTestClock()
	store := sharedSessions(t, c)
	temporal := &decidingTemporal{}
	cfg := Config{Sessions: store, Calls: tgclient.New(temporal, "").WithDoor(testDoor)}
	a, hA := replica(t, cfg, c, nil)
	_, hB := replica(t, cfg, c, nil)

	cookie := signIn(t, hA, "approver-token")
	assert.True(t, signedIn(t, hB, cookie), "B takes A's sign-in")
	req := httptest.NewRequest("GET", "/calls/c1", nil)
	req.AddCookie(cookie)
	rec := serve(hB, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "alice", "B's page names the person signed in on A")

	sess, ok := a.sessions.get(cookie.Value)
	require.True(t, ok)
	rec = postForm(hB, "/calls/c1/decision", url.Values{"csrf": {sess.csrf}, "decision": {"approve"}}, cookie)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Len(t, temporal.decided, 1)
	assert.Equal(t, "alice", temporal.decided[0].Decision.DecidedBy, "B decided as alice, with A's CSRF token")
	assert.Equal(t, InboxChannel, temporal.decided[0].Decision.Channel)

	_, restarted := replica(t, cfg, c, nil)
	assert.True(t, signedIn(t, restarted, cookie), "a restarted replica keeps the session")

	// Restarted with alice's token gone from the tokens file: her sign-in
	// ends, for every replica.
	_, without := replica(t, cfg, c, []TokenEntry{replicaTokens[0], replicaTokens[2]})
	assert.False(t, signedIn(t, without, cookie), "a removed token no longer signs in")
	assert.False(t, signedIn(t, hA, cookie), "ended on the replicas that still have the token too")

	cookie = signIn(t, hB, "approver-token")
	sess, ok = a.sessions.get(cookie.Value)
	require.True(t, ok)
	rec = postForm(hA, "/logout", url.Values{"csrf": {sess.csrf}}, cookie)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	assert.False(t, signedIn(t, hB, cookie), "signed out on A, refused on B")
	assert.False(t, signedIn(t, restarted, cookie))
	req = httptest.NewRequest("GET", "/inbox/pending.json", nil)
	req.AddCookie(cookie)
	assert.Equal(t, http.StatusUnauthorized, serve(hB, req).Code)
}

// A store that fails is a 503 that says so, never a quiet sign-out or a
// page for nobody.
func TestAFailedSessionStoreIsUnavailableNotSignedOut(t *testing.T) {
	c := newTestClock()
	store := sharedSessions(t, c)
	_, h := replica(t, Config{Sessions: store}, c, nil)
	cookie := signIn(t, h, "approver-token")
	require.NoError(t, store.Close())
	for _, path := range []string{"/", "/calls/c1"} {
		req := httptest.NewRequest("GET", path, nil)
		req.AddCookie(cookie)
		rec := serve(h, req)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, path)
		assert.Contains(t, rec.Body.String(), "could not read its sign-in sessions", path)
	}
	req := httptest.NewRequest("GET", "/inbox/pending.json", nil)
	req.AddCookie(cookie)
	rec := serve(h, req)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), `"code":"unavailable"`)

	lc, csrf := loginForm(t, h)
	rec = postForm(h, "/login", url.Values{"csrf": {csrf}, "token": {"approver-token"}}, lc)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "could not store the session")
	assert.Nil(t, cookieNamed(rec, InboxSessionCookie))
}

// fakeIdP is an OpenID provider for these tests: discovery, its key, and
// a token endpoint that redeems the codes a test makes and rotates
// refresh tokens (a spent one is refused, as a provider with rotation
// does). A person without groups is refused a renewal.
type fakeIdP struct {
	t   *testing.T
	srv *httptest.Server
	key *rsa.PrivateKey

	mu        sync.Mutex
	codes     map[string][2]string // code → subject, nonce
	refresh   map[string]string    // live refresh token → subject
	groups    map[string][]string  // subject → groups
	refreshes int                  // refresh grants answered
	n         int
	// hold, when set, keeps refresh grants waiting until it is closed;
	// held receives one value per refresh grant that waits.
	hold chan struct{}
	held chan struct{}
}

const fakeClientID = "toolgate"

func newFakeIdP(t *testing.T) *fakeIdP {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	p := &fakeIdP{t: t, key: key, codes: map[string][2]string{}, refresh: map[string]string{}, groups: map[string][]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		u := p.srv.URL
		writeJSON(w, http.StatusOK, map[string]any{"issuer": u, "authorization_endpoint": u + "/authorize", "token_endpoint": u + "/token",
			"jwks_uri": u + "/jwks", "end_session_endpoint": u + "/logout", "response_types_supported": []string{"code"},
			"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// code is what the provider sends the browser back with after subject
// signed in for the flow of nonce.
func (p *fakeIdP) code(subject, nonce string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	c := "code-" + subject + "-" + string(rune('a'+p.n))
	p.codes[c] = [2]string{subject, nonce}
	return c
}

func (p *fakeIdP) setGroups(subject string, groups ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.groups[subject] = groups
}

func (p *fakeIdP) refreshCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refreshes
}

func (p *fakeIdP) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	var subject, nonce string
	refused := func() { writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"}) }
	switch r.PostFormValue("grant_type") {
	case "authorization_code":
		p.mu.Lock()
		c, ok := p.codes[r.PostFormValue("code")]
		delete(p.codes, r.PostFormValue("code"))
		p.mu.Unlock()
		if !ok {
			refused()
			return
		}
		subject, nonce = c[0], c[1]
	case "refresh_token":
		p.mu.Lock()
		hold, held := p.hold, p.held
		p.mu.Unlock()
		if hold != nil {
			held <- struct{}{}
			<-hold
		}
		p.mu.Lock()
		s, ok := p.refresh[r.PostFormValue("refresh_token")]
		delete(p.refresh, r.PostFormValue("refresh_token"))
		p.refreshes++
		_, member := p.groups[s]
		p.mu.Unlock()
		if !ok || !member {
			refused()
			return
		}
		subject = s
	default:
		refused()
		return
	}
	p.mu.Lock()
	p.n++
	rt := "rt-" + subject + "-" + string(rune('a'+p.n))
	p.refresh[rt] = subject
	groups := p.groups[subject]
	p.mu.Unlock()
	now := time.Now()
	claims := map[string]any{"iss": p.srv.URL, "sub": subject, "aud": fakeClientID, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"email": subject + "@example.com", "email_verified": true, "groups": groups}
	if nonce != "" {
		claims["nonce"] = nonce
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: p.key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	require.NoError(p.t, err)
	payload, _ := json.Marshal(claims)
	obj, err := signer.Sign(payload)
	require.NoError(p.t, err)
	idToken, _ := obj.CompactSerialize()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 3600, "id_token": idToken, "refresh_token": rt})
}

// oidcReplicas are two replicas with sign-in through p, on store.
func oidcReplicas(t *testing.T, p *fakeIdP, c *testClock, store websession.Store) (a, b *inbox, hA, hB http.Handler) {
	provider, err := signin.New(context.Background(), signin.Config{Issuer: p.srv.URL, ClientID: fakeClientID, ClientSecret: "secret", PublicURL: "https://toolgate.example"})
	require.NoError(t, err)
	cfg := Config{Sessions: store, SignIn: &SignIn{Provider: provider, PublicURL: "https://toolgate.example",
		RequiredGroups: []string{"staff"}, SessionMax: InboxSessionTTL, RefreshEvery: DefaultRefreshEvery}}
	a, hA = replica(t, cfg, c, nil)
	b, hB = replica(t, cfg, c, nil)
	return a, b, hA, hB
}

// oidcSignIn starts a sign-in on start, has the provider send the browser
// back to finish (another replica, maybe) and returns the session cookie.
func oidcSignIn(t *testing.T, p *fakeIdP, start, finish http.Handler, subject string) *http.Cookie {
	t.Helper()
	rec := serve(start, httptest.NewRequest("GET", "/auth/login?next=/calls/c1", nil))
	require.Equal(t, http.StatusFound, rec.Code, rec.Body.String())
	to, err := url.Parse(rec.Header().Get("Location"))
	require.NoError(t, err)
	flow := cookieNamed(rec, authFlowCookie)
	require.NotNil(t, flow)
	back := "/auth/callback?" + url.Values{"state": {to.Query().Get("state")}, "code": {p.code(subject, to.Query().Get("nonce"))}}.Encode()
	req := httptest.NewRequest("GET", back, nil)
	req.AddCookie(flow)
	rec = serve(finish, req)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.Equal(t, "/calls/c1", rec.Header().Get("Location"))
	c := cookieNamed(rec, InboxSessionCookie)
	require.NotNil(t, c)
	return c
}

// A sign-in through the provider started on one replica finishes on the
// other; a renewal made by either is the one both use, and only one
// request spends the refresh token however many replicas find it due; the
// provider's refusal and a sign-out end it on both.
func TestOpenIDSessionsSpanReplicas(t *testing.T) {
	p := newFakeIdP(t)
	p.setGroups("olga", "ops", "staff")
	c := newTestClock()
	store := &watchedStore{Store: sharedSessions(t, c), waiting: map[context.Context]bool{}}
	a, b, hA, hB := oidcReplicas(t, p, c, store)

	cookie := oidcSignIn(t, p, hA, hB, "olga")
	assert.True(t, signedIn(t, hA, cookie))
	sess, ok := a.sessions.get(cookie.Value)
	require.True(t, ok)
	assert.Equal(t, "olga@example.com", sess.principal.Name)
	assert.Equal(t, []string{"ops", "staff"}, sess.principal.Groups)

	// Due: A renews and reads the groups anew; B uses that renewal.
	p.setGroups("olga", "staff")
	c.add(DefaultRefreshEvery)
	assert.True(t, signedIn(t, hA, cookie))
	assert.Equal(t, 1, p.refreshCount())
	assert.True(t, signedIn(t, hB, cookie))
	assert.Equal(t, 1, p.refreshCount(), "B did not renew again")
	sess, ok = b.sessions.get(cookie.Value)
	require.True(t, ok)
	assert.Equal(t, []string{"staff"}, sess.principal.Groups, "B sees the groups A's renewal read")

	// Due on both at once: one request renews, the others wait for it.
	c.add(DefaultRefreshEvery)
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	p.mu.Lock()
	p.hold, p.held = hold, make(chan struct{}, 8)
	p.mu.Unlock()
	codes := make(chan int, 4)
	for _, h := range []http.Handler{hA, hB, hA, hB} {
		go func() {
			ctx, cancel := context.WithCancel(context.Background()) // a request of its own
			defer cancel()
			req := httptest.NewRequestWithContext(ctx, "GET", "/login", nil)
			req.AddCookie(cookie)
			codes <- serve(h, req).Code
		}()
	}
	<-p.held
	require.Eventually(t, func() bool { return store.waiters() == 3 }, 10*time.Second, 5*time.Millisecond,
		"the three other requests find the renewal under way")
	release()
	for range 4 {
		assert.Equal(t, http.StatusSeeOther, <-codes, "signed in")
	}
	assert.Equal(t, 2, p.refreshCount(), "one renewal for four requests on two replicas")
	assert.Empty(t, p.held, "no other request reached the provider")
	p.mu.Lock()
	p.hold = nil
	p.mu.Unlock()

	// The provider refuses the next renewal: signed out on both.
	p.mu.Lock()
	delete(p.groups, "olga")
	p.mu.Unlock()
	c.add(DefaultRefreshEvery)
	assert.False(t, signedIn(t, hB, cookie))
	assert.False(t, signedIn(t, hA, cookie))
	assert.Equal(t, 3, p.refreshCount())

	// A sign-out on one replica ends the sign-in on the other.
	p.setGroups("olga", "staff")
	cookie = oidcSignIn(t, p, hB, hA, "olga")
	sess, ok = b.sessions.get(cookie.Value)
	require.True(t, ok)
	rec := postForm(hB, "/logout", url.Values{"csrf": {sess.csrf}}, cookie)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	assert.True(t, strings.HasPrefix(rec.Header().Get("Location"), p.srv.URL+"/logout?"), "on to the provider's sign-out: %s", rec.Header().Get("Location"))
	assert.False(t, signedIn(t, hA, cookie))

	// A restart keeps a provider sign-in too, renewal state included.
	cookie = oidcSignIn(t, p, hA, hA, "olga")
	_, _, restarted, _ := oidcReplicas(t, p, c, store)
	assert.True(t, signedIn(t, restarted, cookie))
	c.add(DefaultRefreshEvery)
	assert.True(t, signedIn(t, restarted, cookie), "and renews it")
	assert.Equal(t, 4, p.refreshCount())
}

// watchedStore counts the requests (by their context) that read a
// session while another request renews it.
type watchedStore struct {
	websession.Store
	mu      sync.Mutex
	waiting map[context.Context]bool
}

func (w *watchedStore) Get(ctx context.Context, id string) (websession.Session, error) {
	s, err := w.Store.Get(ctx, id)
	if err == nil && strings.Contains(string(s.Data), `"renewing_until"`) {
		w.mu.Lock()
		w.waiting[ctx] = true
		w.mu.Unlock()
	}
	return s, err
}

func (w *watchedStore) waiters() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}
