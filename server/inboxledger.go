package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"

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
			entries[n] = ledger.Stored{Index: e.Index, Entry: e.Entry}
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
