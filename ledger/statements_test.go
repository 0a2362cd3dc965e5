package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// testDoor is a door key made from a fixed seed, so its ID is the same in
// every run.
func testDoor(name string) *statement.Signer {
	seed := sha256.Sum256([]byte("door " + name))
	return statement.NewSigner(name, ed25519.NewKeyFromSeed(seed[:]))
}

// doorCall is the entries of call c1 as toolgate writes them: submitted by
// ci-7 and approved by alice (for ops, signed in as alice@example.com)
// through the inbox, each with the statement door signed for it.
func doorCall(t *testing.T, door *statement.Signer) (submitted, decided Entry) {
	t.Helper()
	now := time.Now().UTC()
	call := policy.Call{ID: "c1", Session: "s", Tool: "shell", Requester: "ci-7", Args: json.RawMessage(`{"command":"make"}`)}
	sub, err := door.Sign(policy.SubmissionStatement(call))
	require.NoError(t, err)
	d := policy.Decision{Kind: policy.Approved, DecidedBy: "alice", DeciderGroups: []string{"ops"}, Channel: "inbox",
		Identity: &policy.Identity{Issuer: "https://idp.example.com", Subject: "alice@example.com"}}
	dec, err := door.Sign(policy.DecisionStatement(call, d, "shell"))
	require.NoError(t, err)
	submitted = Entry{Kind: KindCallSubmitted, Event: "c1/r/call.submitted", At: now, CallID: "c1", Session: "s",
		Requester: "ci-7", Tool: "shell", Args: call.Args, Statement: sub}
	decided = Entry{Kind: KindCallDecided, Event: "c1/r/call.decided", At: now, CallID: "c1", Session: "s",
		Decision: &Decision{Kind: "approved", DecidedBy: "alice", Groups: []string{"ops"}, Channel: "inbox", At: now,
			Identity: &Identity{Issuer: "https://idp.example.com", Subject: "alice@example.com"}, Statement: dec}}
	return submitted, decided
}

// checkStatements appends entries to a new log, signs it and verifies
// it, checking statements against doors.
func checkStatements(t *testing.T, doors *statement.Doors, entries ...Entry) (StatementReport, error) {
	t.Helper()
	l, _ := openTest(t)
	ctx := context.Background()
	_, err := l.Append(ctx, entries...)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	sc := NewStatementCheck(doors, nil)
	_, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Statements: sc})
	require.NoError(t, err, "the log itself is intact: whoever holds its key wrote what it holds")
	return sc.Finish()
}

func TestStatementsVerifyAgainstTheDoorsAndSurviveTheLedgersCanonicalJSON(t *testing.T) {
	door := testDoor("dev")
	submitted, decided := doorCall(t, door)
	rep, err := checkStatements(t, statement.NewDoors(door.Public()), submitted, decided)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Verified)
	assert.Equal(t, []KeyCount{{Door: "dev", KeyID: door.KeyID(), Count: 2}}, rep.Keys)
	assert.Zero(t, rep.Unsigned)

	// Stored, the statement is the bytes the door signed, in base64.
	b, err := decided.Canonical()
	require.NoError(t, err)
	assert.Contains(t, string(b), `"statement":{"key_id":"`+door.KeyID()+`","sig":"`)
	assert.Contains(t, string(b), `"statement_bytes":"`)
	back, err := Decode(b, nil)
	require.NoError(t, err)
	assert.Equal(t, decided.Decision.Statement, back.Decision.Statement)
}

