// Package signin is toolgate's side of OpenID Connect: it discovers the
// company's identity provider, runs the authorization code flow (PKCE
// S256, state and nonce) for the inbox, verifies ID tokens and JWT access
// tokens against the provider's published keys, and turns their claims
// into a Person: the name decisions record, the issuer and subject behind
// it, and the groups the provider vouches for.
//
// It knows nothing of toolgate's roles, cookies or HTTP routes: the server
// package maps a Person onto a principal and keeps the browser session.
package signin

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
)

// Config says which provider to trust and how to read its claims.
type Config struct {
	// Issuer is the provider's issuer URL; its
	// /.well-known/openid-configuration is read at start. Required.
	Issuer string
	// ClientID and ClientSecret are toolgate's client at the provider.
	// ClientID is required; the secret may be empty for a public client.
	ClientID, ClientSecret string
	// PublicURL is where browsers reach toolgate; the redirect URI is
	// PublicURL + "/auth/callback". Required for the inbox sign-in.
	PublicURL string
	// Audience is the audience an API access token must carry. Default
	// ClientID.
	Audience string
	// NameClaims name the person in decisions: the first of them the
	// token carries does, else the subject (sub). An "email" counts only
	// when the provider says it verified it (email_verified). Default
	// ["email"]. preferred_username is not in the default: providers let
	// it be changed or chosen (OpenID Connect Core 5.7 says not to rely
	// on it), and Keycloak with "email as username" makes it the
	// unverified address.
	NameClaims []string
	// TrustUnverifiedEmail takes an "email" whose token carries no
	// email_verified claim as verified. Dangerous: Microsoft Entra ID
	// sends none, and its email claim is one a user or administrator may
	// set to anyone's address (the "nOAuth" account takeover). An
	// email_verified of false never counts. Default false.
	TrustUnverifiedEmail bool
	// GroupsClaim holds the person's groups. Default "groups".
	GroupsClaim string
	// Scopes asked for at sign-in. Default openid, email, profile and
	// offline_access (for a refresh token); some providers (Okta) put
	// groups in the token only for a "groups" scope.
	Scopes []string
	// HTTPClient talks to the provider. Default a client with a
	// 10-second timeout.
	HTTPClient *http.Client
	// Now is the clock tokens are checked against. Default time.Now.
	Now func() time.Time
}

// CallbackPath is where the provider sends the browser back.
const CallbackPath = "/auth/callback"

// Algorithms are the signing algorithms toolgate accepts: asymmetric
// only, so a token signed with a key anyone can read (an HMAC keyed with
// the provider's public key) or not signed at all never passes.
var Algorithms = []string{
	oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA,
}

// Provider is a discovered identity provider.
type Provider struct {
	cfg        Config
	provider   *oidc.Provider
	oauth      oauth2.Config
	idTokens   *oidc.IDTokenVerifier
	apiTokens  *oidc.IDTokenVerifier
	endSession string
}

// New discovers the provider at cfg.Issuer.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("sign-in needs the provider's issuer URL and toolgate's client ID (--oidc-issuer, --oidc-client-id)")
	}
	if u, err := url.Parse(cfg.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("--oidc-issuer %q is not an http(s) URL", cfg.Issuer)
	}
	if cfg.Audience == "" {
		cfg.Audience = cfg.ClientID
	}
	if len(cfg.NameClaims) == 0 {
		cfg.NameClaims = []string{"email"}
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{oidc.ScopeOpenID, "email", "profile", oidc.ScopeOfflineAccess}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx = oidc.ClientContext(ctx, cfg.HTTPClient)
	provider, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover the identity provider at %s: %w", cfg.Issuer, err)
	}
	var extra struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := provider.Claims(&extra); err != nil {
		return nil, fmt.Errorf("read %s's discovery document: %w", cfg.Issuer, err)
	}
	verifier := func(audience string) *oidc.IDTokenVerifier {
		return provider.Verifier(&oidc.Config{ClientID: audience, SupportedSigningAlgs: Algorithms, Now: cfg.Now})
	}
	return &Provider{
		cfg:      cfg,
		provider: provider,
		oauth: oauth2.Config{
			ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: provider.Endpoint(),
			RedirectURL: strings.TrimSuffix(cfg.PublicURL, "/") + CallbackPath, Scopes: cfg.Scopes,
		},
		idTokens:   verifier(cfg.ClientID),
		apiTokens:  verifier(cfg.Audience),
		endSession: extra.EndSession,
	}, nil
}

