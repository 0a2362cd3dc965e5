package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
)

// Ledger is where the workflows' entries go (ledger.Ledger); nil: no
// ledger, and nothing is logged.
type Ledger interface {
	Append(ctx context.Context, entries ...ledger.Entry) ([]int64, error)
}

// witnessedLedger is a Ledger whose decisions may have to wait for the
// witnesses' cosignatures before their tool runs (ledger.Ledger).
type witnessedLedger interface {
	RequiresCosigned() bool
	AwaitCosigned(ctx context.Context, index int64) error
}

// AppendLedgerInput is the argument of AppendLedger.
type AppendLedgerInput struct {
	Entries []ledger.Entry `json:"entries"`
}

// AppendLedgerResult says where the entries are in the log.
type AppendLedgerResult struct {
	Indexes []int64 `json:"indexes,omitempty"`
	// Off: this worker has no ledger, and nothing was logged.
	Off bool `json:"off,omitempty"`
}

// AppendLedger writes entries to the ledger, each once whatever the
// retries: the ledger keys them by event ID. Arguments pass the policy's
// redaction first (outputs already have, as the call's output
// middleware).
func (a *Activities) AppendLedger(ctx context.Context, in AppendLedgerInput) (AppendLedgerResult, error) {
	if a.Ledger == nil {
		return AppendLedgerResult{Off: true}, nil
	}
	entries := make([]ledger.Entry, len(in.Entries))
	for i, e := range in.Entries {
		var err error
		call := policy.Call{ID: e.CallID, Session: e.Session, Tool: e.Tool, Requester: e.Requester}
		if e.Args, err = a.redact(ctx, call, e.Args); err != nil {
			return AppendLedgerResult{}, err
		}
		if e.Decision != nil && e.Decision.EditedArgs != nil {
			d := *e.Decision
			if d.EditedArgs, err = a.redact(ctx, call, d.EditedArgs); err != nil {
				return AppendLedgerResult{}, err
			}
			e.Decision = &d
		}
		entries[i] = e
	}
	idx, err := a.Ledger.Append(ctx, entries...)
	if err != nil {
		return AppendLedgerResult{}, err
	}
	if err := a.awaitCosigned(ctx, entries, idx); err != nil {
		return AppendLedgerResult{}, err
	}
	return AppendLedgerResult{Indexes: idx}, nil
}

// cosignedWait bounds one attempt's wait for a cosigned checkpoint, under
// the local activity's timeout: longer than the signer's tick (5 s), so
// with the witnesses up one attempt sees it; the workflow tries again,
// saying why, while they are down.
const cosignedWait = 7 * time.Second

// awaitCosigned holds a decision back until a checkpoint the witnesses
// cosigned holds it, when the ledger requires that: the tool runs only
// once the decision is where nobody can roll it back unseen. A decision
// logged with its call's end (a denial, a timeout) runs nothing and
// does not wait.
func (a *Activities) awaitCosigned(ctx context.Context, entries []ledger.Entry, idx []int64) error {
	w, ok := a.Ledger.(witnessedLedger)
	if !ok || !w.RequiresCosigned() {
		return nil
	}
	decided := -1
	for i, e := range entries {
		switch e.Kind {
		case ledger.KindCallDecided:
			decided = i
		case ledger.KindCallFinished:
			return nil // the call is over (a denial goes with its end): nothing runs
		}
	}
	if decided < 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, cosignedWait)
	defer cancel()
	return w.AwaitCosigned(wctx, idx[decided])
}

// redact passes JSON through the output middleware (the policy's secret
// redaction), as an output would.
func (a *Activities) redact(ctx context.Context, call policy.Call, raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return raw, nil
	}
	for _, m := range a.Middleware {
		out, _, err := m.TransformOutput(ctx, call, raw)
		if err != nil {
			return nil, fmt.Errorf("redact for the ledger: %w", err)
		}
		raw = out
	}
	return raw, nil
}
