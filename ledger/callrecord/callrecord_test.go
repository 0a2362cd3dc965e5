package callrecord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/ledger/callrecord"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// entries are a call's run: submitted (with verdict, "" for none), then
// decided (when d is set), then finished (when status is set).
func entries(id, run, verdict string, d *ledger.Decision, status string) []ledger.Entry {
	ev := func(kind string) string { return id + "/" + run + "/" + kind }
	out := []ledger.Entry{{Kind: ledger.KindCallSubmitted, Event: ev(ledger.KindCallSubmitted), At: t0, CallID: id, Session: "s",
		Tool: "shell", Args: json.RawMessage(`{"command":"ls"}`), Rule: "r", Verdict: verdict}}
	if d != nil {
		out = append(out, ledger.Entry{Kind: ledger.KindCallDecided, Event: ev(ledger.KindCallDecided), At: t0.Add(time.Minute), CallID: id, Session: "s", Decision: d})
	}
	if status != "" {
		out = append(out, ledger.Entry{Kind: ledger.KindCallFinished, Event: ev(ledger.KindCallFinished), At: t0.Add(2 * time.Minute), CallID: id, Session: "s", Status: status})
	}
	return out
}

func TestFoldInfersTheVerdictOfEntriesWrittenWithoutOne(t *testing.T) {
	for _, c := range []struct {
		name    string
		d       *ledger.Decision
		status  string
		verdict string
	}{
		{"the policy approved", &ledger.Decision{Kind: "approved", DecidedBy: "policy", Channel: "policy"}, "ok", callrecord.VerdictAllow},
		{"the policy denied", &ledger.Decision{Kind: "denied_with_reason", DecidedBy: "policy", Channel: "policy", Reason: "no"}, "denied", callrecord.VerdictDeny},
		{"a person approved", &ledger.Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox"}, "ok", callrecord.VerdictAsk},
		{"a person denied in Slack", &ledger.Decision{Kind: "denied", DecidedBy: "bob", Channel: "slack"}, "denied", callrecord.VerdictAsk},
		{"a handler decided", &ledger.Decision{Kind: "approved", DecidedBy: "handler", Channel: "handler"}, "ok", callrecord.VerdictAsk},
		{"a sticky decision covered it", &ledger.Decision{Kind: "approved_for_session", DecidedBy: "session", Channel: "session", Sticky: "session/s/sticky/c0"}, "ok", callrecord.VerdictAsk},
		{"nobody answered", nil, "timed_out", callrecord.VerdictAsk},
		{"still waiting", nil, "", callrecord.VerdictAsk},
		{"approved at the deadline", &ledger.Decision{Kind: "approved", DecidedBy: "timeout", Channel: "timeout"}, "ok", callrecord.VerdictAsk},
		{"failed before any decision", nil, "error", ""},
		{"a reserved tool, refused by toolgate", &ledger.Decision{Kind: "denied_with_reason", DecidedBy: "toolgate", Channel: "policy"}, "denied", ""},
		{"its session had ended", &ledger.Decision{Kind: "denied_with_reason", DecidedBy: "session", Channel: "session", Reason: "the session has ended"}, "denied", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := callrecord.Fold(entries("c1", "r1", "", c.d, c.status))
			require.Len(t, rs, 1)
			assert.Equal(t, c.verdict, rs[0].Verdict)
		})
	}

	// A recorded verdict is taken as it is; a refused submission (a reason
	// and no verdict) was never judged, whoever decided it.
	rs := callrecord.Fold(entries("c2", "r1", callrecord.VerdictAsk, &ledger.Decision{Kind: "approved", DecidedBy: "policy", Channel: "policy"}, "ok"))
	assert.Equal(t, callrecord.VerdictAsk, rs[0].Verdict)
	refused := entries("c3", "r1", "", &ledger.Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox"}, "ok")
	refused[0].Reason = "unknown tool shell"
	rs = callrecord.Fold(refused)
	assert.Equal(t, "", rs[0].Verdict)
	assert.False(t, rs[0].Asked())
}

func TestACallIDThatComesBackIsTwoRecords(t *testing.T) {
	first := entries("c1", "run-1", callrecord.VerdictAsk, &ledger.Decision{Kind: "denied", DecidedBy: "alice", Channel: "inbox"}, "denied")
	second := entries("c1", "run-2", callrecord.VerdictAsk, &ledger.Decision{Kind: "approved", DecidedBy: "bob", Channel: "cli"}, "ok")
	for i := range second {
		second[i].At = second[i].At.Add(time.Hour)
	}
	rs := callrecord.Fold(append(first, second...))
	require.Len(t, rs, 2)
	assert.Equal(t, "c1", rs[0].CallID)
	assert.Equal(t, "c1", rs[1].CallID)
	assert.Equal(t, "denied", rs[0].Status)
	assert.Equal(t, "alice", rs[0].Decision.DecidedBy)
	assert.Equal(t, "ok", rs[1].Status)
	assert.Equal(t, "bob", rs[1].Decision.DecidedBy)
	assert.Equal(t, t0.Add(time.Hour+time.Minute), rs[1].DecidedAt)
}

// openLedger opens a real ledger (SQLite in dir) with the sealer given.
func openLedger(t *testing.T, dir string, sealer ledger.Sealer) *ledger.Ledger {
	t.Helper()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys, Sealer: sealer})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestReadLeavesOutCallsSubmittedBeforeTheWindowAndReadsEveryPage(t *testing.T) {
	dir := t.TempDir()
	l := openLedger(t, dir, nil)
	ctx := context.Background()
	approved := &ledger.Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox"}
	early := entries("early", "r1", callrecord.VerdictAsk, approved, "ok")
	early[0].At = t0.Add(-time.Hour) // submitted before the window, decided and finished in it
	_, err := l.Append(ctx, early...)
	require.NoError(t, err)
	// More calls than one page of entries holds.
	for n := range 3 {
		var batch []ledger.Entry
		for i := range 400 {
			batch = append(batch, entries(fmt.Sprintf("c%d-%d", n, i), "r1", callrecord.VerdictAsk, approved, "ok")...)
		}
		_, err := l.Append(ctx, batch...)
		require.NoError(t, err)
	}
	late := entries("late", "r1", callrecord.VerdictAsk, nil, "")
	late[0].At = t0.Add(48 * time.Hour) // after the window
	_, err = l.Append(ctx, late...)
	require.NoError(t, err)

	rs, err := callrecord.Read(ctx, l, t0, t0.Add(24*time.Hour))
	require.NoError(t, err)
	require.Len(t, rs, 1200, "3,600 entries read over two pages; neither the early call nor the late one")
	for _, r := range rs {
		assert.NotEqual(t, "early", r.CallID)
		assert.NotEqual(t, "late", r.CallID)
		assert.Equal(t, "ok", r.Status, r.CallID)
		assert.Equal(t, "alice", r.Decision.DecidedBy, r.CallID)
	}
	rs, err = callrecord.Read(ctx, l, time.Time{}, time.Time{})
	require.NoError(t, err)
	assert.Len(t, rs, 1202, "without a window: every call")
	assert.Equal(t, "early", rs[0].CallID, "in the order they were submitted")
	assert.Equal(t, "late", rs[1201].CallID)
}

