package notify_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/notify/notifytest"
	"github.com/toolgate/toolgate/policy"
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

// rawReceiver keeps each delivery's headers and its body decoded as a
// generic JSON object, so a test sees exactly which fields were sent.
type rawReceiver struct {
	URL string
	mu  sync.Mutex
	got []rawDelivery
}

type rawDelivery struct {
	Header http.Header
	Body   map[string]any
	Err    error // the verification error, nil when the signature checks out
}

func newRawReceiver(t *testing.T, secret string) *rawReceiver {
	rr := &rawReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d := rawDelivery{Header: r.Header.Clone()}
		d.Err = notify.VerifyWebhook(secret, r.Header, body, time.Now(), 5*time.Minute)
		if err := json.Unmarshal(body, &d.Body); err != nil && d.Err == nil {
			d.Err = err
		}
		rr.mu.Lock()
		rr.got = append(rr.got, d)
		rr.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	rr.URL = srv.URL + "/hooks/toolgate"
	return rr
}

func (rr *rawReceiver) deliveries() []rawDelivery {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return append([]rawDelivery(nil), rr.got...)
}

// TestWebhookEventPayloads sends each event the workflow sends, with the
// values it sends it with (workflows/call.go waitForPerson and run), and
// checks the body against docs/channels.md: notices are status pending with
// the request's message, groups, deadline and sequence; decided, timed_out
// and executed carry decision, decided_by, channel, status and reason, with
// the statuses of the doc's table.
func TestWebhookEventPayloads(t *testing.T) {
	const secret = "hook-secret"
	sentAt := time.Now().Truncate(time.Second)
	// The workflow's clock, in another zone: events carry UTC.
	decidedAt := time.Date(2026, 5, 1, 14, 30, 0, 0, time.FixedZone("CEST", 2*3600))
	call := notice(activities.NoticeWaiting, 1).Call
	agentCall := call
	agentCall.Execution = policy.ExecutionAgent
	const inbox = publicURL + "/calls/call-42"

	// Fields every event carries.
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{
			"call_id": "call-42", "session": "sess-1", "tool": "shell", "requester": "agent-1",
			"args": `{"command":"rm notes.txt <@U_EVERYONE>"}`, "inbox_url": inbox,
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	noticeBody := func(event string, seq float64, groups ...any) map[string]any {
		return base(map[string]any{
			"id": "call-42/notice/" + strconv.Itoa(int(seq)), "event": event, "status": "pending",
			"message": `Run shell command "rm notes.txt"?`, "groups": groups,
			"deadline": "2026-05-01T13:00:00Z", "at": sentAt.UTC().Format(time.RFC3339), "notice_seq": seq,
		})
	}
	outcomeBody := func(event string, fields map[string]any) map[string]any {
		m := base(map[string]any{"id": "call-42/" + event, "event": event, "at": "2026-05-01T12:30:00Z"})
		for k, v := range fields {
			m[k] = v
		}
		return m
	}

	cases := []struct {
		name   string
		notice *activities.Notice
		out    *activities.Outcome
		want   map[string]any
	}{
		{name: "waiting", notice: ptr(notice(activities.NoticeWaiting, 1, "ops")),
			want: noticeBody("waiting", 1, "ops")},
		{name: "reminder", notice: ptr(notice(activities.NoticeReminder, 2, "ops")),
			want: noticeBody("reminder", 2, "ops")},
		{name: "escalation names the groups it adds", notice: ptr(notice(activities.NoticeEscalation, 3, "finance")),
			want: noticeBody("escalation", 3, "finance")},
		{name: "decided: approved, the tool runs next",
			out: &activities.Outcome{Event: activities.EventDecided, Call: call, Status: "running", At: decidedAt,
				Decision: "approved", DecidedBy: "alice", Channel: "slack"},
			want: outcomeBody("decided", map[string]any{"status": "running", "decision": "approved", "decided_by": "alice", "channel": "slack"})},
		{name: "decided: approved by the rule's on_timeout approve",
			out: &activities.Outcome{Event: activities.EventDecided, Call: call, Status: "running", At: decidedAt,
				Decision: "approved", DecidedBy: "timeout", Channel: "timeout"},
			want: outcomeBody("decided", map[string]any{"status": "running", "decision": "approved", "decided_by": "timeout", "channel": "timeout"})},
		{name: "decided: approved, the agent runs the tool",
			out: &activities.Outcome{Event: activities.EventDecided, Call: agentCall, Status: "approved", At: decidedAt,
				Decision: "approved_for_session", DecidedBy: "alice", Channel: "inbox"},
			want: outcomeBody("decided", map[string]any{"status": "approved", "decision": "approved_for_session", "decided_by": "alice", "channel": "inbox"})},
		{name: "decided: denied with a reason",
			out: &activities.Outcome{Event: activities.EventDecided, Call: call, Status: "denied", At: decidedAt,
				Decision: "denied_with_reason", DecidedBy: "bob", Channel: "email", Reason: "prod is frozen"},
			want: outcomeBody("decided", map[string]any{"status": "denied", "decision": "denied_with_reason", "decided_by": "bob",
				"channel": "email", "reason": "prod is frozen"})},
		{name: "timed_out",
			out: &activities.Outcome{Event: activities.EventTimedOut, Call: call, Status: "timed_out", At: decidedAt,
				Decision: "timed_out", DecidedBy: "timeout", Channel: "timeout", Reason: "no approver answered within 15m0s; the call was denied"},
			want: outcomeBody("timed_out", map[string]any{"status": "timed_out", "decision": "timed_out", "decided_by": "timeout",
				"channel": "timeout", "reason": "no approver answered within 15m0s; the call was denied"})},
		{name: "executed: ok",
			out: &activities.Outcome{Event: activities.EventExecuted, Call: call, Status: "ok", At: decidedAt,
				Decision: "approved", DecidedBy: "alice", Channel: "slack"},
			want: outcomeBody("executed", map[string]any{"status": "ok", "decision": "approved", "decided_by": "alice", "channel": "slack"})},
		{name: "executed: error",
			out: &activities.Outcome{Event: activities.EventExecuted, Call: call, Status: "error", At: decidedAt,
				Decision: "approved", DecidedBy: "alice", Channel: "slack", Reason: "exit status 1"},
			want: outcomeBody("executed", map[string]any{"status": "error", "decision": "approved", "decided_by": "alice",
				"channel": "slack", "reason": "exit status 1"})},
		{name: "executed: unknown",
			out: &activities.Outcome{Event: activities.EventExecuted, Call: call, Status: "unknown", At: decidedAt,
				Decision: "approved", DecidedBy: "alice", Channel: "slack", Reason: "the tool's worker was lost"},
			want: outcomeBody("executed", map[string]any{"status": "unknown", "decision": "approved", "decided_by": "alice",
				"channel": "slack", "reason": "the tool's worker was lost"})},
	}
	// The statuses docs/channels.md lists for each event.
	docStatuses := map[string][]string{
		"waiting": {"pending"}, "reminder": {"pending"}, "escalation": {"pending"},
		"decided":   {"running", "approved", "denied"},
		"timed_out": {"timed_out"},
		"executed":  {"ok", "error", "unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recv := newRawReceiver(t, secret)
			w := notify.NewWebhook(notify.WebhookOptions{URLs: []string{recv.URL}, Secret: secret, PublicURL: publicURL,
				Now: func() time.Time { return sentAt }})
			ctx := context.Background()
			for range 2 { // a retried activity delivers the event again
				if tc.notice != nil {
					_, err := w.Notify(ctx, *tc.notice)
					require.NoError(t, err)
				} else {
					require.NoError(t, w.Resolve(ctx, *tc.out, nil))
				}
			}

			got := recv.deliveries()
			require.Len(t, got, 2)
			for _, d := range got {
				require.NoError(t, d.Err, "the delivery verifies with the shared secret")
				assert.Equal(t, "application/json", d.Header.Get("Content-Type"))
				assert.Equal(t, tc.want["event"], d.Header.Get(notify.HeaderWebhookEvent))
				assert.Equal(t, tc.want, d.Body)
			}
			assert.Equal(t, got[0].Body["id"], got[1].Body["id"], "every delivery of one event has the same id")

			event, status := got[0].Body["event"].(string), got[0].Body["status"]
			assert.Contains(t, docStatuses[event], status, "a status docs/channels.md lists for %s", event)
			if tc.out != nil {
				assert.NotEqual(t, "pending", status, "an outcome never says pending")
				for _, k := range []string{"decision", "decided_by", "channel"} {
					assert.NotEmpty(t, got[0].Body[k], "%s carries %s", event, k)
				}
			}
		})
	}
}

