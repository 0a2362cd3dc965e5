package signin

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeProvider is an OpenID provider in a test server: discovery, its
// signing key, and a token endpoint that answers any code with an ID
// token holding claims.
type fakeProvider struct {
	srv    *httptest.Server
	key    *rsa.PrivateKey
	claims map[string]any
}

func newFakeProvider(t *testing.T) *fakeProvider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	f := &fakeProvider{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer": f.srv.URL, "authorization_endpoint": f.srv.URL + "/authorize",
			"token_endpoint": f.srv.URL + "/token", "jwks_uri": f.srv.URL + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"access_token": "opaque", "token_type": "Bearer", "expires_in": 3600, "id_token": f.sign(t, f.claims)})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeProvider) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: f.key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	require.NoError(t, err)
	payload, err := json.Marshal(claims)
	require.NoError(t, err)
	jws, err := signer.Sign(payload)
	require.NoError(t, err)
	raw, err := jws.CompactSerialize()
	require.NoError(t, err)
	return raw
}

// entraClaims are shaped like a Microsoft Entra ID v2.0 ID token: a
// pairwise sub, the object and tenant IDs, preferred_username, and an
// email claim without email_verified (Entra never sends it; its email
// is the mail attribute, which may hold anyone's address).
func (f *fakeProvider) entraClaims(nonce string) map[string]any {
	now := time.Now()
	return map[string]any{
		"ver": "2.0", "iss": f.srv.URL, "aud": "toolgate-client",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(), "nonce": nonce,
		"sub":                "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
		"oid":                "00000000-0000-0000-66f3-3332eca7ea81",
		"tid":                "9122040d-6c67-4c5b-b112-36a304b66dad",
		"name":               "Mallory",
		"preferred_username": "mallory@contoso.onmicrosoft.com",
		"email":              "ceo@victim.example",
		"groups":             []string{"5f9b8c2e-1c1a-4a57-9a3d-2f6f1b0c9e11"},
	}
}

func TestAnEntraIDTokenWithoutEmailVerifiedNeverSignsInUnderItsEmail(t *testing.T) {
	f := newFakeProvider(t)
	signIn := func(cfg Config, edit func(map[string]any)) Person {
		t.Helper()
		cfg.Issuer, cfg.ClientID, cfg.PublicURL = f.srv.URL, "toolgate-client", "https://toolgate.example.com"
		p, err := New(context.Background(), cfg)
		require.NoError(t, err)
		flow := NewFlow()
		f.claims = f.entraClaims(flow.Nonce)
		if edit != nil {
			edit(f.claims)
		}
		tokens, err := p.Exchange(context.Background(), flow, "code")
		require.NoError(t, err)
		return tokens.Person
	}
	const sub, email = "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", "ceo@victim.example"

	got := signIn(Config{}, nil)
	assert.Equal(t, sub, got.Name, "no email_verified: the email names nobody, the subject does")
	assert.Equal(t, sub, got.Identity.Subject)
	assert.Equal(t, []string{"5f9b8c2e-1c1a-4a57-9a3d-2f6f1b0c9e11"}, got.Groups, "Entra's groups are object IDs")

	got = signIn(Config{NameClaims: []string{"email", "preferred_username"}}, nil)
	assert.Equal(t, "mallory@contoso.onmicrosoft.com", got.Name, "a claim the operator names comes next")

	got = signIn(Config{TrustUnverifiedEmail: true}, nil)
	assert.Equal(t, email, got.Name, "--oidc-trust-unverified-email takes the email as it is")

	got = signIn(Config{TrustUnverifiedEmail: true}, func(c map[string]any) { c["email_verified"] = false })
	assert.Equal(t, sub, got.Name, "the flag is for a missing claim: false stays false")

	got = signIn(Config{}, func(c map[string]any) { c["email_verified"] = "true" })
	assert.Equal(t, email, got.Name, `"true" as a string, as some providers send it, is true`)

	got = signIn(Config{}, func(c map[string]any) { c["email_verified"] = true })
	assert.Equal(t, email, got.Name)
}

func TestAnAccessTokenWithoutEmailVerifiedNeverActsUnderItsEmail(t *testing.T) {
	f := newFakeProvider(t)
	p, err := New(context.Background(), Config{Issuer: f.srv.URL, ClientID: "toolgate-client", Audience: "api://toolgate"})
	require.NoError(t, err)
	claims := f.entraClaims("")
	delete(claims, "nonce")
	claims["aud"] = "api://toolgate"
	got, err := p.VerifyAccessToken(context.Background(), f.sign(t, claims))
	require.NoError(t, err)
	assert.Equal(t, "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", got.Name)
}
