package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/ledger"
)

// MaxAuditPage caps the entries one GET /v1/audit/entries answers; the
// answer's X-Next-Start and Link headers say where the next page starts.
const MaxAuditPage = 1000

// The audit routes' refusals.
var (
	errNoLedger = &apiError{http.StatusNotFound, "no_ledger",
		"this deployment runs without a decision ledger (start toolgate with --ledger, docs/audit.md): its calls are recorded only in Temporal, for the namespace's retention"}
	errNoCheckpoint = &apiError{http.StatusNotFound, "no_checkpoint",
		"the ledger has no signed checkpoint yet: the first is signed within seconds of the first entry"}
	errNoCheckpointYet = &apiError{http.StatusServiceUnavailable, "no_checkpoint_yet",
		"the call's newest entries are not in a signed checkpoint yet: one is signed within seconds; try again shortly"}
	errLedgerUnavailable = &apiError{http.StatusServiceUnavailable, "ledger_unavailable",
		"the decision ledger could not be read (see the server log); try again shortly"}
)

func init() {
	retryAfter[errNoCheckpointYet.code] = "5"
	retryAfter[errLedgerUnavailable.code] = "5"
}

// ledgerError answers a failed read of the ledger: its database is down or
// its stored checkpoint does not verify (`toolgate audit verify` says
// which). The cause is logged, never sent.
func (a *api) ledgerError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	a.logger.Error("Ledger read failed", zap.Error(err))
	return errLedgerUnavailable
}

// auditCheckpoint answers GET /v1/audit/checkpoint: the latest signed
// checkpoint, as the signed note (c2sp.org/tlog-checkpoint).
func (a *api) auditCheckpoint(w http.ResponseWriter, r *http.Request, _ Principal) {
	if a.ledger == nil {
		writeError(w, errNoLedger)
		return
	}
	c, ok, err := a.ledger.LatestCheckpoint(r.Context())
	switch {
	case err != nil:
		writeError(w, a.ledgerError(err))
		return
	case !ok:
		writeError(w, errNoCheckpoint)
		return
	}
	w.Header().Set("X-Log-Size", strconv.FormatInt(c.Size, 10))
	writeText(w, c.Note)
}

// auditKey answers GET /v1/audit/key: the verifier key of the ledger's
// checkpoints, in note format (what `toolgate audit key` prints).
func (a *api) auditKey(w http.ResponseWriter, _ *http.Request, _ Principal) {
	if a.ledger == nil {
		writeError(w, errNoLedger)
		return
	}
	key := a.ledger.VerifierKey()
	if key == "" {
		writeError(w, &apiError{http.StatusNotFound, "no_key", "this server was given no verifier key of the ledger " + a.ledger.Origin() + " in note format; ask its operator (toolgate audit key)"})
		return
	}
	writeText(w, []byte(key+"\n"))
}

