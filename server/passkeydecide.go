package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// A call whose rule says `passkey: true` is approved only with the
// deciding person's passkey assertion over the decision (package passkey;
// the workflow checks it against the registry). A page, or a company's
// own UI, first asks for the decision's challenge, runs the WebAuthn
// ceremony (navigator.credentials.get) and sends the assertion with the
// decision, as `webauthn`.

// webauthnAssertion is a decision's `webauthn`: the browser's
// PublicKeyCredential.toJSON() of the ceremony, and the expiry of the
// challenge it was asked over.
type webauthnAssertion struct {
	Credential json.RawMessage `json:"credential"`
	Expires    time.Time       `json:"expires"`
}

// assertion reads w as a passkey assertion.
func (w *webauthnAssertion) assertion() (*passkey.Assertion, error) {
	if w == nil {
		return nil, nil
	}
	if len(w.Credential) == 0 || w.Expires.IsZero() {
		return nil, badRequest("webauthn", `needs "credential" (PublicKeyCredential.toJSON() of navigator.credentials.get) and "expires" (the challenge's)`)
	}
	a, err := passkey.FromBrowser(w.Credential, w.Expires)
	if err != nil {
		return nil, badRequest("webauthn.credential", err.Error())
	}
	return a, nil
}

// passkeyChallenge is what a ceremony for one decision needs.
type passkeyChallenge struct {
	// Challenge is passkey.Challenge of the decision, base64url.
	Challenge string    `json:"challenge"`
	Expires   time.Time `json:"expires"`
	RPID      string    `json:"rp_id"`
	// Decision is what the challenge covers, for the person to see and a
	// verifier to recompute.
	Decision passkey.Decision `json:"decision"`
}

// errNoPasskeyNeeded answers a challenge asked for a call that needs none.
var errNoPasskeyNeeded = badRequest("call_id", "the call's rule needs no passkey: decide it without one")

// challengeFor is the challenge of p's decision req of callID, as the
// call's workflow will check it: its run, tool, and the arguments that
// would run (the edited ones for an edit).
func challengeFor(ctx context.Context, calls *tgclient.Client, p Principal, callID string, req decisionRequest, rpID string, now time.Time) (passkeyChallenge, error) {
	d, err := req.toDecision(p, "api")
	if err != nil {
		return passkeyChallenge{}, err
	}
	if !d.Kind.Approves() {
		return passkeyChallenge{}, badRequest("decision", "a passkey signs approvals; a denial needs none")
	}
	st, err := calls.Status(ctx, callID)
	if err != nil {
		return passkeyChallenge{}, err
	}
	if st.Result != nil {
		return passkeyChallenge{}, calls.AlreadyDecided(ctx, callID)
	}
	if st.State == nil || st.State.Request == nil || !st.State.Request.Passkey {
		return passkeyChallenge{}, errNoPasskeyNeeded
	}
	args := st.State.Call.Args
	if d.Kind == policy.ApprovedWithEdits {
		args = d.EditedArgs
	}
	pd := passkey.Decision{Call: callID, Run: st.State.Run, Tool: st.State.Call.Tool, Args: statement.Digest(args),
		Kind: d.Kind.String(), By: d.DecidedBy, Expires: now.Add(passkey.Lifetime).UTC().Truncate(time.Second)}
	return passkeyChallenge{Challenge: base64.RawURLEncoding.EncodeToString(passkey.Challenge(pd)), Expires: pd.Expires, RPID: rpID, Decision: pd}, nil
}

// passkeyChallengeAPI answers POST /v1/calls/{call_id}/passkey-challenge:
// the body is the decision the person is about to send (decision, args).
func (a *api) passkeyChallengeAPI(w http.ResponseWriter, r *http.Request, p Principal) {
	req, callID, err := readDecision(w, r)
	if err == nil && (p.Role == RoleAgent || p.Role == RoleAuditor) {
		err = &apiError{http.StatusForbidden, "forbidden", "only an approver's passkey approves a call"}
	}
	if err == nil && a.passkeyRP == "" {
		err = errPasskeysOff
	}
	var ch passkeyChallenge
	if err == nil {
		ch, err = challengeFor(r.Context(), a.calls, p, callID, req, a.passkeyRP, time.Now())
	}
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, ch)
}

// errPasskeysOff answers a passkey request on a deployment without them.
var errPasskeysOff = &apiError{http.StatusNotFound, "passkeys_off", "this toolgate has no passkeys: start it with --public-url https://HOST and a ledger"}

// formAssertion reads the decision form's webauthn field, which the page
// script fills after the ceremony ("" when the call needs no passkey).
func formAssertion(field string) (*webauthnAssertion, error) {
	if field == "" {
		return nil, nil
	}
	var w webauthnAssertion
	if err := json.Unmarshal([]byte(field), &w); err != nil {
		return nil, badRequest("webauthn", "the page's passkey answer could not be read; reload the page and try again")
	}
	return &w, nil
}

// passkeyChallenge answers the call page's script (a form post, so the
// CSRF token and the auditor's refusal hold) with the challenge of the
// decision about to be sent, as JSON.
func (i *inbox) passkeyChallenge(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	form := decisionForm{Decision: r.PostFormValue("decision"), Args: r.PostFormValue("args")}
	req, err := form.request()
	if err == nil && i.errs.passkeyRP == "" {
		err = errPasskeysOff
	}
	var ch passkeyChallenge
	if err == nil {
		ch, err = challengeFor(r.Context(), i.calls, s.principal, r.PathValue("call_id"), req, i.errs.passkeyRP, i.now())
	}
	if err != nil {
		writeError(w, i.errs.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, ch)
}

// passkeyInbox is the base of the links that send a person to a call's
// page to approve it with their passkey: the passkeys' origin (toolgate
// dev offers them at localhost even when its public URL is an IP
// address, where no browser makes one), else the public URL.
func passkeyInbox(cfg Config, publicURL string) string {
	if len(cfg.PasskeyRP.Origins) > 0 {
		return cfg.PasskeyRP.Origins[0]
	}
	return strings.TrimSuffix(publicURL, "/")
}