// DisplayName names the provider on the sign-in button: its host.
func (p *Provider) DisplayName() string {
	if u, err := url.Parse(p.cfg.Issuer); err == nil && u.Host != "" {
		return u.Host
	}
	return p.cfg.Issuer
}

// Flow is one sign-in in progress: what the callback must find again.
type Flow struct {
	State, Nonce, Verifier string
}

// NewFlow returns fresh random values for one sign-in.
func NewFlow() Flow {
	return Flow{State: rand.Text(), Nonce: rand.Text(), Verifier: oauth2.GenerateVerifier()}
}

// AuthURL is where the browser goes to sign in.
func (p *Provider) AuthURL(f Flow) string {
	return p.oauth.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
}

// Tokens are what the provider gave for one sign-in or refresh. Raw
// tokens stay in memory: they are never logged or written anywhere.
type Tokens struct {
	Person Person
	// IDToken is the raw ID token, for the end-session endpoint's hint.
	IDToken string
	// RefreshToken is empty when the provider gave none.
	RefreshToken string
	// Expiry is when the ID token expires.
	Expiry time.Time
}

// Error is a refusal of the provider's answer or of a token, with a
// reason to show the person. Provider is set when the provider itself
// could not be reached or failed (not the person's fault).
type Error struct {
	Reason   string
	Provider bool
	Err      error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *Error) Unwrap() error { return e.Err }

// Exchange redeems an authorization code of flow f and verifies the ID
// token it brings: signature, issuer, audience, expiry and f's nonce.
func (p *Provider) Exchange(ctx context.Context, f Flow, code string) (Tokens, error) {
	ctx = oidc.ClientContext(ctx, p.cfg.HTTPClient)
	tok, err := p.oauth.Exchange(ctx, code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Tokens{}, tokenEndpointError("the identity provider refused the authorization code", err)
	}
	t, err := p.fromTokenResponse(ctx, tok, f.Nonce)
	if err != nil {
		return Tokens{}, err
	}
	return t, nil
}

// Refresh renews a sign-in with its refresh token: new claims, so a group
// the provider took away is gone. A refusal ends the sign-in.
func (p *Provider) Refresh(ctx context.Context, refreshToken string) (Tokens, error) {
	ctx = oidc.ClientContext(ctx, p.cfg.HTTPClient)
	tok, err := p.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
	if err != nil {
		return Tokens{}, tokenEndpointError("the identity provider refused to renew the sign-in", err)
	}
	t, err := p.fromTokenResponse(ctx, tok, "")
	if err != nil {
		return Tokens{}, err
	}
	if t.RefreshToken == "" {
		t.RefreshToken = refreshToken // the provider keeps the old one valid
	}
	return t, nil
}

// tokenEndpointError tells the provider refusing (its HTTP answer) from
// the provider not answering.
func tokenEndpointError(reason string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		code := re.ErrorCode
		if code == "" {
			code = fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		}
		return &Error{Reason: reason + " (" + code + ")"}
	}
	return &Error{Reason: "the identity provider could not be reached", Provider: true, Err: err}
}

// fromTokenResponse verifies the ID token of a token response; nonce ""
// means a refresh, whose ID token carries no new nonce to check.
func (p *Provider) fromTokenResponse(ctx context.Context, tok *oauth2.Token, nonce string) (Tokens, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Tokens{}, &Error{Reason: "the identity provider answered without an ID token (is the openid scope allowed for this client?)"}
	}
	idt, err := p.idTokens.Verify(ctx, raw)
	if err != nil {
		return Tokens{}, verifyError("the ID token", err)
	}
	if nonce != "" && idt.Nonce != nonce {
		return Tokens{}, &Error{Reason: "the ID token's nonce is not this sign-in's: it was issued for another sign-in"}
	}
	person, err := p.person(idt)
	if err != nil {
		return Tokens{}, err
	}
	return Tokens{Person: person, IDToken: raw, RefreshToken: tok.RefreshToken, Expiry: idt.Expiry}, nil
}

