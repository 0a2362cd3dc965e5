package integration

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/notify/notifytest"
)

// The notification channels against the real `toolgate dev`, with local
// peers in the test process: a fake Slack Web API, an SMTP server and a
// webhook receiver. Slack's requests are built and signed as Slack sends
// them.

const (
	slackToken     = "xoxb-integration-test"
	slackSecret    = "integration-signing-secret-0123"
	webhookSecret  = "integration-webhook-secret"
	linkSecret     = "integration-link-secret-0123456789"
	channelsPolicy = `default: ask
rules:
  - name: quick
    tool: shell
    when: args.command.startsWith('echo quick')
    action: ask
    groups: [ops]
    timeout: 3s
  - name: escalating
    tool: shell
    when: args.command.startsWith('echo escalate')
    action: ask
    message: 'Escalating {{.args.command}}'
    groups: [ops]
    remind_after: 1s
    escalate_after: 2s
    escalate_to: [finance]
    timeout: 4s
  - name: two-keys
    tool: shell
    when: args.command.startsWith('echo two')
    action: ask
    groups: [ops, finance]
    approvals: 2
    distinct_groups: true
  - name: shell
    tool: shell
    action: ask
    message: 'Run shell command {{printf "%q" .args.command}}?'
    groups: [ops]
  - name: echo
    tool: echo
    action: allow
`
	channelsApprovers = `approvers:
  - {name: alice, groups: [ops], slack_user: U_ALICE, email: alice@example.com}
  - {name: bob, groups: [finance], slack_user: U_BOB, email: bob@example.com}
`
)

// channelsEnv is a toolgate dev with every channel on, and its peers.
type channelsEnv struct {
	t     *testing.T
	base  string
	agent apiClient
	alice apiClient
	slack *notifytest.FakeSlack
	smtp  *notifytest.SMTPServer
	hooks *notifytest.WebhookReceiver
	links *notify.LinkSigner
}

func newChannelsDev(t *testing.T) *channelsEnv {
	e, _ := newChannelsDevWith(t, channelsPolicy)
	return e
}

// newChannelsDevWith is newChannelsDev's toolgate dev with another
// policy, and its process (for its banner).
func newChannelsDevWith(t *testing.T, policy string) (*channelsEnv, *proc) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	e := &channelsEnv{
		t:     t,
		slack: notifytest.NewFakeSlack(t, slackToken),
		smtp:  notifytest.NewSMTPServer(t, "", ""),
		hooks: notifytest.NewWebhookReceiver(t, webhookSecret),
	}
	links, err := notify.NewLinkSigner([]byte(linkSecret))
	require.NoError(t, err)
	e.links = links
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e.base = "http://" + httpAddr
	for k, v := range map[string]string{
		"SLACK_BOT_TOKEN":         slackToken,
		"SLACK_SIGNING_SECRET":    slackSecret,
		"SLACK_CHANNEL":           "#approvals",
		"SLACK_API_URL":           e.slack.URL,
		"SMTP_ADDR":               e.smtp.Addr,
		"SMTP_FROM":               "toolgate <toolgate@example.com>",
		"TOOLGATE_PUBLIC_URL":     e.base,
		"TOOLGATE_APPROVERS_FILE": write("approvers.yaml", channelsApprovers),
		"TOOLGATE_WEBHOOK_URLS":   e.hooks.URL,
		"TOOLGATE_WEBHOOK_SECRET": webhookSecret,
		"TOOLGATE_LINK_SECRET":    linkSecret,
	} {
		t.Setenv(k, v) // start() hands the test's environment to the binary
	}
	dev := start(t, devReady, "dev", "--data-dir", filepath.Join(dir, "data"),
		"--temporal-port", strconv.Itoa(freePort(t)), "--http", httpAddr,
		"--tokens", writeTokensFile(t, dir), "--policy", write("policy.yaml", policy))
	e.agent = apiClient{t: t, base: e.base, token: "token-agent-1"}
	e.alice = apiClient{t: t, base: e.base, token: "token-alice"}
	return e, dev
}