// TestWebhookEventIDsDiffer: receivers dedupe by id, so two different
// events of one call never share one.
func TestWebhookEventIDsDiffer(t *testing.T) {
	recv := notifytest.NewWebhookReceiver(t, "s")
	w := notify.NewWebhook(notify.WebhookOptions{URLs: []string{recv.URL}, Secret: "s"})
	ctx := context.Background()
	for i, k := range []activities.NoticeKind{activities.NoticeWaiting, activities.NoticeReminder, activities.NoticeEscalation} {
		_, err := w.Notify(ctx, notice(k, i+1, "ops"))
		require.NoError(t, err)
	}
	call := notice(activities.NoticeWaiting, 1).Call
	for _, o := range []activities.Outcome{
		{Event: activities.EventDecided, Status: "running", Decision: "approved", DecidedBy: "alice", Channel: "slack"},
		{Event: activities.EventExecuted, Status: "ok", Decision: "approved", DecidedBy: "alice", Channel: "slack"},
		{Event: activities.EventTimedOut, Status: "timed_out", Decision: "timed_out", DecidedBy: "timeout", Channel: "timeout"},
	} {
		o.Call, o.At = call, deadline
		require.NoError(t, w.Resolve(ctx, o, nil))
	}
	ids := map[string]bool{}
	for _, d := range recv.Deliveries() {
		require.True(t, d.Verified, "%v", d.Err)
		ids[d.Event.ID] = true
	}
	assert.Len(t, ids, 6)
}

