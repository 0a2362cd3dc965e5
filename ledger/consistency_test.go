package ledger

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"
)

// A consistency proof from any size up to the latest checkpoint checks
// with the key alone, and one against a forked tree does not.
func TestAConsistencyProofChecksWithTheKeyAlone(t *testing.T) {
	ctx := context.Background()
	l, _ := openTest(t)
	_, err := l.ProveConsistency(ctx, 0)
	assert.ErrorIs(t, err, ErrNoCheckpoint)

	cps := signedLog(t, l, "c", 13, 1, 5, 8)
	latest := cps[len(cps)-1]
	for _, old := range cps {
		p, err := l.ProveConsistency(ctx, old.Size)
		require.NoError(t, err, "from %d", old.Size)
		assert.Equal(t, string(latest.Note), p.Checkpoint)
		assert.Equal(t, old.Size, p.Old)
		c, err := p.Check(l.Verifier(), old)
		require.NoError(t, err, "from %d", old.Size)
		assert.Equal(t, latest.Size, c.Size)
	}
	p, err := l.ProveConsistency(ctx, 0)
	require.NoError(t, err)
	assert.Empty(t, p.Proof, "every tree extends the empty one")
	assert.NotNil(t, p.Proof, "an empty list, not null")

	_, err = l.ProveConsistency(ctx, 14)
	var past *PastCheckpointError
	require.ErrorAs(t, err, &past)
	assert.Equal(t, PastCheckpointError{Old: 14, Size: 13}, *past)

	// A tree of size 8 of another log signed with the same key.
	forked := signedLog(t, forkOf(t, l), "d", 8)[0]
	p, err = l.ProveConsistency(ctx, 8)
	require.NoError(t, err)
	_, err = p.Check(l.Verifier(), forked)
	assert.ErrorContains(t, err, "the log forked: the latest checkpoint, of size 13, does not extend the remembered checkpoint of size 8")

	// A proof tampered with, asked of another size, or of a smaller tree.
	p, err = l.ProveConsistency(ctx, 5)
	require.NoError(t, err)
	bad := p
	bad.Proof = append([]string(nil), p.Proof...)
	bad.Proof[0] = base64.StdEncoding.EncodeToString(make([]byte, tlog.HashSize))
	_, err = bad.Check(l.Verifier(), cps[1])
	assert.ErrorContains(t, err, "the log forked")
	bad.Proof[0] = "not base64"
	_, err = bad.Check(l.Verifier(), cps[1])
	assert.ErrorContains(t, err, "the consistency proof's hash 0 is not a base64 SHA-256")
	_, err = p.Check(l.Verifier(), cps[2])
	assert.ErrorContains(t, err, "the consistency proof is from size 5, not 8 as asked")
	small := p
	small.Checkpoint, small.Old = string(cps[0].Note), 8
	_, err = small.Check(l.Verifier(), cps[2])
	var back *RollbackError
	assert.ErrorAs(t, err, &back)

	// Signed by another key: refused, whatever it proves.
	other, _ := openTest(t)
	signedLog(t, other, "c", 13)
	p, err = other.ProveConsistency(ctx, 5)
	require.NoError(t, err)
	_, err = p.Check(l.Verifier(), cps[1])
	assert.ErrorContains(t, err, "not signed by the log's key")
}
