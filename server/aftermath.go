package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/workflows"
)

// ranAfterEndRequest is the body of POST /v1/calls/{id}/ran-after-end.
type ranAfterEndRequest struct {
	// Via says where the person running the agent approved the run.
	Via    string          `json:"via"`
	Args   json.RawMessage `json:"args"`
	Output json.RawMessage `json:"output"`
	Error  string          `json:"error"`
}

// maxRanAfterEndBody leaves room around the largest arguments and output
// a record may hold.
const maxRanAfterEndBody = workflows.MaxRecordArgsBytes + workflows.MaxRecordOutputBytes + 64<<10

// ranAfterEnd records that an agent-executed call's tool ran after the
// call ended denied or timed out, approved by the token's owner at the
// agent's own prompt (a `user: true` rule). It answers like GET
// /v1/calls/{id}: the Result, with ran_after_end. 409 already_recorded
// for a second record, 409 not_waiting for a call that did not end denied
// or timed out, 403 for a rule without user: true; another agent's call
// is 404, as an unknown one.
func (a *api) ranAfterEnd(w http.ResponseWriter, r *http.Request, p Principal) {
	var req ranAfterEndRequest
	if err := decodeBodyLimit(w, r, &req, maxRanAfterEndBody); err != nil {
		writeError(w, err)
		return
	}
	callID := r.PathValue("call_id")
	if p.Owner == "" {
		writeError(w, &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("agent token %s names no owner: only the person running the agent approves a run at its prompt; add owner: PERSON to its tokens-file entry", p.Name)})
		return
	}
	rec := workflows.RanAfterEnd{User: p.Owner, Via: req.Via, Args: req.Args, Output: req.Output, Error: req.Error}
	if _, err := a.calls.RecordRanAfterEnd(r.Context(), callID, p.Name, rec); err != nil {
		writeError(w, a.ownCallError(r.Context(), p, callID, err))
		return
	}
	a.logger.Warn("The tool ran after its call ended", zap.String("callID", callID), zap.String("agent", p.Name), zap.String("user", p.Owner))
	a.respondCall(w, r, p, callID, 0)
}

// ranAfterEndView is what the call page shows of a run after the call's
// end; the page shows it with control, format and bidi characters escaped
// (the "shown" template).
type ranAfterEndView struct {
	Summary, Args, Output, Error string
}

func newRanAfterEndView(ra *workflows.RanAfterEnd) *ranAfterEndView {
	if ra == nil {
		return nil
	}
	ended := "it was denied"
	switch {
	case ra.CallStatus == workflows.StatusTimedOut:
		ended = "it timed out"
	case ra.DecidedBy != "":
		ended = "it was denied by " + ra.DecidedBy
	}
	via := "the agent's own prompt"
	if ra.Via != "" {
		via = ra.Via
	}
	return &ranAfterEndView{
		Summary: fmt.Sprintf("%s approved it at %s after %s; %s recorded the run at %s. The call's outcome stays %s.",
			ra.User, via, ended, ra.Requester, clock(ra.At), ra.CallStatus),
		Args: pretty(ra.Args), Output: pretty(ra.Output), Error: ra.Error + ra.Withheld,
	}
}
