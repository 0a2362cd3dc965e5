package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
)

// TestPasskeySignInWithHydra registers a passkey in the inbox of the real
// `toolgate dev` for a person signed in through a real OpenID provider
// (Ory Hydra), with headless Chromium's virtual authenticator: the
// ledger's passkey.registered entry and the door's statement in it name
// the person and carry who the provider says they are. The person then
// approves a passkey rule's call on its page; the call runs, and its
// call.decided carries the device's assertion and the same identity.
//
// toolgate's public URL is http://localhost:PORT (its listener is at
// 127.0.0.1:PORT): browsers make no passkey for an IP address, and the
// sign-in's cookie is the host's the browser signed in at.
func TestPasskeySignInWithHydra(t *testing.T) {
	users := map[string]*idpUser{
		"olga": {email: "olga@example.com", groups: []string{"ops", "toolgate-users"}},
	}
	port := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", port)
	base := fmt.Sprintf("http://localhost:%d", port)
	h := startHydra(t, base, users)

	dir := t.TempDir()
	policyFile, secretFile := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(policyFile, []byte(`default: allow
rules:
  - {name: pay, tool: write_file, action: ask, groups: [ops], passkey: true, timeout: 10m}
`), 0o644))
	require.NoError(t, os.WriteFile(secretFile, []byte(hydraSecret+"\n"), 0o600))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: httpAddr}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", httpAddr, "--tokens", writeTokensFile(t, dir), "--policy", policyFile,
		"--oidc-issuer", h.issuer, "--oidc-client-id", hydraClientID, "--oidc-client-secret-file", secretFile,
		"--public-url", base, "--oidc-admin-group", "toolgate-admins", "--oidc-required-group", "toolgate-users")
	require.Contains(t, d.dev.out.String(), base+"/account/passkeys", "dev's banner offers passkeys at the public URL")
	agent := apiClient{t: t, base: base, token: "token-agent-1"}
	auditor := apiClient{t: t, base: base, token: "token-audrey"}
	identity := map[string]any{"iss": h.issuer, "sub": "olga"}

	b := newBrowser(t)
	b.base = base
	ctx, authn := virtualAuthenticator(t, b, 4*stepTimeout)

	var credentialID string
	t.Run("olga signs in through Hydra and adds a passkey; the ledger names her and her identity", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Navigate(base+"/login?next=%2Faccount%2Fpasskeys"), chromedp.Click(chromedp.CSS("#sign-in-provider")))
		b.do(chromedp.WaitVisible(chromedp.CSS("#idp-user")), chromedp.SendKeys(chromedp.CSS("#idp-user"), "olga"), chromedp.Click(chromedp.CSS("#idp-go")))
		b.waitJS(`location.pathname === "/account/passkeys" && !!document.querySelector("#passkeys-empty")`, "olga's empty passkeys page, back from Hydra")
		assert.Equal(t, base+"/account/passkeys", b.location())
		assert.Contains(t, b.text(".user"), "olga@example.com")
		assert.Contains(t, evalJS[string](b, `document.querySelector("main").textContent`), "Passkeys here are for localhost")

		b.do(chromedp.SendKeys(chromedp.CSS("#passkey-name"), "laptop"), chromedp.Click(chromedp.CSS("#passkey-add-button")))
		b.waitJS(`document.querySelector("#passkeys .passkey-name")?.textContent === "laptop" &&
			document.querySelector(".notice")?.textContent === 'Added the passkey "laptop".'`, "the new passkey in olga's list")

		creds, err := chromedp.Call(ctx, cdpwebauthn.GetCredentials, cdpwebauthn.GetCredentialsParams{AuthenticatorID: authn})
		require.NoError(t, err)
		require.Len(t, creds.Credentials, 1)
		c := creds.Credentials[0]
		assert.Equal(t, "localhost", c.RpID)
		credentialID = base64.RawURLEncoding.EncodeToString(c.CredentialID)
		assert.True(t, evalJS[bool](b, `!!document.querySelector('#passkeys li[data-credential-id="`+credentialID+`"]')`), "listed by its credential ID")

		e := passkeyEntry(t, auditor, "passkey.registered", credentialID)
		require.NotNil(t, e, "a passkey.registered entry for %s", credentialID)
		assert.Equal(t, "olga@example.com", e["by"])
		assert.Equal(t, "laptop", e["name"])
		pk := e["details"].(map[string]any)["passkey"].(map[string]any)
		assert.Equal(t, "localhost", pk["rp_id"])
		assert.NotEmpty(t, pk["public_key"])
		assert.Equal(t, identity, pk["identity"], "the entry carries who Hydra says registered it")
		require.NotNil(t, e["statement"], "vouched for by the door that authenticated olga")
		raw, err := base64.StdEncoding.DecodeString(e["statement"].(map[string]any)["statement_bytes"].(string))
		require.NoError(t, err)
		var st map[string]any
		require.NoError(t, json.Unmarshal(raw, &st))
		assert.Equal(t, "register_passkey", st["kind"])
		assert.Equal(t, "olga@example.com", st["by"])
		assert.Equal(t, credentialID, st["key"], "of this credential")
		assert.Equal(t, identity, st["identity"], "the door's statement carries her identity too")
		assert.Equal(t, "inbox", st["channel"])
	})

	t.Run("olga approves a passkey rule's call on its page: it runs, and call.decided carries the assertion and her identity", func(t *testing.T) {
		require.NotEmpty(t, credentialID, "olga's passkey")
		b := b.in(t)
		r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "pk-idp", "call_id": "pk-idp-1", "tool": "write_file",
			"args": map[string]any{"path": "pk-idp-1.txt", "content": "pay 7"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/pk-idp-1", nil).body["status"] == "pending" }, 20*time.Second, 20*time.Millisecond)

		b.do(chromedp.Navigate(base + "/calls/pk-idp-1"))
		b.waitJS(`!!document.querySelector("#passkey-note")`, "the page says the rule needs a passkey")
		assert.Contains(t, evalJS[string](b, `document.querySelector("#passkey-note").textContent`), "needs your passkey")
		b.do(chromedp.Click(chromedp.CSS(`#decide button[value="approve"]`)))

		res := agent.do("GET", "/v1/calls/pk-idp-1?wait=30s", nil)
		body := res.body
		require.Equal(t, "ok", body["status"], "the call ran: %s", res.raw)
		assert.Equal(t, "olga@example.com", body["decided_by"])
		assert.Equal(t, identity, body["identity"], "the call's outcome names who Hydra says decided: %v", body)
		data, err := os.ReadFile(filepath.Join(d.workspace, "pk-idp-1.txt"))
		require.NoError(t, err)
		assert.Equal(t, "pay 7", string(data))

		var receipt ledger.Receipt
		var receiptRaw string
		require.Eventually(t, func() bool {
			r := auditor.do("GET", "/v1/audit/calls/pk-idp-1", nil)
			receipt = ledger.Receipt{}
			if r.status != http.StatusOK || json.Unmarshal([]byte(r.raw), &receipt) != nil {
				return false
			}
			receiptRaw = r.raw
			for _, pe := range receipt.Entries {
				var e ledger.Entry
				if json.Unmarshal(pe.Entry, &e) == nil && e.Kind == ledger.KindCallFinished {
					return true
				}
			}
			return false
		}, 20*time.Second, 200*time.Millisecond, "the call's receipt, through call.finished")
		var decided *ledger.Entry
		for _, pe := range receipt.Entries {
			var e ledger.Entry
			require.NoError(t, json.Unmarshal(pe.Entry, &e))
			if e.Kind == ledger.KindCallDecided {
				decided = &e
			}
		}
		require.NotNil(t, decided, "a call.decided entry")
		dec := decided.Decision
		require.NotNil(t, dec)
		assert.Equal(t, "approved", dec.Kind)
		assert.Equal(t, "olga@example.com", dec.DecidedBy)
		assert.Equal(t, "inbox", dec.Channel)
		assert.Equal(t, &ledger.Identity{Issuer: h.issuer, Subject: "olga"}, dec.Identity, "call.decided carries who Hydra says decided")
		require.NotNil(t, dec.Passkey, "call.decided carries the device's assertion")
		assert.Equal(t, credentialID, base64.RawURLEncoding.EncodeToString(dec.Passkey.CredentialID), "made by the passkey olga registered")
		var client struct{ Type, Origin string }
		require.NoError(t, json.Unmarshal(dec.Passkey.ClientDataJSON, &client))
		assert.Equal(t, "webauthn.get", client.Type)
		assert.Equal(t, base, client.Origin, "signed at toolgate's public URL")

		require.NotNil(t, dec.Statement, "the door's statement of the decision")
		var st map[string]any
		require.NoError(t, json.Unmarshal(dec.Statement.Statement, &st))
		assert.Equal(t, "decide", st["kind"])
		assert.Equal(t, "olga@example.com", st["by"])
		assert.Equal(t, identity, st["identity"], "the door's statement names her identity")
		assert.Equal(t, dec.Passkey.Digest(), st["passkey"], "and the assertion it passed on")

		require.Len(t, receipt.Passkeys, 1, "the receipt carries the passkey's registration")
		var reg ledger.Entry
		require.NoError(t, json.Unmarshal(receipt.Passkeys[0].Entry, &reg))
		assert.Equal(t, ledger.KindPasskeyRegistered, reg.Kind)
		assert.Equal(t, "olga@example.com", reg.By)

		// An auditor checks the receipt offline against the log's key:
		// the assertion against the registration's public key.
		operator := d.cli("audit", "key", "--ledger-key", filepath.Join(d.dataDir, "ledger.key"))
		require.Equal(t, 0, operator.code, operator.stderr)
		vkey := filepath.Join(t.TempDir(), "verifier.key")
		require.NoError(t, os.WriteFile(vkey, []byte(operator.stdout), 0o644))
		file := filepath.Join(t.TempDir(), "pk-idp-1.receipt")
		require.NoError(t, os.WriteFile(file, []byte(receiptRaw), 0o644))
		ok := d.cli("audit", "verify", "--receipt", file, "--key", "@"+vkey)
		require.Equal(t, 0, ok.code, ok.stdout+ok.stderr)
		assert.Contains(t, ok.stdout, "passkeys: 1 approvals verified")
	})
}
