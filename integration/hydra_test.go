package integration

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"
)

// The OpenID provider of the sign-in tests: Ory Hydra, pinned by
// testdata/hydra/go.mod, built once per version into the cache, run in
// memory, with a login and consent app of the test's own that signs in
// scripted people with scripted groups.
const (
	hydraVersion  = "v2.3.0"
	hydraClientID = "toolgate"
	hydraSecret   = "toolgate-client-secret-for-tests"
	// forgeKeySet is a key set Hydra generates and publishes in its JWKS,
	// whose private key the tests read back to sign tokens with exact
	// flaws (a wrong audience, issuer or expiry) that the provider's own
	// endpoints never issue.
	forgeKeySet = "toolgate.forge"
)

// buildHydra returns the Hydra binary, building it on first use (about a
// minute; cgo for its in-memory SQLite).
func buildHydra(t *testing.T) string {
	t.Helper()
	base, err := os.UserCacheDir()
	require.NoError(t, err)
	dir := filepath.Join(base, "toolgate", "hydra-"+hydraVersion+"-"+runtime.Version())
	bin := filepath.Join(dir, "hydra")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	tmp := bin + ".build"
	cmd := exec.Command("go", "build", "-tags", "sqlite,sqlite_omit_load_extension", "-o", tmp, "github.com/ory/hydra/v2")
	cmd.Dir = filepath.Join("testdata", "hydra")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build Hydra %s:\n%s", hydraVersion, out)
	require.NoError(t, os.Rename(tmp, bin))
	return bin
}

// idpUser is a scripted person at the provider.
type idpUser struct {
	email    string
	groups   []string
	disabled bool
}

// hydra is a running provider and its login, consent, logout and token
// hook app.
type hydra struct {
	t               *testing.T
	issuer, admin   string
	app             *httptest.Server
	mu              sync.Mutex
	users           map[string]*idpUser
	forgeKey        jose.JSONWebKey
	toolgateBaseURL string
	// refreshes counts the tokens Hydra issued for a refresh grant.
	refreshes atomic.Int64
}

// startHydra runs Hydra for toolgate at publicURL, with a client that
// may ask for refresh tokens and JWT access tokens for audience
// "toolgate".
func startHydra(t *testing.T, publicURL string, users map[string]*idpUser) *hydra {
	t.Helper()
	bin := buildHydra(t)
	h := &hydra{t: t, users: users, toolgateBaseURL: publicURL}
	h.app = httptest.NewServer(http.HandlerFunc(h.serveApp))
	t.Cleanup(h.app.Close)
	pub, adm := freePort(t), freePort(t)
	h.issuer, h.admin = fmt.Sprintf("http://127.0.0.1:%d", pub), fmt.Sprintf("http://127.0.0.1:%d", adm)
	dir := t.TempDir()
	config := fmt.Sprintf(`dsn: memory
log: {level: error, leak_sensitive_values: false}
serve:
  public: {host: 127.0.0.1, port: %d}
  admin: {host: 127.0.0.1, port: %d}
urls:
  self: {issuer: %s}
  login: %s/login
  consent: %s/consent
  logout: %s/logout
secrets: {system: [integration-test-system-secret-0123456789]}
strategies: {access_token: jwt}
ttl: {id_token: 1h, access_token: 1h}
oauth2:
  allowed_top_level_claims: [email, email_verified, groups]
  token_hook: %s/hook
webfinger:
  jwks:
    broadcast_keys: [hydra.openid.id-token, hydra.jwt.access-token, %s]
`, pub, adm, h.issuer, h.app.URL, h.app.URL, h.app.URL, h.app.URL, forgeKeySet)
	cfg := filepath.Join(dir, "hydra.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(config), 0o600))
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out", "-c", cfg)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool {
		r, err := http.Get(h.issuer + "/.well-known/openid-configuration")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "Hydra did not start:\n%s", &out)

	callback := strings.TrimSuffix(publicURL, "/") + "/auth/callback"
	for _, c := range []map[string]any{
		{"client_id": hydraClientID, "client_secret": hydraSecret, "audience": []string{hydraClientID},
			"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
			"scope": "openid offline_access offline email profile", "redirect_uris": []string{callback},
			"post_logout_redirect_uris":  []string{strings.TrimSuffix(publicURL, "/") + "/login?signed_out=1"},
			"token_endpoint_auth_method": "client_secret_basic"},
		// Another application of the same provider: its tokens are not
		// toolgate's.
		{"client_id": "other-app", "client_secret": hydraSecret, "grant_types": []string{"authorization_code"},
			"response_types": []string{"code"}, "scope": "openid email", "redirect_uris": []string{callback},
			"token_endpoint_auth_method": "client_secret_basic"},
	} {
		h.adminJSON("POST", "/admin/clients", c, nil)
	}
	// Touch the forge set (Hydra generates it on first use), then read its
	// private key.
	r, err := http.Get(h.issuer + "/.well-known/jwks.json")
	require.NoError(t, err)
	r.Body.Close()
	var set jose.JSONWebKeySet
	h.adminJSON("GET", "/admin/keys/"+forgeKeySet, nil, &set)
	require.NotEmpty(t, set.Keys, "the forge key set")
	for _, k := range set.Keys {
		if _, ok := k.Key.(*rsa.PrivateKey); ok {
			h.forgeKey = k
		}
	}
	require.NotNil(t, h.forgeKey.Key, "Hydra's admin API returns the forge set's private key")
	return h
}

