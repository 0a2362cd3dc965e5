package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/workflows"
)

// ledgerView is the call page's ledger section: the call's entries, and
// whether the server could prove them against a signed checkpoint.
type ledgerView struct {
	// Off: the deployment keeps no ledger.
	Off bool
	// Entries are the call's entries, oldest first.
	Entries []ledgerEntryView
	// Verified: every entry's inclusion proof checks against Checkpoint
	// (its size), whose signature checks against the log's key.
	Verified   bool
	Checkpoint int64
	Origin     string
	// Pending: the newest entries are not in a signed checkpoint yet.
	Pending bool
	// Problem says why the entries are not shown proved: the ledger could
	// not be read, or the receipt did not verify (Bad).
	Problem string
	Bad     bool
}

// ledgerEntryView is one entry as the page shows it.
type ledgerEntryView struct {
	Index int64
	Kind  string
	At    string
	// Proof: "in checkpoint 1050, signature valid".
	Proof string
	// JSON is the entry as stored, pretty-printed.
	JSON string
	// Opened is the entry with its sealed part decrypted, when it has one
	// and the server holds its key; Sealed says which key, or why not.
	Opened, Sealed string
}

// ledgerView reads the call's entries and proves them: the receipt the
// API serves (ledger.Prove), checked here with ledger.VerifyReceipt
// against the ledger's own verifier. It returns the entries as stored too;
// none when the ledger holds none of the call. A ledger that cannot be
// read is said on the page, never an error of the page.
func (i *inbox) ledgerView(ctx context.Context, callID string) (*ledgerView, []ledger.Stored) {
	if i.ledger == nil {
		return &ledgerView{Off: true}, nil
	}
	lv := &ledgerView{Origin: i.ledger.Origin()}
	entries, err := i.ledger.CallEntries(ctx, callID)
	if err != nil {
		i.logger.Error("Ledger read failed", zap.String("callID", callID), zap.Error(err))
		lv.Problem = "The decision ledger could not be read (see the server log)."
		return lv, nil
	}
	receipt, err := i.ledger.Prove(ctx, callID)
	switch {
	case len(entries) == 0 || errors.Is(err, ledger.ErrNotFound):
		return lv, nil
	case errors.Is(err, ledger.ErrNoCheckpointYet):
		lv.Pending = true
	case err != nil:
		i.logger.Error("Ledger proof failed", zap.String("callID", callID), zap.Error(err))
		lv.Problem = "The call's entries could not be proved (see the server log)."
	default:
		c, verr := ledger.VerifyReceipt(receipt, i.ledger.Verifier())
		if verr != nil {
			i.logger.Error("A receipt of the ledger does not verify", zap.String("callID", callID), zap.Error(verr))
			lv.Problem, lv.Bad = "The ledger's receipt for this call does NOT verify: "+verr.Error()+". Run toolgate audit verify.", true
			break
		}
		lv.Verified, lv.Checkpoint = true, c.Size
		// The page shows the entries the receipt proved.
		entries = make([]ledger.Stored, len(receipt.Entries))
		for n, e := range receipt.Entries {
			entries[n], _ = e.Carried.Stored() // VerifyReceipt read them
		}
	}
	for _, e := range entries {
		ev := ledgerEntryView{Index: e.Index, JSON: pretty(e.Entry)}
		if opened, err := i.ledger.Read(e); err != nil {
			ev.Sealed = err.Error()
		} else if stored, _ := ledger.Decode(e.Entry, nil); stored.Sealed != nil {
			if b, err := json.Marshal(opened); err == nil {
				ev.Opened, ev.Sealed = pretty(b), "its arguments and outputs are stored encrypted with key "+stored.Sealed.Key+"; decrypted here"
			}
		}
		if h, err := ledger.ReadHeader(e.Entry); err == nil {
			ev.Kind, ev.At = h.Kind, clock(h.At)
		}
		switch {
		case lv.Verified:
			ev.Proof = fmt.Sprintf("in checkpoint %d, signature valid", lv.Checkpoint)
		case lv.Pending:
			ev.Proof = "not in a signed checkpoint yet (one is signed within seconds)"
		default:
			ev.Proof = "not verified"
		}
		lv.Entries = append(lv.Entries, ev)
	}
	return lv, entries
}

