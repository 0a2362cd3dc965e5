package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/signin"
	"github.com/toolgate/toolgate/websession"
)

func TestSignInMapsThePersonOntoARole(t *testing.T) {
	tokens, err := NewTokens([]TokenEntry{{Name: "alice", Role: RoleApprover, SHA256: HashToken("t")}})
	require.NoError(t, err)
	s := &SignIn{AdminGroup: "admins", AuditorGroup: "auditors", RequiredGroups: []string{"staff"}}
	person := func(name string, groups ...string) signin.Person {
		return signin.Person{Name: name, Identity: policy.Identity{Issuer: "https://idp", Subject: "sub-" + name}, Groups: groups}
	}

	p, err := s.principal(person("olga@x", "ops", "*", "staff"), tokens)
	require.NoError(t, err)
	assert.Equal(t, RoleApprover, p.Role)
	assert.Equal(t, []string{"ops", "staff"}, p.Groups, `the provider's "*" is no toolgate wildcard`)
	assert.Equal(t, &policy.Identity{Issuer: "https://idp", Subject: "sub-olga@x"}, p.Identity)
	assert.Equal(t, p.Identity, p.approver().Identity, "the identity goes with every decision")

	p, err = s.principal(person("ada@x", "admins", "staff"), tokens)
	require.NoError(t, err)
	assert.Equal(t, RoleAdmin, p.Role)
	assert.Equal(t, []string{"*"}, p.approver().Groups)

	p, err = s.principal(person("aud@x", "auditors", "staff"), tokens)
	require.NoError(t, err)
	assert.Equal(t, RoleAuditor, p.Role)

	for name, c := range map[string]struct {
		person signin.Person
		why    string
	}{
		"no required group": {person("eve@x", "ops"), "not in a group that may sign in"},
		"a token's name":    {person("ALICE", "staff"), "also the name of a toolgate token"},
		"toolgate's name":   {person(policy.ReservedNames[0], "staff"), "keeps for itself"},
	} {
		_, err := s.principal(c.person, tokens)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.why, name)
	}
}

func TestSignInFlowsAreUsableOnce(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	flows := authFlows{store: websession.NewMemory(func() time.Time { return now })}
	f := signin.NewFlow()
	require.NoError(t, flows.add(ctx, f, "/calls/x", now))
	now = now.Add(time.Minute)
	got, next, err := flows.take(ctx, f.State)
	require.NoError(t, err)
	assert.Equal(t, f, got)
	assert.Equal(t, "/calls/x", next)
	_, _, err = flows.take(ctx, f.State)
	assert.ErrorIs(t, err, websession.ErrNotFound, "a state is used once")

	late := signin.NewFlow()
	require.NoError(t, flows.add(ctx, late, "/", now))
	now = now.Add(authFlowTTL)
	_, _, err = flows.take(ctx, late.State)
	assert.ErrorIs(t, err, websession.ErrNotFound, "a sign-in left unfinished for ten minutes is gone")
}

func TestSlackAndEmailApproversRecordTheIdentityOfTheSamePerson(t *testing.T) {
	signedIn := &people{}
	ap := notify.Approver{Name: "olga", Email: "Olga@Example.com", Groups: []string{"ops"}}
	assert.Nil(t, approverPrincipal(ap, signedIn).Identity, "nobody signed in as olga's address yet")
	signedIn.saw("olga@example.com", policy.Identity{Issuer: "https://idp", Subject: "u-1"})
	p := approverPrincipal(ap, signedIn)
	assert.Equal(t, &policy.Identity{Issuer: "https://idp", Subject: "u-1"}, p.Identity, "the address matches without regard to case")
	assert.Equal(t, "olga", p.Name, "the approvers file still names them")
}

func TestWithoutAProviderTheSignInRoutesAnswerNotFound(t *testing.T) {
	h := New(Config{Tokens: mustTokens(t)})
	for _, path := range []string{"/auth/login", "/auth/callback?state=x&code=y"} {
		rec := serve(h, httptest.NewRequest("GET", path, nil))
		assert.Equal(t, http.StatusNotFound, rec.Code, path)
		assert.Contains(t, rec.Body.String(), "not configured here", path)
	}
	rec := serve(h, httptest.NewRequest("GET", "/login", nil))
	assert.NotContains(t, rec.Body.String(), "sign-in-provider", "no provider button")
	assert.Contains(t, rec.Body.String(), `id="token"`, "the token form")
}
