package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/server"
)

// serveAuditLedger serves the ledger over the HTTP API, as toolgate serve
// does, with an auditor's and an approver's token.
func serveAuditLedger(t *testing.T, al auditLedger) (*ledger.Ledger, string) {
	t.Helper()
	return serveAuditLedgerWith(t, al, nil)
}

// serveAuditLedgerWith is serveAuditLedger with the server's handler
// wrapped (nil: as it is).
func serveAuditLedgerWith(t *testing.T, al auditLedger, wrap func(http.Handler, *ledger.Ledger) http.Handler) (*ledger.Ledger, string) {
	t.Helper()
	keys, err := ledger.LoadKey(al.key)
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: al.db, Keys: keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	tokens, err := server.NewTokens([]server.TokenEntry{
		{Name: "audrey", Role: server.RoleAuditor, SHA256: server.HashToken("auditor-token")},
		{Name: "alice", Role: server.RoleApprover, SHA256: server.HashToken("approver-token")},
	})
	require.NoError(t, err)
	var h http.Handler = server.New(server.Config{Tokens: tokens, Ledger: l})
	if wrap != nil {
		h = wrap(h, l)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return l, srv.URL
}

func TestAuditOverTheAPIReadsAndVerifiesWithTheKeyYouHold(t *testing.T) {
	al := newAuditLedger(t)
	l, url := serveAuditLedger(t, al)
	api := []string{"--api", url, "--token", "auditor-token"}
	_, vkey, _ := audit(t, "key", "--ledger-key", al.key)
	key := "--key=" + strings.TrimSpace(vkey)

	code, out, errs := audit(t, append([]string{"key"}, api...)...)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, vkey, out, "the server states the key the ledger signs with")

	code, out, errs = audit(t, append([]string{"show", "w3"}, api...)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "#6  2026-12-03T10:00:00Z  call.submitted")
	assert.Contains(t, out, "decision: approved by alice via inbox")
	code, _, errs = audit(t, append([]string{"show", "nope"}, api...)...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, `the ledger has no entries for call "nope"`)

	receipt := filepath.Join(t.TempDir(), "w3.receipt")
	code, _, errs = audit(t, append([]string{"proof", "w3", "-o", receipt}, api...)...)
	require.Equal(t, 0, code, errs)
	code, out, errs = audit(t, "verify", "--receipt", receipt, key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "call w3, 2 entries in checkpoint 20 of toolgate/prod")

	code, out, errs = audit(t, append([]string{"verify", key, "--checkpoint", al.held}, api...)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "ledger at "+url+" (toolgate/prod) intact: 20 entries, 1 checkpoints, signed up to size 20, consistent with the held checkpoint of size 20")

	// More than one page (the server sends at most server.MaxAuditPage).
	ctx := context.Background()
	var more []ledger.Entry
	for i := range server.MaxAuditPage + 5 {
		more = append(more, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: fmt.Sprintf("m%d/r/call.submitted", i),
			At: time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC), CallID: fmt.Sprintf("m%d", i), Tool: "shell"})
	}
	_, err := l.Append(ctx, more...)
	require.NoError(t, err)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	code, out, errs = audit(t, append([]string{"verify", key}, api...)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, fmt.Sprintf("intact: %d entries, 1 checkpoints, signed up to size %d", 20+server.MaxAuditPage+5, 20+server.MaxAuditPage+5))

	// An entry edited in the database no longer matches the checkpoint.
	al.exec(t, `UPDATE ledger_entries SET entry = replace(entry, 'alice', 'mallory') WHERE idx = 7`)
	code, _, errs = audit(t, append([]string{"verify", key}, api...)...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "ledger at "+url+" is NOT intact")
	assert.Contains(t, errs, "does not match the entries")

	// A server's ledger is checked with a key held apart from it.
	other := filepath.Join(t.TempDir(), "other.key")
	code, _, errs = audit(t, "key", "--new", other, "--deployment", "prod")
	require.Equal(t, 0, code, errs)
	code, _, errs = audit(t, append([]string{"verify", "--ledger-key", other}, api...)...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "not signed by the log's key")
}

func TestAuditOverTheAPIRefusesWhatItCannotDo(t *testing.T) {
	al := newAuditLedger(t)
	_, url := serveAuditLedger(t, al)
	_, vkey, _ := audit(t, "key", "--ledger-key", al.key)
	key := "--key=" + strings.TrimSpace(vkey)

	code, _, errs := audit(t, "verify", key, "--api", url, "--token", "approver-token")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "alice holds a token with role approver; this needs role auditor", "an approver's token reads no entries")

	code, _, errs = audit(t, "verify", key, "--api", url)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "--api needs --token")

	code, _, errs = audit(t, "show", "w3", "--api", url, "--token", "auditor-token", "--ledger", al.db)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "give one of them")

	code, _, errs = audit(t, "verify", "--receipt", "x", key, "--api", url, "--token", "auditor-token")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "checked offline")

	t.Chdir(t.TempDir()) // no .toolgate/ledger.key here
	code, _, errs = audit(t, "verify", "--api", url, "--token", "auditor-token")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "--key VKEY")
}

func TestAuditTakesTheServerFromTheEnvironmentUnlessTheDatabaseIsNamed(t *testing.T) {
	al := newAuditLedger(t)
	_, url := serveAuditLedger(t, al)
	_, vkey, _ := audit(t, "key", "--ledger-key", al.key)
	t.Setenv("TOOLGATE_API", url)
	t.Setenv("TOOLGATE_TOKEN", "auditor-token")

	code, out, errs := audit(t, "verify", "--key", strings.TrimSpace(vkey))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "ledger at "+url+" (toolgate/prod) intact")

	code, out, errs = audit(t, "verify", "--ledger", al.db, "--key", strings.TrimSpace(vkey))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "ledger "+al.db+" (toolgate/prod) intact", "--ledger names the database")
	t.Setenv("TOOLGATE_LEDGER", al.db)
	code, out, errs = audit(t, "verify", "--key", strings.TrimSpace(vkey))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "ledger "+al.db+" (toolgate/prod) intact", "TOOLGATE_LEDGER wins over TOOLGATE_API")

	other := filepath.Join(t.TempDir(), "other.key")
	code, otherKey, errs := audit(t, "key", "--new", other, "--deployment", "other")
	require.Equal(t, 0, code, errs)
	code, out, errs = audit(t, "key", "--ledger-key", other)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, otherKey, out, "a key file named on the command line, not the server's key")
	code, out, errs = audit(t, "key")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, vkey, out, "the server's key")
}
