package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"
)

// signerAt opens the ledger at dsn as a signer with keys and its state
// file, recording the forks it refuses.
type signerAt struct {
	*Ledger
	mu    sync.Mutex
	forks []ForkError
}

func openSigner(t *testing.T, dsn string, keys Keys, state string) *signerAt {
	t.Helper()
	s := &signerAt{}
	l, err := Open(context.Background(), Options{DSN: dsn, Keys: keys, SignerState: state, OnFork: func(_ context.Context, f ForkError) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.forks = append(s.forks, f)
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	s.Ledger = l
	return s
}

func appendN(t *testing.T, l *Ledger, prefix string, n int) {
	t.Helper()
	for i := range n {
		_, err := l.Append(context.Background(), entry(fmt.Sprintf("%s%d", prefix, i), KindCallDecided))
		require.NoError(t, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.Create(to)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
}

// An insider with the database and no key rewrites it (other entries,
// every hash recomputed, the checkpoints deleted) or rolls it back to a
// copy: the signer, which remembers what it signed in its state file,
// refuses to sign either, says so once, and signs again once the database
// extends what it signed.
func TestTheSignerSignsOnlyATreeThatExtendsWhatItSigned(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	state := filepath.Join(dir, "ledger-signed.json")
	real, copyAt10 := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "at-10.db")

	s := openSigner(t, real, keys, state)
	c, err := s.SignCheckpoint(ctx)
	require.NoError(t, err, "the empty log, as a signer signs it at start")
	require.Zero(t, c.Size)
	appendN(t, s.Ledger, "real-", 10)
	c, err = s.SignCheckpoint(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 10, c.Size)
	require.NoError(t, s.Close())
	copyFile(t, real, copyAt10)
	s = openSigner(t, real, keys, state)
	appendN(t, s.Ledger, "more-", 3)
	c, err = s.SignCheckpoint(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 13, c.Size)
	fi, err := os.Stat(state)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the state file is owner-only")
	require.NoError(t, s.Close())

	// The rewrite: a database of 14 other entries, hashes all correct,
	// no checkpoints. Without the state file it would be signed.
	rewritten := filepath.Join(dir, "rewritten.db")
	forger := openSigner(t, rewritten, keys, "")
	appendN(t, forger.Ledger, "forged-", 14)
	require.NoError(t, forger.Close())
	blind := openSigner(t, rewritten, keys, "")
	_, err = blind.SignCheckpoint(ctx)
	require.NoError(t, err, "a signer that remembers nothing signs it: the test can fail")
	require.NoError(t, blind.Close())
	require.NoError(t, os.Remove(rewritten))
	forger = openSigner(t, rewritten, keys, "")
	appendN(t, forger.Ledger, "forged-", 14)
	require.NoError(t, forger.Close())

	s = openSigner(t, rewritten, keys, state)
	_, err = s.SignCheckpoint(ctx)
	var fork *ForkError
	require.ErrorAs(t, err, &fork)
	assert.EqualValues(t, 13, fork.Signed)
	assert.EqualValues(t, 14, fork.Offered)
	assert.Contains(t, err.Error(), "not consistent with the tree signed before")
	_, err = s.SignCheckpoint(ctx)
	require.ErrorAs(t, err, &fork, "asked again, it refuses again")
	assert.Len(t, s.forks, 1, "and says so once")
	assert.NotNil(t, s.Refused())
	notes, err := s.Checkpoints(ctx)
	require.NoError(t, err)
	assert.Empty(t, notes, "nothing was signed")
	require.NoError(t, s.Close())

	// The rollback: the copy taken at size 10.
	s = openSigner(t, copyAt10, keys, state)
	_, err = s.SignCheckpoint(ctx)
	require.ErrorAs(t, err, &fork)
	assert.EqualValues(t, 10, fork.Offered)
	assert.Contains(t, err.Error(), "smaller than a tree signed before")
	require.NoError(t, s.Close())

	// The real database again, grown: signed, and the refusal is over.
	s = openSigner(t, real, keys, state)
	appendN(t, s.Ledger, "after-", 2)
	c, err = s.SignCheckpoint(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 15, c.Size)
	assert.Nil(t, s.Refused())
	assert.Empty(t, s.forks)
}

// Between two signatures, an entry this process appended is changed in
// the database, its hash recomputed: the signer refuses the tree.
func TestTheSignerChecksTheEntriesItAppendedSince(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	s := openSigner(t, filepath.Join(dir, "ledger.db"), keys, filepath.Join(dir, "ledger-signed.json"))
	appendN(t, s.Ledger, "a-", 4)
	_, err = s.SignCheckpoint(ctx)
	require.NoError(t, err)
	appendN(t, s.Ledger, "b-", 2)

	forged := tlog.RecordHash([]byte(`{"kind":"call.decided","by":"bob"}`))
	_, err = s.st.db.ExecContext(ctx, s.st.db.Q("UPDATE ledger_hashes SET hash = $1 WHERE idx = $2"), forged[:], tlog.StoredHashIndex(0, 5))
	require.NoError(t, err)
	_, err = s.SignCheckpoint(ctx)
	var fork *ForkError
	require.ErrorAs(t, err, &fork)
	assert.Contains(t, err.Error(), "entry #5, which this process appended, was changed")
	require.Len(t, s.forks, 1)
}

// A checkpoint stored under the key that the key did not sign is a
// tampered database too; another signer's checkpoint is the base to
// extend.
func TestTheSignerExtendsAnotherSignersCheckpointAndRefusesAForgedOne(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	dsn := filepath.Join(dir, "ledger.db")
	a := openSigner(t, dsn, keys, filepath.Join(dir, "a.json"))
	b := openSigner(t, dsn, keys, filepath.Join(dir, "b.json"))
	appendN(t, a.Ledger, "x-", 5)
	_, err = a.SignCheckpoint(ctx)
	require.NoError(t, err)
	appendN(t, b.Ledger, "y-", 2)
	c, err := b.SignCheckpoint(ctx)
	require.NoError(t, err, "b extends a's checkpoint")
	assert.EqualValues(t, 7, c.Size)

	_, err = a.st.db.ExecContext(ctx, a.st.db.Q("INSERT INTO ledger_checkpoints (size, note, created_at) VALUES ($1, $2, $3)"), 99, "toolgate/test\n99\nAAAA\n\n— forged\n", "2026-12-05T00:00:00Z")
	require.NoError(t, err)
	_, err = a.SignCheckpoint(ctx)
	var fork *ForkError
	require.True(t, errors.As(err, &fork), "%v", err)
	assert.Contains(t, err.Error(), "not one the log's key signed")
}

// An event appended again (as a backfill run twice does) is not added, and
// the signer does not take the new bytes for a change of the stored entry.
func TestAnEventAppendedAgainIsNoChangeToTheSigner(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	s := openSigner(t, filepath.Join(dir, "ledger.db"), keys, filepath.Join(dir, "ledger-signed.json"))
	first := entry("c1", KindCallDecided)
	_, err = s.Append(ctx, first)
	require.NoError(t, err)
	again := first
	again.Session = "another rendering of the same event"
	idx, err := s.Append(ctx, again)
	require.NoError(t, err)
	assert.Equal(t, []int64{0}, idx, "the event is in the log once")
	_, err = s.SignCheckpoint(ctx)
	require.NoError(t, err)
	assert.Empty(t, s.forks)
}
