package ledger

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// An export is JSON lines: a header ({"ledger":{…}}), the entries
// ({"index":N,"entry":{…},"entry_bytes":"…"}, Carried, with "proof" when
// the export is a part of the log), and every checkpoint
// ({"checkpoint":"<signed note>"}). It is read as a stream of JSON values:
// laid out anew (jq -S .), it still verifies.
type exportLine struct {
	Ledger *ExportHeader `json:"ledger,omitempty"`
	*Carried
	Proof      []string `json:"proof,omitempty"`
	Checkpoint string   `json:"checkpoint,omitempty"`
}

// ExportHeader describes an export.
type ExportHeader struct {
	Origin string `json:"origin"`
	Key    string `json:"key,omitempty"`
	// Size is the log's size when the export was made.
	Size int64 `json:"size"`
	// Partial: the export holds a part of the log (--since, --until);
	// each entry then carries its inclusion proof against the latest
	// checkpoint.
	Partial bool   `json:"partial,omitempty"`
	Since   string `json:"since,omitempty"`
	Until   string `json:"until,omitempty"`
}

// Export writes the entries whose time is in [since, until) (zero: no
// bound), and the checkpoints, as JSON lines.
func (l *Ledger) Export(ctx context.Context, w io.Writer, since, until time.Time) error {
	partial := !since.IsZero() || !until.IsZero()
	if until.IsZero() {
		until = endOfTime
	}
	notes, err := l.st.checkpoints(ctx, false)
	if err != nil {
		return err
	}
	var latest Checkpoint
	if len(notes) > 0 {
		if latest, err = ParseCheckpoint(notes[len(notes)-1], l.verifier); err != nil {
			return err
		}
	}
	h := ExportHeader{Origin: l.Origin(), Key: l.VerifierKey(), Size: latest.Size, Partial: partial}
	if partial {
		h.Since, h.Until = since.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339Nano)
	}
	bw := bufio.NewWriter(w)
	if err := WriteJSON(bw, exportLine{Ledger: &h}); err != nil {
		return err
	}
	// Up to the latest checkpoint only: what is after it is not signed yet.
	for start := int64(0); start < latest.Size; {
		page, err := l.st.entriesBetween(ctx, start, since, until, 1000)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if e.Index >= latest.Size {
				break
			}
			c := e.Carry()
			line := exportLine{Carried: &c}
			if partial {
				proof, err := tlog.ProveRecord(latest.Size, e.Index, l.st.hashReader(ctx))
				if err != nil {
					return fmt.Errorf("ledger: prove entry %d: %w", e.Index, err)
				}
				line.Proof = encodeHashes(proof)
			}
			if err := WriteJSON(bw, line); err != nil {
				return err
			}
		}
		start = page[len(page)-1].Index + 1
	}
	for _, n := range notes {
		if err := WriteJSON(bw, exportLine{Checkpoint: string(n)}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// endOfTime bounds what has no upper bound.
var endOfTime = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Report says what a verification checked.
type Report struct {
	Origin      string `json:"origin"`
	Entries     int64  `json:"entries"`
	Checkpoints int    `json:"checkpoints"`
	// WitnessesRequired is the cosignatures a checkpoint needed to count
	// (VerifyOptions.Witnesses); Uncosigned how many of the log's lacked
	// them and were not counted.
	WitnessesRequired int `json:"witnesses_required,omitempty"`
	Uncosigned        int `json:"uncosigned,omitempty"`
	// Size is the largest checkpoint's size: what the signatures cover.
	Size    int64 `json:"size"`
	Partial bool  `json:"partial,omitempty"`
	// Held is the size of the checkpoint held elsewhere that the log
	// was proved consistent with; zero: none given.
	Held int64 `json:"held,omitempty"`
	// Remembered is the size of the checkpoint a verifier remembered from
	// before (VerifyOptions.Remembered) that the log was proved to
	// extend; zero: none given.
	Remembered int64 `json:"remembered,omitempty"`
	// Latest is the largest checkpoint checked, of the log's, the held
	// and the remembered: what a verifier remembers for next time. Its
	// Note is nil when there was none.
	Latest Checkpoint `json:"-"`
}

// Verification checks a log, entry by entry, against its checkpoints,
// and every checkpoint it is given against every other. Feed it the
// entries in the order of their indices (Entry), the checkpoints
// (Checkpoint) and, optionally, checkpoints held elsewhere (Held) and the
// one a verifier remembers from before (Remembered); Finish says whether
// the log is intact, naming the first thing that is not.
type Verification struct {
	verifier   note.Verifier
	n          int64
	hashes     []tlog.Hash // the tree's stored hashes, recomputed
	events     map[string]int64
	cps        []Checkpoint
	held       []Checkpoint
	remembered *Checkpoint
	witnesses  WitnessRule
	uncosigned int // the log's checkpoints without the cosignatures required
	err        error
}

// NewVerification starts checking a log signed with verifier's key.
func NewVerification(verifier note.Verifier) *Verification {
	return &Verification{verifier: verifier, events: map[string]int64{}}
}

func (v *Verification) fail(format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf(format, args...)
	}
}

// Entry checks the next entry. storedLeaf, when the entry comes from the
// database, is the leaf hash stored with it: an entry whose bytes were
// changed after it was written no longer matches it.
func (v *Verification) Entry(index int64, data []byte, storedLeaf *tlog.Hash) {
	if v.err != nil {
		return
	}
	switch {
	case index > v.n:
		v.fail("entry #%d is missing: the log goes from #%d to #%d", v.n, v.n-1, index)
		return
	case index < v.n:
		v.fail("entry #%d is out of order: it comes after #%d", index, v.n-1)
		return
	}
	h, err := ReadHeader(data)
	if err != nil {
		v.fail("entry #%d is not an entry: %v", index, err)
		return
	}
	if canon, err := CanonicalJSON(data); err != nil || !bytes.Equal(canon, data) {
		v.fail("entry #%d is not in canonical JSON: it was written by something else than toolgate or changed", index)
		return
	}
	if first, ok := v.events[h.Event]; ok {
		v.fail("entry #%d repeats event %s of entry #%d", index, h.Event, first)
		return
	}
	v.events[h.Event] = index
	leaf := tlog.RecordHash(data)
	if storedLeaf != nil && *storedLeaf != leaf {
		v.fail("entry #%d (%s %s) was changed: its bytes no longer hash to the hash stored when it was appended", index, h.Kind, h.Event)
		return
	}
	hashes, err := tlog.StoredHashes(index, data, v)
	if err != nil {
		v.fail("entry #%d: %v", index, err)
		return
	}
	v.hashes = append(v.hashes, hashes...)
	v.n++
}

// ReadHashes makes the recomputed tree a tlog.HashReader.
func (v *Verification) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, idx := range indexes {
		if idx < 0 || idx >= int64(len(v.hashes)) {
			return nil, fmt.Errorf("hash %d is not in the tree", idx)
		}
		out[i] = v.hashes[idx]
	}
	return out, nil
}