// newLedgerCallView is a call's page from its ledger entries alone, for a
// call Temporal no longer has: what was asked, decided and how it ended.
func newLedgerCallView(callID string, entries []ledger.Stored, read func(ledger.Stored) (ledger.Entry, error)) callView {
	v := callView{ID: callID, Final: true, Result: &resultView{},
		FromLedger: "Temporal no longer has this call (its retention passed, or its workflow was deleted): this page shows it from the decision ledger alone."}
	finished := false
	for _, s := range entries {
		e, err := read(s)
		if err != nil {
			continue // shown as stored in the ledger section
		}
		switch e.Kind {
		case ledger.KindCallSubmitted:
			v.Session, v.Tool, v.Requester, v.Rule, v.Args = e.Session, e.Tool, e.Requester, e.Rule, pretty(e.Args)
		case ledger.KindCallDecided:
			if d := e.Decision; d != nil {
				v.Decided, v.DecidedAt = decidedText(d.Kind, d.DecidedBy, d.Channel), clock(d.At)
				if v.DecidedAt == "" {
					v.DecidedAt = clock(e.At)
				}
				if d.Reason != "" {
					v.Result.Reason = d.Reason
				}
				v.Result.Comment = d.Comment
			}
		case ledger.KindCallFinished:
			finished = true
			v.Status = workflows.Status(e.Status)
			v.Result.Output, v.Result.FinishedAt = pretty(e.Output), clock(e.At)
			if e.Reason != "" {
				v.Result.Reason = e.Reason
			}
		}
	}
	if !finished {
		v.FromLedger += " The ledger holds no outcome of it."
	}
	v.URL, v.SessionURL = callURL(v.ID), sessionURL(v.Session)
	return v
}

// The ledger's Audit page: how many calls a page lists, how many entries
// one read takes, and how many entries a page reads at most looking for
// a tool's calls before it offers the older ones.
const (
	auditPageSize = 50
	auditScan     = 2000
)

// auditKinds are the entries the ledger's Audit page lists: a call's
// decision, or the outcome of a call that ended undecided (it timed out,
// or failed before anyone was asked).
var auditKinds = []string{ledger.KindCallDecided, ledger.KindCallFinished}

// ledgerAuditPage serves the Audit page from the decision ledger, the
// page below entry index ?before= (the newest without it).
func (i *inbox) ledgerAuditPage(w http.ResponseWriter, r *http.Request, s *inboxSession, f tgclient.ListFilter) {
	q, before := r.URL.Query(), int64(math.MaxInt64)
	if q.Has("before") {
		var err error
		if before, err = indexParam(q, "before"); err != nil {
			i.renderError(w, s, http.StatusBadRequest, asAPIError(err).message)
			return
		}
	}
	view, err := i.ledgerAuditView(r.Context(), f, before, i.now())
	if err != nil {
		e := asAPIError(i.errs.ledgerError(err))
		i.renderError(w, s, e.status, e.message)
		return
	}
	i.render(w, http.StatusOK, "audit", i.pageData(s, "Audit", view))
}

// ledgerAuditView is the Audit page read from the decision ledger: the
// calls decided (or ended undecided) below entry index before, newest
// first, of any age: the ledger outlives Temporal's retention. A full page
// links to the older calls, from where it stopped.
func (i *inbox) ledgerAuditView(ctx context.Context, f tgclient.ListFilter, before int64, now time.Time) (auditView, error) {
	v := auditView{FromLedger: true, Filter: auditFilter(f), Paged: before != math.MaxInt64}
	cursor, scanned := before, 0
	for len(v.Rows) < auditPageSize && scanned < auditScan {
		page, err := i.ledger.Latest(ctx, auditKinds, f.Session, cursor, auditPageSize)
		if err != nil {
			return v, err
		}
		if len(page) == 0 {
			return v, nil // the log's oldest decision is on this page
		}
		calls, err := i.callsEntries(ctx, page)
		if err != nil {
			return v, err
		}
		for _, s := range page {
			cursor, scanned = s.Index, scanned+1
			row, ok := ledgerAuditRow(s, calls, now)
			if !ok || (f.Tool != "" && row.Tool != f.Tool) {
				continue
			}
			if v.Rows = append(v.Rows, row); len(v.Rows) == auditPageSize {
				break
			}
		}
	}
	older, err := i.ledger.Latest(ctx, auditKinds, f.Session, cursor, 1)
	if err != nil {
		return v, err
	}
	if len(older) > 0 {
		v.OlderURL = auditURL(f, cursor)
	}
	return v, nil
}