// submit submits a shell call and waits until it is pending.
func (e *channelsEnv) submit(session, callID, command string) {
	e.t.Helper()
	r := e.agent.do("POST", "/v1/calls?wait=100ms", map[string]any{
		"session": session, "tool": "shell", "call_id": callID, "args": map[string]any{"command": command},
	})
	require.Equal(e.t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(e.t, func() bool {
		return e.agent.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending"
	}, 30*time.Second, 20*time.Millisecond)
}

// status is the call's status now.
func (e *channelsEnv) status(callID string) string {
	s, _ := e.agent.do("GET", "/v1/calls/"+callID, nil).body["status"].(string)
	return s
}

// result waits for the call's Result.
func (e *channelsEnv) result(callID string) map[string]any {
	e.t.Helper()
	r := e.agent.do("GET", "/v1/calls/"+callID+"?wait=30s", nil)
	require.Equal(e.t, http.StatusOK, r.status, r.raw)
	return r.body
}

// posts returns the Slack messages posted about callID, in order.
func (e *channelsEnv) posts(callID string) []notifytest.SlackCall {
	var out []notifytest.SlackCall
	for _, c := range e.slack.Calls("chat.postMessage") {
		if strings.Contains(c.Form.Get("blocks"), `"toolgate_call:`+callID+`"`) {
			out = append(out, c)
		}
	}
	return out
}

// waitPosts waits for n Slack messages about callID.
func (e *channelsEnv) waitPosts(callID string, n int, timeout time.Duration) []notifytest.SlackCall {
	e.t.Helper()
	var got []notifytest.SlackCall
	require.Eventually(e.t, func() bool { got = e.posts(callID); return len(got) >= n }, timeout, 20*time.Millisecond,
		"want %d Slack messages for %s", n, callID)
	return got
}

// updates returns the chat.update calls for the message with ts.
func (e *channelsEnv) updates(ts string) []notifytest.SlackCall {
	var out []notifytest.SlackCall
	for _, c := range e.slack.Calls("chat.update") {
		if c.Form.Get("ts") == ts {
			out = append(out, c)
		}
	}
	return out
}

func (e *channelsEnv) waitUpdate(ts string) notifytest.SlackCall {
	e.t.Helper()
	var got []notifytest.SlackCall
	require.Eventually(e.t, func() bool { got = e.updates(ts); return len(got) > 0 }, 30*time.Second, 20*time.Millisecond,
		"message %s was never updated", ts)
	return got[0]
}

// messageTS is the timestamp the fake Slack answered the post with.
func (e *channelsEnv) messageTS(post notifytest.SlackCall) string {
	require.NotEmpty(e.t, post.TS)
	return post.TS
}

// responses returns what was posted to the response URL named name.
func (e *channelsEnv) responses(name string) []notifytest.SlackCall { return e.slack.Responses(name) }

// waitResponses waits for n posts to the response URL named name.
func (e *channelsEnv) waitResponses(name string, n int) []notifytest.SlackCall {
	e.t.Helper()
	var got []notifytest.SlackCall
	require.Eventually(e.t, func() bool { got = e.responses(name); return len(got) >= n }, 30*time.Second, 20*time.Millisecond,
		"want %d answers at response URL %s", n, name)
	return got
}

// slackPost sends a signed interaction, as Slack does, and returns the
// status.
func (e *channelsEnv) slackPost(payload map[string]any, at time.Time, secret string) int {
	e.t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(e.t, err)
	body := url.Values{"payload": {string(raw)}}.Encode()
	req, err := http.NewRequest("POST", e.base+"/slack/interactions", strings.NewReader(body))
	require.NoError(e.t, err)
	stamp := strconv.FormatInt(at.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + stamp + ":" + body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	req.Header.Set("X-Slack-Request-Timestamp", stamp)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(m.Sum(nil)))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	assert.Less(e.t, time.Since(start), 3*time.Second, "Slack needs an answer within 3 seconds")
	return resp.StatusCode
}

// click is a block_actions payload as Slack sends it when user presses a
// button of the posted message.
func click(post notifytest.SlackCall, ts, user, action, responseURL string) map[string]any {
	var blocks []any
	_ = json.Unmarshal([]byte(post.Form.Get("blocks")), &blocks)
	var blockID, value string
	for _, b := range blocks {
		if m := b.(map[string]any); m["type"] == "actions" {
			blockID = m["block_id"].(string)
			for _, el := range m["elements"].([]any) {
				if el.(map[string]any)["action_id"] == action {
					value = el.(map[string]any)["value"].(string)
				}
			}
		}
	}
	return map[string]any{
		"type":       "block_actions",
		"user":       map[string]any{"id": user, "username": strings.ToLower(user), "name": strings.ToLower(user), "team_id": "T0TEAM"},
		"api_app_id": "A0TOOLGATE",
		"token":      "verification-token-unused",
		"container":  map[string]any{"type": "message", "message_ts": ts, "channel_id": "C0APPROVALS", "is_ephemeral": false},
		"trigger_id": "1234567890.0987654321.abcdef" + user,
		"team":       map[string]any{"id": "T0TEAM", "domain": "example"},
		"enterprise": nil, "is_enterprise_install": false,
		"channel":      map[string]any{"id": "C0APPROVALS", "name": "approvals"},
		"message":      map[string]any{"type": "message", "user": "U0BOT", "ts": ts, "bot_id": "B0BOT", "text": post.Form.Get("text"), "blocks": blocks},
		"state":        map[string]any{"values": map[string]any{}},
		"response_url": responseURL,
		"actions": []any{map[string]any{
			"action_id": action, "block_id": blockID, "value": value, "type": "button", "action_ts": "1700000999.000001",
			"text": map[string]any{"type": "plain_text", "text": action, "emoji": true},
		}},
	}
}

// submission is the view_submission Slack sends when user submits the
// reason modal that views.open opened.
func submission(view map[string]any, user, reason string) map[string]any {
	v := map[string]any{
		"id": "V0MODAL", "team_id": "T0TEAM", "type": "modal", "blocks": view["blocks"],
		"private_metadata": view["private_metadata"], "callback_id": view["callback_id"],
		"state": map[string]any{"values": map[string]any{
			"reason": map[string]any{"reason": map[string]any{"type": "plain_text_input", "value": reason}},
		}},
		"hash": "1700000000.abc", "title": view["title"], "submit": view["submit"], "close": view["close"],
		"previous_view_id": nil, "root_view_id": "V0MODAL", "app_id": "A0TOOLGATE", "bot_id": "B0BOT",
	}
	return map[string]any{
		"type":       "view_submission",
		"team":       map[string]any{"id": "T0TEAM", "domain": "example"},
		"user":       map[string]any{"id": user, "username": strings.ToLower(user), "name": strings.ToLower(user), "team_id": "T0TEAM"},
		"api_app_id": "A0TOOLGATE", "token": "verification-token-unused", "trigger_id": "1234.5678.modal",
		"view": v, "response_urls": []any{}, "is_enterprise_install": false, "enterprise": nil,
	}
}

var decideLink = regexp.MustCompile(`http://[^\s"<>]+/email/decide\?t=[A-Za-z0-9_.%-]+`)

// mailLinks returns the decision links of the last message to addr about
// callID, by decision.
func (e *channelsEnv) mailLinks(addr, callID string) map[string]string {
	e.t.Helper()
	var text string
	require.Eventually(e.t, func() bool {
		for _, m := range e.smtp.MailsTo(addr) {
			h, parts, err := m.Parts()
			if err == nil && h.Get("X-Toolgate-Call") == callID {
				text = parts["text/plain"]
				return strings.Contains(parts["text/html"], callID)
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "no email to %s about %s", addr, callID)
	out := map[string]string{}
	for _, l := range decideLink.FindAllString(text, -1) {
		u, err := url.Parse(l)
		require.NoError(e.t, err)
		c, err := e.links.Verify(u.Query().Get("t"), time.Now())
		require.NoError(e.t, err)
		out[c.Decision] = l
	}
	require.Len(e.t, out, 4, "one link per decision:\n%s", text)
	return out
}

// page fetches or posts an email-link page.
func page(t *testing.T, method, u string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func token(t *testing.T, link string) string {
	u, err := url.Parse(link)
	require.NoError(t, err)
	return u.Query().Get("t")
}

func TestChannels(t *testing.T) {
	e := newChannelsDev(t)

	t.Run("a Slack click approves as the approver it maps to", func(t *testing.T) {
		e.submit("ch-slack", "sl-1", "echo sl-1")
		post := e.waitPosts("sl-1", 1, 30*time.Second)[0]
		assert.Equal(t, "#approvals", post.Form.Get("channel"))
		assert.Contains(t, post.AllText(), `Run shell command "echo sl-1"?`)
		msgTS := e.messageTS(post)

		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_ALICE", "approve", e.slack.ResponseURL("sl-1")), time.Now(), slackSecret))
		r := e.result("sl-1")
		assert.Equal(t, "ok", r["status"])
		assert.Equal(t, "approved", r["decision"])
		assert.Equal(t, "alice", r["decided_by"])
		assert.Equal(t, "slack", r["channel"])

		upd := e.waitUpdate(msgTS)
		assert.Equal(t, "C0APPROVALS", upd.Form.Get("channel"))
		assert.Contains(t, upd.Text(), "approved by alice via slack")
		assert.NotContains(t, upd.Form.Get("blocks"), `"type":"actions"`, "the buttons are gone")
		time.Sleep(300 * time.Millisecond)
		assert.Len(t, e.updates(msgTS), 1, "one update per message: the workflow's")
		assert.Empty(t, e.responses("sl-1"), "a decision needs no ephemeral answer")

		// The webhook saw the whole life of the call, every delivery signed.
		require.Eventually(t, func() bool { return len(e.hooks.Events("sl-1")) >= 3 }, 30*time.Second, 20*time.Millisecond)
		assert.Equal(t, []string{"waiting", "decided", "executed"}, e.hooks.Events("sl-1"))
		for _, d := range e.hooks.Deliveries() {
			assert.True(t, d.Verified, "delivery %s %s: %v", d.Event.CallID, d.Event.Event, d.Err)
		}
		for _, d := range e.hooks.Deliveries() {
			if d.Event.CallID == "sl-1" && d.Event.Event == "decided" {
				assert.Equal(t, "alice", d.Event.DecidedBy)
				assert.Equal(t, "slack", d.Event.Channel)
			}
		}
	})

	t.Run("forged and replayed Slack requests change nothing", func(t *testing.T) {
		e.submit("ch-slack", "sl-2", "echo sl-2")
		post := e.waitPosts("sl-2", 1, 30*time.Second)[0]
		msgTS := e.messageTS(post)
		approve := click(post, msgTS, "U_ALICE", "approve", e.slack.ResponseURL("sl-2"))

		assert.Equal(t, http.StatusUnauthorized, e.slackPost(approve, time.Now(), "a forged signing secret"))
		assert.Equal(t, http.StatusUnauthorized, e.slackPost(approve, time.Now().Add(-10*time.Minute), slackSecret), "a replayed old request")
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, "pending", e.status("sl-2"))
		assert.Empty(t, e.responses("sl-2"))
	})

	t.Run("someone who may not decide gets an ephemeral refusal", func(t *testing.T) {
		post := e.waitPosts("sl-2", 1, 30*time.Second)[0]
		msgTS := e.messageTS(post)

		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_MALLORY", "approve", e.slack.ResponseURL("sl-2-mallory")), time.Now(), slackSecret))
		got := e.waitResponses("sl-2-mallory", 1)
		assert.Equal(t, "ephemeral", got[0].JSON["response_type"])
		assert.Contains(t, got[0].Text(), "U_MALLORY")
		assert.Contains(t, got[0].Text(), "not in toolgate's approvers file")

		// Bob is an approver, but of finance; the call is asked of ops.
		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_BOB", "approve", e.slack.ResponseURL("sl-2-bob")), time.Now(), slackSecret))
		got = e.waitResponses("sl-2-bob", 1)
		assert.Equal(t, "ephemeral", got[0].JSON["response_type"])
		assert.Contains(t, got[0].Text(), "bob may not decide call sl-2: it is asked of ops; their groups: finance. Nothing was recorded.")

		assert.Equal(t, "pending", e.status("sl-2"))
		assert.Empty(t, e.updates(msgTS))
	})

	t.Run("deny with reason: modal, submission, denied_with_reason", func(t *testing.T) {
		post := e.waitPosts("sl-2", 1, 30*time.Second)[0]
		msgTS := e.messageTS(post)
		before := len(e.slack.Calls("views.open"))
		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_ALICE", "deny_with_reason", e.slack.ResponseURL("sl-2-modal")), time.Now(), slackSecret))
		opens := e.slack.WaitCalls(t, "views.open", before+1, 10*time.Second)
		open := opens[len(opens)-1]
		assert.Equal(t, "1234567890.0987654321.abcdefU_ALICE", open.JSON["trigger_id"])
		view := open.JSON["view"].(map[string]any)
		assert.Contains(t, view["private_metadata"], `"call_id":"sl-2"`)
		assert.Equal(t, "pending", e.status("sl-2"), "opening the modal decides nothing")

		assert.Equal(t, http.StatusOK, e.slackPost(submission(view, "U_ALICE", "use the staging database"), time.Now(), slackSecret))
		r := e.result("sl-2")
		assert.Equal(t, "denied", r["status"])
		assert.Equal(t, "denied_with_reason", r["decision"])
		assert.Equal(t, "use the staging database", r["reason"])
		assert.Equal(t, "alice", r["decided_by"])
		assert.Equal(t, "slack", r["channel"])
		upd := e.waitUpdate(msgTS)
		assert.Contains(t, upd.AllText(), "use the staging database")
	})

	t.Run("a decision in the API updates the Slack message; a later click is refused", func(t *testing.T) {
		e.submit("ch-slack", "sl-3", "echo sl-3")
		post := e.waitPosts("sl-3", 1, 30*time.Second)[0]
		msgTS := e.messageTS(post)
		r := e.alice.do("POST", "/v1/calls/sl-3/decision", map[string]any{"decision": "deny", "reason": "not now"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		upd := e.waitUpdate(msgTS)
		assert.Contains(t, upd.Text(), "denied with reason by alice via api")
		assert.NotContains(t, upd.Form.Get("blocks"), `"type":"actions"`)

		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_ALICE", "approve", e.slack.ResponseURL("sl-3-late")), time.Now(), slackSecret))
		got := e.waitResponses("sl-3-late", 1)
		assert.Contains(t, got[0].Text(), "already decided: denied_with_reason by alice via api")
		assert.Equal(t, "denied", e.result("sl-3")["status"])
	})

	t.Run("four eyes: the clicked message shows the count, the second click decides", func(t *testing.T) {
		e.submit("ch-four", "fe-sl", "echo two fe-sl")
		post := e.waitPosts("fe-sl", 1, 30*time.Second)[0]
		msgTS := e.messageTS(post)
		assert.Contains(t, post.AllText(), "2 people must approve (four eyes)")

		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_ALICE", "approve", e.slack.ResponseURL("fe-sl-alice")), time.Now(), slackSecret))
		assert.Contains(t, e.waitResponses("fe-sl-alice", 1)[0].Text(), "Approval recorded: 1 of 2 approvals")
		counted := e.waitUpdate(msgTS)
		assert.Contains(t, counted.AllText(), "1 of 2 approvals: alice via slack for ops; waiting for another approver")
		assert.Contains(t, counted.Form.Get("blocks"), `"type":"actions"`, "the buttons stay for the second approver")
		assert.Equal(t, "pending", e.status("fe-sl"))

		assert.Equal(t, http.StatusOK, e.slackPost(click(post, msgTS, "U_BOB", "approve", e.slack.ResponseURL("fe-sl-bob")), time.Now(), slackSecret))
		r := e.result("fe-sl")
		assert.Equal(t, "ok", r["status"])
		assert.Equal(t, "bob", r["decided_by"])
		require.Eventually(t, func() bool { return len(e.updates(msgTS)) >= 2 }, 30*time.Second, 20*time.Millisecond)
		final := e.updates(msgTS)[len(e.updates(msgTS))-1]
		assert.Contains(t, final.Text(), "approved by bob via slack")
		assert.NotContains(t, final.Form.Get("blocks"), `"type":"actions"`)
	})

	t.Run("a timeout updates the Slack message", func(t *testing.T) {
		e.submit("ch-timeout", "to-1", "echo quick to-1")
		post := e.waitPosts("to-1", 1, 30*time.Second)[0]
		upd := e.waitUpdate(e.messageTS(post))
		assert.Contains(t, upd.Text(), "timed out")
		assert.Equal(t, "timed_out", e.result("to-1")["status"])
		require.Eventually(t, func() bool { return len(e.hooks.Events("to-1")) >= 2 }, 30*time.Second, 20*time.Millisecond)
		assert.Equal(t, []string{"waiting", "timed_out"}, e.hooks.Events("to-1"))
	})

	t.Run("reminders and escalation", func(t *testing.T) {
		e.submit("ch-escalate", "esc-1", "echo escalate esc-1")
		require.Eventually(t, func() bool { return e.result("esc-1")["status"] == "timed_out" }, 30*time.Second, 100*time.Millisecond)
		posts := e.waitPosts("esc-1", 3, 10*time.Second)
		var kinds []string
		for _, p := range posts {
			switch text := p.Text(); {
			case strings.HasPrefix(text, "Approval needed"):
				kinds = append(kinds, "waiting")
			case strings.HasPrefix(text, "Reminder"):
				kinds = append(kinds, "reminder")
			case strings.HasPrefix(text, "Escalated to finance"):
				kinds = append(kinds, "escalation")
				assert.Contains(t, p.AllText(), "finance may now decide this call too")
			default:
				t.Errorf("unexpected message %q", text)
			}
		}
		assert.Equal(t, "waiting", kinds[0])
		assert.Contains(t, kinds, "reminder")
		assert.Contains(t, kinds, "escalation")
		for _, p := range posts {
			upd := e.waitUpdate(e.messageTS(p))
			assert.Contains(t, upd.Text(), "timed out", "every message of the call shows the outcome")
		}
		// The escalation also mailed finance.
		found := false
		for _, m := range e.smtp.MailsTo("bob@example.com") {
			if h, parts, err := m.Parts(); err == nil && h.Get("X-Toolgate-Call") == "esc-1" {
				found = found || strings.Contains(parts["text/plain"], "finance may now decide this call too")
			}
		}
		assert.True(t, found, "bob (finance) got the escalation email")
	})

	t.Run("email: GET shows, POST decides, once", func(t *testing.T) {
		e.submit("ch-mail", "em-1", "echo em-1")
		links := e.mailLinks("alice@example.com", "em-1")
		for _, m := range e.smtp.MailsTo("bob@example.com") {
			h, _, err := m.Parts()
			require.NoError(t, err)
			assert.NotEqual(t, "em-1", h.Get("X-Toolgate-Call"), "the call is asked of ops: bob (finance) is not mailed")
		}

		status, body := page(t, "GET", links["approve"], nil)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, "em-1")
		assert.Contains(t, body, "echo em-1")
		assert.Contains(t, body, `<form method="post" action="/email/decide"`)
		assert.Contains(t, body, "alice")
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, "pending", e.status("em-1"), "a GET (a mail scanner) decides nothing")

		status, body = page(t, "POST", e.base+"/email/decide", url.Values{"t": {token(t, links["approve"])}})
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, "Approved call em-1 as alice")
		r := e.result("em-1")
		assert.Equal(t, "ok", r["status"])
		assert.Equal(t, "alice", r["decided_by"])
		assert.Equal(t, "email", r["channel"])

		status, body = page(t, "POST", e.base+"/email/decide", url.Values{"t": {token(t, links["approve"])}})
		assert.Equal(t, http.StatusConflict, status)
		assert.Contains(t, body, "already decided")
		status, body = page(t, "POST", e.base+"/email/decide", url.Values{"t": {token(t, links["deny"])}})
		assert.Equal(t, http.StatusConflict, status, "another link for a decided call")
		assert.Contains(t, body, "already decided: approved by alice via email")
		status, _ = page(t, "GET", links["deny"], nil)
		assert.Equal(t, http.StatusConflict, status)
	})

	t.Run("email: deny with a reason; expired and tampered links change nothing", func(t *testing.T) {
		e.submit("ch-mail", "em-2", "echo em-2")
		links := e.mailLinks("alice@example.com", "em-2")

		expired, err := e.links.Sign("em-2", "alice@example.com", "approve", time.Now().Add(-time.Minute))
		require.NoError(t, err)
		status, body := page(t, "POST", e.base+"/email/decide", url.Values{"t": {expired}})
		assert.Equal(t, http.StatusGone, status)
		assert.Contains(t, body, "This link expired")

		tampered := strings.Replace(token(t, links["deny"]), ".", ".x", 1)
		status, body = page(t, "POST", e.base+"/email/decide", url.Values{"t": {tampered}})
		assert.Equal(t, http.StatusBadRequest, status)
		assert.Contains(t, body, "nothing was decided")
		forgedForBob, err := notify.NewLinkSigner([]byte("not the toolgate link secret!!"))
		require.NoError(t, err)
		forged, err := forgedForBob.Sign("em-2", "alice@example.com", "approve", time.Now().Add(time.Hour))
		require.NoError(t, err)
		status, _ = page(t, "POST", e.base+"/email/decide", url.Values{"t": {forged}})
		assert.Equal(t, http.StatusBadRequest, status)
		assert.Equal(t, "pending", e.status("em-2"))

		status, body = page(t, "GET", links["deny"], nil)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, `name="reason"`)
		status, body = page(t, "POST", e.base+"/email/decide", url.Values{"t": {token(t, links["deny"])}, "reason": {"wrong host"}})
		require.Equal(t, http.StatusOK, status, body)
		r := e.result("em-2")
		assert.Equal(t, "denied", r["status"])
		assert.Equal(t, "denied_with_reason", r["decision"])
		assert.Equal(t, "wrong host", r["reason"])
		assert.Equal(t, "email", r["channel"])
	})
}
