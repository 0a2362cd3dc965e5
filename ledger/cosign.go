package ledger

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/witness"
)

// Witnesses cosign the log's checkpoints (Options.Witnesses). After each
// checkpoint, and at every tick until each has, every witness is sent the
// latest one with a consistency proof from the tree it cosigned before;
// its cosignature is added to the stored checkpoint, so the API, exports
// and receipts carry it. A witness that is down only delays its
// cosignature: it is sent the latest checkpoint when it is back. A
// witness that knows a larger tree, or refuses the proof, saw a log this
// one does not extend: that is a fork, reported as the signer's own.

// cosigner remembers what each witness cosigned and a witness's alarm.
type cosigner struct {
	mu sync.Mutex
	// known is the size of the tree each witness last cosigned (or told
	// us it knows), by name; a witness not yet asked is sent size 0.
	known map[string]int64
	// failing are the witnesses whose last answer was not a cosignature.
	failing map[string]bool
	alarm   *ForkError
}

// cosign asks every witness whose cosignature the latest stored
// checkpoint lacks, and stores what they give.
func (l *Ledger) cosign(ctx context.Context) {
	if len(l.opts.Witnesses) == 0 {
		return
	}
	notes, err := l.st.checkpoints(ctx, true)
	if err != nil || len(notes) == 0 {
		return // read again at the next tick; signedBefore reports a bad one
	}
	msg := notes[0]
	c, err := ParseCheckpoint(msg, l.verifier)
	if err != nil {
		return
	}
	var lines []byte
	for _, w := range l.opts.Witnesses {
		if n, err := witness.Cosigned(msg, l.verifier, []note.Verifier{w.Verifier}); err == nil && n == 1 {
			continue
		}
		cosig, err := l.askWitness(ctx, w, c)
		l.witnessAnswered(w, c.Size, err)
		if err != nil {
			continue
		}
		lines = append(lines, cosig...)
	}
	if lines == nil {
		return
	}
	if err := l.st.addSignatures(ctx, c.Size, msg, append(append([]byte(nil), msg...), lines...)); err != nil {
		l.log.Warn("Could not store the witnesses' cosignatures; they are asked again", zap.Int64("size", c.Size), zap.Error(err))
	}
}

// askWitness sends c to w with a proof from the tree w knows, learning
// that size from its conflict answer when it differs from ours.
func (l *Ledger) askWitness(ctx context.Context, w *witness.Witness, c Checkpoint) ([]byte, error) {
	l.cos.mu.Lock()
	old := l.cos.known[w.Name()]
	l.cos.mu.Unlock()
	for range 2 {
		if old > c.Size {
			// Another signer may have stored and had a larger one
			// cosigned since c was read: only a store that still has
			// nothing as large is behind the witness.
			if latest, ok, err := l.LatestCheckpoint(ctx); err != nil || (ok && latest.Size >= old) {
				return nil, fmt.Errorf("witness %s cosigned size %d since this checkpoint (%d) was read", w.Name(), old, c.Size)
			}
			l.witnessFork(ctx, w, old, c.Size, fmt.Sprintf("the witness cosigned size %d, larger than the log's latest checkpoint", old))
			return nil, fmt.Errorf("witness %s cosigned a larger tree (%d) than the log's latest (%d)", w.Name(), old, c.Size)
		}
		var proof tlog.TreeProof
		if old > 0 && old < c.Size {
			var err error
			if proof, err = tlog.ProveTree(c.Size, old, l.st.hashReader(ctx)); err != nil {
				return nil, fmt.Errorf("prove size %d from %d: %w", c.Size, old, err)
			}
		}
		cosig, err := w.Add(ctx, old, proof, c.Note)
		var conflict *witness.ConflictError
		var refused *witness.RefusedError
		switch {
		case errors.As(err, &conflict):
			old = conflict.Size
			l.remember(w, old)
			continue
		case errors.As(err, &refused) && refused.Status == http.StatusUnprocessableEntity:
			l.witnessFork(ctx, w, old, c.Size, "the witness refused the consistency proof from the tree it cosigned")
			return nil, err
		case err != nil:
			return nil, err
		}
		l.remember(w, c.Size)
		return cosig, nil
	}
	return nil, fmt.Errorf("witness %s: its tree size kept changing", w.Name())
}

