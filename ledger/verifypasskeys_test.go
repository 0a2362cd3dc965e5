package ledger

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/passkeytest"
	"github.com/toolgate/toolgate/statement"
)

const (
	pkRPID   = "toolgate.example.com"
	pkOrigin = "https://toolgate.example.com"
)

// pkStart is when the passkeys of these tests are registered.
var pkStart = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// pkRegistered is a passkey.registered entry as package passkey/registry
// writes it.
func pkRegistered(auth *passkeytest.Authenticator, person string, at time.Time) Entry {
	id := passkey.IDString(auth.ID)
	return Entry{Kind: KindPasskeyRegistered, Event: KindPasskeyRegistered + "/" + id, At: at, By: person, Name: "YubiKey",
		Details: map[string]any{"passkey": map[string]any{"credential_id": id,
			"public_key": base64.StdEncoding.EncodeToString(auth.PublicKey()), "rp_id": pkRPID}}}
}

// pkRemoved is a passkey.removed entry as the registry writes it.
func pkRemoved(auth *passkeytest.Authenticator, person string, at time.Time) Entry {
	id := passkey.IDString(auth.ID)
	return Entry{Kind: KindPasskeyRemoved, Event: KindPasskeyRemoved + "/" + id, At: at, By: person,
		Details: map[string]any{"passkey": map[string]any{"credential_id": id}}}
}

var pkArgs = json.RawMessage(`{"amount":100,"to":"acme"}`)

// pkSubmitted is a call of send_money under a rule that needs a passkey.
func pkSubmitted(call string, at time.Time) Entry {
	return Entry{Kind: KindCallSubmitted, Event: call + "/run-" + call + "/" + KindCallSubmitted, At: at, CallID: call,
		Requester: "agent", Tool: "send_money", Args: pkArgs, Rule: "payments", PasskeyRule: true}
}

// pkDecision is the decision the workflow checks an assertion over.
func pkDecision(call, kind, by string, args json.RawMessage, at time.Time) passkey.Decision {
	return passkey.Decision{Call: call, Run: "run-" + call, Tool: "send_money", Args: statement.Digest(args), Kind: kind, By: by,
		Expires: at.Add(2 * time.Minute)}
}

// pkDecided is call's decision by the person, with their passkey's
// assertion over it, as the workflow logs it.
func pkDecided(call, by string, a *passkey.Assertion, at time.Time) Entry {
	return Entry{Kind: KindCallDecided, Event: call + "/run-" + call + "/" + KindCallDecided, At: at.Add(time.Second), CallID: call,
		Decision: &Decision{Kind: "approved", DecidedBy: by, Channel: "inbox", At: at, Passkey: a, Run: "run-" + call}}
}

// pkApproved is call approved by the person with auth, at at.
func pkApproved(auth *passkeytest.Authenticator, call, by string, at time.Time) Entry {
	return pkDecided(call, by, auth.Assert(pkDecision(call, "approved", by, pkArgs, at), pkRPID, pkOrigin), at)
}

// checkPasskeys appends entries to a new log, signs it, verifies it
// (which must pass: whoever holds its key wrote it so) and checks its
// passkey approvals.
func checkPasskeys(t *testing.T, entries ...Entry) (PasskeyReport, error) {
	t.Helper()
	l, _ := openTest(t)
	ctx := context.Background()
	_, err := l.Append(ctx, entries...)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	pc := NewPasskeyCheck(nil)
	_, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Passkeys: pc})
	require.NoError(t, err, "the log itself is intact")
	return pc.Finish()
}

// pkLog is a log of three passkey approvals: pay-1 approved by alice,
// pay-2 by alice and bob under four eyes, pay-3 approved by alice with
// edits.
func pkLog(t *testing.T) []Entry {
	alice, bob := passkeytest.New(), passkeytest.New()
	t1, t2, t3, t4 := pkStart.Add(time.Hour), pkStart.Add(2*time.Hour), pkStart.Add(3*time.Hour), pkStart.Add(4*time.Hour)
	edited := json.RawMessage(`{"amount":10,"to":"acme"}`)
	// Made in the order of their times: each moves its counter forward.
	one := pkApproved(alice, "pay-1", "alice", t1)
	four := pkDecided("pay-2", "bob", bob.Assert(pkDecision("pay-2", "approved", "bob", pkArgs, t3), pkRPID, pkOrigin), t3)
	four.Decision.Approvals = []Approval{
		{By: "alice", Channel: "inbox", At: t2, Passkey: alice.Assert(pkDecision("pay-2", "approved", "alice", pkArgs, t2), pkRPID, pkOrigin)},
		{By: "bob", Channel: "inbox", At: t3, Passkey: four.Decision.Passkey},
	}
	edit := pkDecided("pay-3", "alice", alice.Assert(pkDecision("pay-3", "approved_with_edits", "alice", edited, t4), pkRPID, pkOrigin), t4)
	edit.Decision.Kind, edit.Decision.EditedArgs = "approved_with_edits", edited
	return []Entry{
		pkRegistered(alice, "alice", pkStart), pkRegistered(bob, "bob", pkStart),
		pkSubmitted("pay-1", t1), one,
		// The four-eyes call is logged when decided, after pay-3, whose
		// assertion alice made after hers on pay-2.
		pkSubmitted("pay-2", t2), pkSubmitted("pay-3", t2), edit, four,
	}
}

