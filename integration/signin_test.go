package integration

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const signInPolicy = `default: ask
rules:
  - name: finance
    tool: shell
    when: args.command.startsWith('echo fin')
    action: ask
    groups: [finance]
  - name: shell
    tool: shell
    action: ask
    groups: [ops]
  - name: echo
    tool: echo
    action: allow
`

// TestSignInWithHydra signs people in to the inbox and the API through a
// real OpenID provider (Ory Hydra), and refuses every forged, expired,
// misdirected or replayed piece of the flow.
func TestSignInWithHydra(t *testing.T) {
	users := map[string]*idpUser{
		"olga":  {email: "olga@example.com", groups: []string{"ops", "toolgate-users"}},
		"carol": {email: "carol@example.com", groups: []string{"ops", "toolgate-users"}},
		"ada":   {email: "ada@example.com", groups: []string{"toolgate-admins", "toolgate-users"}},
		"fin":   {email: "fin@example.com", groups: []string{"finance", "toolgate-users"}},
		"eve":   {email: "eve@example.com", groups: []string{"ops"}},         // not a toolgate user
		"alias": {email: "alice", groups: []string{"ops", "toolgate-users"}}, // a token's name
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := "http://" + httpAddr
	h := startHydra(t, base, users)

	dir := t.TempDir()
	policyFile, secretFile := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(policyFile, []byte(signInPolicy), 0o644))
	require.NoError(t, os.WriteFile(secretFile, []byte(hydraSecret+"\n"), 0o600))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: httpAddr}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", httpAddr, "--tokens", writeTokensFile(t, dir), "--policy", policyFile,
		"--oidc-issuer", h.issuer, "--oidc-client-id", hydraClientID, "--oidc-client-secret-file", secretFile,
		"--public-url", base, "--oidc-admin-group", "toolgate-admins", "--oidc-required-group", "toolgate-users",
		"--oidc-refresh-every", "2s")
	agent := apiClient{t: t, base: base, token: "token-agent-1"}
	var presented []string // every provider token sent: none may be logged
	person := func(token string) apiClient {
		presented = append(presented, token)
		return apiClient{t: t, base: base, token: token}
	}
	t.Cleanup(func() {
		logs := d.dev.out.String()
		for _, tok := range presented {
			sig := tok[strings.LastIndex(tok, ".")+1:]
			assert.NotContains(t, logs, tok, "a token was logged")
			if len(sig) > 20 {
				assert.NotContains(t, logs, sig, "a token's signature was logged")
			}
		}
	})

	submitWaiting(t, agent, "idp", "idp-ops")
	r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "idp", "tool": "shell", "call_id": "idp-fin", "args": map[string]any{"command": "echo fin"}})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)

	t.Run("chromium signs in through Hydra, sees its groups' calls, approves one as the person", func(t *testing.T) {
		b := newBrowser(t)
		b.base = base
		b.do(chromedp.Navigate(base+"/login"), chromedp.Click(chromedp.CSS("#sign-in-provider")))
		b.do(chromedp.WaitVisible(chromedp.CSS("#idp-user")), chromedp.SendKeys(chromedp.CSS("#idp-user"), "olga"), chromedp.Click(chromedp.CSS("#idp-go")))
		b.waitJS(`!!document.querySelector('#pending a[href="/calls/idp-ops"]')`, "the ops call in olga's list")
		assert.Equal(t, base+"/", b.location())
		assert.NotContains(t, b.text("#pending"), "idp-fin", "a finance call is not olga's to decide")
		assert.Contains(t, b.text(".user"), "olga@example.com")
		c := b.sessionCookie()
		assert.True(t, c.HTTPOnly)
		oldCookie := c.Value

		b.do(chromedp.Click(chromedp.CSS(`#pending a[href="/calls/idp-ops"]`)), chromedp.WaitVisible(chromedp.CSS("#decide")))
		b.do(chromedp.Click(chromedp.CSS(`#decide button[value="approve"]`)))
		b.waitJS(`document.querySelector("#decided")?.textContent.includes("approved by olga@example.com via inbox")`, "the decision")
		b.do(chromedp.Reload())
		b.waitJS(`document.querySelector("#identity")?.textContent === "olga at `+h.issuer+`"`, "the identity on the call's page")
		res := agent.do("GET", "/v1/calls/idp-ops?wait=30s", nil)
		assert.Equal(t, "ok", res.body["status"], res.raw)
		assert.Equal(t, "olga@example.com", res.body["decided_by"])
		assert.Equal(t, map[string]any{"iss": h.issuer, "sub": "olga"}, res.body["identity"], "the decision records who the provider says olga is")
		st := d.cli("status", "idp-ops", "--json")
		assert.Contains(t, st.stdout, `"identity"`, st.stdout+st.stderr)
		assert.Contains(t, st.stdout, `"sub": "olga"`)
		ledgerDB := filepath.Join(d.dataDir, "ledger.db")
		require.Eventually(t, func() bool {
			return strings.Contains(d.cli("audit", "show", "idp-ops", "--ledger", ledgerDB, "--ledger-key", filepath.Join(d.dataDir, "ledger.key")).stdout, "olga at "+h.issuer)
		}, 10*time.Second, 200*time.Millisecond, "the ledger's call.decided names the identity: %+v", d.cli("audit", "show", "idp-ops", "--ledger", ledgerDB, "--ledger-key", filepath.Join(d.dataDir, "ledger.key")))

		// Sign out from the waiting list (the call's page reloads itself
		// once its call finishes, which could swallow the click), after
		// the sign-in was renewed: Hydra's renewed ID tokens carry no sid,
		// which its sign-out needs.
		renewed := h.refreshes.Load()
		time.Sleep(2100 * time.Millisecond) // --oidc-refresh-every 2s
		b.do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(".signout button")))
		require.Eventually(t, func() bool { return h.refreshes.Load() > renewed }, 10*time.Second, 100*time.Millisecond, "the page load renewed the sign-in")
		b.do(chromedp.Click(chromedp.CSS(".signout button")))
		b.waitJS(`location.pathname === "/login" && document.body.textContent.includes("You are signed out.")`, "signed out, back from the provider's end-session page")
		req, _ := http.NewRequest("GET", base+"/inbox/pending.json", nil)
		req.AddCookie(&http.Cookie{Name: "toolgate_session", Value: oldCookie})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the old cookie no longer signs anyone in")
	})

	t.Run("an OpenID sign-in through one replica decides through another, outlives its restart, and one sign-out ends both", func(t *testing.T) {
		// dev is replica A (its sign-ins in its ledger's database); B is a
		// serve on the same Temporal, provider and sessions database.
		addrB := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		baseB := "http://" + addrB
		replicaB := func() *proc {
			return start(t, "HTTP listener running", "serve", "--temporal-address", d.address(), "--keys", d.keysFile(), "--door-key", d.doorKeyFile(),
				"--tokens", writeTokensFile(t, t.TempDir()), "--http", addrB, "--sessions-db", filepath.Join(d.dataDir, "ledger.db"),
				"--oidc-issuer", h.issuer, "--oidc-client-id", hydraClientID, "--oidc-client-secret-file", secretFile,
				"--public-url", base, "--oidc-admin-group", "toolgate-admins", "--oidc-required-group", "toolgate-users",
				"--oidc-refresh-every", "2s")
		}
		b := replicaB()
		submitWaiting(t, agent, "idp", "idp-rep")
		browser, res, body := signInHTTP(t, h, base, "carol", "")
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		cookie := sessionCookieOf(t, browser, base)

		callPage := getBody(t, browser, baseB+"/calls/idp-rep")
		require.Contains(t, callPage, `id="decide"`, "B shows carol the call with its buttons")
		r, err := browser.PostForm(baseB+"/calls/idp-rep/decision", url.Values{"csrf": {csrfOf(t, callPage)}, "decision": {"approve"}})
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, http.StatusOK, r.StatusCode)
		out := agent.do("GET", "/v1/calls/idp-rep?wait=30s", nil)
		assert.Equal(t, "ok", out.body["status"], out.raw)
		assert.Equal(t, "carol@example.com", out.body["decided_by"])
		assert.Equal(t, map[string]any{"iss": h.issuer, "sub": "carol"}, out.body["identity"], "B records who the provider says decided")

		// B restarts: the sign-in holds there and on A, past a renewal
		// (every 2s) made by either.
		b.stop()
		b = replicaB()
		submitWaiting(t, agent, "idp", "idp-rep-2")
		require.Eventually(t, func() bool {
			return strings.Contains(pendingAs(t, baseB, cookie), "idp-rep-2") && strings.Contains(pendingAs(t, base, cookie), "idp-rep-2")
		}, 20*time.Second, 500*time.Millisecond, "signed in on both replicas after B's restart")

		// Signing out through B ends the sign-in on A.
		noRedirect := &http.Client{Jar: browser.Jar, Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		r, err = noRedirect.PostForm(baseB+"/logout", url.Values{"csrf": {csrfOf(t, getBody(t, browser, baseB+"/"))}})
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, http.StatusSeeOther, r.StatusCode, "on to the provider's end-session page")
		for _, at := range []string{base, baseB} {
			assert.Equal(t, http.StatusUnauthorized, pendingStatus(t, at, cookie), "%s after the sign-out", at)
		}
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/idp-rep-2", nil).body["status"], "nothing decided idp-rep-2")
	})

	t.Run("a person without the required group cannot sign in", func(t *testing.T) {
		_, resp, body := signInHTTP(t, h, base, "eve", "")
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Contains(t, body, "eve@example.com is not in a group that may sign in")
	})

	t.Run("a person named like a toolgate token cannot sign in", func(t *testing.T) {
		_, resp, body := signInHTTP(t, h, base, "alias", "")
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Contains(t, body, "alice is also the name of a toolgate token")
	})

	t.Run("an admin group acts for every group", func(t *testing.T) {
		c, resp, _ := signInHTTP(t, h, base, "ada", "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Contains(t, getBody(t, c, base+"/inbox/pending.json"), "idp-fin")
	})

	t.Run("a group taken away at the provider is gone at the next renewal", func(t *testing.T) {
		submitWaiting(t, agent, "idp", "idp-ops2")
		c, resp, _ := signInHTTP(t, h, base, "carol", "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, getBody(t, c, base+"/inbox/pending.json"), "idp-ops2")
		h.setGroups("carol", "toolgate-users")
		time.Sleep(2500 * time.Millisecond) // --oidc-refresh-every 2s
		assert.NotContains(t, getBody(t, c, base+"/inbox/pending.json"), "idp-ops2", "carol is no longer in ops")
		h.setGroups("carol")
		time.Sleep(2500 * time.Millisecond)
		r, err := c.Get(base + "/inbox/pending.json")
		require.NoError(t, err)
		r.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, r.StatusCode, "out of the required group, the sign-in ends")
	})

	t.Run("a decision form without the session's CSRF token is refused", func(t *testing.T) {
		c, resp, _ := signInHTTP(t, h, base, "olga", "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		r, err := c.PostForm(base+"/calls/idp-ops2/decision", url.Values{"decision": {"approve"}})
		require.NoError(t, err)
		r.Body.Close()
		assert.Equal(t, http.StatusForbidden, r.StatusCode)
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/idp-ops2", nil).body["status"], "nothing was decided")
	})

	t.Run("a return URL that leaves the site is ignored", func(t *testing.T) {
		for _, next := range []string{"https://evil.example", "//evil.example", `/\evil.example`} {
			_, resp, _ := signInHTTP(t, h, base, "olga", next)
			assert.Equal(t, base+"/", resp.Request.URL.String(), next)
		}
	})

	t.Run("the API takes a Hydra access token and decides as the person", func(t *testing.T) {
		olga, fin := person(h.accessToken(t, "olga")), person(h.accessToken(t, "fin"))
		r := fin.do("POST", "/v1/calls/idp-ops2/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, "fin is not in ops: %s", r.raw)
		r = olga.do("POST", "/v1/calls/idp-ops2/decision", map[string]any{"decision": "deny", "reason": "not now"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		res := agent.do("GET", "/v1/calls/idp-ops2?wait=30s", nil)
		assert.Equal(t, "olga@example.com", res.body["decided_by"])
		assert.Equal(t, map[string]any{"iss": h.issuer, "sub": "olga"}, res.body["identity"])
		r = olga.do("POST", "/v1/calls", map[string]any{"session": "idp", "tool": "echo", "args": map[string]any{}})
		assert.Equal(t, http.StatusForbidden, r.status, "a person is not an agent: %s", r.raw)
		assert.Equal(t, http.StatusOK, person(h.forge(t, h.goodClaims("olga"))).do("GET", "/v1/pending", nil).status,
			"a token signed with the forge key and nothing wrong passes: the refusals below are for their flaw alone")
	})

	refused := func(t *testing.T, token, why string) {
		t.Helper()
		r := person(token).do("GET", "/v1/pending", nil)
		assert.Equal(t, http.StatusUnauthorized, r.status, r.raw)
		assert.Contains(t, r.raw, why)
	}
	t.Run("an ID token for another application", func(t *testing.T) {
		back := h.signInAt(t, browserless(t, true), h.authURL("other-app", url.Values{}), "olga")
		status, body := h.tokens(t, "other-app", back.Query().Get("code"), nil)
		require.Equal(t, http.StatusOK, status, "%v", body)
		refused(t, body["id_token"].(string), "audience")
	})
	t.Run("a wrong issuer", func(t *testing.T) {
		c := h.goodClaims("olga")
		c["iss"] = "https://evil.example"
		refused(t, h.forge(t, c), "issued by a different provider")
	})
	t.Run("an expired token", func(t *testing.T) {
		c := h.goodClaims("olga")
		c["exp"] = time.Now().Add(-time.Minute).Unix()
		refused(t, h.forge(t, c), "expired")
	})
	t.Run("alg none", func(t *testing.T) {
		refused(t, jws(t, map[string]any{"alg": "none", "typ": "JWT"}, h.goodClaims("olga"), nil), "not valid")
	})
	t.Run("HS256 keyed with the provider's public key", func(t *testing.T) {
		pub, err := json.Marshal(h.forgeKey.Public())
		require.NoError(t, err)
		token := jws(t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": h.forgeKey.KeyID}, h.goodClaims("olga"), func(in []byte) []byte {
			m := hmac.New(sha256.New, pub)
			m.Write(in)
			return m.Sum(nil)
		})
		refused(t, token, "not valid")
	})
	t.Run("an unknown kid", func(t *testing.T) {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k, KeyID: "unknown-kid"}}, nil)
		require.NoError(t, err)
		payload, _ := json.Marshal(h.goodClaims("olga"))
		obj, err := signer.Sign(payload)
		require.NoError(t, err)
		s, _ := obj.CompactSerialize()
		refused(t, s, "not valid")
	})
	t.Run("a changed payload", func(t *testing.T) {
		parts := strings.Split(h.accessToken(t, "fin"), ".")
		var claims map[string]any
		raw, err := base64.RawURLEncoding.DecodeString(parts[1])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &claims))
		claims["groups"] = []string{"toolgate-admins", "toolgate-users"}
		changed, _ := json.Marshal(claims)
		parts[1] = base64.RawURLEncoding.EncodeToString(changed)
		refused(t, strings.Join(parts, "."), "not valid")
	})

	badCallback := func(t *testing.T, c *http.Client, u, why string) {
		t.Helper()
		r, err := c.Get(u)
		require.NoError(t, err)
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		assert.Equal(t, http.StatusBadRequest, r.StatusCode, string(body))
		assert.Contains(t, string(body), why)
		assert.NotContains(t, getBody(t, c, base+"/"), "Sign out", "nobody is signed in")
	}
	t.Run("a callback without state", func(t *testing.T) {
		badCallback(t, browserless(t, false), base+"/auth/callback?code=anything", "no state")
	})
	t.Run("a callback the provider refused", func(t *testing.T) {
		badCallback(t, browserless(t, false), base+"/auth/callback?error=access_denied&error_description=nope", "access_denied")
	})
	t.Run("a replayed state", func(t *testing.T) {
		back := completedSignIn(t, h, base)
		// The same answer again, with the flow's cookie put back.
		c2 := browserless(t, false)
		c2.Jar.SetCookies(mustURL(t, base), []*http.Cookie{{Name: "toolgate_auth", Value: back.Query().Get("state"), Path: "/"}})
		badCallback(t, c2, back.String(), "expired or was already used")
	})
	t.Run("a state of another browser", func(t *testing.T) {
		back := startSignIn(t, h, browserless(t, true), base, "olga")
		badCallback(t, browserless(t, false), back.String(), "not started in this browser")
	})
	t.Run("a wrong nonce", func(t *testing.T) {
		victim := browserless(t, true)
		noFollow := &http.Client{Jar: victim.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		r, err := noFollow.Get(base + "/auth/login")
		require.NoError(t, err)
		r.Body.Close()
		toProvider, err := r.Location()
		require.NoError(t, err)
		q := toProvider.Query()
		// The attacker's own authorization with the victim's PKCE challenge
		// (visible in the URL) but another nonce: the code redeems, and
		// only the nonce tells the ID token is not this sign-in's.
		back := h.signInAt(t, browserless(t, true), h.authURL(hydraClientID, url.Values{
			"code_challenge": {q.Get("code_challenge")}, "code_challenge_method": {"S256"}, "nonce": {"attackers-nonce-0123456789"}, "scope": {"openid email"},
		}), "olga")
		badCallback(t, victim, withQuery(back, "state", q.Get("state")), "nonce")
	})
	t.Run("a reused authorization code", func(t *testing.T) {
		back := completedSignIn(t, h, base)
		// Another sign-in, answered with the used code.
		c2 := browserless(t, true)
		again := startSignIn(t, h, c2, base, "olga")
		badCallback(t, c2, withQuery(again, "code", back.Query().Get("code")), "refused the authorization code")
	})
}

