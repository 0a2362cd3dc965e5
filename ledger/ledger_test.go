package ledger

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/keyring"
)

func openTest(t testing.TB) (*Ledger, string) {
	t.Helper()
	dir := t.TempDir()
	keys, created, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	require.True(t, created)
	dsn := filepath.Join(dir, "ledger.db")
	l, err := Open(context.Background(), Options{DSN: dsn, Keys: keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, dsn
}

func entry(call string, kind string) Entry {
	return Entry{Kind: kind, Event: call + "/" + kind, At: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), CallID: call, Session: "s",
		Args: []byte(`{"z":1,"a":"<b>"}`)}
}

func TestAppendIsOncePerEventAndLinearUnderConcurrency(t *testing.T) {
	l, _ := openTest(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				// Every event twice, from different goroutines.
				_, err := l.Append(ctx, entry(fmt.Sprintf("c%d", (w%4)*50+i), KindCallSubmitted))
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	size, err := l.Size(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 200, size, "each of the 200 events once")
	idx, err := l.Append(ctx, entry("c7", KindCallSubmitted))
	require.NoError(t, err)
	e, err := l.CallEntries(ctx, "c7")
	require.NoError(t, err)
	require.Len(t, e, 1)
	assert.Equal(t, e[0].Index, idx[0], "a repeated append returns the index it has")
	assert.Equal(t, `{"args":{"a":"<b>","z":1},"at":"2026-12-03T10:00:00Z","call_id":"c7","event":"c7/call.submitted","kind":"call.submitted","session":"s"}`, string(e[0].Entry))

	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	rep, err := l.VerifyStore(ctx, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 200, rep.Entries)
}

func TestReceiptChecksWithTheFormatsOwnPackages(t *testing.T) {
	l, _ := openTest(t)
	ctx := context.Background()
	for i := range 37 {
		_, err := l.Append(ctx, entry(fmt.Sprintf("c%d", i), KindCallSubmitted), entry(fmt.Sprintf("c%d", i), KindCallFinished))
		require.NoError(t, err)
	}
	r, err := l.Prove(ctx, "c20")
	require.NoError(t, err)
	require.Len(t, r.Entries, 2)

	// With x/mod alone: the note, then each entry's inclusion.
	v, err := note.NewVerifier(r.Key)
	require.NoError(t, err)
	n, err := note.Open([]byte(r.Checkpoint), note.VerifierList(v))
	require.NoError(t, err)
	var origin, root string
	var size int64
	_, err = fmt.Sscanf(n.Text, "%s\n%d\n%s\n", &origin, &size, &root)
	require.NoError(t, err)
	assert.Equal(t, "toolgate/test", origin)
	var th tlog.Hash
	b, _ := base64.StdEncoding.DecodeString(root)
	copy(th[:], b)
	for _, e := range r.Entries {
		var p tlog.RecordProof
		for _, s := range e.Proof {
			var h tlog.Hash
			b, _ := base64.StdEncoding.DecodeString(s)
			copy(h[:], b)
			p = append(p, h)
		}
		assert.NoError(t, tlog.CheckRecord(p, size, th, e.Index, tlog.RecordHash(e.Entry)))
	}
	_, err = VerifyReceipt(r, l.Verifier())
	require.NoError(t, err)

	r.Entries[1].Entry = bytes.Replace(r.Entries[1].Entry, []byte("call.finished"), []byte("call.decided!"), 1)
	_, err = VerifyReceipt(r, l.Verifier())
	assert.ErrorContains(t, err, "was changed")
	_, err = l.Prove(ctx, "nope")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestVerifyNamesWhatWasTamperedWith(t *testing.T) {
	setup := func(t *testing.T) (*Ledger, *sql.DB, []byte) {
		l, _ := openTest(t)
		ctx := context.Background()
		for i := range 10 {
			_, err := l.Append(ctx, entry(fmt.Sprintf("c%d", i), KindCallDecided))
			require.NoError(t, err)
		}
		held, err := l.SignCheckpoint(ctx)
		require.NoError(t, err)
		_, err = l.VerifyStore(ctx, [][]byte{held.Note})
		require.NoError(t, err, "intact")
		return l, l.st.db.DB, held.Note
	}
	cases := map[string]struct {
		sql  string
		want string
	}{
		"edited":    {`UPDATE ledger_entries SET entry = replace(entry, 'decided', 'decidex') WHERE idx = 4`, "entry #4 (call.decidex c4/call.decidex) was changed"},
		"deleted":   {`DELETE FROM ledger_entries WHERE idx = 3`, "entry #3 is missing"},
		"reordered": {`UPDATE ledger_entries SET entry = (SELECT e.entry FROM ledger_entries e WHERE e.idx = 11 - ledger_entries.idx) WHERE idx IN (5, 6)`, "entry #5 (call.decided c6/call.decided) was changed"},
		"truncated": {`DELETE FROM ledger_entries WHERE idx >= 8; DELETE FROM ledger_checkpoints; UPDATE ledger_head SET size = 8`, "entries #8 to #9 were removed"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l, db, held := setup(t)
			for _, stmt := range bytes.Split([]byte(c.sql), []byte(";")) {
				_, err := db.Exec(string(stmt))
				require.NoError(t, err)
			}
			_, err := l.VerifyStore(context.Background(), [][]byte{held})
			assert.ErrorContains(t, err, c.want)
		})
	}
}

func TestSealedEntriesVerifyWithoutTheKeysAndReadWithThem(t *testing.T) {
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	ring, _, err := keyring.LoadOrCreate(filepath.Join(dir, "keys.json"))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := Open(ctx, Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys, Sealer: ring})
	require.NoError(t, err)
	defer l.Close()

	const secret = "sk-live-ledger-9"
	submitted := Entry{Kind: KindCallSubmitted, Event: "c1/submitted", At: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), CallID: "c1",
		Requester: "agent", Tool: "write_file", Args: json.RawMessage(`{"content":"` + secret + `"}`), Preview: map[string]any{"diff": "+" + secret}}
	decided := Entry{Kind: KindCallDecided, Event: "c1/decided", At: submitted.At, CallID: "c1",
		Decision: &Decision{Kind: "approved", DecidedBy: "alice", EditedArgs: json.RawMessage(`{"content":"edited ` + secret + `"}`),
			Reason: "fine, " + secret, Comment: "see " + secret}}
	finished := Entry{Kind: KindCallFinished, Event: "c1/finished", At: submitted.At, CallID: "c1", Status: "error",
		Output: json.RawMessage(`{"stderr":"` + secret + `"}`), Reason: "tool failed: " + secret,
		Details: map[string]any{"note": "alice edited the arguments: " + secret, "redactions": float64(1)}}
	ended := Entry{Kind: KindSessionEnded, Event: "s/ended", At: submitted.At, Session: "s", By: "bob"}
	_, err = l.Append(ctx, submitted, decided, finished, ended)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)

	stored, err := l.Entries(ctx, 0, 4)
	require.NoError(t, err)
	for _, s := range stored[:3] {
		assert.NotContains(t, string(s.Entry), secret)
		assert.Contains(t, string(s.Entry), `"sealed":{"data":`)
	}
	assert.NotContains(t, string(stored[3].Entry), "sealed", "an entry without secrets is stored as it is")
	assert.Contains(t, string(stored[1].Entry), `"decided_by":"alice"`, "who decided stays readable")
	assert.Contains(t, string(stored[2].Entry), `"details":{"redactions":1}`, "what holds no secret stays readable")

	// The log verifies with the verifier key alone, exported too.
	_, err = l.VerifyStore(ctx, nil)
	require.NoError(t, err)
	var export bytes.Buffer
	require.NoError(t, l.Export(ctx, &export, time.Time{}, time.Time{}))
	_, err = VerifyExport(&export, keys.Verifier, nil)
	require.NoError(t, err)

	// With the keys it reads as written; without, the sealed part stays.
	got, err := l.Read(stored[0])
	require.NoError(t, err)
	assert.JSONEq(t, string(submitted.Args), string(got.Args))
	assert.Equal(t, submitted.Preview, got.Preview)
	got, err = l.Read(stored[1])
	require.NoError(t, err)
	assert.JSONEq(t, string(decided.Decision.EditedArgs), string(got.Decision.EditedArgs))
	assert.Equal(t, decided.Decision.Reason, got.Decision.Reason)
	assert.Equal(t, decided.Decision.Comment, got.Decision.Comment)
	got, err = l.Read(stored[2])
	require.NoError(t, err)
	assert.Equal(t, finished.Reason, got.Reason)
	assert.Equal(t, finished.Details, got.Details)
	assert.JSONEq(t, string(finished.Output), string(got.Output))

	blind, err := Decode(stored[2].Entry, nil)
	require.NoError(t, err)
	require.NotNil(t, blind.Sealed)
	assert.Equal(t, ring.Current(), blind.Sealed.Key)
	assert.Empty(t, blind.Output)

	other, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	_, err = Decode(stored[2].Entry, other)
	require.ErrorIs(t, err, keyring.ErrUnknownKey)
	assert.Contains(t, err.Error(), ring.Current())
}