// VerifyAccessToken checks a bearer token for the API: a JWT signed by
// the provider, for Audience, not expired; its claims name the person.
func (p *Provider) VerifyAccessToken(ctx context.Context, raw string) (Person, error) {
	ctx = oidc.ClientContext(ctx, p.cfg.HTTPClient)
	t, err := p.apiTokens.Verify(ctx, raw)
	if err != nil {
		return Person{}, verifyError("the access token", err)
	}
	return p.person(t)
}

func verifyError(what string, err error) error {
	var expired *oidc.TokenExpiredError
	if errors.As(err, &expired) {
		return &Error{Reason: fmt.Sprintf("%s expired at %s", what, expired.Expiry.UTC().Format(time.RFC3339))}
	}
	// go-oidc's messages name the problem (issuer, audience, signature,
	// algorithm) and never quote the token.
	return &Error{Reason: what + " is not valid", Err: err}
}

// LooksLikeJWT tells a JWT (three base64url parts) from one of toolgate's
// own tokens, which never hold a dot.
func LooksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2
}

// EndSessionOrigin is the origin (scheme://host) of the provider's
// sign-out page; "" when it has none.
func (p *Provider) EndSessionOrigin() string {
	u, err := url.Parse(p.endSession)
	if p.endSession == "" || err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// EndSessionURL is the provider's sign-out page for the sign-in whose ID
// token is idToken, coming back to then; "" when the provider has none.
func (p *Provider) EndSessionURL(idToken, then string) string {
	if p.endSession == "" {
		return ""
	}
	u, err := url.Parse(p.endSession)
	if err != nil {
		return ""
	}
	q := u.Query()
	q.Set("id_token_hint", idToken)
	q.Set("post_logout_redirect_uri", then)
	q.Set("client_id", p.cfg.ClientID)
	u.RawQuery = q.Encode()
	return u.String()
}

// Person is who a token says signed in.
type Person struct {
	// Name is what decisions record as decided_by.
	Name     string
	Identity policy.Identity
	Groups   []string
}

// person reads a verified token's claims.
func (p *Provider) person(t *oidc.IDToken) (Person, error) {
	var claims map[string]any
	if err := t.Claims(&claims); err != nil {
		return Person{}, &Error{Reason: "the token's claims could not be read", Err: err}
	}
	name, err := p.name(claims, t.Subject)
	if err != nil {
		return Person{}, err
	}
	groups, err := stringList(claims[p.cfg.GroupsClaim])
	if err != nil {
		return Person{}, &Error{Reason: fmt.Sprintf("the token's %q claim %s", p.cfg.GroupsClaim, err)}
	}
	return Person{Name: name, Identity: policy.Identity{Issuer: t.Issuer, Subject: t.Subject}, Groups: groups}, nil
}

// name is the person's name: the first of NameClaims the token carries,
// else the subject. An email counts only when the provider says it
// verified it: an address a person may type in themselves names nobody,
// so the next claim, or the subject, names them instead.
func (p *Provider) name(claims map[string]any, subject string) (string, error) {
	for _, claim := range p.cfg.NameClaims {
		v, ok := claims[claim].(string)
		if !ok || v == "" {
			continue
		}
		if claim == "email" && !emailVerified(claims, p.cfg.TrustUnverifiedEmail) {
			continue
		}
		if err := tgclient.ValidateID(claim, v); err != nil {
			return "", &Error{Reason: fmt.Sprintf("the token's %s %q cannot name a person in toolgate: %v (choose another claim with --oidc-name-claim)", claim, v, err)}
		}
		return v, nil
	}
	if err := tgclient.ValidateID("sub", subject); err != nil {
		return "", &Error{Reason: fmt.Sprintf("the token names nobody: no %s claim (an email only when verified), and its subject cannot name a person (%v); choose a claim with --oidc-name-claim",
			strings.Join(p.cfg.NameClaims, " or "), err)}
	}
	return subject, nil
}

// emailVerified reads the email_verified claim: true, or the string
// "true" some providers send (Amazon Cognito). A token without the claim
// counts as unverified unless trustMissing; anything else (false,
// "false", a number) is unverified.
func emailVerified(claims map[string]any, trustMissing bool) bool {
	switch v := claims["email_verified"].(type) {
	case nil:
		return trustMissing
	case bool:
		return v
	case string:
		return strings.EqualFold(v, "true")
	}
	return false
}

// stringList reads a groups claim: a list of strings, or one string.
func stringList(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, errors.New("holds something other than names")
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return out, nil
	}
	return nil, errors.New("is neither a list of names nor a name")
}