// adminJSON calls Hydra's admin API.
func (h *hydra) adminJSON(method, path string, in, out any) {
	h.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		require.NoError(h.t, err)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.admin+path, body)
	require.NoError(h.t, err)
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer r.Body.Close()
	raw, _ := io.ReadAll(r.Body)
	require.Less(h.t, r.StatusCode, 300, "%s %s: %s", method, path, raw)
	if out != nil {
		require.NoError(h.t, json.Unmarshal(raw, out), string(raw))
	}
}

func (h *hydra) user(subject string) (idpUser, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u, ok := h.users[subject]
	if !ok {
		return idpUser{}, false
	}
	return idpUser{email: u.email, groups: slices.Clone(u.groups), disabled: u.disabled}, true
}

// setGroups changes a person's groups at the provider.
func (h *hydra) setGroups(subject string, groups ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.users[subject].groups = groups
}

func (u idpUser) claims() map[string]any {
	return map[string]any{"email": u.email, "email_verified": true, "groups": u.groups}
}

// serveApp is the login, consent and logout UI and the token hook.
func (h *hydra) serveApp(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == "GET" && r.URL.Path == "/login":
		fmt.Fprintf(w, `<!doctype html><form method="post" action="/login" id="idp-login">
<input type="hidden" name="challenge" value="%s"><input id="idp-user" name="user"><button id="idp-go">Sign in</button></form>`,
			html.EscapeString(r.URL.Query().Get("login_challenge")))
	case r.Method == "POST" && r.URL.Path == "/login":
		challenge, subject := r.PostFormValue("challenge"), r.PostFormValue("user")
		var answer struct {
			RedirectTo string `json:"redirect_to"`
		}
		if u, ok := h.user(subject); !ok || u.disabled {
			h.adminJSON("PUT", "/admin/oauth2/auth/requests/login/reject?login_challenge="+url.QueryEscape(challenge),
				map[string]any{"error": "access_denied", "error_description": "unknown user"}, &answer)
		} else {
			h.adminJSON("PUT", "/admin/oauth2/auth/requests/login/accept?login_challenge="+url.QueryEscape(challenge),
				map[string]any{"subject": subject}, &answer)
		}
		http.Redirect(w, r, answer.RedirectTo, http.StatusFound)
	case r.URL.Path == "/consent":
		challenge := r.URL.Query().Get("consent_challenge")
		var req struct {
			Subject  string   `json:"subject"`
			Scope    []string `json:"requested_scope"`
			Audience []string `json:"requested_access_token_audience"`
		}
		h.adminJSON("GET", "/admin/oauth2/auth/requests/consent?consent_challenge="+url.QueryEscape(challenge), nil, &req)
		u, _ := h.user(req.Subject)
		var answer struct {
			RedirectTo string `json:"redirect_to"`
		}
		h.adminJSON("PUT", "/admin/oauth2/auth/requests/consent/accept?consent_challenge="+url.QueryEscape(challenge), map[string]any{
			"grant_scope": req.Scope, "grant_access_token_audience": req.Audience,
			"session": map[string]any{"id_token": u.claims(), "access_token": u.claims()},
		}, &answer)
		http.Redirect(w, r, answer.RedirectTo, http.StatusFound)
	case r.URL.Path == "/logout":
		var answer struct {
			RedirectTo string `json:"redirect_to"`
		}
		h.adminJSON("PUT", "/admin/oauth2/auth/requests/logout/accept?logout_challenge="+url.QueryEscape(r.URL.Query().Get("logout_challenge")), nil, &answer)
		http.Redirect(w, r, answer.RedirectTo, http.StatusFound)
	case r.URL.Path == "/hook":
		// Every token Hydra issues, refreshes included, carries the
		// person's groups as they are now: the way a directory-backed
		// provider updates its claims.
		var hook struct {
			Session struct {
				IDToken struct {
					Subject string `json:"subject"`
				} `json:"id_token"`
			} `json:"session"`
			Request struct {
				GrantTypes []string `json:"grant_types"`
			} `json:"request"`
		}
		_ = json.NewDecoder(r.Body).Decode(&hook)
		if slices.Contains(hook.Request.GrantTypes, "refresh_token") {
			h.refreshes.Add(1)
		}
		u, ok := h.user(hook.Session.IDToken.Subject)
		if !ok || u.disabled {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"session": map[string]any{"id_token": u.claims(), "access_token": u.claims()}})
	default:
		http.NotFound(w, r)
	}
}