func TestPasskeyApprovalsVerifyFromTheLogAndFromAReceipt(t *testing.T) {
	entries := pkLog(t)
	rep, err := checkPasskeys(t, entries...)
	require.NoError(t, err)
	assert.Equal(t, PasskeyReport{Verified: 4, Registered: 2}, rep, "alice's, both four-eyes approvals (bob's once) and alice's edit")

	l, _ := openTest(t)
	ctx := context.Background()
	_, err = l.Append(ctx, entries...)
	require.NoError(t, err)
	r, err := l.Prove(ctx, "pay-2")
	require.NoError(t, err)
	require.Len(t, r.Passkeys, 2, "alice's and bob's registrations")
	assert.Equal(t, []int64{0, 1}, []int64{r.Passkeys[0].Index, r.Passkeys[1].Index})

	// Offline, from the file, laid out anew.
	var read Receipt
	require.NoError(t, json.Unmarshal(indented(t, writeJSON(t, r), true), &read))
	pc := NewPasskeyCheck(nil)
	_, err = VerifyReceiptWithOptions(read, l.Verifier(), VerifyOptions{Passkeys: pc})
	require.NoError(t, err)
	rep, err = pc.Finish()
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Verified)

	// A receipt without the registrations proves nothing of the passkeys.
	bare := r
	bare.Passkeys = nil
	pc = NewPasskeyCheck(nil)
	_, err = VerifyReceiptWithOptions(bare, l.Verifier(), VerifyOptions{Passkeys: pc})
	require.NoError(t, err, "its entries are the log's")
	_, err = pc.Finish()
	assert.ErrorContains(t, err, "the receipt carries no passkey.registered entry of it")

	// One byte of the stored assertion, or of the registration, changed.
	for name, where := range map[string]func(Receipt) *ProvenEntry{
		"the assertion":    func(r Receipt) *ProvenEntry { return &r.Entries[1] },
		"the registration": func(r Receipt) *ProvenEntry { return &r.Passkeys[1] },
	} {
		t.Run(name, func(t *testing.T) {
			var changed Receipt
			require.NoError(t, json.Unmarshal(writeJSON(t, r), &changed))
			e := where(changed)
			field := "signature"
			if name == "the registration" {
				field = "public_key"
			}
			e.Bytes = flipIn(t, e.Bytes, field)
			e.Entry = nil
			_, err := VerifyReceiptWithOptions(changed, l.Verifier(), VerifyOptions{Passkeys: NewPasskeyCheck(nil)})
			assert.ErrorContains(t, err, "was changed")
		})
	}

	// A whole export checks them too.
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	var export bytes.Buffer
	require.NoError(t, l.Export(ctx, &export, time.Time{}, time.Time{}))
	pc = NewPasskeyCheck(nil)
	_, err = VerifyExportWithOptions(&export, l.Verifier(), VerifyOptions{Passkeys: pc})
	require.NoError(t, err)
	rep, err = pc.Finish()
	require.NoError(t, err)
	assert.Equal(t, 4, rep.Verified)
}

// flipIn changes one character of the base64 value of field in an entry's
// bytes.
func flipIn(t *testing.T, entry []byte, field string) []byte {
	t.Helper()
	key := []byte(`"` + field + `":"`)
	at := bytes.Index(entry, key)
	require.Positive(t, at, "the entry has %s", field)
	out := bytes.Clone(entry)
	i := at + len(key) + 10
	if out[i] == 'A' {
		out[i] = 'B'
	} else {
		out[i] = 'A'
	}
	return out
}

