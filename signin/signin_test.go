package signin

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheNameIsAVerifiedEmailThenTheSubject(t *testing.T) {
	for _, c := range []struct {
		cfg    Config
		claims map[string]any
		want   string
	}{
		{Config{}, map[string]any{"email": "olga@example.com", "email_verified": true, "preferred_username": "olga"}, "olga@example.com"},
		{Config{}, map[string]any{"email": "olga@example.com", "email_verified": "true"}, "olga@example.com"},
		{Config{}, map[string]any{"email": "olga@example.com", "email_verified": "TRUE"}, "olga@example.com"},
		{Config{}, map[string]any{"email": "olga@example.com"}, "sub-1"}, // a provider that does not say
		{Config{}, map[string]any{"email": "olga@example.com", "email_verified": nil}, "sub-1"},
		{Config{}, map[string]any{"email": "olga@example.com", "email_verified": false}, "sub-1"},
		{Config{}, map[string]any{"email": "olga@example.com", "email_verified": "false"}, "sub-1"},
		{Config{}, map[string]any{"email": "olga@example.com", "email_verified": 1.0}, "sub-1"},
		{Config{}, map[string]any{"preferred_username": "olga"}, "sub-1"}, // not in the default chain
		{Config{}, map[string]any{}, "sub-1"},
		{Config{TrustUnverifiedEmail: true}, map[string]any{"email": "olga@example.com"}, "olga@example.com"},
		{Config{TrustUnverifiedEmail: true}, map[string]any{"email": "olga@example.com", "email_verified": false}, "sub-1"},
		{Config{TrustUnverifiedEmail: true}, map[string]any{"email": "olga@example.com", "email_verified": "no"}, "sub-1"},
		{Config{NameClaims: []string{"email", "preferred_username"}}, map[string]any{"email": "olga@example.com", "preferred_username": "olga"}, "olga"},
		{Config{NameClaims: []string{"email", "preferred_username"}}, map[string]any{"email": "olga@example.com", "email_verified": true, "preferred_username": "olga"}, "olga@example.com"},
		{Config{NameClaims: []string{"upn"}}, map[string]any{"upn": "olga@contoso.com", "email": "x@example.com", "email_verified": true}, "olga@contoso.com"},
	} {
		if len(c.cfg.NameClaims) == 0 {
			c.cfg.NameClaims = []string{"email"}
		}
		p := &Provider{cfg: c.cfg}
		got, err := p.name(c.claims, "sub-1")
		require.NoError(t, err, "%+v %v", c.cfg, c.claims)
		assert.Equal(t, c.want, got, "%+v %v", c.cfg, c.claims)
	}

	p := &Provider{cfg: Config{NameClaims: []string{"email"}}}
	_, err := p.name(map[string]any{"email": "olga+x@example.com", "email_verified": true}, "sub-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--oidc-name-claim", "the error says how to choose another claim")

	_, err = p.name(map[string]any{"email": "ceo@example.com"}, "has spaces")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names nobody: no email claim (an email only when verified)")
}

func TestGroupsClaim(t *testing.T) {
	got, err := stringList([]any{"ops", "finance", "ops"})
	require.NoError(t, err)
	assert.Equal(t, []string{"ops", "finance"}, got)
	got, err = stringList("ops")
	require.NoError(t, err)
	assert.Equal(t, []string{"ops"}, got)
	got, err = stringList(nil)
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = stringList([]any{"ops", 7.0})
	assert.ErrorContains(t, err, "other than names")
	_, err = stringList(map[string]any{})
	assert.ErrorContains(t, err, "neither a list")
}

func TestOnlyJWTsGoToTheProvider(t *testing.T) {
	assert.True(t, LooksLikeJWT("a.b.c"))
	assert.False(t, LooksLikeJWT("tgp_0123456789abcdef"), "toolgate's own tokens hold no dot")
}