// witnessAnswered logs a witness that stops cosigning once, not at every
// tick, and when it cosigns again.
func (l *Ledger) witnessAnswered(w *witness.Witness, size int64, err error) {
	l.cos.mu.Lock()
	was := l.cos.failing[w.Name()]
	l.cos.failing[w.Name()] = err != nil
	l.cos.mu.Unlock()
	switch {
	case err != nil && !was:
		l.log.Warn("A witness did not cosign the ledger's checkpoint; it is asked again at every tick",
			zap.String("witness", w.Name()), zap.Int64("size", size), zap.Error(err))
	case err != nil:
		l.log.Debug("A witness still does not cosign", zap.String("witness", w.Name()), zap.Int64("size", size), zap.Error(err))
	case was:
		l.log.Info("A witness cosigns the ledger's checkpoints again", zap.String("witness", w.Name()), zap.Int64("size", size))
	}
}

func (l *Ledger) remember(w *witness.Witness, size int64) {
	l.cos.mu.Lock()
	l.cos.known[w.Name()] = size
	l.cos.mu.Unlock()
}

// witnessFork raises a witness's alarm: it stays until the process
// restarts, as a log that forked from what a witness saw stays forked.
func (l *Ledger) witnessFork(ctx context.Context, w *witness.Witness, seen, offered int64, reason string) {
	f := &ForkError{Signed: seen, Offered: offered, Witness: w.Name(), Reason: reason}
	l.cos.mu.Lock()
	first := l.cos.alarm == nil || *l.cos.alarm != *f
	l.cos.alarm = f
	l.cos.mu.Unlock()
	if !first {
		return
	}
	l.log.Error("A witness saw a ledger this one does not extend: the log was rewritten or rolled back",
		zap.String("witness", w.Name()), zap.Int64("witness_size", seen), zap.Int64("offered", offered), zap.String("reason", reason))
	if l.opts.OnFork != nil {
		l.opts.OnFork(ctx, *f)
	}
}

// NotCosignedError: no checkpoint the witnesses cosigned holds the entry
// yet.
type NotCosignedError struct {
	Index    int64
	Required int
}

func (e *NotCosignedError) Error() string {
	return fmt.Sprintf("entry #%d is in no checkpoint with %d witnesses' cosignatures yet: the witnesses cosign each new checkpoint, unless they are down", e.Index, e.Required)
}

// cosignedPoll is how often AwaitCosigned reads the latest checkpoint.
const cosignedPoll = 250 * time.Millisecond

// RequiresCosigned reports whether an approved call's tool waits for a
// cosigned checkpoint of its decision (Options.WitnessesRequired).
func (l *Ledger) RequiresCosigned() bool { return l.opts.WitnessesRequired > 0 }

// AwaitCosigned waits, until ctx ends, for a stored checkpoint that holds
// entry index and carries the cosignatures Options.WitnessesRequired asks
// of Options.Witnesses; it returns a *NotCosignedError when ctx ends
// first.
func (l *Ledger) AwaitCosigned(ctx context.Context, index int64) error {
	rule := WitnessRule{Required: l.opts.WitnessesRequired}
	for _, w := range l.opts.Witnesses {
		rule.Verifiers = append(rule.Verifiers, w.Verifier)
	}
	for {
		if c, ok, err := l.LatestCheckpoint(ctx); err == nil && ok && c.Size > index {
			if _, enough, err := rule.cosigned(c.Note, l.verifier); err == nil && enough {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return &NotCosignedError{Index: index, Required: rule.Required}
		case <-time.After(cosignedPoll):
		}
	}
}