func writeText(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// auditEntries answers GET /v1/audit/entries?start=N&end=M: the entries
// with start <= index < end, as JSON lines
// {"index":N,"entry":{…},"entry_bytes":"<base64>"} (ledger.Carried): the
// bytes as stored, which its leaf hash covers, and the entry to read. start
// defaults to 0, end to the log's size; an end past the size reads to the
// end. At most MaxAuditPage entries (and about 4 MiB) come at once: when
// more are asked, X-Next-Start names the next page's start and Link its
// URL (rel="next").
func (a *api) auditEntries(w http.ResponseWriter, r *http.Request, _ Principal) {
	if a.ledger == nil {
		writeError(w, errNoLedger)
		return
	}
	q := r.URL.Query()
	if err := onlyParams(q, "start", "end"); err != nil {
		writeError(w, err)
		return
	}
	start, err := indexParam(q, "start")
	if err != nil {
		writeError(w, err)
		return
	}
	end, err := indexParam(q, "end")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	size, err := a.ledger.Size(ctx)
	if err != nil {
		writeError(w, a.ledgerError(err))
		return
	}
	if !q.Has("end") || end > size {
		end = size
	}
	switch {
	case start > size:
		writeError(w, badRequest("start", fmt.Sprintf("%d is past the log's end: it holds %d entries (indices 0 to %d)", start, size, size-1)))
		return
	case start > end:
		writeError(w, badRequest("start", fmt.Sprintf("%d is after end %d; start is inclusive, end exclusive", start, end)))
		return
	}
	entries, pageEnd, err := a.auditPage(ctx, start, end)
	if err != nil {
		writeError(w, a.ledgerError(err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("X-Log-Size", strconv.FormatInt(size, 10))
	if pageEnd < end {
		next := strconv.FormatInt(pageEnd, 10)
		h.Set("X-Next-Start", next)
		h.Set("Link", fmt.Sprintf(`</v1/audit/entries?%s>; rel="next"`, url.Values{"start": {next}, "end": {strconv.FormatInt(end, 10)}}.Encode()))
	}
	w.WriteHeader(http.StatusOK)
	for _, e := range entries {
		if err := ledger.WriteJSON(w, e); err != nil {
			return // the client went away
		}
	}
}

// auditPage reads the entries of one page from start on, before end: at
// most MaxAuditPage of them, and no more than maxAuditPageBytes of entries
// as sent past the first (an entry may hold half a MiB of arguments).
// pageEnd is where the page stops.
func (a *api) auditPage(ctx context.Context, start, end int64) (entries []ledger.Stored, pageEnd int64, err error) {
	limit, size := min(end, start+MaxAuditPage), 0
	pageEnd = start
	for pageEnd < limit {
		chunk, err := a.ledger.Entries(ctx, pageEnd, min(limit, pageEnd+auditChunk))
		if err != nil {
			return nil, 0, err
		}
		for _, e := range chunk {
			// Each entry goes out twice: its bytes in base64 and the
			// object to read (ledger.Carried).
			n := len(e.Entry) + base64.StdEncoding.EncodedLen(len(e.Entry))
			if len(entries) > 0 && size+n > maxAuditPageBytes {
				return entries, e.Index, nil
			}
			entries, size = append(entries, e), size+n
		}
		pageEnd = min(limit, pageEnd+auditChunk)
	}
	return entries, pageEnd, nil
}

// The entries one page reads at a time, and the bytes of entries a page
// holds at most.
const (
	auditChunk        = 100
	maxAuditPageBytes = 4 << 20
)

// indexParam reads an entry index from the query: a whole number from 0
// up, in decimal digits only; absent is 0.
func indexParam(q url.Values, name string) (int64, error) {
	return wholeParam(q, name, "an entry index")
}

// wholeParam reads a whole number from 0 up from the query, in decimal
// digits only, what it is (an entry index, a tree size) named in the
// refusal; absent is 0.
func wholeParam(q url.Values, name, what string) (int64, error) {
	if !q.Has(name) {
		return 0, nil
	}
	v := q.Get(name)
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, badRequest(name, fmt.Sprintf("must be %s, a whole number from 0 up (got %q)", what, clip(v)))
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		if v == "" {
			return 0, badRequest(name, fmt.Sprintf("must be %s, a whole number from 0 up (got an empty value)", what))
		}
		return 0, badRequest(name, fmt.Sprintf("is too large: %s is at most %d", what, int64(math.MaxInt64)))
	}
	return n, nil
}

// clip shortens a value quoted back in an error.
func clip(v string) string {
	if len(v) > 40 {
		return v[:40] + "…"
	}
	return v
}

// auditCall answers GET /v1/audit/calls/{call_id}: the call's receipt, its
// entries with their inclusion proofs against a signed checkpoint
// (ledger.Receipt), checkable offline with the log's verifier key. An
// agent reads only the calls it submitted: another agent's call is
// answered as an unknown one.
func (a *api) auditCall(w http.ResponseWriter, r *http.Request, p Principal) {
	receipt, err := a.receipt(r.Context(), p, r.PathValue("call_id"))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = ledger.WriteJSON(w, receipt)
}

// receipt proves a call's entries for p, or says why not as the API
// answers it: the API's receipt route and the inbox's serve it alike.
func (a *api) receipt(ctx context.Context, p Principal, callID string) (ledger.Receipt, error) {
	if a.ledger == nil {
		return ledger.Receipt{}, errNoLedger
	}
	entries, err := a.ledger.CallEntries(ctx, callID)
	if err != nil {
		return ledger.Receipt{}, a.ledgerError(err)
	}
	if len(entries) == 0 || !mayReadEntries(p, entries) {
		return ledger.Receipt{}, notFound(callID)
	}
	receipt, err := a.ledger.Prove(ctx, callID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return ledger.Receipt{}, notFound(callID)
	case errors.Is(err, ledger.ErrNoCheckpointYet):
		return ledger.Receipt{}, errNoCheckpointYet
	case err != nil:
		return ledger.Receipt{}, a.ledgerError(err)
	}
	return receipt, nil
}

// mayReadEntries: an agent reads a call's entries only when its
// call.submitted entry names the agent's own token as the requester;
// every other role that reads calls reads them all, as GET
// /v1/calls/{call_id} lets it.
func mayReadEntries(p Principal, entries []ledger.Stored) bool {
	if p.Role != RoleAgent {
		return true
	}
	for _, e := range entries {
		var sub struct {
			Kind      string `json:"kind"`
			Requester string `json:"requester"`
		}
		if err := json.Unmarshal(e.Entry, &sub); err == nil && sub.Kind == ledger.KindCallSubmitted {
			return sub.Requester == p.Name
		}
	}
	return false
}