// Checkpoint adds one of the log's checkpoints, checking its signature.
func (v *Verification) Checkpoint(msg []byte) {
	c, err := ParseCheckpoint(msg, v.verifier)
	if err != nil {
		v.fail("a stored %v", err)
		return
	}
	if v.counts(c, msg) {
		v.cps = append(v.cps, c)
	}
}

// Held adds a checkpoint kept outside the store: the log must still be
// consistent with it.
func (v *Verification) Held(msg []byte) {
	c, err := ParseCheckpoint(msg, v.verifier)
	if err != nil {
		v.fail("the held %v", err)
		return
	}
	v.held = append(v.held, c)
}

// Remembered adds the checkpoint a verifier saw before (its state): the
// log's latest checkpoint must be as large, and the log must extend it.
func (v *Verification) Remembered(msg []byte) {
	c, err := ParseCheckpoint(msg, v.verifier)
	if err != nil {
		v.fail("the remembered %v", err)
		return
	}
	v.remembered = &c
}

// Finish checks every checkpoint against the recomputed tree and against
// each other (verifycheckpoints.go).
func (v *Verification) Finish() (Report, error) {
	r := Report{Origin: v.verifier.Name(), Entries: v.n, Checkpoints: len(v.cps), WitnessesRequired: v.witnesses.Required, Uncosigned: v.uncosigned}
	if v.err != nil {
		return r, v.err
	}
	seen, err := v.seen()
	if err != nil {
		return r, err
	}
	if err := checkSeen(seen, v.n); err != nil {
		return r, err
	}
	if len(v.cps) == 0 && v.n > 0 && v.uncosigned > 0 {
		return r, fmt.Errorf("no checkpoint carries the %d witnesses' cosignatures required (%d lack them): nothing the witnesses saw signs these entries", v.witnesses.Required, v.uncosigned)
	}
	if len(v.cps) == 0 && v.n > 0 {
		return r, errors.New("no checkpoint: nothing signs these entries")
	}
	for _, s := range seen {
		switch s.from {
		case fromLog:
			r.Size = max(r.Size, s.Size)
		case fromHeld:
			r.Held = max(r.Held, s.Size)
		case fromRemembered:
			r.Remembered = s.Size
		}
		if r.Latest.Note == nil || s.Size > r.Latest.Size {
			r.Latest = s.Checkpoint
		}
	}
	return r, nil
}

