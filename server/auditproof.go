package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/toolgate/toolgate/ledger"
)

// errPastCheckpoint refuses a proof from a size the latest signed
// checkpoint does not reach.
func errPastCheckpoint(old, size int64) *apiError {
	return &apiError{http.StatusBadRequest, "old_past_checkpoint", fmt.Sprintf(
		"old %d is past the latest signed checkpoint, of size %d: no tree of size %d is signed here (if one was, the log was rolled back)", old, size, old)}
}

// auditProof answers GET /v1/audit/proof?old=N: the latest signed
// checkpoint and the consistency proof (RFC 6962, tlog.ProveTree) that
// its tree extends the log's tree of size N, as JSON
// (ledger.ConsistencyProof). A verifier that remembers a checkpoint of
// size N checks it with its own key (tlog.CheckTree). Its roles are those
// of GET /v1/audit/checkpoint: every role.
func (a *api) auditProof(w http.ResponseWriter, r *http.Request, _ Principal) {
	if a.ledger == nil {
		writeError(w, errNoLedger)
		return
	}
	q := r.URL.Query()
	if err := onlyParams(q, "old"); err != nil {
		writeError(w, err)
		return
	}
	if !q.Has("old") {
		writeError(w, badRequest("old", "is required: the size of the tree the proof starts from (a checkpoint's size)"))
		return
	}
	old, err := wholeParam(q, "old", "a tree size")
	if err != nil {
		writeError(w, err)
		return
	}
	p, err := a.ledger.ProveConsistency(r.Context(), old)
	var past *ledger.PastCheckpointError
	switch {
	case errors.Is(err, ledger.ErrNoCheckpoint):
		writeError(w, errNoCheckpoint)
		return
	case errors.As(err, &past):
		writeError(w, errPastCheckpoint(past.Old, past.Size))
		return
	case err != nil:
		writeError(w, a.ledgerError(err))
		return
	}
	writeJSON(w, http.StatusOK, p)
}
