package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/signin"
)

// signInFlags configure sign-in with the company's OpenID provider, on
// dev and serve.
type signInFlags struct {
	issuer, clientID, clientSecret, clientSecretFile, publicURL string
	audience, groupsClaim, adminGroup, auditorGroup             string
	nameClaims, requiredGroups, scopes                          []string
	sessionMax, refreshEvery                                    time.Duration
	tokenSignIn, trustUnverifiedEmail                           bool
}

func (f *signInFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.issuer, "oidc-issuer", os.Getenv("TOOLGATE_OIDC_ISSUER"), "OpenID provider's issuer URL: people sign in to the inbox and call the API through it (env TOOLGATE_OIDC_ISSUER; see docs/sign-in.md)")
	fl.StringVar(&f.clientID, "oidc-client-id", os.Getenv("TOOLGATE_OIDC_CLIENT_ID"), "toolgate's client ID at the provider (env TOOLGATE_OIDC_CLIENT_ID)")
	fl.StringVar(&f.clientSecret, "oidc-client-secret", "", "the client's secret; prefer env TOOLGATE_OIDC_CLIENT_SECRET or --oidc-client-secret-file (a flag's value shows in ps)")
	fl.StringVar(&f.clientSecretFile, "oidc-client-secret-file", "", "file holding the client's secret")
	fl.StringVar(&f.publicURL, "public-url", os.Getenv("TOOLGATE_PUBLIC_URL"), "where browsers reach toolgate; the provider's redirect URI is <public-url>/auth/callback (env TOOLGATE_PUBLIC_URL; dev: http://<--http>)")
	fl.StringVar(&f.audience, "oidc-audience", "", "audience an API access token must carry (default the client ID)")
	fl.StringSliceVar(&f.nameClaims, "oidc-name-claim", []string{"email"}, "claim that names the person in decisions; repeatable, the first the token carries names them, else sub. An email counts only when email_verified is true (e.g. email,preferred_username; see docs/sign-in.md)")
	trust, _ := strconv.ParseBool(os.Getenv("TOOLGATE_OIDC_TRUST_UNVERIFIED_EMAIL"))
	fl.BoolVar(&f.trustUnverifiedEmail, "oidc-trust-unverified-email", trust, "DANGEROUS: take an email whose token has no email_verified claim as verified. Microsoft Entra ID sends none and lets its email claim be set to anyone's address (the nOAuth account takeover); email_verified false still never counts (env TOOLGATE_OIDC_TRUST_UNVERIFIED_EMAIL=1)")
	fl.StringVar(&f.groupsClaim, "oidc-groups-claim", "groups", "claim holding the person's approver groups")
	fl.StringVar(&f.adminGroup, "oidc-admin-group", "", "provider group whose members are admins (act for every group)")
	fl.StringVar(&f.auditorGroup, "oidc-auditor-group", "", "provider group whose members are auditors (read only)")
	fl.StringSliceVar(&f.requiredGroups, "oidc-required-group", nil, "only members of this provider group may sign in; repeatable (any one suffices)")
	fl.StringSliceVar(&f.scopes, "oidc-scope", []string{"openid", "email", "profile", "offline_access"}, "scopes asked for at sign-in; repeatable (add groups for providers such as Okta)")
	fl.DurationVar(&f.sessionMax, "oidc-session-max", server.InboxSessionTTL, "longest an inbox sign-in lasts, renewed or not")
	fl.DurationVar(&f.refreshEvery, "oidc-refresh-every", server.DefaultRefreshEvery, "how often an inbox sign-in is renewed with its refresh token, reading the person's groups anew")
	fl.BoolVar(&f.tokenSignIn, "inbox-token-sign-in", true, "let the inbox take pasted approver tokens too (false: sign in through the provider only)")
}

// configured reports whether any sign-in flag was given.
func (f *signInFlags) configured() bool {
	return f != nil && (f.issuer != "" || f.clientID != "")
}

// build discovers the provider and returns the server's sign-in; nil
// when none is configured. devHTTP is dev's listen address, the default
// public URL there.
func (f *signInFlags) build(ctx context.Context, devHTTP string) (*server.SignIn, error) {
	if !f.configured() {
		if !f.tokenSignIn {
			return nil, usageError("--inbox-token-sign-in=false leaves no way to sign in: configure --oidc-issuer too")
		}
		return nil, nil
	}
	switch {
	case f.issuer == "":
		return nil, usageError("--oidc-client-id needs --oidc-issuer")
	case f.clientID == "":
		return nil, usageError("--oidc-issuer needs --oidc-client-id")
	case f.sessionMax <= 0 || f.refreshEvery <= 0:
		return nil, usageError("--oidc-session-max and --oidc-refresh-every must be positive")
	}
	public := f.publicURL
	if public == "" && devHTTP != "" {
		public = "http://" + devHTTP
	}
	if u, err := url.Parse(public); public == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, usageError("sign-in needs --public-url (the https URL people open toolgate at; the provider redirects to <public-url>%s)", signin.CallbackPath)
	}
	secret, err := f.secret()
	if err != nil {
		return nil, err
	}
	p, err := signin.New(ctx, signin.Config{
		Issuer: f.issuer, ClientID: f.clientID, ClientSecret: secret, PublicURL: public,
		Audience: f.audience, NameClaims: f.nameClaims, TrustUnverifiedEmail: f.trustUnverifiedEmail,
		GroupsClaim: f.groupsClaim, Scopes: f.scopes,
	})
	if err != nil {
		return nil, err
	}
	return &server.SignIn{
		Provider: p, PublicURL: public, AdminGroup: f.adminGroup, AuditorGroup: f.auditorGroup,
		RequiredGroups: f.requiredGroups, SessionMax: f.sessionMax, RefreshEvery: f.refreshEvery,
		NoTokenSignIn: !f.tokenSignIn,
	}, nil
}

// secret is the client secret: the flag, else the file, else the env.
func (f *signInFlags) secret() (string, error) {
	if f.clientSecret != "" {
		return f.clientSecret, nil
	}
	if f.clientSecretFile != "" {
		b, err := os.ReadFile(f.clientSecretFile)
		if err != nil {
			return "", fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return os.Getenv("TOOLGATE_OIDC_CLIENT_SECRET"), nil
}
