package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// decisionRequest is the body of POST /v1/calls/{call_id}/decision and one
// item of POST /v1/decisions.
type decisionRequest struct {
	CallID   string          `json:"call_id,omitempty"`
	Decision string          `json:"decision"`
	Reason   string          `json:"reason,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Comment  string          `json:"comment,omitempty"`
	// WebAuthn is the person's passkey assertion over this decision, for
	// a call whose rule needs one (passkeydecide.go).
	WebAuthn *webauthnAssertion `json:"webauthn,omitempty"`
}

// toDecision maps the API's four words onto the six decisions: a reason
// turns deny into denied_with_reason, args turn approve into
// approved_with_edits.
func (d decisionRequest) toDecision(p Principal, channel string) (out policy.Decision, err error) {
	approver := p.approver()
	out = policy.Decision{DecidedBy: approver.Name, DeciderGroups: approver.Groups, Identity: approver.Identity, Channel: channel, Reason: d.Reason, Comment: d.Comment}
	switch d.Decision {
	case "approve":
		out.Kind = policy.Approved
		if len(d.Args) > 0 {
			out.Kind, out.EditedArgs = policy.ApprovedWithEdits, d.Args
		}
	case "approve_for_session":
		out.Kind = policy.ApprovedForSession
	case "deny":
		out.Kind = policy.Denied
		if d.Reason != "" {
			out.Kind = policy.DeniedWithReason
		}
	case "deny_always":
		out.Kind = policy.DeniedAlways
	default:
		return out, badRequest("decision", `must be "approve", "approve_for_session", "deny" or "deny_always"`)
	}
	if len(d.Args) > 0 && out.Kind != policy.ApprovedWithEdits {
		return out, badRequest("args", `edited arguments go with "approve" only`)
	}
	if out.Passkey, err = d.WebAuthn.assertion(); err != nil {
		return out, err
	}
	if len(d.Args) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(d.Args, &obj); err != nil {
			return out, badRequest("args", "must be a JSON object")
		}
	}
	return out, nil
}

// readDecision decodes the decision of one call's route; the body may
// name the call, but only as the URL does.
func readDecision(w http.ResponseWriter, r *http.Request) (req decisionRequest, callID string, err error) {
	if err := decodeBody(w, r, &req); err != nil {
		return req, "", err
	}
	callID = r.PathValue("call_id")
	if req.CallID != "" && req.CallID != callID {
		return req, "", badRequest("call_id", fmt.Sprintf("names %q but the URL names %q", req.CallID, callID))
	}
	return req, callID, nil
}

func (a *api) decideOne(w http.ResponseWriter, r *http.Request, p Principal) {
	req, callID, err := readDecision(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	applied, err := Decide(r.Context(), a.calls, p, callID, req, "api")
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	a.logger.Info("Decision", zap.String("callID", callID), zap.Stringer("decision", applied.Kind), zap.String("approver", p.Name), zap.String("channel", "api"))
	out := map[string]any{"call_id": callID, "decision": applied}
	if ap := approvalsLeft(r.Context(), a.calls, callID, applied); ap != nil {
		out["approvals"] = ap
	}
	writeJSON(w, http.StatusOK, out)
}

// approvalsLeft is the count of a four-eyes call an approval did not yet
// decide (nil otherwise): the approval was counted, the call waits.
func approvalsLeft(ctx context.Context, calls *tgclient.Client, callID string, applied policy.Decision) *workflows.Approvals {
	if st := countedState(ctx, calls, callID, applied); st != nil {
		return st.Approvals
	}
	return nil
}

// countedState is the call as it stands after an approval that a
// four-eyes call counted and that did not yet decide it; nil otherwise.
func countedState(ctx context.Context, calls *tgclient.Client, callID string, applied policy.Decision) *workflows.CallState {
	if !applied.Kind.Approves() {
		return nil
	}
	st, err := calls.Status(ctx, callID)
	if err != nil || st.State == nil || st.State.Decision != nil || st.State.Approvals == nil {
		return nil
	}
	return st.State
}

// Decide applies p's decision through the call's validated update, which
// checks p's groups and that p did not request the call. Every channel
// (API, inbox, Slack, email) decides through here.
func Decide(ctx context.Context, calls *tgclient.Client, p Principal, callID string, req decisionRequest, channel string) (policy.Decision, error) {
	switch p.Role {
	case RoleAgent:
		return policy.Decision{}, &apiError{http.StatusForbidden, "forbidden", "agent tokens cannot decide calls"}
	case RoleAuditor:
		return policy.Decision{}, errReadOnly(p.Name)
	}
	d, err := req.toDecision(p, channel)
	if err != nil {
		return d, err
	}
	return calls.Decide(ctx, callID, d)
}

// cancelCall cancels a waiting call: an agent its own, an approver one it
// may decide, an admin any. The workflow checks requester and groups; an
// agent's other calls are not even named to it.
func (a *api) cancelCall(w http.ResponseWriter, r *http.Request, p Principal) {
	callID := r.PathValue("call_id")
	cancel := func(ctx context.Context) (policy.Decision, error) { return a.calls.Cancel(ctx, callID, p.approver()) }
	if p.Role == RoleAgent {
		if err := a.ownCall(r.Context(), p, callID); err != nil {
			writeError(w, err)
			return
		}
		cancel = func(ctx context.Context) (policy.Decision, error) { return a.calls.CancelOwn(ctx, callID, p.Name) }
	}
	applied, err := cancel(r.Context())
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	a.logger.Info("Call cancelled", zap.String("callID", callID), zap.String("approver", p.Name))
	writeJSON(w, http.StatusOK, map[string]any{"call_id": callID, "decision": applied})
}

// ownCall refuses a call the agent p did not submit exactly like one that
// never was.
func (a *api) ownCall(ctx context.Context, p Principal, callID string) error {
	st, err := a.calls.Status(ctx, callID)
	if err != nil {
		return a.mapError(err)
	}
	// A finished call has its Result and no State.
	var requester string
	switch {
	case st.Result != nil:
		requester = st.Result.Requester
	case st.State != nil:
		requester = st.State.Call.Requester
	}
	if requester != p.Name {
		return notFound(callID)
	}
	return nil
}

// userDecision applies the decision of the person running the agent (the
// agent token's owner), taken in the agent's own client: an MCP client's
// elicitation form, a coding agent's permission prompt. The workflow takes
// it only when the call's rule says `user: true`.
func (a *api) userDecision(w http.ResponseWriter, r *http.Request, p Principal) {
	req, callID, err := readDecision(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case len(req.Args) > 0:
		writeError(w, badRequest("args", "the person running the agent approves or denies; edited arguments are a remote approver's"))
		return
	case p.Owner == "":
		writeError(w, &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("agent token %s names no owner: add owner: PERSON to its tokens-file entry so the person running the agent may decide its calls", p.Name)})
		return
	}
	if err := a.ownCall(r.Context(), p, callID); err != nil {
		writeError(w, err)
		return
	}
	d, err := req.toDecision(p, policy.ChannelClient)
	if err != nil {
		writeError(w, err)
		return
	}
	applied, err := a.calls.DecideAsUser(r.Context(), callID, p.Owner, d)
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	a.logger.Info("Decision", zap.String("callID", callID), zap.Stringer("decision", applied.Kind), zap.String("user", p.Owner), zap.String("agent", p.Name), zap.String("channel", policy.ChannelClient))
	writeJSON(w, http.StatusOK, map[string]any{"call_id": callID, "decision": applied})
}

type bulkRequest struct {
	Decisions []decisionRequest `json:"decisions"`
}

// bulkRefusal names one call of a bulk request that cannot be decided.
type bulkRefusal struct {
	CallID  string `json:"call_id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// decideBulk applies every decision or none: each call's workflow checks
// its decision first, as its decide update will (known, waiting, valid,
// allowed: groups, four eyes, the acting user); one refusal refuses the
// request and nothing is applied. What changes between the check and the
// apply (a decision taken elsewhere, a sticky decision of the same bulk
// deciding a later call of it) is the one race left; it is reported per
// call.
func (a *api) decideBulk(w http.ResponseWriter, r *http.Request, p Principal) {
	var req bulkRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Decisions) == 0 || len(req.Decisions) > MaxBulk {
		writeError(w, badRequest("decisions", fmt.Sprintf("must name 1 to %d calls", MaxBulk)))
		return
	}
	ctx := r.Context()
	var refusals []bulkRefusal
	seen := map[string]bool{}
	for _, d := range req.Decisions {
		if err := a.checkDecidable(ctx, p, d, seen); err != nil {
			e := asAPIError(a.mapError(err))
			refusals = append(refusals, bulkRefusal{CallID: d.CallID, Code: e.code, Message: e.message})
		}
	}
	if len(refusals) > 0 {
		writeJSON(w, http.StatusConflict, map[string]any{"error": map[string]any{
			"code": "bulk_refused", "message": fmt.Sprintf("%d of %d decisions refused; none was applied", len(refusals), len(req.Decisions)),
			"refused": refusals,
		}})
		return
	}
	applied := make([]map[string]any, 0, len(req.Decisions))
	for _, d := range req.Decisions {
		dec, err := Decide(ctx, a.calls, p, d.CallID, d, "api")
		if err != nil {
			e := asAPIError(a.mapError(err))
			applied = append(applied, map[string]any{"call_id": d.CallID, "error": map[string]string{"code": e.code, "message": e.message}})
			continue
		}
		applied = append(applied, map[string]any{"call_id": d.CallID, "decision": dec})
	}
	writeJSON(w, http.StatusOK, map[string]any{"decisions": applied})
}

func (a *api) checkDecidable(ctx context.Context, p Principal, d decisionRequest, seen map[string]bool) error {
	if d.CallID == "" {
		return badRequest("call_id", "is required for every decision")
	}
	if seen[d.CallID] {
		return badRequest("call_id", "names the same call twice")
	}
	seen[d.CallID] = true
	dec, err := d.toDecision(p, "api")
	if err != nil {
		return err
	}
	if err := dec.Validate(); err != nil {
		return &tgclient.RefusedError{Type: workflows.ErrTypeInvalidDecision, Message: "invalid decision: " + err.Error()}
	}
	if dec.Kind == policy.ApprovedWithEdits {
		// Whether an edit holds is the policy's to say, when it is applied.
		return badRequest("args", "edited arguments are decided one call at a time (POST /v1/calls/{call_id}/decision), not in a bulk")
	}
	st, err := a.calls.Status(ctx, d.CallID)
	if err != nil {
		return err
	}
	if st.Result != nil {
		return a.calls.AlreadyDecided(ctx, d.CallID)
	}
	// The workflow's own check of its decide update: groups, the requester,
	// four eyes, the acting user, for-session on a four-eyes rule.
	return a.calls.CheckDecision(ctx, d.CallID, dec)
}
