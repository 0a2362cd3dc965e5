package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/ledger"
)

// rollBack restores the ledger as a copy taken at size keep would: the
// newer entries, their hashes and the checkpoints past keep gone, the head
// at keep.
func (al auditLedger) rollBack(t *testing.T, keep int64) {
	t.Helper()
	al.exec(t,
		fmt.Sprintf(`DELETE FROM ledger_entries WHERE idx >= %d`, keep),
		fmt.Sprintf(`DELETE FROM ledger_hashes WHERE idx >= %d`, tlog.StoredHashIndex(0, keep)),
		fmt.Sprintf(`DELETE FROM ledger_checkpoints WHERE size > %d`, keep),
		fmt.Sprintf(`UPDATE ledger_head SET size = %d`, keep))
}

// fork is a second ledger signed with al's key, of n other entries: its
// checkpoints are of the same log, another tree.
func (al auditLedger) fork(t *testing.T, n int) (auditLedger, ledger.Checkpoint) {
	t.Helper()
	keys, err := ledger.LoadKey(al.key)
	require.NoError(t, err)
	f := auditLedger{db: filepath.Join(t.TempDir(), "fork.db"), key: al.key}
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: f.db, Keys: keys})
	require.NoError(t, err)
	defer l.Close()
	appendCalls(t, l, "f", n)
	c, err := l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	return f, c
}

// appendCalls appends n call.submitted entries, of calls prefix0….
func appendCalls(t *testing.T, l *ledger.Ledger, prefix string, n int) {
	t.Helper()
	var more []ledger.Entry
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		more = append(more, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: id + "/r/call.submitted",
			At: time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC), CallID: id, Tool: "shell"})
	}
	_, err := l.Append(context.Background(), more...)
	require.NoError(t, err)
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

func TestAuditVerifyStateRemembersTheLogAndRefusesARollback(t *testing.T) {
	al := newAuditLedger(t)
	state := filepath.Join(t.TempDir(), "prod.state")
	verify := []string{"verify", "--ledger", al.db, "--ledger-key", al.key}

	code, out, errs := audit(t, append(verify, "--state", state)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 20 entries, 2 checkpoints, signed up to size 20, trusted on first use: --state remembered nothing, and now remembers size 20")
	if runtime.GOOS != "windows" {
		info, err := os.Stat(state)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the state is owner-only")
	}
	remembered, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(remembered), "toolgate/prod\n20\n"), "the signed note: %s", remembered)

	code, out, errs = audit(t, append(verify, "--state", state)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 20 entries, 2 checkpoints, signed up to size 20, consistent from the remembered size 20 (--state)")

	// Rolled back to a copy of size 12, whose checkpoint of size 10 is
	// still there: it verifies on its own, the hole --state closes.
	al.rollBack(t, 12)
	code, out, errs = audit(t, verify...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 12 entries, 1 checkpoints, signed up to size 10", "without --state, a rolled-back ledger verifies")

	code, _, errs = audit(t, append(verify, "--state", state)...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "is NOT intact: the log was rolled back: this verifier saw size 20 before, and the log's latest checkpoint is of size 10")
	after, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Equal(t, remembered, after, "a refused log leaves the state as it was")
}

func TestAuditVerifyRefusesAForkedCheckpoint(t *testing.T) {
	al := newAuditLedger(t)
	_, forked := al.fork(t, 20)
	verify := []string{"verify", "--ledger", al.db, "--ledger-key", al.key}

	code, _, errs := audit(t, append(verify, "--checkpoint", writeFile(t, forked.Note))...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "is NOT intact: the log forked: the log's checkpoint of size 20 and the held checkpoint of size 20 sign different trees, and both are signed with the log's key")

	// Remembered from the fork.
	code, _, errs = audit(t, append(verify, "--state", writeFile(t, forked.Note))...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "the log forked: the log's checkpoint of size 20 and the remembered checkpoint of size 20 sign different trees")

	// A smaller tree of the fork: the log's larger checkpoint does not
	// extend it.
	_, small := al.fork(t, 15)
	code, _, errs = audit(t, append(verify, "--state", writeFile(t, small.Note))...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "the log forked: the log's checkpoint of size 20 does not extend the remembered checkpoint of size 15")
}

func TestAuditVerifyStateIsOfOneLog(t *testing.T) {
	al := newAuditLedger(t)
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "other.key"), "other")
	require.NoError(t, err)
	other, err := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dir, "other.db"), Keys: keys})
	require.NoError(t, err)
	defer other.Close()
	appendCalls(t, other, "o", 3)
	c, err := other.SignCheckpoint(context.Background())
	require.NoError(t, err)

	state := writeFile(t, c.Note)
	code, _, errs := audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--state", state)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, `--state: the verifier's state is of log "toolgate/other", not "toolgate/prod": a state file remembers one log`)

	code, _, errs = audit(t, "verify", "--receipt", state, "--ledger-key", al.key, "--state", state)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "--state goes with a whole log, not a receipt")
}