// largestBelow is the largest of sizes smaller than n, or 0: the entries
// before it are as a checkpoint that matched says, so a mismatch of one of
// size n is in [largestBelow, n).
func largestBelow(sizes []int64, n int64) int64 {
	var out int64
	for _, s := range sizes {
		if s < n {
			out = max(out, s)
		}
	}
	return out
}

// VerifyOptions are what a verification checks beyond the log itself.
type VerifyOptions struct {
	// Held are checkpoints kept outside the store: the log must be
	// consistent with them (a store, or a whole export). Optional.
	Held [][]byte
	// Remembered is the checkpoint a verifier remembers from before (its
	// state, the signed note): the log's latest checkpoint must be as
	// large, and the log must extend it (a whole log). Optional: nil
	// trusts the log on first use.
	Remembered []byte
	// Statements, when set, is given every entry read, to check its door
	// statements: its Finish says what it found. Believe that only when
	// the log verified. Optional.
	Statements *StatementCheck
	// Passkeys, when set, is given every entry read, to check the
	// passkey assertions its decisions carry: its Finish says what it
	// found. Believe that only when the log verified. Optional.
	Passkeys *PasskeyCheck
	// Witnesses: the log's checkpoints count only with the cosignatures
	// it requires (a receipt's too). Optional.
	Witnesses WitnessRule
}

// statements gives an entry to the statement check, if there is one.
func (o VerifyOptions) statements(index int64, data []byte) {
	if o.Statements != nil {
		o.Statements.Entry(index, data)
	}
}

// VerifyExport checks an export offline: a whole log is recomputed and
// every checkpoint (and held, if given) checked against it; a part of a
// log is checked entry by entry against its latest checkpoint.
func VerifyExport(r io.Reader, verifier note.Verifier, held [][]byte) (Report, error) {
	return VerifyExportWithOptions(r, verifier, VerifyOptions{Held: held})
}

// VerifyExportWithOptions is VerifyExport, with what opts add.
func VerifyExportWithOptions(r io.Reader, verifier note.Verifier, opts VerifyOptions) (Report, error) {
	held := opts.Held
	lines := &lineCounter{r: r}
	dec := json.NewDecoder(lines)
	var (
		header  *ExportHeader
		entries []exportLine
		notes   [][]byte
	)
	for dec.More() {
		line := lines.line(dec.InputOffset()) // More skipped the space before the value
		var l exportLine
		if err := dec.Decode(&l); err != nil {
			return Report{}, fmt.Errorf("export line %d is not JSON: %v", line, err)
		}
		switch {
		case l.Ledger != nil:
			if header != nil {
				return Report{}, fmt.Errorf("export line %d: a second header", line)
			}
			header = l.Ledger
		case l.Carried != nil:
			entries = append(entries, l)
		case l.Checkpoint != "":
			notes = append(notes, []byte(l.Checkpoint))
		default:
			return Report{}, fmt.Errorf("export line %d is neither a header, an entry nor a checkpoint", line)
		}
	}
	line := lines.line(dec.InputOffset())
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		return Report{}, fmt.Errorf("export line %d is not JSON: %v", line, err)
	}
	if header == nil {
		return Report{}, errors.New("not a toolgate ledger export: no header line")
	}
	if header.Origin != verifier.Name() {
		return Report{}, fmt.Errorf("the export is of log %q, the key is of %q", header.Origin, verifier.Name())
	}
	stored := make([]Stored, len(entries))
	for i, e := range entries {
		var err error
		if stored[i], err = e.Carried.Stored(); err != nil {
			return Report{}, err
		}
	}
	if !header.Partial {
		rep, err := verifyWhole(verifier, stored, notes, held, opts.Remembered, opts.Witnesses)
		for _, e := range stored {
			opts.statements(e.Index, e.Entry)
			opts.passkeys(e.Index, e.Entry)
		}
		if err == nil && rep.Size != header.Size {
			err = fmt.Errorf("the export says the log had %d entries, its checkpoints sign %d", header.Size, rep.Size)
		}
		if err != nil {
			err = reformattedExport(verifier, entries, stored, notes, held, opts, err)
		}
		return rep, err
	}
	if len(held) > 0 {
		return Report{}, errors.New("a held checkpoint is checked against a whole log: export without --since/--until")
	}
	if opts.Remembered != nil {
		return Report{}, errors.New("a remembered checkpoint is checked against a whole log: export without --since/--until")
	}
	if len(notes) == 0 {
		return Report{}, errors.New("the export has no checkpoint")
	}
	latest, err := ParseCheckpoint(notes[len(notes)-1], verifier)
	if err != nil {
		return Report{}, err
	}
	if err := opts.Witnesses.checkCosigned("the export", latest, verifier); err != nil {
		return Report{}, err
	}
	rep := Report{Origin: verifier.Name(), Entries: int64(len(entries)), Checkpoints: len(notes), Size: latest.Size, Partial: true}
	if opts.Passkeys != nil {
		opts.Passkeys.scope = scopePart
	}
	for i, e := range entries {
		if err := checkInclusion(latest, *e.Carried, stored[i].Entry, e.Proof); err != nil {
			return rep, err
		}
		opts.statements(stored[i].Index, stored[i].Entry)
		opts.passkeys(stored[i].Index, stored[i].Entry)
	}
	return rep, nil
}

