package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/fsmode"
)

// A signer signs only a tree that extends the one it signed before. Anyone
// who can write the ledger's database can rewrite its entries and
// recompute every hash (RFC 6962 needs no key); only the signature needs
// the key. So the process that signs remembers the last tree it signed
// outside the database, in memory and in its state file, and signs a new
// tree only when a consistency proof from that tree, and from the latest
// checkpoint stored under the key (another signer's), checks out; the
// entries it appended itself since must still be there, unchanged. A
// refusal is a fork: the signer signs nothing more until the database
// again extends what it signed, and says so (Options.OnFork, Refused).

// signedTree is a tree a signer signed: what its state file holds.
type signedTree struct {
	Origin string    `json:"origin"`
	Size   int64     `json:"size"`
	Hash   tlog.Hash `json:"hash"`
}

// ForkError is a signer's refusal of a tree that does not extend what it
// signed before.
type ForkError struct {
	// Signed is the size of the tree it signed before (or found signed);
	// Offered the size of the tree the database holds now.
	Signed, Offered int64
	Reason          string
	// Witness names the witness that saw what the log does not extend
	// (Signed is then the size it cosigned); "" for the signer's own
	// refusal.
	Witness string
}

func (e *ForkError) Error() string {
	what := fmt.Sprintf("refused to sign the log at size %d: %s; this signer signed size %d before", e.Offered, e.Reason, e.Signed)
	switch {
	case e.Witness != "":
		what = fmt.Sprintf("witness %s refused the log at size %d: %s (it cosigned size %d)", e.Witness, e.Offered, e.Reason, e.Signed)
	case e.Offered < 0:
		what = "refused to sign: " + e.Reason
	}
	return "ledger: " + what + ". Someone rewrote or rolled back the ledger's database: compare it with a backup and the published checkpoints (docs/audit.md, \"A refused checkpoint\")"
}

// signerMemory is a signer's memory of what it signed and appended.
type signerMemory struct {
	mu     sync.Mutex
	file   string // "" keeps it in memory only
	signed *signedTree
	// appended are the leaf hashes of the entries this process appended
	// since it last signed, by index.
	appended map[int64]tlog.Hash
	refused  *ForkError
}

// maxRemembered bounds the appended entries remembered between two
// signatures; the oldest are dropped beyond it.
const maxRemembered = 1 << 17

// loadSignerMemory reads the state file, if any. A file of another log is
// refused: its key signs another origin.
func loadSignerMemory(file, origin string, log *zap.Logger) (*signerMemory, error) {
	m := &signerMemory{file: file, appended: map[int64]tlog.Hash{}}
	if file == "" {
		return m, nil
	}
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return m, nil
	case err != nil:
		return nil, fmt.Errorf("ledger: read the signer's state: %w", err)
	}
	if _, err := fsmode.Tighten(log, file, fsmode.File); err != nil {
		return nil, err
	}
	var t signedTree
	if err := json.Unmarshal(b, &t); err != nil || t.Size < 0 {
		return nil, fmt.Errorf("ledger: the signer's state file %s is not one toolgate wrote", filepath.Base(file))
	}
	if t.Origin != origin {
		return nil, fmt.Errorf("ledger: the signer's state file %s is of log %q, not %q", filepath.Base(file), t.Origin, origin)
	}
	m.signed = &t
	return m, nil
}

// noteAppended remembers the leaf hashes of entries this process added
// (not those it asked to append again, which were in the log already).
func (m *signerMemory) noteAppended(written map[int64]tlog.Hash) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for idx, h := range written {
		if len(m.appended) >= maxRemembered {
			break
		}
		m.appended[idx] = h
	}
}

// remember records a tree this signer signed, in memory and in its file
// (written whole, then renamed over the old one).
func (m *signerMemory) remember(t signedTree) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.signed, m.refused = &t, nil
	for idx := range m.appended {
		if idx < t.Size {
			delete(m.appended, idx)
		}
	}
	if m.file == "" {
		return nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	tmp := m.file + ".new"
	if err := os.WriteFile(tmp, b, fsmode.File); err != nil {
		return fmt.Errorf("ledger: write the signer's state: %w", err)
	}
	return os.Rename(tmp, m.file)
}

// extends checks that the tree of size and hash, as the store holds it,
// extends every tree in bases (what this signer signed, the latest stored
// checkpoint) and still holds the entries this process appended.
func (l *Ledger) extends(ctx context.Context, size int64, hash tlog.Hash, bases []signedTree) error {
	hr := l.st.hashReader(ctx)
	for _, b := range bases {
		if b.Size == 0 {
			continue // every tree extends the empty one
		}
		if size < b.Size {
			return &ForkError{Signed: b.Size, Offered: size, Reason: "the log is smaller than a tree signed before"}
		}
		proof, err := tlog.ProveTree(size, b.Size, hr)
		if err == nil {
			err = tlog.CheckTree(proof, size, hash, b.Size, b.Hash)
		}
		if err != nil {
			return &ForkError{Signed: b.Size, Offered: size, Reason: "it is not consistent with the tree signed before (an entry below that size was changed, removed or reordered)"}
		}
	}
	m := l.memory
	m.mu.Lock()
	appended := make(map[int64]tlog.Hash, len(m.appended))
	for idx, h := range m.appended {
		if idx < size {
			appended[idx] = h
		}
	}
	m.mu.Unlock()
	for idx, want := range appended {
		got, err := l.st.leafHashes(ctx, idx, idx+1)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0] != want {
			signed := int64(0)
			if len(bases) > 0 {
				signed = bases[0].Size
			}
			return &ForkError{Signed: signed, Offered: size, Reason: fmt.Sprintf("entry #%d, which this process appended, was changed", idx)}
		}
	}
	return nil
}

// refuse records a fork and tells Options.OnFork once per refused size.
func (l *Ledger) refuse(ctx context.Context, f *ForkError) {
	m := l.memory
	m.mu.Lock()
	first := m.refused == nil || m.refused.Offered != f.Offered
	m.refused = f
	m.mu.Unlock()
	if !first {
		return
	}
	l.log.Error("Refused to sign a ledger checkpoint: the database does not extend what this signer signed",
		zap.Int64("signed", f.Signed), zap.Int64("offered", f.Offered), zap.String("reason", f.Reason))
	if l.opts.OnFork != nil {
		l.opts.OnFork(ctx, *f)
	}
}

// Refused is the signer's standing refusal, nil while it signs: a
// database that does not extend what it signed.
func (l *Ledger) Refused() *ForkError {
	l.memory.mu.Lock()
	refused := l.memory.refused
	l.memory.mu.Unlock()
	if refused == nil {
		l.cos.mu.Lock()
		refused = l.cos.alarm
		l.cos.mu.Unlock()
	}
	if refused == nil {
		return nil
	}
	f := *refused
	return &f
}
