package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/passkeytest"
)

// TestPasskeyApprovals runs a rule with passkey: true on the real
// `toolgate dev`: bob registers a passkey with headless Chromium's virtual
// authenticator, approves calls on their inbox pages (his device signs
// each decision), and every other way in is refused, named: a door's word
// alone, an assertion for another call or other arguments, a replay, an
// expired one, one without user verification, one whose counter went
// back, and one for another person.
func TestPasskeyApprovals(t *testing.T) {
	d := startDevWithPolicy(t, `
default: allow
rules:
  - {name: pay-twice, tool: write_file, when: args.path.startsWith("four"), action: ask, groups: [ops], approvals: 2, passkey: true, timeout: 10m}
  - {name: pay, tool: write_file, action: ask, passkey: true, timeout: 10m}
`)
	port := d.httpAddr[strings.LastIndex(d.httpAddr, ":")+1:]
	origin := "http://localhost:" + port
	as := func(name string) apiClient { return apiClient{t: t, base: origin, token: "token-" + name} }
	agent, bob, alice, auditor := as("agent-1"), as("bob"), as("alice"), as("audrey")

	b, ctx, authn := passkeyBrowser(t, origin, "bob")
	b.keepScreenshot("passkeys-account.png")

	// device is bob's passkey outside the browser: its key, as the virtual
	// authenticator holds it, signing where a company's own UI would.
	device := func(t *testing.T) *passkeytest.Authenticator {
		creds, err := chromedp.Call(ctx, cdpwebauthn.GetCredentials, cdpwebauthn.GetCredentialsParams{AuthenticatorID: authn})
		require.NoError(t, err)
		require.Len(t, creds.Credentials, 1)
		c := creds.Credentials[0]
		a, err := passkeytest.FromPKCS8(c.CredentialID, c.PrivateKey, uint32(c.SignCount))
		require.NoError(t, err)
		return a
	}
	submit := func(t *testing.T, id, content string) {
		r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "pk", "call_id": id, "tool": "write_file",
			"args": map[string]any{"path": id + ".txt", "content": content}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/"+id, nil).body["status"] == "pending" }, 20*time.Second, 20*time.Millisecond)
	}
	finished := func(t *testing.T, id string) map[string]any {
		var body map[string]any
		require.Eventually(t, func() bool {
			// With wait, the final result: a call that says ok while it
			// finishes answers in its waiting shape without it.
			body = agent.do("GET", "/v1/calls/"+id+"?wait=10s", nil).body
			return body["status"] == "ok"
		}, 30*time.Second, 50*time.Millisecond, "call %s ran", id)
		return body
	}
	challenge := func(t *testing.T, id string, decision map[string]any) (passkey.Decision, time.Time) {
		r := bob.do("POST", "/v1/calls/"+id+"/passkey-challenge", decision)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		var ch struct {
			Challenge string           `json:"challenge"`
			Expires   time.Time        `json:"expires"`
			RPID      string           `json:"rp_id"`
			Decision  passkey.Decision `json:"decision"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.raw), &ch))
		assert.Equal(t, "localhost", ch.RPID)
		assert.Equal(t, base64.RawURLEncoding.EncodeToString(passkey.Challenge(ch.Decision)), ch.Challenge, "the challenge is the decision's digest")
		return ch.Decision, ch.Expires
	}
	decide := func(as apiClient, id string, a *passkey.Assertion, expires time.Time) apiResponse {
		return as.do("POST", "/v1/calls/"+id+"/decision", map[string]any{"decision": "approve",
			"webauthn": map[string]any{"credential": json.RawMessage(passkeytest.BrowserJSON(a)), "expires": expires}})
	}

	t.Run("a door's word alone does not approve", func(t *testing.T) {
		submit(t, "pk-door", "pay 1")
		r := bob.do("POST", "/v1/calls/pk-door/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, r.raw)
		assert.Equal(t, "passkey_required", r.errorCode())
		assert.Contains(t, r.errorMessage(), "needs bob's passkey")
		assert.Contains(t, r.errorMessage(), "inbox")
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/pk-door", nil).body["status"], "nothing ran")
		bulk := bob.do("POST", "/v1/decisions", map[string]any{"decisions": []map[string]any{{"call_id": "pk-door", "decision": "approve"}}})
		assert.Equal(t, http.StatusConflict, bulk.status, "a bulk without assertions is refused whole: %s", bulk.raw)
		assert.Contains(t, bulk.raw, "passkey")
	})

	t.Run("approve on the call's page", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Navigate(b.base + "/calls/pk-door"))
		b.waitJS(`!!document.querySelector("#passkey-note")`, "the page says the rule needs a passkey")
		assert.Contains(t, evalJS[string](b, `document.querySelector("#passkey-note").textContent`), "needs your passkey")
		b.keepScreenshot("passkey-approve.png")
		b.do(chromedp.Click(chromedp.CSS(`#decide button[value="approve"]`)))
		body := finished(t, "pk-door")
		assert.Equal(t, "bob", body["decided_by"])
		data, err := os.ReadFile(filepath.Join(d.workspace, "pk-door.txt"))
		require.NoError(t, err)
		assert.Equal(t, "pay 1", string(data))
	})

	t.Run("approve with edits: the passkey signs the edited arguments", func(t *testing.T) {
		submit(t, "pk-edit", "pay 100")
		b := b.in(t)
		b.do(chromedp.Navigate(b.base+"/calls/pk-edit"), chromedp.Click(chromedp.CSS("details.edit summary")))
		b.waitJS(`!!document.querySelector("#edited-args")`, "the editor")
		b.do(chromedp.SetValue(chromedp.CSS("#edited-args"), `{"path": "pk-edit.txt", "content": "pay 10"}`),
			chromedp.Click(chromedp.CSS(`#decide button[value="approve_edited"]`)))
		finished(t, "pk-edit")
		data, err := os.ReadFile(filepath.Join(d.workspace, "pk-edit.txt"))
		require.NoError(t, err)
		assert.Equal(t, "pay 10", string(data), "the edited arguments ran")
	})

	t.Run("four eyes: two people, two authenticators", func(t *testing.T) {
		a, _, _ := passkeyBrowser(t, origin, "alice")
		submit(t, "four-1", "pay 1000")
		approveOnPage := func(b *browserTab, who string) {
			b.do(chromedp.Navigate(b.base + "/calls/four-1"))
			b.waitJS(`!!document.querySelector("#passkey-note")`, who+"'s page of the call")
			b.do(chromedp.Click(chromedp.CSS(`#decide button[value="approve"]`)))
		}
		approveOnPage(b.in(t), "bob")
		require.Eventually(t, func() bool {
			ap, _ := agent.do("GET", "/v1/calls/four-1", nil).body["approvals"].(map[string]any)
			given, _ := ap["given"].([]any)
			return len(given) == 1
		}, 30*time.Second, 50*time.Millisecond, "bob's approval counted")
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/four-1", nil).body["status"], "one of two: it waits")
		approveOnPage(a.in(t), "alice")
		finished(t, "four-1")
		r := auditor.do("GET", "/v1/audit/calls/four-1", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, 2, strings.Count(r.raw, `"authenticator_data"`)-1, "each approval carries its own assertion (the last is also the decision's): %s", r.raw)
	})

	// From here bob's passkey also signs outside the browser, as a
	// company's own UI would; its counter moves on there.
	var used *passkey.Assertion
	var usedExpires time.Time
	var outside *passkeytest.Authenticator // bob's passkey signing outside the browser
	t.Run("an assertion made in a company's own UI, over the API", func(t *testing.T) {
		submit(t, "pk-api", "pay 2")
		dec, expires := challenge(t, "pk-api", map[string]any{"decision": "approve"})
		outside = device(t)
		used, usedExpires = outside.Assert(dec, "localhost", origin), expires
		r := decide(bob, "pk-api", used, expires)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		finished(t, "pk-api")
	})

	t.Run("a bulk of passkey calls: one assertion per call", func(t *testing.T) {
		require.NotNil(t, outside)
		dev := outside
		var items []map[string]any
		for _, id := range []string{"pk-bulk-1", "pk-bulk-2"} {
			submit(t, id, "pay 5")
			dec, expires := challenge(t, id, map[string]any{"decision": "approve"})
			items = append(items, map[string]any{"call_id": id, "decision": "approve",
				"webauthn": map[string]any{"credential": json.RawMessage(passkeytest.BrowserJSON(dev.Assert(dec, "localhost", origin))), "expires": expires}})
		}
		r := bob.do("POST", "/v1/decisions", map[string]any{"decisions": items})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.NotContains(t, r.raw, `"error"`)
		finished(t, "pk-bulk-1")
		finished(t, "pk-bulk-2")
	})

	t.Run("refused, each named, and nothing runs", func(t *testing.T) {
		submit(t, "pk-no", "pay 3")
		dec, expires := challenge(t, "pk-no", map[string]any{"decision": "approve"})
		require.NotNil(t, outside)
		dev := outside
		otherArgs := dec
		otherArgs.Args = "sha256:" + strings.Repeat("0", 64)
		expired := dec
		expired.Expires = time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
		noUV := device(t)
		noUV.NoUV = true
		back := device(t)
		back.Count = 0
		for _, c := range []struct {
			name, want string
			as         apiClient
			a          *passkey.Assertion
			expires    time.Time
		}{
			{"another call's (a replay of pk-api's)", "another decision", bob, used, usedExpires},
			{"other arguments", "another decision", bob, dev.Assert(otherArgs, "localhost", origin), expires},
			{"expired", "expired", bob, dev.Assert(expired, "localhost", origin), expired.Expires},
			{"without user verification", "did not verify the user", bob, noUV.Assert(dec, "localhost", origin), expires},
			{"a counter that went back", "sign counter went back", bob, back.Assert(dec, "localhost", origin), expires},
			{"bob's passkey for alice's approval", "not a passkey registered to alice", alice, dev.Assert(dec, "localhost", origin), expires},
		} {
			r := decide(c.as, "pk-no", c.a, c.expires)
			assert.Equal(t, http.StatusForbidden, r.status, "%s: %s", c.name, r.raw)
			assert.Equal(t, "passkey_refused", r.errorCode(), c.name)
			assert.Contains(t, r.errorMessage(), c.want, c.name)
		}
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/pk-no", nil).body["status"], "nothing ran")
		_, err := os.Stat(filepath.Join(d.workspace, "pk-no.txt"))
		assert.True(t, os.IsNotExist(err), "the tool never ran")
	})

	t.Run("a removed passkey approves nothing", func(t *testing.T) {
		require.NotNil(t, outside)
		submit(t, "pk-removed", "pay 4")
		b := b.in(t)
		id := base64.RawURLEncoding.EncodeToString(outside.ID)
		b.do(chromedp.Navigate(b.base+"/account/passkeys"), chromedp.Click(chromedp.CSS(`#passkeys li[data-credential-id="`+id+`"] button`)))
		b.waitJS(`!!document.querySelector("#passkeys-empty")`, "bob's passkey removed")
		dec, expires := challenge(t, "pk-removed", map[string]any{"decision": "approve"})
		r := decide(bob, "pk-removed", outside.Assert(dec, "localhost", origin), expires)
		assert.Equal(t, http.StatusForbidden, r.status, r.raw)
		assert.Equal(t, "passkey_refused", r.errorCode())
		assert.Contains(t, r.errorMessage(), "removed")
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/pk-removed", nil).body["status"], "nothing ran")
	})

	t.Run("the CLI's approval is refused, naming the passkey", func(t *testing.T) {
		r := d.cli("approve", "pk-no", "--by", "bob")
		assert.NotEqual(t, 0, r.code, r.stdout)
		assert.Contains(t, r.stderr, "needs bob's passkey")
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/pk-no", nil).body["status"])
	})

	t.Run("a receipt proves the passkey approval offline, and one changed byte breaks it", func(t *testing.T) {
		operator := d.cli("audit", "key", "--ledger-key", filepath.Join(d.dataDir, "ledger.key"))
		require.Equal(t, 0, operator.code, operator.stderr)
		vkey := filepath.Join(t.TempDir(), "verifier.key")
		require.NoError(t, os.WriteFile(vkey, []byte(operator.stdout), 0o644))
		r := auditor.do("GET", "/v1/audit/calls/pk-api", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		receipt := filepath.Join(t.TempDir(), "pk-api.receipt")
		require.NoError(t, os.WriteFile(receipt, []byte(r.raw), 0o644))
		ok := d.cli("audit", "verify", "--receipt", receipt, "--key", "@"+vkey)
		require.Equal(t, 0, ok.code, ok.stderr)
		assert.Contains(t, ok.stdout, "passkeys: 1 approvals verified", "the assertion is checked against the registration the receipt carries")

		// One byte of the signature the device made, changed.
		sig := base64.StdEncoding.EncodeToString(used.Signature)
		flipped := append([]byte(nil), used.Signature...)
		flipped[len(flipped)-1] ^= 1
		require.Contains(t, r.raw, sig)
		tampered := filepath.Join(t.TempDir(), "tampered.receipt")
		require.NoError(t, os.WriteFile(tampered, []byte(strings.Replace(r.raw, sig, base64.StdEncoding.EncodeToString(flipped), 1)), 0o644))
		bad := d.cli("audit", "verify", "--receipt", tampered, "--key", "@"+vkey)
		assert.Equal(t, 1, bad.code, bad.stdout)
		assert.Contains(t, bad.stderr, "was changed")
	})

	t.Run("the ledger keeps each assertion", func(t *testing.T) {
		r := auditor.do("GET", "/v1/audit/calls/pk-api", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Contains(t, r.raw, `"passkey_rule":true`)
		assert.Contains(t, r.raw, `"authenticator_data"`)
		assert.Contains(t, r.raw, `"passkeys"`, "the receipt carries the passkey's registration")
	})
}

// passkeyBrowser is a Chromium of its own with a virtual authenticator
// (user verification included), signed in to the inbox at origin as who,
// who has registered a passkey named "laptop" there.
func passkeyBrowser(t *testing.T, origin, who string) (*browserTab, context.Context, cdpwebauthn.AuthenticatorID) {
	b := newBrowser(t)
	b.base = origin
	ctx, authn := virtualAuthenticator(t, b, 2*stepTimeout)
	b.do(chromedp.Navigate(b.base+"/login?next=%2Faccount%2Fpasskeys"), chromedp.SendKeys(chromedp.CSS("#token"), "token-"+who), chromedp.Click(chromedp.CSS("#login button")))
	b.waitJS(`location.pathname === "/account/passkeys" && !!document.querySelector("#passkeys-empty")`, who+"'s passkeys page")
	// A wait on chromedp's own view of the new page (as the inbox tests
	// sign in): the script's wait alone left chromedp acting on the login
	// page's nodes now and then ("Could not find node with given id").
	b.do(chromedp.WaitVisible(chromedp.CSS("#passkey-name")))
	b.do(chromedp.SendKeys(chromedp.CSS("#passkey-name"), "laptop"), chromedp.Click(chromedp.CSS("#passkey-add-button")))
	b.waitJS(`document.querySelector("#passkeys .passkey-name")?.textContent === "laptop"`, who+"'s passkey")
	return b, ctx, authn
}

// virtualAuthenticator gives b's Chromium a CDP virtual authenticator that
// verifies its user (CTAP2, internal, resident keys), and returns a
// context for CDP calls that lasts timeout, and the authenticator's ID.
func virtualAuthenticator(t *testing.T, b *browserTab, timeout time.Duration) (context.Context, cdpwebauthn.AuthenticatorID) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	t.Cleanup(cancel)
	_, err := chromedp.Call(ctx, cdpwebauthn.Enable, cdpwebauthn.EnableParams{})
	require.NoError(t, err)
	authn, err := chromedp.Call(ctx, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{Options: &cdpwebauthn.VirtualAuthenticatorOptions{
		Protocol: cdpwebauthn.AuthenticatorProtocolCtap2, Transport: cdpwebauthn.AuthenticatorTransportInternal,
		HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
	}})
	require.NoError(t, err)
	return ctx, authn.AuthenticatorID
}
