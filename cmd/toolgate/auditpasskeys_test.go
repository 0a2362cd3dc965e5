package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/passkeytest"
	"github.com/toolgate/toolgate/statement"
)

// passkeyLedger is a ledger of alice's passkey and her approval of pay-1
// with it; bad: the assertion's signature is not over what it says.
func passkeyLedger(t *testing.T, bad bool) (db, key string) {
	dir := t.TempDir()
	db, key = filepath.Join(dir, "ledger.db"), filepath.Join(dir, "ledger.key")
	keys, _, err := ledger.LoadOrCreateKey(key, "prod")
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: db, Keys: keys})
	require.NoError(t, err)
	defer l.Close()
	alice := passkeytest.New()
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	args := json.RawMessage(`{"amount":100}`)
	d := passkey.Decision{Call: "pay-1", Run: "r1", Tool: "send_money", Args: statement.Digest(args), Kind: "approved", By: "alice", Expires: at.Add(time.Minute)}
	a := alice.Assert(d, "toolgate.example.com", "https://toolgate.example.com")
	if bad {
		a.Signature[len(a.Signature)-1] ^= 1
	}
	id := passkey.IDString(alice.ID)
	_, err = l.Append(context.Background(),
		ledger.Entry{Kind: ledger.KindPasskeyRegistered, Event: ledger.KindPasskeyRegistered + "/" + id, At: at.Add(-time.Hour), By: "alice",
			Details: map[string]any{"passkey": map[string]any{"credential_id": id, "public_key": base64.StdEncoding.EncodeToString(alice.PublicKey()), "rp_id": "toolgate.example.com"}}},
		ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "pay-1/r1/call.submitted", At: at, CallID: "pay-1", Tool: "send_money", Args: args, Rule: "payments", PasskeyRule: true},
		ledger.Entry{Kind: ledger.KindCallDecided, Event: "pay-1/r1/call.decided", At: at, CallID: "pay-1",
			Decision: &ledger.Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox", At: at, Passkey: a, Run: "r1"}})
	require.NoError(t, err)
	_, err = l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	return db, key
}

func TestAuditVerifyChecksPasskeyApprovals(t *testing.T) {
	db, key := passkeyLedger(t, false)
	code, out, errs := audit(t, "verify", "--ledger", db, "--ledger-key", key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "passkeys: 1 approvals verified (each its approver's authenticator's signature, with user verification, over the call, run, tool, arguments and decision); 1 passkeys registered, 0 removed")

	receipt := filepath.Join(t.TempDir(), "pay-1.receipt")
	code, _, errs = audit(t, "proof", "pay-1", "--ledger", db, "--ledger-key", key, "-o", receipt)
	require.Equal(t, 0, code, errs)
	_, vkey, _ := audit(t, "key", "--ledger-key", key)
	code, out, errs = audit(t, "verify", "--receipt", receipt, "--key", strings.TrimSpace(vkey))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "call pay-1, 2 entries (and 1 of the passkeys its decision was signed with) in checkpoint 3")
	assert.Contains(t, out, "passkeys: 1 approvals verified")

	db, key = passkeyLedger(t, true)
	code, out, errs = audit(t, "verify", "--ledger", db, "--ledger-key", key)
	assert.Equal(t, exitFailure, code, out)
	assert.Contains(t, errs, "is intact, but a passkey approval in it does NOT verify: entry #2 (call.decided pay-1/r1/call.decided): call pay-1, approved by alice: passkey ")
}
