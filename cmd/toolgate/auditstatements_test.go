package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// auditDoor is door dev's key, the same in every run.
func auditDoor(name string) *statement.Signer {
	seed := sha256.Sum256([]byte("audit door " + name))
	return statement.NewSigner(name, ed25519.NewKeyFromSeed(seed[:]))
}

// doorsFile writes a doors file trusting keys.
func doorsFile(t *testing.T, keys ...statement.DoorKey) string {
	path := filepath.Join(t.TempDir(), "doors.json")
	require.NoError(t, statement.WriteDoors(path, statement.NewDoors(keys...)))
	return path
}

// signedLedger is a ledger holding call c1, submitted by ci-7 and
// approved by alice through the inbox, each with door dev's statement,
// as change leaves them (whoever holds the ledger's key writes what it
// likes).
func signedLedger(t *testing.T, change func(submitted, decided *ledger.Entry)) auditLedger {
	dir := t.TempDir()
	al := auditLedger{db: filepath.Join(dir, "ledger.db"), key: filepath.Join(dir, "ledger.key")}
	keys, _, err := ledger.LoadOrCreateKey(al.key, "prod")
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: al.db, Keys: keys})
	require.NoError(t, err)
	defer l.Close()

	door, now := auditDoor("dev"), time.Now().UTC()
	call := policy.Call{ID: "c1", Session: "demo", Tool: "shell", Requester: "ci-7", Args: json.RawMessage(`{"command":"make"}`)}
	sub, err := door.Sign(policy.SubmissionStatement(call))
	require.NoError(t, err)
	d := policy.Decision{Kind: policy.Approved, DecidedBy: "alice", DeciderGroups: []string{"ops"}, Channel: "inbox",
		Identity: &policy.Identity{Issuer: "https://idp.example.com", Subject: "alice@example.com"}}
	dec, err := door.Sign(policy.DecisionStatement(call, d, "shell"))
	require.NoError(t, err)
	submitted := ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "c1/r/call.submitted", At: now, CallID: "c1", Session: "demo",
		Requester: "ci-7", Tool: "shell", Args: call.Args, Statement: sub}
	decided := ledger.Entry{Kind: ledger.KindCallDecided, Event: "c1/r/call.decided", At: now, CallID: "c1", Session: "demo",
		Decision: &ledger.Decision{Kind: "approved", DecidedBy: "alice", Groups: []string{"ops"}, Channel: "inbox", At: now,
			Identity: &ledger.Identity{Issuer: "https://idp.example.com", Subject: "alice@example.com"}, Statement: dec}}
	if change != nil {
		change(&submitted, &decided)
	}
	_, err = l.Append(context.Background(), submitted, decided)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	return al
}

func TestAuditVerifyAndShowCheckTheDoorsStatements(t *testing.T) {
	door := auditDoor("dev")
	al, doors := signedLedger(t, nil), doorsFile(t, door.Public())
	code, out, errs := audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--doors", doors)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 2 entries")
	assert.Contains(t, out, "statements: 2 verified: 2 by door dev (key "+door.KeyID()+"); 0 entries unsigned")

	code, out, errs = audit(t, "show", "c1", "--ledger", al.db, "--ledger-key", al.key, "--doors", doors)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "requester: ci-7 at door dev (key "+door.KeyID()+")\n")
	assert.Contains(t, out, "decision: approved by alice via inbox for ops at door dev (key "+door.KeyID()+")\n")
	assert.Contains(t, out, "statement: verified against the doors given, issued ")
	assert.Contains(t, out, "identity: alice@example.com at https://idp.example.com (verified: door dev's statement)")

	// Without the doors' keys nothing is taken on the door's word.
	t.Chdir(t.TempDir()) // no .toolgate/doors.json here
	code, out, errs = audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "statements: not checked: no doors file: give the doors' public keys with --doors FILE")
	code, out, errs = audit(t, "show", "c1", "--ledger", al.db, "--ledger-key", al.key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "at door dev (key "+door.KeyID()+"), unverified\n")
	assert.Contains(t, out, "statement: not checked: no doors file")
	assert.Contains(t, out, "identity: alice@example.com at https://idp.example.com (unverified: no doors file given)")
}

