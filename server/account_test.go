package server

import (
	"context"
	tgclient "github.com/toolgate/toolgate/client"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/passkeytest"
	"github.com/toolgate/toolgate/passkey/registry"
)

func openPasskeys(t *testing.T) *registry.Registry {
	t.Helper()
	l, _, dsn := testLedger(t)
	r, err := registry.Open(context.Background(), dsn, l, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func getPage(h http.Handler, path string, c *http.Cookie) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.AddCookie(c)
	return serve(h, req)
}

func TestPasskeysPagesAreOffWithoutARelyingParty(t *testing.T) {
	_, h := newAuditInbox(t, Config{})
	c := signIn(t, h, "approver-token")
	rec := getPage(h, "/account/passkeys", c)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "Passkeys are off here: they need --public-url with a host name")
	assert.NotContains(t, rec.Body.String(), `id="passkey-add"`)
}

func TestPasskeysPagesListOnlyTheirOwnAndRemoveOnlyTheirOwn(t *testing.T) {
	reg := openPasskeys(t)
	ctx := context.Background()
	mine, err := reg.Register(ctx, registry.Registration{Credential: passkeytest.New().Credential("alice", "localhost"), Name: "laptop <b>"}, nil)
	require.NoError(t, err)
	theirs, err := reg.Register(ctx, registry.Registration{Credential: passkeytest.New().Credential("root", "localhost"), Name: "root's key"}, nil)
	require.NoError(t, err)
	i, h := newAuditInbox(t, Config{Calls: tgclient.New(nil, "").WithDoor(testDoor), Passkeys: reg, PasskeyRP: passkey.RelyingParty{ID: "localhost", Origins: []string{"http://localhost:7700"}}})

	c := signIn(t, h, "approver-token")
	sess, ok := i.sessions.get(c.Value)
	require.True(t, ok)
	page := getPage(h, "/account/passkeys", c).Body.String()
	assert.Contains(t, page, `data-credential-id="`+passkey.IDString(mine.Credential.ID)+`"`)
	assert.Contains(t, page, "laptop &lt;b&gt;")
	assert.NotContains(t, page, passkey.IDString(theirs.Credential.ID))
	assert.Contains(t, page, `id="passkey-add"`)

	rec := postForm(h, "/account/passkeys/"+passkey.IDString(theirs.Credential.ID)+"/remove", url.Values{"csrf": {sess.csrf}}, c)
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Contains(t, rec.Body.String(), "not a passkey registered to alice")
	_, err = reg.Lookup(ctx, "root", theirs.Credential.ID)
	require.NoError(t, err, "root's passkey stays")

	rec = postForm(h, "/account/passkeys/"+passkey.IDString(mine.Credential.ID)+"/remove", url.Values{}, c)
	assert.Equal(t, http.StatusForbidden, rec.Code, "no CSRF token")
	rec = postForm(h, "/account/passkeys/"+passkey.IDString(mine.Credential.ID)+"/remove", url.Values{"csrf": {sess.csrf}}, c)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	_, err = reg.Lookup(ctx, "alice", mine.Credential.ID)
	require.ErrorIs(t, err, registry.ErrRemoved)

	// The ceremony's JSON posts want the CSRF token in their header.
	post := func(path, csrf string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if csrf != "" {
			req.Header.Set(csrfHeader, csrf)
		}
		req.AddCookie(c)
		return serve(h, req)
	}
	assert.Equal(t, http.StatusForbidden, post("/account/passkeys/options", "").Code)
	rec = post("/account/passkeys/options", sess.csrf)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"userVerification":"required"`)
	assert.Contains(t, rec.Body.String(), `"residentKey":"preferred"`)
	assert.Contains(t, rec.Body.String(), `"id":"localhost"`)
	rec = post("/account/passkeys", sess.csrf)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Contains(t, rec.Body.String(), "name the passkey")

	a := signIn(t, h, "auditor-token")
	page = getPage(h, "/account/passkeys", a).Body.String()
	assert.NotContains(t, page, `id="passkey-add"`)
	assert.Contains(t, page, "Auditors read only: they register no passkeys.")
}
