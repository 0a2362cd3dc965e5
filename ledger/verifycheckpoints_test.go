package ledger

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"
)

// signedLog is a ledger of n entries named prefix0…, with a checkpoint
// signed at each size in at (and at n).
func signedLog(t *testing.T, l *Ledger, prefix string, n int, at ...int) []Checkpoint {
	t.Helper()
	ctx := context.Background()
	var out []Checkpoint
	for i := range n {
		_, err := l.Append(ctx, entry(fmt.Sprintf("%s%d", prefix, i), KindCallDecided))
		require.NoError(t, err)
		for _, s := range append(at, n) {
			if i+1 == s {
				c, err := l.SignCheckpoint(ctx)
				require.NoError(t, err)
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// forkOf opens a second ledger signed with l's key: its checkpoints are
// the log's too, of another tree.
func forkOf(t *testing.T, l *Ledger) *Ledger {
	t.Helper()
	other, err := Open(context.Background(), Options{DSN: filepath.Join(t.TempDir(), "fork.db"), Keys: l.opts.Keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	return other
}

// rollBack deletes the entries from keep on, their hashes, and the
// checkpoints past keep, and sets the head to keep: a copy of the
// database taken at that size, restored.
func rollBack(t *testing.T, db *sql.DB, keep int64) {
	t.Helper()
	for _, q := range []string{
		fmt.Sprintf("DELETE FROM ledger_entries WHERE idx >= %d", keep),
		fmt.Sprintf("DELETE FROM ledger_hashes WHERE idx >= %d", tlog.StoredHashIndex(0, keep)),
		fmt.Sprintf("DELETE FROM ledger_checkpoints WHERE size > %d", keep),
		fmt.Sprintf("UPDATE ledger_head SET size = %d", keep),
	} {
		_, err := db.Exec(q)
		require.NoError(t, err)
	}
}

// exportOf is l's whole export.
func exportOf(t *testing.T, l *Ledger) io.Reader {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, l.Export(context.Background(), &b, time.Time{}, time.Time{}))
	return &b
}

// Two signed checkpoints of the log that are not consistent are a fork,
// named with both sizes, wherever they come from and whatever the
// entries say.
func TestEveryCheckpointIsCheckedAgainstEveryOther(t *testing.T) {
	ctx := context.Background()
	l, _ := openTest(t)
	signedLog(t, l, "c", 10, 4)
	forked := signedLog(t, forkOf(t, l), "d", 10, 6)
	notes := func(cs ...Checkpoint) (out [][]byte) {
		for _, c := range cs {
			out = append(out, c.Note)
		}
		return out
	}

	// One size, two trees.
	_, err := l.VerifyStore(ctx, notes(forked[1]))
	assert.ErrorContains(t, err, "the log forked: the log's checkpoint of size 10 and the held checkpoint of size 10 sign different trees, and both are signed with the log's key")
	assert.ErrorContains(t, err, "the held checkpoint's differ between #0 and #9")

	// A larger tree that does not extend a smaller one.
	_, err = l.VerifyStore(ctx, notes(forked[0]))
	assert.ErrorContains(t, err, "the log forked: the log's checkpoint of size 10 does not extend the held checkpoint of size 6")

	// Two held checkpoints of one size: a fork, though the entries cover
	// neither.
	v := NewVerification(l.Verifier())
	v.Held(forked[1].Note)
	v.Held(signedLog(t, forkOf(t, l), "f", 10)[0].Note)
	_, err = v.Finish()
	assert.ErrorContains(t, err, "the log forked: the held checkpoint of size 10 and the held checkpoint of size 10 sign different trees")

	// Consistent ones pass, and the largest is the one to remember.
	rep, err := l.VerifyStore(ctx, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 10, rep.Latest.Size)
}

func TestARememberedCheckpointRefusesARollbackAndAFork(t *testing.T) {
	ctx := context.Background()
	l, _ := openTest(t)
	cps := signedLog(t, l, "c", 20, 10)
	seen := cps[1].Note // size 20

	rep, err := l.VerifyStoreWithOptions(ctx, VerifyOptions{Remembered: seen})
	require.NoError(t, err)
	assert.EqualValues(t, 20, rep.Remembered)
	assert.EqualValues(t, 20, rep.Latest.Size)

	// A smaller remembered checkpoint: the log extends it.
	rep, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Remembered: cps[0].Note})
	require.NoError(t, err)
	assert.EqualValues(t, 10, rep.Remembered)
	assert.Equal(t, seen, rep.Latest.Note, "the latest to remember")

	// Remembered from a fork signed with the same key.
	forked := signedLog(t, forkOf(t, l), "d", 15)
	_, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Remembered: forked[0].Note})
	assert.ErrorContains(t, err, "the log forked: the log's checkpoint of size 20 does not extend the remembered checkpoint of size 15")

	// Rolled back to size 12: it verifies on its own (the hole), and is
	// refused by a verifier that saw size 20.
	rollBack(t, l.st.db.DB, 12)
	rep, err = l.VerifyStore(ctx, nil)
	require.NoError(t, err, "without a memory, a rolled-back log verifies")
	assert.EqualValues(t, 10, rep.Size)
	_, err = l.VerifyStoreWithOptions(ctx, VerifyOptions{Remembered: seen})
	var back *RollbackError
	require.ErrorAs(t, err, &back)
	assert.Equal(t, RollbackError{Seen: 20, Latest: 10}, *back)
	assert.ErrorContains(t, err, "the log was rolled back: this verifier saw size 20 before, and the log's latest checkpoint is of size 10")

	// A whole export checks it too; a part of one, or a receipt, cannot.
	_, err = VerifyExportWithOptions(exportOf(t, l), l.Verifier(), VerifyOptions{Remembered: seen})
	assert.ErrorAs(t, err, &back)
	_, err = VerifyReceiptWithOptions(Receipt{}, l.Verifier(), VerifyOptions{Remembered: seen})
	assert.ErrorContains(t, err, "a remembered checkpoint is checked against a whole log, not a receipt")
}
