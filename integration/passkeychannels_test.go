package integration

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rule with passkey: true over Slack and email, against the real
// `toolgate dev` with the fake Slack and the SMTP server of TestChannels:
// an approval there carries no passkey, so it is refused and answered
// with the call's inbox page, where the passkey signs it; nothing is
// recorded and the call still waits. A denial needs no passkey and works
// over Slack as ever.

const passkeyChannelsPolicy = `default: allow
rules:
  - {name: pay, tool: write_file, action: ask, passkey: true, timeout: 10m}
`

func TestPasskeyChannels(t *testing.T) {
	e, dev := newChannelsDevWith(t, passkeyChannelsPolicy)
	port := e.base[strings.LastIndex(e.base, ":")+1:]

	// The public URL is at an IP address: dev offers passkeys at
	// localhost on its port, and its worker loaded the passkey rule with
	// that origin (the ledger, which keeps the passkeys, is on).
	banner := dev.out.String()
	assert.Contains(t, banner, "passkeys   http://localhost:"+port+"/account/passkeys", banner)
	assert.NotContains(t, banner, "passkeys   off", banner)

	const id = "pk-pay-1"
	r := e.agent.do("POST", "/v1/calls?wait=100ms", map[string]any{
		"session": "pk-channels", "tool": "write_file", "call_id": id,
		"args": map[string]any{"path": "invoice.txt", "content": "pay 100 EUR"},
	})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool { return e.status(id) == "pending" }, 30*time.Second, 20*time.Millisecond)

	post := e.waitPosts(id, 1, 30*time.Second)[0]
	msgTS := e.messageTS(post)
	refusal := `needs bob's passkey (rule "pay"): approve it on the call's page in the toolgate inbox`
	// The inbox page of the call, under the public URL (or localhost, where
	// dev's passkeys are).
	pageURL := regexp.MustCompile(`http://(127\.0\.0\.1|localhost):` + port + `/calls/` + id + `\b`)

	t.Run("a Slack approval is refused with the call's inbox page; nothing is recorded", func(t *testing.T) {
		for _, action := range []string{"approve", "approve_for_session"} {
			name := id + "-" + action
			assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_BOB", action, e.slack.ResponseURL(name)), time.Now(), slackSecret))
			got := e.waitResponses(name, 1)
			require.Len(t, got, 1)
			assert.Equal(t, "ephemeral", got[0].JSON["response_type"], "only bob sees the refusal")
			text := got[0].Text()
			t.Logf("%s: Slack answered %q", action, text)
			assert.True(t, strings.HasPrefix(text, ":warning: call "+id+" "+refusal), text)
			assert.Regexp(t, pageURL, text, "the reply names the call's inbox page")
			assert.True(t, strings.HasSuffix(text, ". Nothing was recorded."), text)
		}
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, "pending", e.status(id), "the call still waits")
		assert.Empty(t, e.updates(msgTS), "the Slack message is not updated: nothing was decided")
		assert.Equal(t, []string{"waiting"}, e.hooks.Events(id), "no decision reached the webhook")
	})

	t.Run("the email approve link's page asks for the passkey; its form decides nothing", func(t *testing.T) {
		links := e.mailLinks("bob@example.com", id)
		for _, decision := range []string{"approve", "approve_for_session"} {
			status, body := page(t, "GET", links[decision], nil)
			text := html.UnescapeString(body)
			assert.Equal(t, http.StatusForbidden, status, text)
			assert.Contains(t, text, "Needs your passkey")
			assert.Contains(t, text, "call "+id+" "+refusal)
			assert.Contains(t, text, "(/calls/"+id+")", "the page names the call's inbox page")
			assert.Contains(t, text, "nothing was decided")
			assert.NotContains(t, text, `<form method="post" action="/email/decide"`, "no button to press")

			// The form is not offered; posted anyway, as a client could,
			// it decides nothing.
			status, body = page(t, "POST", e.base+"/email/decide", url.Values{"t": {token(t, links[decision])}})
			text = html.UnescapeString(body)
			t.Logf("%s: POST /email/decide answered %d: %s", decision, status, errorLine(text))
			assert.Equal(t, http.StatusForbidden, status, text)
			assert.Contains(t, text, "call "+id+" "+refusal)
			assert.Contains(t, text, "nothing was decided")
			assert.NotContains(t, text, "Approved call")
		}
		// Denying needs no passkey: the deny link still offers its form.
		status, body := page(t, "GET", links["deny"], nil)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, `<form method="post" action="/email/decide"`)

		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, "pending", e.status(id))
		assert.Empty(t, e.updates(msgTS))
		assert.Equal(t, []string{"waiting"}, e.hooks.Events(id))
	})

	t.Run("a Slack denial needs no passkey: the call ends denied", func(t *testing.T) {
		name := id + "-deny"
		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_BOB", "deny", e.slack.ResponseURL(name)), time.Now(), slackSecret))
		res := e.result(id)
		assert.Equal(t, "denied", res["status"])
		assert.Equal(t, "denied", res["decision"])
		assert.Equal(t, "bob", res["decided_by"])
		assert.Equal(t, "slack", res["channel"])
		upd := e.waitUpdate(msgTS)
		assert.Contains(t, upd.Text(), "denied by bob via slack")
		assert.NotContains(t, upd.Form.Get("blocks"), `"type":"actions"`, "the buttons are gone")
		assert.Empty(t, e.responses(name), "a decision needs no ephemeral answer")
		require.Eventually(t, func() bool { return len(e.hooks.Events(id)) >= 2 }, 30*time.Second, 20*time.Millisecond)
		assert.Equal(t, []string{"waiting", "decided"}, e.hooks.Events(id)[:2])
	})
}

// errorLine is the refusal of an email-link page, for the log.
func errorLine(page string) string {
	if m := regexp.MustCompile(`(?s)<p class="error"[^>]*>(.*?)</p>`).FindStringSubmatch(page); m != nil {
		return m[1]
	}
	return page
}
