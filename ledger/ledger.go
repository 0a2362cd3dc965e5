// Package ledger is toolgate's decision ledger: an append-only log of
// every call, decision and outcome, kept apart from Temporal (which
// forgets a call with its namespace's retention), in the C2SP
// transparency-log formats: entries are leaves of an RFC 6962 Merkle tree
// (golang.org/x/mod/sumdb/tlog), and signed checkpoints (c2sp.org/
// tlog-checkpoint, golang.org/x/mod/sumdb/note) state its size and root.
// A checkpoint held outside the store proves that nothing before it was
// changed, removed or reordered since; receipts prove a call's entries
// offline. docs/audit.md says what is logged and how to check it.
package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/witness"
)

// DefaultCheckpointEvery is how often a new checkpoint is signed while
// entries arrive.
const DefaultCheckpointEvery = 5 * time.Second

// maxBatch bounds the entries one append transaction writes.
const maxBatch = 512

// Options configure a ledger.
type Options struct {
	// DSN is a postgres:// URL or a SQLite file path.
	DSN string
	// Keys sign checkpoints. Without a signer (Keys.Signer nil) the ledger
	// appends and reads, and only verifies checkpoints with Verifier.
	Keys Keys
	// Verifier checks checkpoints; defaults to Keys.Verifier.
	Verifier note.Verifier
	// CheckpointEvery: how often Run signs a checkpoint while entries
	// arrive; zero means DefaultCheckpointEvery.
	CheckpointEvery time.Duration
	// Publish receives every checkpoint this process signed first (a
	// webhook, a file), so that it also lives outside the store.
	Publish []func(context.Context, Checkpoint) error
	// Sealer, when set, encrypts what may carry secrets in every entry
	// appended (Entry.Seal), and Read decrypts it. Optional.
	Sealer Sealer
	// Logger receives the ledger's logs, a tightening of its SQLite
	// file's permissions included. Optional.
	Logger *zap.Logger
	// SignerState is the file where the signer remembers the last tree it
	// signed (signer.go), outside the database; "" remembers it only
	// while the process runs. Used with a signing key.
	SignerState string
	// OnFork hears each refusal to sign a tree that does not extend what
	// this signer signed: a rewritten or rolled-back database; and each
	// witness that saw a tree the log does not extend. Optional.
	OnFork func(context.Context, ForkError)
	// Witnesses cosign every checkpoint this signer signs (cosign.go).
	// Optional.
	Witnesses []*witness.Witness
	// WitnessesRequired, when above zero, is how many of Witnesses must
	// cosign a checkpoint holding a call's decision before its tool runs
	// (AwaitCosigned); a ledger that does not sign only checks them.
	WitnessesRequired int
}

// Ledger is an open log.
type Ledger struct {
	st       *store
	opts     Options
	verifier note.Verifier
	log      *zap.Logger
	reqs     chan *appendReq
	stop     chan struct{}
	stopped  chan struct{}
	memory   *signerMemory
	cos      cosigner

	closeOnce sync.Once
	closeErr  error
}

type appendReq struct {
	entries []pending
	done    chan appendResult
}

type appendResult struct {
	indexes []int64
	err     error
}

// Open opens the ledger's database, creating its tables when they are
// missing, and starts its writer.
func Open(ctx context.Context, o Options) (*Ledger, error) {
	if o.Verifier == nil {
		o.Verifier = o.Keys.Verifier
	}
	if o.Verifier == nil {
		return nil, errors.New("ledger: no key: give the signing key file (or the verifier key to only read)")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if o.WitnessesRequired > len(o.Witnesses) {
		return nil, fmt.Errorf("ledger: %d witnesses' cosignatures required of %d witnesses", o.WitnessesRequired, len(o.Witnesses))
	}
	state := ""
	if o.Keys.Signer != nil {
		state = o.SignerState
	}
	memory, err := loadSignerMemory(state, o.Verifier.Name(), o.Logger)
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, o.DSN, o.Logger)
	if err != nil {
		return nil, err
	}
	l := &Ledger{st: st, opts: o, verifier: o.Verifier, log: o.Logger, memory: memory, cos: cosigner{known: map[string]int64{}, failing: map[string]bool{}},
		reqs: make(chan *appendReq), stop: make(chan struct{}), stopped: make(chan struct{})}
	go l.write()
	return l, nil
}