// startSignIn starts a sign-in at toolgate in c's browser and signs in at
// the provider as subject; it returns the callback URL, not yet visited.
func startSignIn(t *testing.T, h *hydra, c *http.Client, base, subject string) *url.URL {
	t.Helper()
	return h.signInAt(t, c, base+"/auth/login", subject)
}

// completedSignIn signs olga in with a fresh client and returns the
// callback URL it used.
func completedSignIn(t *testing.T, h *hydra, base string) *url.URL {
	t.Helper()
	c := browserless(t, true)
	back := startSignIn(t, h, c, base, "olga")
	r, err := c.Get(back.String())
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, base+"/", r.Request.URL.String(), "the first use signs in")
	return back
}

// withQuery is u with one query parameter set to v.
func withQuery(u *url.URL, key, v string) string {
	c := *u
	q := c.Query()
	q.Set(key, v)
	c.RawQuery = q.Encode()
	return c.String()
}

// signInHTTP signs subject in to toolgate's inbox with a cookie-keeping
// HTTP client, returning it, the last response and its body.
func signInHTTP(t *testing.T, h *hydra, base, subject, next string) (*http.Client, *http.Response, string) {
	t.Helper()
	c := browserless(t, true)
	start := base + "/auth/login"
	if next != "" {
		start += "?next=" + url.QueryEscape(next)
	}
	back := h.signInAt(t, c, start, subject)
	follow := browserless(t, false)
	follow.Jar = c.Jar
	r, err := follow.Get(back.String())
	require.NoError(t, err)
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	return follow, r, string(body)
}

func getBody(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	r, err := c.Get(u)
	require.NoError(t, err)
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// jws builds a compact JWS by hand, for the algorithms a library refuses
// to sign with (none) or that toolgate must refuse (HS256).
func jws(t *testing.T, header, claims map[string]any, sign func([]byte) []byte) string {
	hb, err := json.Marshal(header)
	require.NoError(t, err)
	cb, err := json.Marshal(claims)
	require.NoError(t, err)
	in := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	sig := ""
	if sign != nil {
		sig = base64.RawURLEncoding.EncodeToString(sign([]byte(in)))
	}
	return in + "." + sig
}