// verifyWhole recomputes a whole log from its entries and checks its
// checkpoints, the held ones and the remembered one (nil: none) against
// it.
func verifyWhole(verifier note.Verifier, entries []Stored, notes, held [][]byte, remembered []byte, witnesses WitnessRule) (Report, error) {
	v := NewVerification(verifier)
	v.RequireCosignatures(witnesses)
	for _, e := range entries {
		v.Entry(e.Index, e.Entry, nil)
	}
	for _, n := range notes {
		v.Checkpoint(n)
	}
	for _, n := range held {
		v.Held(n)
	}
	if remembered != nil {
		v.Remembered(remembered)
	}
	return v.Finish()
}

// reformattedExport tells a whole export of the older format that was
// laid out anew from one that was changed: when its entries, made
// canonical again, verify, it names the first entry that was reformatted;
// otherwise it returns failure, the reason the export does not verify.
func reformattedExport(verifier note.Verifier, entries []exportLine, stored []Stored, notes, held [][]byte, opts VerifyOptions, failure error) error {
	first := int64(-1)
	canon := make([]Stored, len(stored))
	for i, s := range stored {
		canon[i] = s
		if !entries[i].Older() {
			continue
		}
		c, err := CanonicalJSON(s.Entry)
		if err != nil || bytes.Equal(c, s.Entry) {
			continue
		}
		canon[i].Entry = c
		if first < 0 {
			first = s.Index
		}
	}
	if first < 0 {
		return failure
	}
	if _, err := verifyWhole(verifier, canon, notes, held, opts.Remembered, opts.Witnesses); err != nil {
		return failure
	}
	return fmt.Errorf("the export was reformatted, not changed (entry #%d first): its entries hold the same JSON as the log's, laid out anew, and the leaf hashes cover the bytes as written. %s", first, olderFormat)
}

// lineCounter counts the lines of what is read through it, to name the
// line a value of an export starts on.
type lineCounter struct {
	r        io.Reader
	read     int64
	newlines []int64 // the offset of every newline read
}

func (l *lineCounter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		if b == '\n' {
			l.newlines = append(l.newlines, l.read+int64(i))
		}
	}
	l.read += int64(n)
	return n, err
}

// line is the line number (from 1) of the byte at offset.
func (l *lineCounter) line(offset int64) int {
	n, _ := slices.BinarySearch(l.newlines, offset)
	return n + 1
}

// checkInclusion proves that data, the bytes c carries, is the log's
// entry c.Index in checkpoint cp. An entry that is not says whether it was
// changed or, in the older format, only reformatted.
func checkInclusion(cp Checkpoint, c Carried, data []byte, proof []string) error {
	index := c.Index
	p := make(tlog.RecordProof, len(proof))
	for i, s := range proof {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != tlog.HashSize {
			return fmt.Errorf("entry #%d: its proof's hash %d is not a base64 SHA-256", index, i)
		}
		copy(p[i][:], b)
	}
	if index < 0 || index >= cp.Size {
		return fmt.Errorf("entry #%d is not in the checkpoint of size %d", index, cp.Size)
	}
	verifies := func(b []byte) bool { return tlog.CheckRecord(p, cp.Size, cp.Hash, index, tlog.RecordHash(b)) == nil }
	if verifies(data) {
		return nil
	}
	what := fmt.Sprintf("entry #%d", index)
	if h, err := ReadHeader(data); err == nil {
		what += fmt.Sprintf(" (%s %s)", h.Kind, h.Event)
	}
	if reformatted(c, data, verifies) {
		return errReformatted(what, index)
	}
	return fmt.Errorf("%s was changed: it is not the log's entry #%d in the checkpoint of size %d (a value in it differs, or the proof is not its own)", what, index, cp.Size)
}

