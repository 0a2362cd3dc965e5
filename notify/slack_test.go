package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/notify/notifytest"
	"github.com/toolgate/toolgate/policy"
)

var deadline = time.Date(2026, 5, 1, 13, 0, 0, 0, time.UTC)

func notice(kind activities.NoticeKind, seq int, groups ...string) activities.Notice {
	return activities.Notice{
		Kind: kind, Seq: seq, Groups: groups, Deadline: deadline,
		Call: policy.Call{ID: "call-42", Session: "sess-1", Tool: "shell", Requester: "agent-1",
			Args: json.RawMessage(`{"command": "rm notes.txt <@U_EVERYONE>"}`)},
		Request: policy.ApprovalRequest{Message: `Run shell command "rm notes.txt"?`, Groups: []string{"ops"}, Rule: "shell"},
	}
}

func slackChannel(t *testing.T) (*notify.Slack, *notifytest.FakeSlack) {
	fake := notifytest.NewFakeSlack(t, "xoxb-test")
	cfg := notify.Config{SlackBotToken: "xoxb-test", SlackAPIURL: fake.URL}
	return notify.NewSlack(notify.SlackOptions{API: cfg.SlackClient(), Channel: "#approvals", PublicURL: "https://toolgate.example.com"}), fake
}

// actions returns the elements of the message's actions block, and its
// block_id.
func actions(t *testing.T, blocks []map[string]any) (string, []map[string]any) {
	t.Helper()
	for _, b := range blocks {
		if b["type"] == "actions" {
			var out []map[string]any
			for _, e := range b["elements"].([]any) {
				out = append(out, e.(map[string]any))
			}
			id, _ := b["block_id"].(string)
			return id, out
		}
	}
	return "", nil
}

func TestSlackNotifyPostsButtonsForTheCall(t *testing.T) {
	s, fake := slackChannel(t)
	r, err := s.Notify(context.Background(), notice(activities.NoticeWaiting, 1, "ops"))
	require.NoError(t, err)
	assert.Equal(t, "slack", r.Channel)
	assert.Equal(t, "C0APPROVALS", r.Ref["channel"], "the channel ID Slack answered, not the name")
	assert.NotEmpty(t, r.Ref["ts"])

	posts := fake.Calls("chat.postMessage")
	require.Len(t, posts, 1)
	post := posts[0]
	assert.Equal(t, "#approvals", post.Form.Get("channel"))
	assert.Contains(t, post.Text(), "Approval needed: shell")
	raw := post.AllText()
	for _, want := range []string{"call-42", "sess-1", "agent-1", "Run shell command", "rm notes.txt", "Asked of", "ops",
		"<!date^" + "1777640400", "https://toolgate.example.com/calls/call-42"} {
		assert.Contains(t, raw, want)
	}
	assert.NotContains(t, raw, "<@U_EVERYONE>", "arguments cannot mention anyone")

	blockID, buttons := actions(t, post.Blocks())
	assert.Equal(t, "toolgate_call:call-42", blockID)
	var ids []string
	for _, b := range buttons {
		ids = append(ids, b["action_id"].(string))
		assert.Equal(t, "call-42", b["value"], "every button names the call")
		callID, action, ok := notify.ParseSlackAction(blockID, b["action_id"].(string), b["value"].(string))
		assert.True(t, ok)
		assert.Equal(t, "call-42", callID)
		assert.Equal(t, b["action_id"], action)
	}
	assert.Equal(t, []string{"approve", "approve_for_session", "deny", "deny_always", "deny_with_reason"}, ids)
}

func TestSlackSaysWhoElseDecides(t *testing.T) {
	s, fake := slackChannel(t)
	n := notice(activities.NoticeWaiting, 1, "finance", "risk")
	n.Request.Approvals = 2
	_, err := s.Notify(context.Background(), n)
	require.NoError(t, err)
	n = notice(activities.NoticeWaiting, 1, "ops")
	n.Call.ID, n.Call.ActingUser, n.Request.User = "call-43", "dana", true
	_, err = s.Notify(context.Background(), n)
	require.NoError(t, err)

	posts := fake.Calls("chat.postMessage")
	require.Len(t, posts, 2)
	assert.Contains(t, posts[0].AllText(), "*Approvals*\n2 people must approve (four eyes)")
	assert.NotContains(t, posts[0].AllText(), "Also asked of")
	assert.Contains(t, posts[1].AllText(), "*Also asked of*\ndana, who runs the agent, in its client")
}

func TestSlackReminderAndEscalationSaySo(t *testing.T) {
	s, fake := slackChannel(t)
	_, err := s.Notify(context.Background(), notice(activities.NoticeReminder, 2, "ops"))
	require.NoError(t, err)
	_, err = s.Notify(context.Background(), notice(activities.NoticeEscalation, 3, "finance"))
	require.NoError(t, err)
	posts := fake.Calls("chat.postMessage")
	require.Len(t, posts, 2)
	assert.Contains(t, posts[0].Text(), "Reminder")
	assert.Contains(t, posts[0].AllText(), "still waits for a decision from ops")
	assert.Contains(t, posts[1].Text(), "Escalated to finance")
	assert.Contains(t, posts[1].AllText(), "finance may now decide this call too")
	_, buttons := actions(t, posts[1].Blocks())
	assert.Len(t, buttons, 5, "an escalation can be decided from its own message")
}