func TestAStoredAssertionChangedIsCaughtByTheLogItself(t *testing.T) {
	l, _ := openTest(t)
	ctx := context.Background()
	_, err := l.Append(ctx, pkLog(t)...)
	require.NoError(t, err)
	held, err := l.SignCheckpoint(ctx)
	require.NoError(t, err)
	stored, err := l.Entries(ctx, 3, 4)
	require.NoError(t, err)
	_, err = l.st.db.DB.Exec("UPDATE ledger_entries SET entry = ? WHERE idx = 3", flipIn(t, stored[0].Entry, "signature"))
	require.NoError(t, err)
	_, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Held: [][]byte{held.Note}, Passkeys: NewPasskeyCheck(nil)})
	assert.ErrorContains(t, err, "entry #3 (call.decided pay-1/run-pay-1/call.decided) was changed")
}

func TestPasskeyApprovalsThatDoNotHoldAreNamed(t *testing.T) {
	t1, t2 := pkStart.Add(time.Hour), pkStart.Add(2*time.Hour)
	cases := map[string]struct {
		entries func(alice, bob *passkeytest.Authenticator) []Entry
		want    string
	}{
		"one byte of the signature changed": {func(alice, _ *passkeytest.Authenticator) []Entry {
			e := pkApproved(alice, "pay-1", "alice", t1)
			e.Decision.Passkey.Signature[len(e.Decision.Passkey.Signature)-1] ^= 1
			return []Entry{pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), e}
		}, "entry #2 (call.decided pay-1/run-pay-1/call.decided): call pay-1, approved by alice: passkey "},
		"one byte of the authenticator data changed": {func(alice, _ *passkeytest.Authenticator) []Entry {
			e := pkApproved(alice, "pay-1", "alice", t1)
			e.Decision.Passkey.AuthenticatorData[36] ^= 1 // the counter's last byte
			return []Entry{pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), e}
		}, "call pay-1, approved by alice: passkey "},
		"the registration's public key changed": {func(alice, bob *passkeytest.Authenticator) []Entry {
			reg := pkRegistered(alice, "alice", pkStart)
			reg.Details["passkey"].(map[string]any)["public_key"] = base64.StdEncoding.EncodeToString(bob.PublicKey())
			return []Entry{reg, pkSubmitted("pay-1", t1), pkApproved(alice, "pay-1", "alice", t1)}
		}, passkey.ErrInvalid.Error()},
		"a passkey registered after the decision": {func(alice, _ *passkeytest.Authenticator) []Entry {
			return []Entry{pkSubmitted("pay-1", t1), pkApproved(alice, "pay-1", "alice", t1), pkRegistered(alice, "alice", pkStart)}
		}, "was registered after this decision, by entry #2"},
		"a passkey never registered": {func(alice, _ *passkeytest.Authenticator) []Entry {
			return []Entry{pkSubmitted("pay-1", t1), pkApproved(alice, "pay-1", "alice", t1)}
		}, "no passkey.registered entry registers it"},
		"a passkey removed before": {func(alice, _ *passkeytest.Authenticator) []Entry {
			return []Entry{pkRegistered(alice, "alice", pkStart), pkRemoved(alice, "alice", t1.Add(-time.Minute)),
				pkSubmitted("pay-1", t1), pkApproved(alice, "pay-1", "alice", t1)}
		}, "was removed by entry #1 at 2026-12-05T12:59:00Z, before this approval at 2026-12-05T13:00:00Z"},
		"another person's passkey": {func(alice, _ *passkeytest.Authenticator) []Entry {
			return []Entry{pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), pkApproved(alice, "pay-1", "mallory", t1)}
		}, "is alice's (registered by entry #0), not mallory's, who decided"},
		"other arguments than those signed": {func(alice, _ *passkeytest.Authenticator) []Entry {
			sub := pkSubmitted("pay-1", t1)
			sub.Args = json.RawMessage(`{"amount":100000,"to":"acme"}`)
			return []Entry{pkRegistered(alice, "alice", pkStart), sub, pkApproved(alice, "pay-1", "alice", t1)}
		}, passkey.ErrChallenge.Error()},
		"a counter that went back across two decisions": {func(alice, _ *passkeytest.Authenticator) []Entry {
			later := pkApproved(alice, "pay-2", "alice", t2) // counter 1
			earlier := pkApproved(alice, "pay-1", "alice", t1)
			return []Entry{pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), pkSubmitted("pay-2", t1), earlier, later}
		}, "entry #4 (call.decided pay-2/run-pay-2/call.decided): call pay-2, approved by alice: passkey " +
			"%s: " + passkey.ErrClone.Error() + " (1 after 2, of entry #3"},
		"an assertion made at another origin": {func(alice, _ *passkeytest.Authenticator) []Entry {
			e := pkDecided("pay-1", "alice", alice.Assert(pkDecision("pay-1", "approved", "alice", pkArgs, t1), pkRPID, "https://evil.example"), t1)
			return []Entry{pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), e}
		}, `the assertion was made at origin "https://evil.example", not at https://toolgate.example.com[:port]`},
		"a decision that names no run": {func(alice, _ *passkeytest.Authenticator) []Entry {
			e := pkApproved(alice, "pay-1", "alice", t1)
			e.Event, e.Decision.Run = "pay-1/decided", ""
			return []Entry{pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), e}
		}, "call pay-1, approved by alice: run unknown"},
		"an approval a passkey rule needed one for, without": {func(alice, _ *passkeytest.Authenticator) []Entry {
			e := pkDecided("pay-1", "alice", nil, t1)
			return []Entry{pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), e}
		}, `entry #2 (call.decided pay-1/run-pay-1/call.decided): call pay-1's rule "payments" needs the approver's passkey for every approval, and the approval by alice carries none`},
		"a four-eyes approval without": {func(alice, bob *passkeytest.Authenticator) []Entry {
			e := pkApproved(bob, "pay-1", "bob", t1)
			e.Decision.Approvals = []Approval{{By: "alice", At: t1}, {By: "bob", At: t1, Passkey: e.Decision.Passkey}}
			return []Entry{pkRegistered(bob, "bob", pkStart), pkSubmitted("pay-1", t1), e}
		}, "the approval by alice carries none"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			alice, bob := passkeytest.New(), passkeytest.New()
			want := c.want
			if bytes.Contains([]byte(want), []byte("%s")) {
				want = string(bytes.Replace([]byte(want), []byte("%s"), []byte(passkey.IDString(alice.ID)), 1))
			}
			_, err := checkPasskeys(t, c.entries(alice, bob)...)
			assert.ErrorContains(t, err, want)
		})
	}
}