func TestAuditVerifyNamesTheStatementThatDoesNotHold(t *testing.T) {
	door, other := auditDoor("dev"), auditDoor("laptop")
	revoked := door.Public()
	revoked.Revoked = true
	const entry = "entry #1 (call.decided c1/r/call.decided): "
	cases := map[string]struct {
		change func(submitted, decided *ledger.Entry)
		doors  []statement.DoorKey
		want   string
	}{
		"statement altered": {
			change: func(_, d *ledger.Entry) {
				st := d.Decision.Statement
				st.Statement = bytes.Replace(st.Statement, []byte(`"alice"`), []byte(`"mallory"`), 1)
				d.Decision.DecidedBy = "mallory"
			},
			doors: []statement.DoorKey{door.Public()},
			want:  entry + "statement altered: its signature does not verify (key " + door.KeyID() + " of door dev)",
		},
		"a key the verifier was not given": {
			doors: []statement.DoorKey{other.Public()},
			want:  "statement signed by key " + door.KeyID() + ` (door "dev", as it says) that the verifier was not given`,
		},
		"a revoked key": {
			doors: []statement.DoorKey{revoked},
			want:  entry + "statement signed by revoked key " + door.KeyID() + " of door dev",
		},
		"decided_by changed": {
			change: func(_, d *ledger.Entry) { d.Decision.DecidedBy = "mallory" },
			doors:  []statement.DoorKey{door.Public()},
			want:   entry + `its statement says by "alice" but the entry says decided_by "mallory"`,
		},
		"groups changed": {
			change: func(_, d *ledger.Entry) { d.Decision.Groups = []string{"admins"} },
			doors:  []statement.DoorKey{door.Public()},
			want:   entry + `its statement says groups "ops" but the entry says groups "admins"`,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			al := signedLedger(t, c.change)
			code, out, errs := audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--doors", doorsFile(t, c.doors...))
			assert.Equal(t, exitFailure, code, out)
			assert.Contains(t, errs, "(toolgate/prod) is intact, but")
			assert.Contains(t, errs, "NOT verify")
			assert.Contains(t, errs, c.want)
		})
	}

	// Altered, the decision shows unverified, and so does the identity.
	al := signedLedger(t, cases["statement altered"].change)
	code, out, errs := audit(t, "show", "c1", "--ledger", al.db, "--ledger-key", al.key, "--doors", doorsFile(t, door.Public()))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "decision: approved by mallory via inbox for ops at door dev (key "+door.KeyID()+"), unverified\n")
	assert.Contains(t, out, "statement: NOT verified: statement altered: its signature does not verify")
	assert.Contains(t, out, "identity: alice@example.com at https://idp.example.com (unverified: its statement does not verify)")
}

func TestAuditVerifyCountsEntriesRecordedBeforeStatements(t *testing.T) {
	al := newAuditLedger(t)
	code, out, errs := audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--doors", doorsFile(t, auditDoor("dev").Public()))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "statements: 0 verified; 20 entries unsigned (recorded before statements, or by toolgate itself)")
	assert.Contains(t, out, "  no statement: entry #0 (call.submitted w0/r/call.submitted): requested by ci-7\n")
	assert.Contains(t, out, "  no statement: entry #1 (call.decided w0/r/call.decided): approved by alice via inbox\n")
	assert.Contains(t, out, "  … and 15 more with no statement\n")
	assert.Equal(t, 5, strings.Count(out, "no statement: "), "the first five named")
}

func TestAuditVerifyChecksStatementsInExportsAndReceipts(t *testing.T) {
	door := auditDoor("dev")
	al := signedLedger(t, func(_, d *ledger.Entry) { d.Decision.Groups = nil })
	dir := t.TempDir()
	export, receipt, doors := filepath.Join(dir, "export.jsonl"), filepath.Join(dir, "c1.receipt"), doorsFile(t, door.Public())
	code, _, errs := audit(t, "export", "--ledger", al.db, "--ledger-key", al.key, "-o", export)
	require.Equal(t, 0, code, errs)
	code, _, errs = audit(t, "proof", "c1", "--ledger", al.db, "--ledger-key", al.key, "-o", receipt)
	require.Equal(t, 0, code, errs)
	want := `entry #1 (call.decided c1/r/call.decided): its statement says groups "ops" but the entry says groups (none)`
	for kind, path := range map[string]string{"export": export, "receipt": receipt} {
		code, out, errs := audit(t, "verify", "--"+kind, path, "--ledger-key", al.key, "--doors", doors)
		assert.Equal(t, exitFailure, code, out)
		assert.Contains(t, errs, kind+" "+path+" is intact, but a statement in it does NOT verify: "+want)

		code, out, errs = audit(t, "verify", "--"+kind, path, "--ledger-key", al.key, "--doors", filepath.Join(dir, "nope.json"))
		assert.Equal(t, exitUsage, code, out)
		assert.Contains(t, errs, "--doors: read the doors file: no such file or directory")
		assert.NotContains(t, errs, dir, "errors do not name where the keys are")
	}
}

func TestAuditKeyListsTheDoors(t *testing.T) {
	al := newAuditLedger(t)
	dev, laptop := auditDoor("dev"), auditDoor("laptop").Public()
	laptop.Revoked = true
	code, out, errs := audit(t, "key", "--ledger-key", al.key, "--doors", doorsFile(t, dev.Public(), laptop))
	require.Equal(t, 0, code, errs)
	assert.True(t, strings.HasPrefix(out, "toolgate/prod+"), out)
	assert.Equal(t, 1, strings.Count(out, "\n"), "stdout stays the verifier key alone")
	assert.Contains(t, errs, "  door dev          key "+dev.KeyID()+"\n")
	assert.Contains(t, errs, "  door laptop       key "+laptop.KeyID+"  revoked\n")
}
