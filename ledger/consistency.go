package ledger

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A verifier that remembers the log's latest checkpoint it verified asks,
// next time, for a consistency proof (RFC 6962 §2.1.2, tlog.ProveTree)
// from that tree to the latest one, and checks it with the key it holds:
// a log that was rolled back, or rewritten and signed again, is then
// refused, as Go's checksum database client refuses to go back.

// ConsistencyProof is the proof that the log's latest signed checkpoint
// extends its tree of size Old: what GET /v1/audit/proof?old=N answers.
type ConsistencyProof struct {
	// Checkpoint is the latest signed checkpoint, the note as signed.
	Checkpoint string `json:"checkpoint"`
	// Old is the size of the tree the proof starts from.
	Old int64 `json:"old"`
	// Proof are the hashes of tlog.ProveTree, base64; empty when Old is 0
	// or the checkpoint's size.
	Proof []string `json:"proof"`
}

// ErrNoCheckpoint: the log has no signed checkpoint yet.
var ErrNoCheckpoint = errors.New("ledger: no signed checkpoint yet")

// PastCheckpointError refuses a proof from a size past the latest signed
// checkpoint: no tree of that size was signed, or the log was rolled back.
type PastCheckpointError struct {
	Old, Size int64
}

func (e *PastCheckpointError) Error() string {
	return fmt.Sprintf("ledger: size %d is past the latest signed checkpoint, of size %d", e.Old, e.Size)
}

// ProveConsistency proves that the latest signed checkpoint extends the
// log's tree of size old, from the stored hashes.
func (l *Ledger) ProveConsistency(ctx context.Context, old int64) (ConsistencyProof, error) {
	c, ok, err := l.LatestCheckpoint(ctx)
	switch {
	case err != nil:
		return ConsistencyProof{}, err
	case !ok:
		return ConsistencyProof{}, ErrNoCheckpoint
	case old < 0 || old > c.Size:
		return ConsistencyProof{}, &PastCheckpointError{Old: old, Size: c.Size}
	}
	p := ConsistencyProof{Checkpoint: string(c.Note), Old: old, Proof: []string{}}
	if old == 0 {
		return p, nil // every tree extends the empty one
	}
	proof, err := tlog.ProveTree(c.Size, old, l.st.hashReader(ctx))
	if err != nil {
		return ConsistencyProof{}, fmt.Errorf("ledger: prove size %d consistent with %d: %w", c.Size, old, err)
	}
	p.Proof = encodeHashes(proof)
	return p, nil
}

// Check verifies the proof's checkpoint with verifier (the key the
// verifier holds, never one the server names) and the proof that it
// extends old, a checkpoint seen before; it returns the checkpoint.
func (p ConsistencyProof) Check(verifier note.Verifier, old Checkpoint) (Checkpoint, error) {
	c, err := ParseCheckpoint([]byte(p.Checkpoint), verifier)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("the consistency proof's %w", err)
	}
	if p.Old != old.Size {
		return c, fmt.Errorf("the consistency proof is from size %d, not %d as asked", p.Old, old.Size)
	}
	if c.Size < old.Size {
		return c, &RollbackError{Seen: old.Size, Latest: c.Size}
	}
	proof := make(tlog.TreeProof, len(p.Proof))
	for i, s := range p.Proof {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != tlog.HashSize {
			return c, fmt.Errorf("the consistency proof's hash %d is not a base64 SHA-256", i)
		}
		copy(proof[i][:], b)
	}
	if old.Size == 0 {
		return c, nil
	}
	if tlog.CheckTree(proof, c.Size, c.Hash, old.Size, old.Hash) != nil {
		return c, fmt.Errorf("the log forked: the latest checkpoint, of size %d, does not extend the remembered checkpoint of size %d (its consistency proof does not check; both are signed with the log's key)", c.Size, old.Size)
	}
	return c, nil
}

// RollbackError says the log's latest checkpoint is smaller than one a
// verifier saw before: the log went back.
type RollbackError struct {
	// Seen is the size the verifier saw before; Latest the size of the
	// log's latest checkpoint now.
	Seen, Latest int64
}

func (e *RollbackError) Error() string {
	return fmt.Sprintf("the log was rolled back: this verifier saw size %d before, and the log's latest checkpoint is of size %d", e.Seen, e.Latest)
}