// Close stops the writer and closes the database; a second Close does
// nothing.
func (l *Ledger) Close() error {
	l.closeOnce.Do(func() {
		close(l.stop)
		<-l.stopped
		l.closeErr = l.st.db.Close()
	})
	return l.closeErr
}

// Origin is the log's name, toolgate/<deployment>.
func (l *Ledger) Origin() string { return l.verifier.Name() }

// Verifier checks the log's checkpoints.
func (l *Ledger) Verifier() note.Verifier { return l.verifier }

// VerifierKey is the log's public key in note format, when known.
func (l *Ledger) VerifierKey() string { return l.opts.Keys.VerifierKey }

// Signs reports whether this process holds the signing key (and signs
// checkpoints), not the verifier key alone.
func (l *Ledger) Signs() bool { return l.opts.Keys.Signer != nil }

// Where names the database, for messages.
func (l *Ledger) Where() string { return l.st.db.Where() }

// Append adds entries to the log, once each: an entry whose event is
// already in the log is not added again. It returns each entry's index
// once the entries are committed. Appends from concurrent callers are
// written together, in one transaction.
func (l *Ledger) Append(ctx context.Context, entries ...Entry) ([]int64, error) {
	req := &appendReq{done: make(chan appendResult, 1)}
	for _, e := range entries {
		if l.opts.Sealer != nil {
			var err error
			if e, err = e.Seal(l.opts.Sealer); err != nil {
				return nil, err
			}
		}
		data, err := e.Canonical()
		if err != nil {
			return nil, err
		}
		h, err := ReadHeader(data)
		if err != nil {
			return nil, err
		}
		req.entries = append(req.entries, pending{data: data, header: h})
	}
	if len(req.entries) == 0 {
		return nil, nil
	}
	select {
	case l.reqs <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.stop:
		return nil, errors.New("ledger: closed")
	}
	select {
	case r := <-req.done:
		return r.indexes, r.err
	case <-ctx.Done():
		return nil, ctx.Err() // the append may still commit: it is idempotent
	}
}

// write commits waiting appends in batches: one transaction for every
// append that arrived while the last one was written.
func (l *Ledger) write() {
	defer close(l.stopped)
	for {
		var batch []*appendReq
		select {
		case r := <-l.reqs:
			batch = append(batch, r)
		case <-l.stop:
			return
		}
		n := len(batch[0].entries)
	more:
		for n < maxBatch {
			select {
			case r := <-l.reqs:
				batch = append(batch, r)
				n += len(r.entries)
			default:
				break more
			}
		}
		l.commit(batch)
	}
}