// VerifyReceipt checks a receipt offline: the checkpoint's signature, and
// each entry's inclusion proof against it, the passkeys' entries too.
func VerifyReceipt(r Receipt, verifier note.Verifier) (Checkpoint, error) {
	return VerifyReceiptWithOptions(r, verifier, VerifyOptions{})
}

// VerifyReceiptWithOptions is VerifyReceipt, with what opts add (Held
// and Remembered go with a whole log, not a receipt).
func VerifyReceiptWithOptions(r Receipt, verifier note.Verifier, opts VerifyOptions) (Checkpoint, error) {
	if len(opts.Held) > 0 {
		return Checkpoint{}, errors.New("a held checkpoint is checked against a whole log, not a receipt")
	}
	if opts.Remembered != nil {
		return Checkpoint{}, errors.New("a remembered checkpoint is checked against a whole log, not a receipt")
	}
	c, err := ParseCheckpoint([]byte(r.Checkpoint), verifier)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := opts.Witnesses.checkCosigned("the receipt", c, verifier); err != nil {
		return c, err
	}
	if len(r.Entries) == 0 {
		return c, errors.New("the receipt has no entries")
	}
	var all []Stored
	for _, e := range r.Entries {
		s, err := e.Carried.Stored()
		if err != nil {
			return c, err
		}
		h, err := ReadHeader(s.Entry)
		if err != nil {
			return c, fmt.Errorf("entry #%d: %v", e.Index, err)
		}
		if h.CallID != r.CallID {
			return c, fmt.Errorf("entry #%d is of call %q, the receipt of %q", e.Index, h.CallID, r.CallID)
		}
		if err := checkInclusion(c, e.Carried, s.Entry, e.Proof); err != nil {
			return c, err
		}
		all = append(all, s)
	}
	keys, err := checkReceiptPasskeys(r, c)
	if err != nil {
		return c, err
	}
	all = append(all, keys...)
	slices.SortFunc(all, func(a, b Stored) int { return cmp.Compare(a.Index, b.Index) })
	if opts.Passkeys != nil {
		opts.Passkeys.scope = scopeReceipt
	}
	for _, s := range all {
		opts.statements(s.Index, s.Entry)
		opts.passkeys(s.Index, s.Entry)
	}
	return c, nil
}

// VerifyStore checks the log in its database: every entry against the
// leaf hash stored with it and the recomputed tree, every stored
// checkpoint, and the held ones, each against the others.
func (l *Ledger) VerifyStore(ctx context.Context, held [][]byte) (Report, error) {
	return l.VerifyStoreWithOptions(ctx, VerifyOptions{Held: held})
}

// VerifyStoreWithOptions is VerifyStore, with what opts add.
func (l *Ledger) VerifyStoreWithOptions(ctx context.Context, opts VerifyOptions) (Report, error) {
	held := opts.Held
	v := NewVerification(l.verifier)
	v.RequireCosignatures(opts.Witnesses)
	size, err := l.st.size(ctx)
	if err != nil {
		return Report{}, err
	}
	// Past the head too: rows appended behind the head's back are found.
	next := int64(0)
	for {
		page, err := l.st.entriesBetween(ctx, next, time.Time{}, endOfTime, 1000)
		if err != nil {
			return Report{}, err
		}
		if len(page) == 0 {
			break
		}
		end := page[len(page)-1].Index + 1
		leaves, err := l.st.leafHashesPresent(ctx, page)
		if err != nil {
			return Report{}, err
		}
		for i, e := range page {
			v.Entry(e.Index, e.Entry, leaves[i])
			opts.statements(e.Index, e.Entry)
			opts.passkeys(e.Index, e.Entry)
		}
		next = end
	}
	notes, err := l.st.checkpoints(ctx, false)
	if err != nil {
		return Report{}, err
	}
	for _, n := range notes {
		v.Checkpoint(n)
	}
	for _, n := range held {
		v.Held(n)
	}
	if opts.Remembered != nil {
		v.Remembered(opts.Remembered)
	}
	rep, err := v.Finish()
	if err == nil && rep.Entries != size {
		err = fmt.Errorf("the log's head says %d entries, it holds %d", size, rep.Entries)
	}
	return rep, err
}