// Whoever holds the ledger's key can write any entry; the statements
// tell what no door vouched for, named by entry and in words.
func TestStatementsNameTheEntryAndWhatIsWrong(t *testing.T) {
	door, other := testDoor("dev"), testDoor("laptop")
	const decidedEntry = "entry #1 (call.decided c1/r/call.decided): "
	cases := map[string]struct {
		doors  *statement.Doors
		change func(submitted, decided *Entry)
		want   string
	}{
		"statement altered": {
			doors: statement.NewDoors(door.Public()),
			change: func(_, d *Entry) {
				d.Decision.Statement.Statement = bytes.Replace(d.Decision.Statement.Statement, []byte(`"alice"`), []byte(`"mallory"`), 1)
				d.Decision.DecidedBy = "mallory"
			},
			want: decidedEntry + "statement altered: its signature does not verify (key " + door.KeyID() + " of door dev)",
		},
		"a key the verifier was not given": {
			doors: statement.NewDoors(other.Public()),
			want:  "entry #0 (call.submitted c1/r/call.submitted): statement signed by key " + door.KeyID() + ` (door "dev", as it says) that the verifier was not given`,
		},
		"a revoked key": {
			doors: statement.NewDoors(func() statement.DoorKey { k := door.Public(); k.Revoked = true; return k }()),
			want:  decidedEntry + "statement signed by revoked key " + door.KeyID() + " of door dev",
		},
		"decided_by changed": {
			doors:  statement.NewDoors(door.Public()),
			change: func(_, d *Entry) { d.Decision.DecidedBy = "mallory" },
			want:   decidedEntry + `its statement says by "alice" but the entry says decided_by "mallory"`,
		},
		"groups changed": {
			doors:  statement.NewDoors(door.Public()),
			change: func(_, d *Entry) { d.Decision.Groups = []string{"admins"} },
			want:   decidedEntry + `its statement says groups "ops" but the entry says groups "admins"`,
		},
		"channel changed": {
			doors:  statement.NewDoors(door.Public()),
			change: func(_, d *Entry) { d.Decision.Channel = "slack" },
			want:   decidedEntry + `its statement says channel "inbox" but the entry says channel "slack"`,
		},
		"requester changed": {
			doors:  statement.NewDoors(door.Public()),
			change: func(s, _ *Entry) { s.Requester = "ci-8" },
			want:   `entry #0 (call.submitted c1/r/call.submitted): its statement says by "ci-7" but the entry says requester "ci-8"`,
		},
		"arguments changed": {
			doors:  statement.NewDoors(door.Public()),
			change: func(s, _ *Entry) { s.Args = json.RawMessage(`{"command":"make clean"}`) },
			want:   "entry #0 (call.submitted c1/r/call.submitted): its statement says arguments \"" + statement.Digest(json.RawMessage(`{"command":"make"}`)) + `" but the entry's arguments digest to`,
		},
		"a decision moved to another call": {
			doors:  statement.NewDoors(door.Public()),
			change: func(_, d *Entry) { d.CallID = "c2" },
			want:   `entry #1 (call.decided c1/r/call.decided): its statement says call "c1" but the entry says call_id "c2"`,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			submitted, decided := doorCall(t, door)
			if c.change != nil {
				c.change(&submitted, &decided)
			}
			_, err := checkStatements(t, c.doors, submitted, decided)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestUnsignedEntriesAreCountedNotFailed(t *testing.T) {
	door := testDoor("dev")
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	old := []Entry{
		{Kind: KindCallSubmitted, Event: "o1/r/call.submitted", At: at, CallID: "o1", Requester: "ci-7", Tool: "shell"},
		{Kind: KindCallDecided, Event: "o1/r/call.decided", At: at, CallID: "o1", Decision: &Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox"}},
		{Kind: KindCallFinished, Event: "o1/r/call.finished", At: at, CallID: "o1", Status: "ok"},
		{Kind: KindCallDecided, Event: "o2/r/call.decided", At: at, CallID: "o2", Decision: &Decision{Kind: "approved", DecidedBy: "policy", Channel: "policy"}},
		{Kind: KindCallDecided, Event: "o3/r/call.decided", At: at, CallID: "o3", Decision: &Decision{Kind: "denied", DecidedBy: "tmp-writer-bot", Channel: "handler"}},
	}
	submitted, decided := doorCall(t, door)
	rep, err := checkStatements(t, statement.NewDoors(door.Public()), append(old, submitted, decided)...)
	require.NoError(t, err, "entries recorded before statements do not fail")
	assert.Equal(t, 2, rep.Verified)
	assert.Equal(t, 4, rep.Unsigned, "the call.finished records nobody's word")
	assert.Equal(t, 2, rep.NoStatementCount)
	assert.Equal(t, []string{
		"entry #0 (call.submitted o1/r/call.submitted): requested by ci-7",
		"entry #1 (call.decided o1/r/call.decided): approved by alice via inbox",
	}, rep.NoStatement)
}

// A sticky decision's statement travels with every call it decides, and a
// session's end with every call it denies: verified against the call it
// was made on.
func TestHandedOnDecisionsVerifyAgainstTheirOwnCall(t *testing.T) {
	door := testDoor("dev")
	now := time.Now().UTC()
	c1 := policy.Call{ID: "c1", Session: "s", Tool: "shell", Args: json.RawMessage(`{"command":"make"}`)}
	sticky := policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "alice", DeciderGroups: []string{"ops"}, Channel: "slack"}
	sd, err := door.Sign(policy.DecisionStatement(c1, sticky, "shell"))
	require.NoError(t, err)
	end, err := door.Sign(policy.EndStatement("s", policy.Approver{Name: "bob"}))
	require.NoError(t, err)
	cancel, err := door.Sign(policy.CancelStatement(policy.Call{ID: "c4", Session: "s", Tool: "shell"}, policy.Approver{Name: "carol"}, false))
	require.NoError(t, err)
	entries := []Entry{
		{Kind: KindSessionSticky, Event: "session/s/sticky/c1", At: now, CallID: "c1", Session: "s", Tool: "shell",
			Decision: &Decision{Kind: "approved_for_session", DecidedBy: "alice", Groups: []string{"ops"}, Channel: "slack", At: now, Statement: sd},
			Details:  map[string]any{"key": "shell"}},
		{Kind: KindCallDecided, Event: "c2/r/call.decided", At: now, CallID: "c2", Session: "s",
			Decision: &Decision{Kind: "approved_for_session", DecidedBy: "alice", Groups: []string{"ops"}, Channel: "session", At: now,
				Sticky: "session/s/sticky/c1", Statement: sd}},
		{Kind: KindSessionEnded, Event: "session/s/ended", At: now, Session: "s", By: "bob", Statement: end},
		{Kind: KindCallDecided, Event: "c3/r/call.decided", At: now, CallID: "c3", Session: "s",
			Decision: &Decision{Kind: "denied_with_reason", DecidedBy: "bob", Channel: "session", At: now, Statement: end}},
		{Kind: KindCallDecided, Event: "c4/r/call.decided", At: now, CallID: "c4", Session: "s",
			Decision: &Decision{Kind: "denied_with_reason", DecidedBy: "carol", Channel: "cancel", At: now, Statement: cancel}},
	}
	rep, err := checkStatements(t, statement.NewDoors(door.Public()), entries...)
	require.NoError(t, err)
	assert.Equal(t, 5, rep.Verified)

	entries[1].Decision.Sticky = "session/s/sticky/c9"
	_, err = checkStatements(t, statement.NewDoors(door.Public()), entries...)
	assert.ErrorContains(t, err, `entry #1 (call.decided c2/r/call.decided): its statement says call "c1" but the entry says sticky decision was taken on call "c9"`)
}

func TestReceiptsAndExportsCheckTheirStatements(t *testing.T) {
	door := testDoor("dev")
	submitted, decided := doorCall(t, door)
	decided.Decision.Groups = nil // changed by whoever wrote the log
	l, _ := openTest(t)
	ctx := context.Background()
	_, err := l.Append(ctx, submitted, decided)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	want := `entry #1 (call.decided c1/r/call.decided): its statement says groups "ops" but the entry says groups (none)`

	r, err := l.Prove(ctx, "c1")
	require.NoError(t, err)
	sc := NewStatementCheck(statement.NewDoors(door.Public()), nil)
	_, err = VerifyReceiptWithOptions(r, l.Verifier(), VerifyOptions{Statements: sc})
	require.NoError(t, err)
	_, err = sc.Finish()
	assert.EqualError(t, err, want)

	var export bytes.Buffer
	require.NoError(t, l.Export(ctx, &export, time.Time{}, time.Time{}))
	sc = NewStatementCheck(statement.NewDoors(door.Public()), nil)
	_, err = VerifyExportWithOptions(&export, l.Verifier(), VerifyOptions{Statements: sc})
	require.NoError(t, err)
	rep, err := sc.Finish()
	assert.EqualError(t, err, want)
	assert.Equal(t, 1, rep.Verified, "the submission's")
}
