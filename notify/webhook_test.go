package notify_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/notify/notifytest"
)

func TestWebhookEventsAreSignedAndVerified(t *testing.T) {
	recv := notifytest.NewWebhookReceiver(t, "hook-secret")
	w := notify.NewWebhook(notify.WebhookOptions{URLs: []string{recv.URL}, Secret: "hook-secret", PublicURL: publicURL})
	ctx := context.Background()
	n := notice(activities.NoticeWaiting, 1, "ops")

	r, err := w.Notify(ctx, n)
	require.NoError(t, err)
	assert.Equal(t, "webhook", r.Channel)
	require.NoError(t, w.Resolve(ctx, activities.Outcome{Event: activities.EventDecided, Call: n.Call, Status: "running",
		Decision: "approved", DecidedBy: "alice", Channel: "slack", At: deadline}, nil))
	require.NoError(t, w.Resolve(ctx, activities.Outcome{Event: activities.EventExecuted, Call: n.Call, Status: "ok", At: deadline}, nil))

	got := recv.Deliveries()
	require.Len(t, got, 3)
	for _, d := range got {
		assert.True(t, d.Verified, "%v", d.Err)
	}
	assert.Equal(t, []string{"waiting", "decided", "executed"}, recv.Events("call-42"))
	waiting := got[0].Event
	assert.Equal(t, "call-42/notice/1", waiting.ID)
	assert.Equal(t, "sess-1", waiting.Session)
	assert.Equal(t, "shell", waiting.Tool)
	assert.Equal(t, `{"command":"rm notes.txt <@U_EVERYONE>"}`, waiting.Args)
	assert.Equal(t, `Run shell command "rm notes.txt"?`, waiting.Message)
	assert.Equal(t, []string{"ops"}, waiting.Groups)
	assert.Equal(t, "pending", waiting.Status)
	assert.Equal(t, deadline, waiting.Deadline)
	assert.Equal(t, publicURL+"/calls/call-42", waiting.InboxURL)
	decided := got[1].Event
	assert.Equal(t, "alice", decided.DecidedBy)
	assert.Equal(t, "slack", decided.Channel)
	assert.Equal(t, "approved", decided.Decision)
	assert.Equal(t, deadline, decided.At)
	assert.Equal(t, "ok", got[2].Event.Status)
}

func TestWebhookFailuresAreErrors(t *testing.T) {
	ctx := context.Background()
	n := notice(activities.NoticeWaiting, 1)

	wrongSecret := notifytest.NewWebhookReceiver(t, "the receiver's secret")
	w := notify.NewWebhook(notify.WebhookOptions{URLs: []string{wrongSecret.URL}, Secret: "another secret"})
	_, err := w.Notify(ctx, n)
	assert.ErrorContains(t, err, "401 Unauthorized", "the receiver refuses a wrong signature")
	require.Len(t, wrongSecret.Deliveries(), 1)
	assert.ErrorIs(t, wrongSecret.Deliveries()[0].Err, notify.ErrWebhookSignature)

	down := notifytest.NewWebhookReceiver(t, "s")
	down.AnswerWith(http.StatusServiceUnavailable)
	ok := notifytest.NewWebhookReceiver(t, "s")
	w = notify.NewWebhook(notify.WebhookOptions{URLs: []string{ok.URL, down.URL}, Secret: "s"})
	_, err = w.Notify(ctx, n)
	assert.ErrorContains(t, err, "503", "non-2xx is an error, so the activity retries")
	assert.Len(t, ok.Deliveries(), 1)
}

func TestVerifyWebhook(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event":"waiting"}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	h := http.Header{}
	h.Set(notify.HeaderWebhookTimestamp, ts)
	h.Set(notify.HeaderWebhookSignature, notify.SignWebhook("s", ts, body))
	require.NoError(t, notify.VerifyWebhook("s", h, body, now, time.Minute))

	assert.ErrorIs(t, notify.VerifyWebhook("wrong", h, body, now, time.Minute), notify.ErrWebhookSignature)
	assert.ErrorIs(t, notify.VerifyWebhook("s", h, []byte(`{"event":"decided"}`), now, time.Minute), notify.ErrWebhookSignature)
	assert.ErrorIs(t, notify.VerifyWebhook("s", h, body, now.Add(2*time.Minute), time.Minute), notify.ErrWebhookStale, "a replay of an old delivery")
	assert.ErrorIs(t, notify.VerifyWebhook("s", h, body, now.Add(-2*time.Minute), time.Minute), notify.ErrWebhookStale)

	moved := h.Clone()
	moved.Set(notify.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix()+1, 10))
	assert.ErrorIs(t, notify.VerifyWebhook("s", moved, body, now, time.Minute), notify.ErrWebhookSignature, "the timestamp is signed")
	assert.ErrorIs(t, notify.VerifyWebhook("s", http.Header{}, body, now, time.Minute), notify.ErrWebhookUnsigned)
}