// withoutProofs makes the server answer GET /v1/audit/proof with a bare
// 404, as a toolgate from before the route does.
func withoutProofs(h http.Handler, _ *ledger.Ledger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/audit/proof" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func TestAuditVerifyOverTheAPIRemembersAndRefusesARollback(t *testing.T) {
	al := newAuditLedger(t)
	l, url := serveAuditLedgerWith(t, al, nil)
	_, vkey, _ := audit(t, "key", "--ledger-key", al.key)
	state := filepath.Join(t.TempDir(), "prod.state")
	verify := []string{"verify", "--key=" + strings.TrimSpace(vkey), "--api", url, "--token", "auditor-token"}

	code, out, errs := audit(t, append(verify, "--state", state)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "ledger at "+url+" (toolgate/prod) intact: 20 entries, 1 checkpoints, signed up to size 20, trusted on first use")

	code, out, errs = audit(t, append(verify, "--state", state)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 20 entries, 1 checkpoints, signed up to size 20, consistent from the remembered size 20 (--state, the server's consistency proof checked)")

	appendCalls(t, l, "m", 5)
	_, err := l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	code, out, errs = audit(t, append(verify, "--state", state)...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 25 entries, 1 checkpoints, signed up to size 25, consistent from the remembered size 20 (--state, the server's consistency proof checked, now remembers size 25)")

	al.rollBack(t, 12)
	code, out, errs = audit(t, verify...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 12 entries, 1 checkpoints, signed up to size 10", "without --state, a rolled-back server's ledger verifies")

	code, _, errs = audit(t, append(verify, "--state", state)...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "ledger at "+url+" is NOT intact: the log was rolled back: this verifier saw size 25 before, and the log's latest checkpoint is of size 10")
}

func TestAuditVerifyOverTheAPIRefusesAForkTheProofShows(t *testing.T) {
	al := newAuditLedger(t)
	_, vkey, _ := audit(t, "key", "--ledger-key", al.key)
	key := "--key=" + strings.TrimSpace(vkey)
	state := filepath.Join(t.TempDir(), "prod.state")
	code, _, errs := audit(t, "verify", "--ledger", al.db, key, "--state", state)
	require.Equal(t, 0, code, errs)

	// A server whose ledger is another tree of 25 entries signed with the
	// same key.
	forked, _ := al.fork(t, 25)
	_, url := serveAuditLedgerWith(t, forked, nil)
	code, _, errs = audit(t, "verify", key, "--api", url, "--token", "auditor-token", "--state", state)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "ledger at "+url+" is NOT intact: the log forked: the latest checkpoint, of size 25, does not extend the remembered checkpoint of size 20")
}

// A server from before GET /v1/audit/proof: the remembered checkpoint is
// still checked, on the tree recomputed from every entry.
func TestAuditVerifyOverTheAPIWithoutProofsChecksTheRecomputedTree(t *testing.T) {
	al := newAuditLedger(t)
	_, url := serveAuditLedgerWith(t, al, withoutProofs)
	_, vkey, _ := audit(t, "key", "--ledger-key", al.key)
	state := filepath.Join(t.TempDir(), "prod.state")
	verify := []string{"verify", "--key=" + strings.TrimSpace(vkey), "--api", url, "--token", "auditor-token", "--state", state}

	code, _, errs := audit(t, verify...)
	require.Equal(t, 0, code, errs)
	code, out, errs := audit(t, verify...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "consistent from the remembered size 20 (--state, the server offers no consistency proof: checked on the recomputed tree)")

	_, forked := al.fork(t, 20)
	require.NoError(t, os.WriteFile(state, forked.Note, 0o600))
	code, _, errs = audit(t, verify...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "the log forked: the log's checkpoint of size 20 and the remembered checkpoint of size 20 sign different trees")
}