func TestSealedArgumentsAreCheckedWithTheKeysOrSaidUnchecked(t *testing.T) {
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	ring, _, err := keyring.LoadOrCreate(filepath.Join(dir, "keys.json"))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := Open(ctx, Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys, Sealer: ring})
	require.NoError(t, err)
	defer l.Close()
	alice := passkeytest.New()
	t1 := pkStart.Add(time.Hour)
	_, err = l.Append(ctx, pkRegistered(alice, "alice", pkStart), pkSubmitted("pay-1", t1), pkApproved(alice, "pay-1", "alice", t1))
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)

	pc := NewPasskeyCheck(ring)
	_, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Passkeys: pc})
	require.NoError(t, err)
	rep, err := pc.Finish()
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Verified)

	pc = NewPasskeyCheck(nil)
	_, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Passkeys: pc})
	require.NoError(t, err)
	rep, err = pc.Finish()
	require.NoError(t, err, "what cannot be checked is not a failure")
	assert.Zero(t, rep.Verified)
	assert.Equal(t, 1, rep.UncheckedCount)
	assert.Contains(t, rep.Unchecked[0], "call pay-1, approved by alice: its arguments are sealed")
}

func TestAPasskeyOfToolgateDevVerifiesAtLocalhost(t *testing.T) {
	alice := passkeytest.New()
	t1 := pkStart.Add(time.Hour)
	reg := pkRegistered(alice, "alice", pkStart)
	reg.Details["passkey"].(map[string]any)["rp_id"] = "localhost"
	d := pkDecision("pay-1", "approved", "alice", pkArgs, t1)
	rep, err := checkPasskeys(t, reg, pkSubmitted("pay-1", t1), pkDecided("pay-1", "alice", alice.Assert(d, "localhost", "http://localhost:8234"), t1))
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Verified)
}

func TestAPartOfTheLogSaysWhatItCannotCheck(t *testing.T) {
	l, _ := openTest(t)
	ctx := context.Background()
	_, err := l.Append(ctx, pkLog(t)...)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	var export bytes.Buffer
	require.NoError(t, l.Export(ctx, &export, pkStart.Add(90*time.Minute), time.Time{}))
	pc := NewPasskeyCheck(nil)
	_, err = VerifyExportWithOptions(&export, l.Verifier(), VerifyOptions{Passkeys: pc})
	require.NoError(t, err)
	rep, err := pc.Finish()
	require.NoError(t, err, "the registrations are before this part: not known, not wrong")
	assert.Equal(t, 3, rep.UncheckedCount)
	assert.Contains(t, rep.Unchecked[0], "is not in this part of the log")
}