func (l *Ledger) commit(batch []*appendReq) {
	var all []pending
	for _, r := range batch {
		all = append(all, r.entries...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	indexes, written, err := l.st.append(ctx, all)
	if err != nil {
		err = fmt.Errorf("ledger %s: append: %w", l.st.db.Where(), err)
		l.log.Warn("Ledger append failed", zap.Int("entries", len(all)), zap.Error(err))
	} else if l.Signs() {
		l.memory.noteAppended(written)
	}
	for _, r := range batch {
		res := appendResult{err: err}
		if err == nil {
			res.indexes, indexes = indexes[:len(r.entries)], indexes[len(r.entries):]
		}
		r.done <- res
	}
}

// Read decodes a stored entry, its sealed part opened with the ledger's
// Sealer (see Decode).
func (l *Ledger) Read(s Stored) (Entry, error) { return Decode(s.Entry, l.opts.Sealer) }

// Size is the number of entries in the log.
func (l *Ledger) Size(ctx context.Context) (int64, error) { return l.st.size(ctx) }

// Entries returns the entries with start <= index < end.
func (l *Ledger) Entries(ctx context.Context, start, end int64) ([]Stored, error) {
	return l.st.entries(ctx, start, end)
}

// EntriesBetween returns up to limit entries from index start on whose
// time is in [since, until).
func (l *Ledger) EntriesBetween(ctx context.Context, start int64, since, until time.Time, limit int) ([]Stored, error) {
	return l.st.entriesBetween(ctx, start, since, until, limit)
}

// CallEntries returns the entries of one call, in order.
func (l *Ledger) CallEntries(ctx context.Context, callID string) ([]Stored, error) {
	return l.st.callEntries(ctx, callID)
}

// Latest returns up to limit entries of the kinds given whose index is
// below before, newest first: a page of, say, the decided calls, the next
// page starting below the last one's index. session, when not empty,
// keeps the entries of that session only.
func (l *Ledger) Latest(ctx context.Context, kinds []string, session string, before int64, limit int) ([]Stored, error) {
	if len(kinds) == 0 {
		return nil, nil
	}
	return l.st.latest(ctx, kinds, session, before, limit)
}

// CallsEntries returns the entries of the calls named, in order.
func (l *Ledger) CallsEntries(ctx context.Context, callIDs []string) ([]Stored, error) {
	return l.st.callsEntries(ctx, callIDs)
}

// LeafHashes returns the stored leaf hashes of entries start <= i < end.
func (l *Ledger) LeafHashes(ctx context.Context, start, end int64) ([]tlog.Hash, error) {
	return l.st.leafHashes(ctx, start, end)
}

// Checkpoints returns the stored checkpoints, smallest first, each as
// stored (`audit verify` checks them).
func (l *Ledger) Checkpoints(ctx context.Context) ([][]byte, error) {
	return l.st.checkpoints(ctx, false)
}

// LatestCheckpoint returns the largest stored checkpoint, verified; ok is
// false when none was signed yet.
func (l *Ledger) LatestCheckpoint(ctx context.Context) (c Checkpoint, ok bool, err error) {
	notes, err := l.st.checkpoints(ctx, true)
	if err != nil || len(notes) == 0 {
		return Checkpoint{}, false, err
	}
	c, err = ParseCheckpoint(notes[0], l.verifier)
	return c, err == nil, err
}

// SignCheckpoint signs a checkpoint of the log as it is now, stores it and
// publishes it when it is new. It needs the signing key, and signs only a
// tree that extends what this signer signed before and the latest
// checkpoint stored (signer.go); else it returns a *ForkError.
func (l *Ledger) SignCheckpoint(ctx context.Context) (Checkpoint, error) {
	if l.opts.Keys.Signer == nil {
		return Checkpoint{}, errors.New("ledger: no signing key here")
	}
	size, err := l.st.size(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	hash, err := tlog.TreeHash(size, l.st.hashReader(ctx))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("ledger: tree hash at %d: %w", size, err)
	}
	bases, err := l.signedBefore(ctx)
	if err == nil {
		err = l.extends(ctx, size, hash, bases)
	}
	if err != nil {
		var fork *ForkError
		if errors.As(err, &fork) {
			l.refuse(ctx, fork)
		}
		return Checkpoint{}, err
	}
	msg, err := note.Sign(&note.Note{Text: checkpointText(l.Origin(), size, hash)}, l.opts.Keys.Signer)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("ledger: sign checkpoint: %w", err)
	}
	c := Checkpoint{Origin: l.Origin(), Size: size, Hash: hash, Note: msg}
	if err := l.memory.remember(signedTree{Origin: l.Origin(), Size: size, Hash: hash}); err != nil {
		return Checkpoint{}, err // not published: a restart would forget it
	}
	added, err := l.st.putCheckpoint(ctx, size, msg, time.Now())
	if err != nil {
		return Checkpoint{}, fmt.Errorf("ledger: store checkpoint: %w", err)
	}
	if added {
		for _, publish := range l.opts.Publish {
			if err := publish(ctx, c); err != nil {
				l.log.Warn("Could not publish a ledger checkpoint", zap.Int64("size", size), zap.Error(err))
			}
		}
	}
	return c, nil
}

// signedBefore are the trees a new checkpoint must extend: the last this
// signer signed, and the latest checkpoint stored under the key (another
// signer's, or this one's from before its state was kept).
func (l *Ledger) signedBefore(ctx context.Context) ([]signedTree, error) {
	var bases []signedTree
	l.memory.mu.Lock()
	if l.memory.signed != nil {
		bases = append(bases, *l.memory.signed)
	}
	l.memory.mu.Unlock()
	notes, err := l.st.checkpoints(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("ledger: read the latest checkpoint: %w", err)
	}
	if len(notes) == 0 {
		return bases, nil
	}
	c, err := ParseCheckpoint(notes[0], l.verifier)
	if err != nil {
		// Only the database could hold one the key did not sign.
		return nil, &ForkError{Offered: -1, Reason: "the latest checkpoint the database holds is not one the log's key signed (" + err.Error() + ")"}
	}
	return append(bases, signedTree{Origin: c.Origin, Size: c.Size, Hash: c.Hash}), nil
}

// Run signs a checkpoint every CheckpointEvery while the log grows, until
// ctx ends. It does nothing without a signing key.
func (l *Ledger) Run(ctx context.Context) {
	if l.opts.Keys.Signer == nil {
		return
	}
	t := time.NewTicker(l.opts.CheckpointEvery)
	defer t.Stop()
	var last int64 = -1
	for {
		size, err := l.st.size(ctx)
		if err == nil && size != last {
			var fork *ForkError
			if c, err := l.SignCheckpoint(ctx); errors.As(err, &fork) {
				// Logged once by refuse; asked again at every tick.
			} else if err != nil {
				l.log.Warn("Could not sign a ledger checkpoint", zap.Error(err))
			} else {
				last = c.Size
			}
		}
		l.cosign(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Receipt proves a call's entries: each with its inclusion proof against a
// signed checkpoint that holds them all. Anyone with the log's verifier
// key checks it offline (VerifyReceipt, or tlog.CheckRecord over each
// entry's bytes), also after the file was reformatted.
type Receipt struct {
	CallID string `json:"call_id"`
	// Key is the log's verifier key, for reference: check the receipt
	// against the key you hold, not this one.
	Key        string        `json:"key,omitempty"`
	Checkpoint string        `json:"checkpoint"`
	Entries    []ProvenEntry `json:"entries"`
	// Passkeys are the passkey.registered entries (and passkey.removed,
	// when the log had them) of the passkeys whose assertions the call's
	// decision carries, proved as Entries are: their public keys check
	// the assertions offline (PasskeyCheck). Absent from receipts of
	// calls without, and of receipts made before.
	Passkeys []ProvenEntry `json:"passkeys,omitempty"`
}

// ProvenEntry is an entry, carried as exports carry it (its bytes, and
// the object to read), with its inclusion proof (base64 hashes, as
// tlog.ProveRecord gives them) against the receipt's checkpoint.
type ProvenEntry struct {
	Carried
	Proof []string `json:"proof"`
}

// ErrNotFound: the ledger has no entry for the call.
var ErrNotFound = errors.New("ledger: no entries for the call")

// ErrNoCheckpointYet: the call's entries are newer than every checkpoint.
var ErrNoCheckpointYet = errors.New("ledger: the call's entries are not in a signed checkpoint yet; one is signed within seconds")

// Prove returns the receipt of a call. When its newest entry is past the
// latest checkpoint, a new checkpoint is signed if this process may.
func (l *Ledger) Prove(ctx context.Context, callID string) (Receipt, error) {
	entries, err := l.st.callEntries(ctx, callID)
	if err != nil {
		return Receipt{}, err
	}
	if len(entries) == 0 {
		return Receipt{}, ErrNotFound
	}
	last := entries[len(entries)-1].Index
	c, ok, err := l.LatestCheckpoint(ctx)
	if err != nil {
		return Receipt{}, err
	}
	if !ok || c.Size <= last {
		if l.opts.Keys.Signer == nil {
			return Receipt{}, ErrNoCheckpointYet
		}
		if c, err = l.SignCheckpoint(ctx); err != nil {
			return Receipt{}, err
		}
		// The witnesses' cosignatures, at once, so the receipt carries
		// them; a witness that is down leaves them out.
		l.cosign(ctx)
		if latest, ok, err := l.LatestCheckpoint(ctx); err == nil && ok && latest.Size == c.Size {
			c = latest
		}
	}
	r := Receipt{CallID: callID, Key: l.VerifierKey(), Checkpoint: string(c.Note)}
	keys, err := l.passkeyEntries(ctx, entries, c.Size)
	if err != nil {
		return Receipt{}, err
	}
	for i, list := range [][]Stored{entries, keys} {
		for _, e := range list {
			proof, err := tlog.ProveRecord(c.Size, e.Index, l.st.hashReader(ctx))
			if err != nil {
				return Receipt{}, fmt.Errorf("ledger: prove entry %d: %w", e.Index, err)
			}
			p := ProvenEntry{Carried: e.Carry(), Proof: encodeHashes(proof)}
			if i == 0 {
				r.Entries = append(r.Entries, p)
			} else {
				r.Passkeys = append(r.Passkeys, p)
			}
		}
	}
	return r, nil
}

func encodeHashes(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = base64.StdEncoding.EncodeToString(h[:])
	}
	return out
}

// WriteJSON writes v as one line of JSON without escaping HTML characters:
// an entry's readable copy inside v then keeps its stored bytes too, which
// readers of the older format hash. Every writer of entries (exports,
// receipts, the API) uses it.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
