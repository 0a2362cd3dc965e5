package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/notify/notifytest"
)

const testSigningSecret = "8f742231b10e8888abcd99yyyzzz85a5"

func testApprovers(t *testing.T) *notify.Approvers {
	a, err := notify.NewApprovers([]notify.Approver{
		{Name: "alice", Groups: []string{"ops"}, SlackUser: "U_ALICE", Email: "alice@example.com"},
		{Name: "bob", Groups: []string{"finance"}, SlackUser: "U_BOB", Email: "bob@example.com"},
	})
	require.NoError(t, err)
	return a
}

func slackServer(t *testing.T) (http.Handler, *notifytest.FakeSlack) {
	fake := notifytest.NewFakeSlack(t, "xoxb-test")
	h := New(Config{Tokens: mustTokens(t), Notify: notify.Config{
		SlackBotToken: "xoxb-test", SlackSigningSecret: testSigningSecret, SlackChannel: "#approvals",
		SlackAPIURL: fake.URL, Approvers: testApprovers(t),
	}})
	return h, fake
}

// slackRequest builds an interaction request exactly as Slack sends it: a
// form with the payload JSON, signed with v0 over "v0:ts:body".
func slackRequest(secret string, ts time.Time, payload string) *http.Request {
	body := url.Values{"payload": {payload}}.Encode()
	r := httptest.NewRequest("POST", "/slack/interactions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	stamp := strconv.FormatInt(ts.Unix(), 10)
	r.Header.Set("X-Slack-Request-Timestamp", stamp)
	r.Header.Set("X-Slack-Signature", slackSignature(secret, stamp, body))
	return r
}

// slackSignature signs as Slack does: "v0=" and the hex HMAC-SHA256 of
// "v0:<timestamp>:<body>" under the signing secret. TestVerifySlack checks
// it against the example in Slack's documentation.
func slackSignature(secret, stamp, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + stamp + ":" + body))
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

func blockActionPayload(user, callID, action, responseURL string) string {
	p := map[string]any{
		"type": "block_actions", "trigger_id": "1337.42.abcd", "response_url": responseURL,
		"user":      map[string]any{"id": user, "username": "someone", "name": "someone", "team_id": "T0001"},
		"team":      map[string]any{"id": "T0001", "domain": "example"},
		"channel":   map[string]any{"id": "C0APPROVALS", "name": "approvals"},
		"container": map[string]any{"type": "message", "message_ts": "1700000000.000001", "channel_id": "C0APPROVALS"},
		"message":   map[string]any{"type": "message", "ts": "1700000000.000001", "text": "Approval needed"},
		"actions": []any{map[string]any{
			"type": "button", "action_id": action, "block_id": "toolgate_call:" + callID, "value": callID,
			"text": map[string]any{"type": "plain_text", "text": "Approve"}, "action_ts": "1700000001.000001",
		}},
	}
	b, _ := json.Marshal(p)
	return string(b)
}

func TestSlackRefusesUnsignedForgedAndReplayedRequests(t *testing.T) {
	h, fake := slackServer(t)
	payload := blockActionPayload("U_ALICE", "call-1", "approve", fake.ResponseURL("r1"))
	now := time.Now()

	rec := serve(h, slackRequest("not the signing secret", now, payload))
	assert.Equal(t, http.StatusUnauthorized, rec.Code, "forged signature")

	rec = serve(h, slackRequest(testSigningSecret, now.Add(-6*time.Minute), payload))
	assert.Equal(t, http.StatusUnauthorized, rec.Code, "replayed old request")
	assert.Contains(t, rec.Body.String(), "too old")

	rec = serve(h, slackRequest(testSigningSecret, now.Add(6*time.Minute), payload))
	assert.Equal(t, http.StatusUnauthorized, rec.Code, "timestamp from the future")

	r := slackRequest(testSigningSecret, now, payload)
	r.Header.Del("X-Slack-Signature")
	assert.Equal(t, http.StatusUnauthorized, serve(h, r).Code, "unsigned")

	// A valid signature over a different body does not cover this one.
	r = slackRequest(testSigningSecret, now, payload)
	r.Body = io.NopCloser(strings.NewReader(url.Values{"payload": {strings.Replace(payload, "U_ALICE", "U_BOB", 1)}}.Encode()))
	assert.Equal(t, http.StatusUnauthorized, serve(h, r).Code, "body changed after signing")

	assert.Empty(t, fake.Calls(""), "nothing was done for any of them")

	rec = serve(h, slackRequest(testSigningSecret, now, "{not json"))
	assert.Equal(t, http.StatusBadRequest, rec.Code)
}

func TestSlackUnknownUserGetsAnEphemeralRefusal(t *testing.T) {
	h, fake := slackServer(t)
	rec := serve(h, slackRequest(testSigningSecret, time.Now(), blockActionPayload("U_MALLORY", "call-1", "approve", fake.ResponseURL("r1"))))
	assert.Equal(t, http.StatusOK, rec.Code)
	got := fake.WaitCalls(t, "response_url", 1, 5*time.Second)
	assert.Equal(t, "ephemeral", got[0].JSON["response_type"])
	assert.Equal(t, false, got[0].JSON["replace_original"])
	assert.Contains(t, got[0].Text(), "U_MALLORY")
	assert.Contains(t, got[0].Text(), "not in toolgate's approvers file")
	assert.Contains(t, got[0].Text(), "Nothing was recorded")
}