func TestSealedArgumentsReadWithoutTheKeyAreSealed(t *testing.T) {
	dir := t.TempDir()
	ring, _, err := keyring.LoadOrCreate(filepath.Join(dir, "keys.json"))
	require.NoError(t, err)
	w := openLedger(t, dir, ring)
	ctx := context.Background()
	_, err = w.Append(ctx, entries("c1", "r1", callrecord.VerdictAsk,
		&ledger.Decision{Kind: "denied_with_reason", DecidedBy: "alice", Channel: "inbox", Reason: "not on prod"}, "denied")...)
	require.NoError(t, err)
	require.NoError(t, w.Close())

	blind := openLedger(t, dir, nil)
	rs, err := callrecord.Read(ctx, blind, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.True(t, rs[0].Sealed)
	assert.Nil(t, rs[0].Args)
	assert.Empty(t, rs[0].Decision.Reason, "the reason is sealed with the arguments")
	assert.Equal(t, "alice", rs[0].Decision.DecidedBy, "who decided stays readable")
	assert.Equal(t, callrecord.VerdictAsk, rs[0].Verdict)
	require.NoError(t, blind.Close())

	keyed := openLedger(t, dir, ring)
	rs, err = callrecord.Read(ctx, keyed, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.False(t, rs[0].Sealed)
	assert.JSONEq(t, `{"command":"ls"}`, string(rs[0].Args))
	assert.Equal(t, "not on prod", rs[0].Decision.Reason)
}

// A keyring that lacks the key an entry was sealed with (a key retired,
// another deployment's keyring) leaves the entry sealed: the call is
// counted, its secrets unread, and the other calls read as ever.
func TestAnEntryNoKeyHereOpensStaysSealed(t *testing.T) {
	dir := t.TempDir()
	old, _, err := keyring.LoadOrCreate(filepath.Join(dir, "old-keys.json"))
	require.NoError(t, err)
	w := openLedger(t, dir, old)
	ctx := context.Background()
	_, err = w.Append(ctx, entries("c1", "r1", callrecord.VerdictAsk, &ledger.Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox"}, "ok")...)
	require.NoError(t, err)
	require.NoError(t, w.Close())

	current, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	l := openLedger(t, dir, current)
	_, err = l.Append(ctx, entries("c2", "r1", callrecord.VerdictAsk, &ledger.Decision{Kind: "approved", DecidedBy: "bob", Channel: "cli"}, "ok")...)
	require.NoError(t, err)
	rs, err := callrecord.Read(ctx, l, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.True(t, rs[0].Sealed, "c1's key is not in this keyring")
	assert.Nil(t, rs[0].Args)
	assert.Equal(t, "ok", rs[0].Status)
	assert.False(t, rs[1].Sealed)
	assert.JSONEq(t, `{"command":"ls"}`, string(rs[1].Args))
}