// TestWebhookArgsAreCut: docs/channels.md says args are cut at 600 bytes.
func TestWebhookArgsAreCut(t *testing.T) {
	recv := notifytest.NewWebhookReceiver(t, "s")
	w := notify.NewWebhook(notify.WebhookOptions{URLs: []string{recv.URL}, Secret: "s"})
	n := notice(activities.NoticeWaiting, 1)
	n.Call.Args = json.RawMessage(`{"content":"` + strings.Repeat("x", 2000) + `"}`)
	_, err := w.Notify(context.Background(), n)
	require.NoError(t, err)
	require.Len(t, recv.Deliveries(), 1)
	args := recv.Deliveries()[0].Event.Args
	assert.LessOrEqual(t, len(args), 600)
	assert.True(t, strings.HasPrefix(args, `{"content":"xxx`), args)
	assert.True(t, strings.HasSuffix(args, "…"), "a cut is marked: %q", args[len(args)-10:])
}

func ptr[T any](v T) *T { return &v }

// Each checkpoint the ledger signs goes out as a signed ledger.checkpoint
// event, whose note verifies with the ledger's key.
func TestLedgerCheckpointsGoOutAsSignedWebhookEvents(t *testing.T) {
	recv := notifytest.NewWebhookReceiver(t, "hook-secret")
	w := notify.NewWebhook(notify.WebhookOptions{URLs: []string{recv.URL}, Secret: "hook-secret"})
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "prod")
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys,
		Publish: []func(context.Context, ledger.Checkpoint) error{func(ctx context.Context, c ledger.Checkpoint) error {
			return w.Checkpoint(ctx, c.Origin, c.Size, c.Note)
		}}})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	_, err = l.Append(ctx, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "c1/r/call.submitted", At: deadline, CallID: "c1"})
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx) // the same size again: nothing new to send
	require.NoError(t, err)

	got := recv.Deliveries()
	require.Len(t, got, 1)
	require.True(t, got[0].Verified, "%v", got[0].Err)
	var ev notify.LedgerCheckpointEvent
	require.NoError(t, json.Unmarshal(got[0].Body, &ev))
	assert.Equal(t, notify.EventLedgerCheckpoint, ev.Event)
	assert.Equal(t, "toolgate/prod", ev.Origin)
	assert.EqualValues(t, 1, ev.Size)
	c, err := ledger.ParseCheckpoint([]byte(ev.Checkpoint), keys.Verifier)
	require.NoError(t, err)
	assert.EqualValues(t, 1, c.Size)
}
