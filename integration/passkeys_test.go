package integration

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPasskeys registers a passkey in the inbox of the real `toolgate dev`
// with headless Chromium's virtual authenticator (user verification
// included), sees it listed and logged in the ledger, and removes it.
// The browser opens dev at localhost: browsers make no passkey for an IP
// address.
func TestPasskeys(t *testing.T) {
	b := newBrowser(t)
	d, as := newAPIDev(t)
	auditor := as("audrey")
	b.base = "http://localhost:" + d.httpAddr[strings.LastIndex(d.httpAddr, ":")+1:]

	ctx, authn := virtualAuthenticator(t, b, stepTimeout)

	b.do(chromedp.Navigate(b.base+"/login?next=%2Faccount%2Fpasskeys"), chromedp.SendKeys(chromedp.CSS("#token"), "token-bob"), chromedp.Click(chromedp.CSS("#login button")))
	b.waitJS(`location.pathname === "/account/passkeys" && !!document.querySelector("#passkeys-empty")`, "bob's empty passkeys page")
	// A wait on chromedp's own view of the new page (as the inbox tests
	// sign in): the script's wait alone left chromedp acting on the login
	// page's nodes now and then ("Could not find node with given id").
	b.do(chromedp.WaitVisible(chromedp.CSS("#passkey-name")))
	assert.Contains(t, evalJS[string](b, `document.querySelector("main").textContent`), "Passkeys here are for localhost")

	var id string
	t.Run("add a passkey", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.SendKeys(chromedp.CSS("#passkey-name"), "laptop"), chromedp.Click(chromedp.CSS("#passkey-add-button")))
		b.waitJS(`document.querySelector("#passkeys .passkey-name")?.textContent === "laptop" &&
			document.querySelector(".notice")?.textContent === 'Added the passkey "laptop".'`, "the new passkey in the list")

		creds, err := chromedp.Call(ctx, cdpwebauthn.GetCredentials, cdpwebauthn.GetCredentialsParams{AuthenticatorID: authn})
		require.NoError(t, err)
		require.Len(t, creds.Credentials, 1)
		c := creds.Credentials[0]
		assert.Equal(t, "localhost", c.RpID)
		assert.True(t, c.IsResidentCredential, "a discoverable credential, as preferred")
		id = base64.RawURLEncoding.EncodeToString(c.CredentialID)
		assert.True(t, evalJS[bool](b, `!!document.querySelector('#passkeys li[data-credential-id="`+id+`"]')`), "listed by its credential ID")

		e := passkeyEntry(t, auditor, "passkey.registered", id)
		require.NotNil(t, e, "a passkey.registered entry for %s", id)
		assert.Equal(t, "bob", e["by"])
		assert.Equal(t, "laptop", e["name"])
		assert.Equal(t, "localhost", e["details"].(map[string]any)["passkey"].(map[string]any)["rp_id"])
		require.NotNil(t, e["statement"], "vouched for by the door that authenticated bob")
		raw, err := base64.StdEncoding.DecodeString(e["statement"].(map[string]any)["statement_bytes"].(string))
		require.NoError(t, err)
		var st map[string]any
		require.NoError(t, json.Unmarshal(raw, &st))
		assert.Equal(t, "register_passkey", st["kind"])
		assert.Equal(t, "bob", st["by"])
		assert.Equal(t, id, st["key"], "of this credential")
	})

	t.Run("the same authenticator is not added twice", func(t *testing.T) {
		b := b.in(t)
		b.mark()
		b.do(chromedp.SendKeys(chromedp.CSS("#passkey-name"), "laptop again"), chromedp.Click(chromedp.CSS("#passkey-add-button")))
		b.waitJS(`!document.querySelector("#passkey-error").hidden`, "the refusal")
		assert.Contains(t, evalJS[string](b, `document.querySelector("#passkey-error").textContent`), "The passkey was not added")
		b.assertNotReloaded()
		assert.Equal(t, 1, evalJS[int](b, `document.querySelectorAll("#passkeys li").length`))
	})

	t.Run("remove it", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Click(chromedp.CSS(`#passkeys li[data-credential-id="` + id + `"] button`)))
		b.waitJS(`!!document.querySelector("#passkeys-empty") && document.querySelector(".notice")?.textContent === 'Removed the passkey "laptop".'`,
			"the empty list")
		assert.NotNil(t, passkeyEntry(t, auditor, "passkey.removed", id), "a passkey.removed entry for %s", id)
	})
}

// passkeyEntry is the ledger's entry of kind for credential id, read
// through the audit API; nil when there is none.
func passkeyEntry(t *testing.T, auditor apiClient, kind, id string) map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", auditor.base+"/v1/audit/entries", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+auditor.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var c struct {
			Entry map[string]any `json:"entry"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c))
		details, _ := c.Entry["details"].(map[string]any)
		pk, _ := details["passkey"].(map[string]any)
		if c.Entry["kind"] == kind && pk["credential_id"] == id {
			return c.Entry
		}
	}
	require.NoError(t, sc.Err())
	return nil
}