func TestSlackResolveUpdatesEveryMessageInPlace(t *testing.T) {
	s, fake := slackChannel(t)
	ctx := context.Background()
	var receipts []activities.Receipt
	for i, kind := range []activities.NoticeKind{activities.NoticeWaiting, activities.NoticeReminder} {
		r, err := s.Notify(ctx, notice(kind, i+1))
		require.NoError(t, err)
		receipts = append(receipts, r)
	}
	n := notice(activities.NoticeWaiting, 1)
	decided := activities.Outcome{Event: activities.EventDecided, Call: n.Call, Status: "running", Decision: "approved",
		DecidedBy: "alice", Channel: "inbox", At: deadline.Add(-time.Minute)}
	require.NoError(t, s.Resolve(ctx, decided, receipts))

	updates := fake.Calls("chat.update")
	require.Len(t, updates, 2)
	for i, u := range updates {
		assert.Equal(t, receipts[i].Ref["ts"], u.Form.Get("ts"))
		assert.Equal(t, "C0APPROVALS", u.Form.Get("channel"))
		assert.Contains(t, u.Text(), "approved by alice via inbox")
		assert.Contains(t, u.AllText(), "Approved")
		assert.Contains(t, u.AllText(), "<!date^"+"1777640340")
		id, buttons := actions(t, u.Blocks())
		assert.Empty(t, id)
		assert.Empty(t, buttons, "no buttons on a decided call")
	}

	timedOut := activities.Outcome{Event: activities.EventTimedOut, Call: n.Call, Status: "timed_out", At: deadline, Reason: "no approver answered within 1h0m0s; the call was denied"}
	require.NoError(t, s.Resolve(ctx, timedOut, receipts[:1]))
	updates = fake.Calls("chat.update")
	require.Len(t, updates, 3)
	assert.Contains(t, updates[2].Text(), "timed out")
	assert.Contains(t, updates[2].AllText(), "no approver answered within 1h0m0s")

	executed := activities.Outcome{Event: activities.EventExecuted, Call: n.Call, Status: "ok", At: deadline}
	require.NoError(t, s.Resolve(ctx, executed, receipts))
	assert.Len(t, fake.Calls("chat.update"), 3, "executions leave the message alone")
}

func TestSlackErrors(t *testing.T) {
	s, fake := slackChannel(t)
	ctx := context.Background()

	fake.FailNext("chat.postMessage", "channel_not_found")
	_, err := s.Notify(ctx, notice(activities.NoticeWaiting, 1))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "settings errors are application errors: %v", err)
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, err.Error(), "channel_not_found")

	fake.FailNext("chat.postMessage", "ratelimited")
	_, err = s.Notify(ctx, notice(activities.NoticeWaiting, 1))
	require.Error(t, err)
	assert.False(t, errors.As(err, &appErr), "a passing problem is retried")

	r, err := s.Notify(ctx, notice(activities.NoticeWaiting, 1))
	require.NoError(t, err)
	n := notice(activities.NoticeWaiting, 1)
	fake.FailNext("chat.update", "message_not_found")
	assert.NoError(t, s.Resolve(ctx, activities.Outcome{Event: activities.EventDecided, Call: n.Call, Decision: "denied", DecidedBy: "bob"}, []activities.Receipt{r}),
		"a deleted message is not an error to retry")
	fake.FailNext("chat.update", "internal_error")
	assert.Error(t, s.Resolve(ctx, activities.Outcome{Event: activities.EventDecided, Call: n.Call, Decision: "denied", DecidedBy: "bob"}, []activities.Receipt{r}))
}

func TestParseSlackAction(t *testing.T) {
	for _, c := range []struct {
		block, action, value string
		ok                   bool
	}{
		{"toolgate_call:c1", "approve", "c1", true},
		{"toolgate_call:c1", "deny_with_reason", "", true},
		{"toolgate_call:c1", "approve", "c2", false},
		{"toolgate_call:c1", "approve_with_edits", "c1", false},
		{"other:c1", "approve", "c1", false},
		{"toolgate_call:", "approve", "", false},
	} {
		_, _, ok := notify.ParseSlackAction(c.block, c.action, c.value)
		assert.Equal(t, c.ok, ok, "%+v", c)
	}
}

func TestDenyReasonModal(t *testing.T) {
	m := notify.DenyReasonModal("call-42", "shell", "C0APPROVALS")
	assert.Equal(t, notify.SlackDenyReasonCallback, m.CallbackID)
	var meta notify.SlackModalMeta
	require.NoError(t, json.Unmarshal([]byte(m.PrivateMetadata), &meta))
	assert.Equal(t, notify.SlackModalMeta{CallID: "call-42", Channel: "C0APPROVALS"}, meta)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(b), `"block_id":"reason"`), string(b))
}

func TestSlackFallbackTextIsEscaped(t *testing.T) {
	s, fake := slackChannel(t)
	ctx := context.Background()
	n := notice(activities.NoticeWaiting, 1)
	n.Request.Message = `Fetch <http://evil|click me>? <!channel> & <@U123>`
	r, err := s.Notify(ctx, n)
	require.NoError(t, err)
	text := fake.Calls("chat.postMessage")[0].Text()
	for _, raw := range []string{"<!channel>", "<http://evil|click me>", "<@U123>", " & "} {
		assert.NotContains(t, text, raw, "the fallback text cannot ping, link or mention")
	}
	assert.Contains(t, text, "Fetch &lt;http://evil|click me&gt;? &lt;!channel&gt; &amp; &lt;@U123&gt;", "shown as typed")

	o := activities.Outcome{Event: activities.EventDecided, Call: n.Call, Decision: "denied", DecidedBy: "<!here>", Channel: "<http://evil|x>"}
	require.NoError(t, s.Resolve(ctx, o, []activities.Receipt{r}))
	text = fake.Calls("chat.update")[0].Text()
	assert.NotContains(t, text, "<!here>")
	assert.NotContains(t, text, "<http://evil|x>")
	assert.Contains(t, text, "&lt;!here&gt;")
}
