package integration

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/notify/notifytest"
)

// An insider with write access to dev's ledger database, and no key,
// rolls it back (the newest entries, their hashes and every checkpoint
// deleted). dev's signer, which remembers the tree it signed in
// ledger-signed.json, refuses to sign the smaller tree: a signed
// ledger.fork webhook event, an error in its log, /readyz degraded with
// the reason, and the fork metric; calls still run.
func TestTheLedgersSignerRefusesARolledBackDatabase(t *testing.T) {
	const secret = "fork-webhook-secret"
	hooks := notifytest.NewWebhookReceiver(t, secret)
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.dev = startIn(t, "", []string{"TOOLGATE_WEBHOOK_URLS=" + hooks.URL, "TOOLGATE_WEBHOOK_SECRET=" + secret}, devReady,
		"dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port), "--http", d.httpAddr)
	agentToken, _ := d.devTokens()
	agent := apiClient{t: t, base: "http://" + d.httpAddr, token: agentToken}
	for i := range 4 {
		r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "fork", "tool": "echo", "args": map[string]any{"n": i}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}

	// The signer has signed the log as it is: its size is in its state.
	signed := func() int64 {
		var last int64
		for _, dl := range hooks.Deliveries() {
			var c notify.LedgerCheckpointEvent
			if dl.Verified && json.Unmarshal(dl.Body, &c) == nil && c.Event == notify.EventLedgerCheckpoint && c.Size > last {
				last = c.Size
			}
		}
		return last
	}
	var size int64
	require.Eventually(t, func() bool {
		size = signed()
		return size >= 12 // four calls' three entries, at least
	}, 30*time.Second, 100*time.Millisecond, "dev publishes its checkpoints")
	state := filepath.Join(d.dataDir, "ledger-signed.json")
	fi, err := os.Stat(state)
	require.NoError(t, err, "the signer keeps its state beside its key")
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	dbFile := filepath.Join(d.dataDir, "ledger.db")
	require.Eventually(t, func() bool {
		size = signed()
		return size == headSize(t, dbFile)
	}, 30*time.Second, 200*time.Millisecond, "every entry signed: the log is quiet")

	// The rollback, as the insider does it with the database alone.
	const keep = 2
	rollBack(t, dbFile, keep)

	var fork notify.LedgerForkEvent
	require.Eventually(t, func() bool {
		for _, dl := range hooks.Deliveries() {
			if dl.Verified && json.Unmarshal(dl.Body, &fork) == nil && fork.Event == notify.EventLedgerFork {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "a signed ledger.fork event")
	assert.EqualValues(t, size, fork.Signed)
	assert.EqualValues(t, keep, fork.Offered)
	assert.Contains(t, fork.Reason, "smaller than a tree signed before")
	assert.Equal(t, size, signed(), "no checkpoint of the rolled-back log was published")
	assert.Contains(t, d.dev.out.String(), "Refused to sign a ledger checkpoint")

	status, body := getJSON(t, "http://"+d.httpAddr+"/readyz", "")
	assert.Equal(t, http.StatusOK, status, "calls still run")
	assert.Equal(t, "degraded", body["status"], "%v", body)
	assert.Contains(t, body["ledger"], "refused to sign the log at size 2")

	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + d.httpAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "toolgate_ledger_forks 1")
	}, 10*time.Second, 200*time.Millisecond, "the fork metric counts it")

	r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "fork", "tool": "echo", "args": map[string]any{"after": true}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "ok", r.body["status"], r.raw)
}

// headSize is the size a ledger database's head says it has.
func headSize(t *testing.T, dbFile string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", dbFile+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	var size int64
	require.NoError(t, db.QueryRow("SELECT size FROM ledger_head WHERE id = 1").Scan(&size))
	return size
}

// rollBack deletes a ledger database's entries from keep on, their
// hashes and every checkpoint, as an insider with the database does.
func rollBack(t *testing.T, dbFile string, keep int64) {
	t.Helper()
	db, err := sql.Open("sqlite", dbFile+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	tx, err := db.Begin()
	require.NoError(t, err)
	for _, stmt := range []struct {
		q    string
		args []any
	}{
		{"DELETE FROM ledger_entries WHERE idx >= ?", []any{keep}},
		{"DELETE FROM ledger_hashes WHERE idx >= ?", []any{tlog.StoredHashIndex(0, keep)}},
		{"DELETE FROM ledger_checkpoints", nil},
		{"UPDATE ledger_head SET size = ?", []any{keep}},
	} {
		_, err := tx.Exec(stmt.q, stmt.args...)
		require.NoError(t, err, stmt.q)
	}
	require.NoError(t, tx.Commit())
}

// rewrite does what an insider with the database and no key can: one
// entry's bytes changed (old to new, once), the entries of dropCall
// deleted, the rest renumbered, every stored hash recomputed with the
// public RFC 6962 algorithm, and every checkpoint deleted.
func rewrite(t *testing.T, dbFile, dropCall string, old, new []byte) {
	t.Helper()
	db, err := sql.Open("sqlite", dbFile+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	type row struct {
		event, kind, call, session, at string
		entry                          []byte
	}
	rows, err := db.Query("SELECT event, kind, call_id, session, at, entry FROM ledger_entries ORDER BY idx")
	require.NoError(t, err)
	var forged []row
	changed := false
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.event, &r.kind, &r.call, &r.session, &r.at, &r.entry))
		if r.call == dropCall {
			continue
		}
		if !changed && bytes.Contains(r.entry, old) {
			r.entry, changed = bytes.Replace(r.entry, old, new, 1), true
		}
		forged = append(forged, r)
	}
	require.NoError(t, rows.Err())
	require.True(t, changed, "an entry holds %s", old)

	hashes := map[int64]tlog.Hash{}
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = hashes[x]
		}
		return out, nil
	})
	tx, err := db.Begin()
	require.NoError(t, err)
	for _, q := range []string{"DELETE FROM ledger_entries", "DELETE FROM ledger_hashes", "DELETE FROM ledger_checkpoints"} {
		_, err := tx.Exec(q)
		require.NoError(t, err, q)
	}
	for i, r := range forged {
		stored, err := tlog.StoredHashes(int64(i), r.entry, reader)
		require.NoError(t, err)
		_, err = tx.Exec("INSERT INTO ledger_entries (idx, event, kind, call_id, session, at, entry) VALUES (?, ?, ?, ?, ?, ?, ?)",
			i, r.event, r.kind, r.call, r.session, r.at, r.entry)
		require.NoError(t, err)
		for j, h := range stored {
			at := tlog.StoredHashIndex(0, int64(i)) + int64(j)
			hashes[at] = h
			_, err = tx.Exec("INSERT INTO ledger_hashes (idx, hash) VALUES (?, ?)", at, h[:])
			require.NoError(t, err)
		}
	}
	_, err = tx.Exec("UPDATE ledger_head SET size = ?", len(forged))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}
