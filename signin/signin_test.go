package signin

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheNameIsAVerifiedEmailThenAUsernameThenTheSubject(t *testing.T) {
	p := &Provider{cfg: Config{NameClaim: "email"}}
	for _, c := range []struct {
		claims map[string]any
		want   string
	}{
		{map[string]any{"email": "olga@example.com", "email_verified": true, "preferred_username": "olga"}, "olga@example.com"},
		{map[string]any{"email": "olga@example.com"}, "olga@example.com"}, // a provider that does not say
		{map[string]any{"preferred_username": "olga"}, "olga"},
		{map[string]any{}, "sub-1"},
	} {
		got, err := p.name(c.claims, "sub-1")
		require.NoError(t, err, "%v", c.claims)
		assert.Equal(t, c.want, got, "%v", c.claims)
	}

	_, err := p.name(map[string]any{"email": "ceo@example.com", "email_verified": false}, "sub-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has not verified the email ceo@example.com")

	_, err = p.name(map[string]any{"email": "olga+x@example.com"}, "sub-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--oidc-name-claim", "the error says how to choose another claim")

	_, err = p.name(map[string]any{}, "has spaces")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names nobody")
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