// browserless is an HTTP client with its own cookies that stops at
// toolgate's callback (stopAtCallback) or follows every redirect.
func browserless(t *testing.T, stopAtCallback bool) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	if stopAtCallback {
		c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
			if req.URL.Path == "/auth/callback" {
				return http.ErrUseLastResponse
			}
			return nil
		}
	}
	return c
}

// signInAt follows an authorization URL through Hydra and the login app
// as subject, and returns where the provider sends the browser back
// (toolgate's callback with code and state), without going there.
func (h *hydra) signInAt(t *testing.T, c *http.Client, authURL, subject string) *url.URL {
	t.Helper()
	r, err := c.Get(authURL)
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, "/login", r.Request.URL.Path, "Hydra sends the browser to the login app")
	r, err = c.PostForm(h.app.URL+"/login", url.Values{"challenge": {r.Request.URL.Query().Get("login_challenge")}, "user": {subject}})
	require.NoError(t, err)
	r.Body.Close()
	require.Contains(t, []int{http.StatusFound, http.StatusSeeOther}, r.StatusCode, "the provider redirects back to toolgate")
	back, err := r.Location()
	require.NoError(t, err)
	return back
}

// authURL is an authorization request of client straight to Hydra, as an
// attacker or an internal tool would make it.
func (h *hydra) authURL(client string, q url.Values) string {
	q.Set("client_id", client)
	q.Set("response_type", "code")
	q.Set("redirect_uri", strings.TrimSuffix(h.toolgateBaseURL, "/")+"/auth/callback")
	if q.Get("scope") == "" {
		q.Set("scope", "openid email")
	}
	if q.Get("state") == "" {
		q.Set("state", "state-of-the-test-0123456789")
	}
	if q.Get("nonce") == "" {
		q.Set("nonce", "nonce-of-the-test-0123456789")
	}
	return h.issuer + "/oauth2/auth?" + q.Encode()
}

// tokens redeems a code at Hydra's token endpoint as client.
func (h *hydra) tokens(t *testing.T, client, code string, extra url.Values) (status int, body map[string]any) {
	t.Helper()
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {strings.TrimSuffix(h.toolgateBaseURL, "/") + "/auth/callback"}}
	for k, v := range extra {
		form[k] = v
	}
	req, err := http.NewRequestWithContext(context.Background(), "POST", h.issuer+"/oauth2/token", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client, hydraSecret)
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer r.Body.Close()
	_ = json.NewDecoder(r.Body).Decode(&body)
	return r.StatusCode, body
}

// accessToken is a JWT access token of Hydra for subject, audience
// toolgate, through the code flow of toolgate's client.
func (h *hydra) accessToken(t *testing.T, subject string) string {
	t.Helper()
	back := h.signInAt(t, browserless(t, true), h.authURL(hydraClientID, url.Values{"audience": {hydraClientID}, "scope": {"openid email"}}), subject)
	status, body := h.tokens(t, hydraClientID, back.Query().Get("code"), nil)
	require.Equal(t, http.StatusOK, status, "%v", body)
	tok, _ := body["access_token"].(string)
	require.Equal(t, 2, strings.Count(tok, "."), "a JWT access token")
	return tok
}

// forge signs claims with the forge key (published in Hydra's JWKS).
func (h *hydra) forge(t *testing.T, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: h.forgeKey}, (&jose.SignerOptions{}).WithType("JWT"))
	require.NoError(t, err)
	payload, err := json.Marshal(claims)
	require.NoError(t, err)
	obj, err := signer.Sign(payload)
	require.NoError(t, err)
	s, err := obj.CompactSerialize()
	require.NoError(t, err)
	return s
}

// goodClaims are claims toolgate accepts, for subject, as the forge
// tests' starting point.
func (h *hydra) goodClaims(subject string) map[string]any {
	u, _ := h.user(subject)
	now := time.Now()
	c := u.claims()
	c["iss"], c["sub"], c["aud"] = h.issuer, subject, []string{hydraClientID}
	c["iat"], c["exp"] = now.Unix(), now.Add(time.Hour).Unix()
	return c
}