func TestSlackIgnoresOtherActionsAndInteractions(t *testing.T) {
	h, fake := slackServer(t)
	other := strings.Replace(blockActionPayload("U_ALICE", "call-1", "approve", fake.ResponseURL("r1")), "toolgate_call:", "someone_else:", 1)
	assert.Equal(t, http.StatusOK, serve(h, slackRequest(testSigningSecret, time.Now(), other)).Code)
	shortcut := `{"type":"shortcut","callback_id":"x","trigger_id":"1","user":{"id":"U_ALICE"}}`
	assert.Equal(t, http.StatusOK, serve(h, slackRequest(testSigningSecret, time.Now(), shortcut)).Code)
	time.Sleep(50 * time.Millisecond)
	assert.Empty(t, fake.Calls(""))
}

func reasonSubmission(user, callID, reason string) string {
	p := map[string]any{
		"type": "view_submission",
		"user": map[string]any{"id": user},
		"team": map[string]any{"id": "T0001"},
		"view": map[string]any{
			"id": "V1", "type": "modal", "callback_id": notify.SlackDenyReasonCallback,
			"private_metadata": `{"call_id":"` + callID + `","channel":"C0APPROVALS"}`,
			"state": map[string]any{"values": map[string]any{
				"reason": map[string]any{"reason": map[string]any{"type": "plain_text_input", "value": reason}},
			}},
		},
	}
	b, _ := json.Marshal(p)
	return string(b)
}

func TestSlackReasonModalSubmission(t *testing.T) {
	h, fake := slackServer(t)
	rec := serve(h, slackRequest(testSigningSecret, time.Now(), reasonSubmission("U_ALICE", "call-1", "   ")))
	assert.Equal(t, http.StatusOK, rec.Code)
	var answer map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &answer), rec.Body.String())
	assert.Equal(t, "errors", answer["response_action"], "an empty reason keeps the modal open")

	rec = serve(h, slackRequest(testSigningSecret, time.Now(), reasonSubmission("U_MALLORY", "call-1", "no")))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Empty(t, rec.Body.String(), "an empty answer closes the modal")
	got := fake.WaitCalls(t, "chat.postEphemeral", 1, 5*time.Second)
	assert.Equal(t, "C0APPROVALS", got[0].Form.Get("channel"))
	assert.Equal(t, "U_MALLORY", got[0].Form.Get("user"))
	assert.Contains(t, got[0].Text(), "not in toolgate's approvers file")
}

func TestSlackEndpointOnlyWhenConfigured(t *testing.T) {
	h := New(Config{Tokens: mustTokens(t)})
	rec := serve(h, slackRequest(testSigningSecret, time.Now(), "{}"))
	assert.NotEqual(t, http.StatusOK, rec.Code)
}

func TestVerifySlack(t *testing.T) {
	// The example from Slack's documentation: the tests sign as Slack does.
	docBody := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	require.Equal(t, "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
		slackSignature(testSigningSecret, "1531420618", docBody))

	signed := func(secret string, at time.Time, body string) http.Header {
		h := http.Header{}
		stamp := strconv.FormatInt(at.Unix(), 10)
		h.Set("X-Slack-Request-Timestamp", stamp)
		h.Set("X-Slack-Signature", slackSignature(secret, stamp, body))
		return h
	}
	now := time.Now()
	body := []byte(docBody)
	h := signed(testSigningSecret, now, docBody)
	assert.NoError(t, verifySlack([]byte(testSigningSecret), h, body, now))
	assert.NoError(t, verifySlack([]byte(testSigningSecret), h, body, now.Add(SlackMaxSkew-time.Second)), "just inside the window")
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), h, body, now.Add(SlackMaxSkew+time.Second)), errSlackStale)
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), h, body, now.Add(-SlackMaxSkew-time.Second)), errSlackStale, "from the future")
	assert.ErrorIs(t, verifySlack([]byte("other"), h, body, now), errSlackSignature)
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), h, []byte(docBody+"&x=1"), now), errSlackSignature, "body changed")

	// slack-go also checks the window against the wall clock: the
	// documentation's request, signed in 2018, is a replay today.
	doc := http.Header{}
	doc.Set("X-Slack-Request-Timestamp", "1531420618")
	doc.Set("X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), doc, body, time.Unix(1531420618, 0)), errSlackStale)

	malformed := signed(testSigningSecret, now, docBody)
	malformed.Set("X-Slack-Signature", "v0=not-hex")
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), malformed, body, now), errSlackSignature)
	malformed.Set("X-Slack-Signature", "v0=abcd")
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), malformed, body, now), errSlackSignature, "too short")
	malformed.Set("X-Slack-Signature", "v1="+strings.TrimPrefix(h.Get("X-Slack-Signature"), "v0="))
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), malformed, body, now), errSlackUnsigned, "another scheme")
	malformed = signed(testSigningSecret, now, docBody)
	malformed.Del("X-Slack-Request-Timestamp")
	assert.ErrorIs(t, verifySlack([]byte(testSigningSecret), malformed, body, now), errSlackUnsigned)
}