// callsEntries reads the entries of the calls of page, decoded (their
// sealed parts left sealed: the page shows none of them), by call.
func (i *inbox) callsEntries(ctx context.Context, page []ledger.Stored) (map[string][]ledger.Entry, error) {
	var ids []string
	seen := map[string]bool{}
	for _, s := range page {
		if h, err := ledger.ReadHeader(s.Entry); err == nil && h.CallID != "" && !seen[h.CallID] {
			seen[h.CallID] = true
			ids = append(ids, h.CallID)
		}
	}
	stored, err := i.ledger.CallsEntries(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := map[string][]ledger.Entry{}
	for _, s := range stored {
		if e, err := ledger.Decode(s.Entry, nil); err == nil {
			out[e.CallID] = append(out[e.CallID], e)
		}
	}
	return out, nil
}

// ledgerAuditRow is the Audit page's row of a call.decided entry, or of
// the call.finished entry of a call its run never decided; false for a
// call.finished whose decision has a row of its own, and for what is not
// a call's entry.
func ledgerAuditRow(s ledger.Stored, calls map[string][]ledger.Entry, now time.Time) (auditRow, bool) {
	e, err := ledger.Decode(s.Entry, nil)
	if err != nil || e.CallID == "" {
		return auditRow{}, false
	}
	// A call's events are "<call>/<run>/<kind>": the entries of the same
	// run of the call are named alike. Events named otherwise match any
	// entry of the call.
	run, named := strings.CutSuffix(e.Event, "/"+e.Kind)
	sibling := func(kind string, sameRun bool) *ledger.Entry {
		var other *ledger.Entry
		for n, o := range calls[e.CallID] {
			switch {
			case o.Kind != kind:
			case o.Event == run+"/"+kind:
				return &calls[e.CallID][n]
			case other == nil && (!sameRun || !named):
				other = &calls[e.CallID][n]
			}
		}
		return other
	}
	row := auditRow{CallID: e.CallID, URL: callURL(e.CallID), Session: e.Session, SessionURL: sessionURL(e.Session),
		Index: s.Index, ReceiptURL: receiptURL(e.CallID), When: clock(e.At), Ago: ago(now.Sub(e.At))}
	finished := &e
	if e.Kind == ledger.KindCallDecided {
		finished = sibling(ledger.KindCallFinished, true)
	} else if sibling(ledger.KindCallDecided, true) != nil {
		return auditRow{}, false // listed with its decision
	}
	if d := e.Decision; d != nil {
		row.Decision, row.DecidedBy, row.Channel = d.Kind, d.DecidedBy, d.Channel
	}
	if sub := sibling(ledger.KindCallSubmitted, false); sub != nil {
		row.Tool = sub.Tool
	}
	if finished != nil {
		row.Status = finished.Status
	}
	return row, true
}

// auditFilter describes the Audit page's session or tool filter.
func auditFilter(f tgclient.ListFilter) string {
	var filters []string
	if f.Session != "" {
		filters = append(filters, "session "+f.Session)
	}
	if f.Tool != "" {
		filters = append(filters, "tool "+f.Tool)
	}
	return strings.Join(filters, ", ")
}

// auditURL is the Audit page of f's calls below entry index before.
func auditURL(f tgclient.ListFilter, before int64) string {
	q := url.Values{"before": {strconv.FormatInt(before, 10)}}
	if f.Session != "" {
		q.Set("session", f.Session)
	}
	if f.Tool != "" {
		q.Set("tool", f.Tool)
	}
	return "/audit?" + q.Encode()
}

// receiptURL is where the inbox serves a call's receipt.
func receiptURL(callID string) string { return callURL(callID) + "/receipt" }

// receipt serves a call's receipt to the signed-in person, to download:
// the receipt GET /v1/audit/calls/{call_id} answers a token, under the
// same rules (everyone the inbox signs in reads every call's).
func (i *inbox) receipt(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	callID := r.PathValue("call_id")
	a := &api{ledger: i.ledger, logger: i.logger}
	receipt, err := a.receipt(r.Context(), s.principal, callID)
	if err != nil {
		e := asAPIError(err)
		i.renderError(w, s, e.status, e.message)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": callID + ".receipt"}))
	w.WriteHeader(http.StatusOK)
	_ = ledger.WriteJSON(w, receipt)
}
