package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// Limits of the API.
const (
	// MaxBodyBytes caps request bodies; call arguments are capped lower by
	// the client (512 KiB).
	MaxBodyBytes = 1 << 20
	// MaxWait caps ?wait= long polls.
	MaxWait = 5 * time.Minute
	// MaxBulk caps one bulk decision.
	MaxBulk = 100
)

// api serves /v1.
type api struct {
	calls  *tgclient.Client
	tokens *Tokens
	logger *zap.Logger
	ready  *readiness
	// ledger is the decision ledger; nil: the deployment keeps none.
	ledger *ledger.Ledger
	authn  *authenticator
	// passkeyRP is the passkeys' relying party ID; "": passkeys are off.
	passkeyRP string
}

// route is one API endpoint and the roles that may call it.
type route struct {
	method, pattern string
	handle          func(http.ResponseWriter, *http.Request, Principal)
	roles           []Role
}

// table lists every API route. An auditor is in the roles of reading
// routes only; auth refuses it on any other method whatever a route says.
func (a *api) table() []route {
	agents := []Role{RoleAgent, RoleAdmin}
	approvers := []Role{RoleApprover, RoleAdmin}
	everyone := []Role{RoleAgent, RoleApprover, RoleAdmin}
	readers := []Role{RoleAgent, RoleApprover, RoleAdmin, RoleAuditor}
	watchers := []Role{RoleApprover, RoleAdmin, RoleAuditor}
	auditors := []Role{RoleAuditor, RoleAdmin}
	return []route{
		{"POST", "/v1/calls", a.submit, agents},
		{"GET", "/v1/calls", a.listCalls, readers},
		{"GET", "/v1/calls/{call_id}", a.getCall, readers},
		{"GET", "/v1/pending", a.pending, watchers},
		{"POST", "/v1/calls/{call_id}/decision", a.decideOne, approvers},
		{"POST", "/v1/calls/{call_id}/passkey-challenge", a.passkeyChallengeAPI, approvers},
		{"POST", "/v1/calls/{call_id}/cancel", a.cancelCall, everyone},
		{"POST", "/v1/calls/{call_id}/user-decision", a.userDecision, []Role{RoleAgent}},
		{"POST", "/v1/calls/{call_id}/claim", a.claim, agents},
		{"POST", "/v1/calls/{call_id}/report", a.report, agents},
		{"POST", "/v1/calls/{call_id}/ran-after-end", a.ranAfterEnd, []Role{RoleAgent}},
		{"POST", "/v1/decisions", a.decideBulk, approvers},
		{"GET", "/v1/sessions/{session}", a.session, watchers},
		{"DELETE", "/v1/sessions/{session}/sticky/{tool}", a.revoke, approvers},
		{"POST", "/v1/sessions/{session}/end", a.endSession, approvers},
		{"GET", "/v1/tools", a.listTools, agents},
		{"GET", "/v1/audit/checkpoint", a.auditCheckpoint, readers},
		{"GET", "/v1/audit/key", a.auditKey, readers},
		{"GET", "/v1/audit/entries", a.auditEntries, auditors},
		{"GET", "/v1/audit/proof", a.auditProof, readers},
		{"GET", "/v1/audit/calls/{call_id}", a.auditCall, readers},
	}
}

// readOnly reports whether a request only reads: an auditor may send no
// other.
func readOnly(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// errReadOnly refuses an auditor's request that would change something.
func errReadOnly(name string) *apiError {
	return &apiError{http.StatusForbidden, "read_only", fmt.Sprintf(
		"%s holds an auditor token: it reads the ledger, the calls and the sessions, and decides, cancels, submits or changes nothing", name)}
}

func (a *api) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	for _, r := range a.table() {
		mux.Handle(r.method+" "+r.pattern, a.auth(r.handle, r.roles...))
	}
}

// auth resolves the bearer token (toolgate's own, or the person's from
// the identity provider) and checks its role.
func (a *api) auth(h func(http.ResponseWriter, *http.Request, Principal), roles ...Role) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, refused := a.authn.bearer(r)
		if refused != nil {
			if refused.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
			}
			writeError(w, refused)
			return
		}
		if p.Role == RoleAuditor && !readOnly(r.Method) {
			writeError(w, errReadOnly(p.Name))
			return
		}
		if !roleIn(p.Role, roles) {
			writeError(w, &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("%s holds a token with role %s; this needs role %s", p.Name, p.Role, joinRoles(roles))})
			return
		}
		if err := checkPathIDs(r); err != nil {
			writeError(w, err)
			return
		}
		h(w, r, p)
	})
}

// checkPathIDs refuses a request whose path holds a call ID or a session
// that breaks the identifier rule (tgclient.ValidateID), before anything
// is asked of Temporal. The sticky-decision key of a revoke is not an
// identifier (e.g. "http_get|host=api.github.com") and is not checked.
func checkPathIDs(r *http.Request) *apiError {
	for _, name := range []string{"call_id", "session"} {
		v := r.PathValue(name)
		if v == "" {
			continue // not in this route's pattern
		}
		var input *tgclient.InputError
		if errors.As(tgclient.ValidateID(name, v), &input) {
			return badRequest(input.Field, input.Problem)
		}
	}
	return nil
}

func joinRoles(roles []Role) string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return strings.Join(names, " or ")
}

func roleIn(r Role, roles []Role) bool {
	for _, x := range roles {
		if r == x {
			return true
		}
	}
	return false
}

// submitRequest is the body of POST /v1/calls.
type submitRequest struct {
	Session string          `json:"session"`
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"`
	CallID  string          `json:"call_id"`
	// Execution "agent": the agent runs the tool once approved, and
	// reports (unless Report is false).
	Execution policy.Execution `json:"execution"`
	Report    *bool            `json:"report"`
	// Preview, with execution "agent": what the call will change, as the
	// agent sees it.
	Preview *policy.Preview `json:"preview"`
	// Claim, with execution "agent": take the approval for this run as
	// soon as the call is approved, in the same request (the answer says
	// claimed, or why the claim was refused).
	Claim *tgclient.Claim `json:"claim"`
}

func (a *api) submit(w http.ResponseWriter, r *http.Request, p Principal) {
	var req submitRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	wait, err := waitParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := a.ready.check(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	creq := tgclient.CallRequest{CallID: req.CallID, Session: req.Session, Tool: req.Tool, Args: req.Args,
		Requester: p.Name, ActingUser: p.Owner, Execution: req.Execution, NoReport: req.Report != nil && !*req.Report, Preview: req.Preview}
	if req.Claim != nil {
		a.submitAndClaim(w, r, p, creq, *req.Claim, wait)
		return
	}
	id, err := a.calls.Submit(r.Context(), creq)
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	if req.Execution != policy.ExecutionAgent {
		// A call toolgate runs is answered by its Result: one long poll
		// for the workflow's close, not a walk through its history.
		a.respondResult(w, r, p, id, wait)
		return
	}
	a.respondCall(w, r, p, id, wait)
}

// submitAndClaim submits an agent-executed call and takes its approval
// for cl.Run in one round trip to Temporal (the first-answer update): a
// call the policy approves is answered 202 approved and claimed, one it
// denies 200 with its Result. A call that asks a person is answered as
// it would be without the claim (waiting up to wait), and the agent
// claims it once approved; so is a resubmitted call ID.
func (a *api) submitAndClaim(w http.ResponseWriter, r *http.Request, p Principal, req tgclient.CallRequest, cl tgclient.Claim, wait time.Duration) {
	if req.Execution != policy.ExecutionAgent {
		writeError(w, badRequest("claim", `needs execution "agent": only a call the agent runs is claimed`))
		return
	}
	if err := cl.Validate(); err != nil { // a claim that takes nothing is a mistake here
		writeError(w, a.mapError(err))
		return
	}
	if req.CallID == "" {
		req.CallID = tgclient.NewCallID() // known here, should the answer come the usual way
	}
	first, err := a.calls.SubmitAndClaim(r.Context(), req, cl)
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	if first == nil || (first.Status.Result == nil && first.Status.State.Status == workflows.StatusPending && wait > 0) {
		a.respondCall(w, r, p, req.CallID, wait)
		return
	}
	if res := first.Status.Result; res != nil {
		writeJSON(w, http.StatusOK, res)
		return
	}
	view := tgclient.WaitingView(first.Status)
	view.Claimed = first.Claimed
	if first.ClaimErr != nil {
		e := asAPIError(a.mapError(first.ClaimErr))
		view.ClaimRefused = &tgclient.ClaimRefusal{Code: e.code, Message: e.message}
	}
	if first.Claimed {
		a.logClaim(req.CallID, p, cl)
	}
	writeJSON(w, http.StatusAccepted, view)
}

func (a *api) getCall(w http.ResponseWriter, r *http.Request, p Principal) {
	wait, err := waitParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	a.respondCall(w, r, p, r.PathValue("call_id"), wait)
}

// respondCall answers with the Result (200) when the call is final within
// wait, else with the call as it stands (202): still waiting, or, for an
// agent-executed call, approved with the arguments to run.
func (a *api) respondCall(w http.ResponseWriter, r *http.Request, p Principal, callID string, wait time.Duration) {
	a.respond(w, r, p, callID, wait, a.calls.WaitDecided)
}

// respondResult is respondCall waiting for the Result only: after a
// report, the call is still "approved" until its after-call checks ran.
func (a *api) respondResult(w http.ResponseWriter, r *http.Request, p Principal, callID string, wait time.Duration) {
	a.respond(w, r, p, callID, wait, func(ctx context.Context, callID string) (tgclient.Status, error) {
		res, err := a.calls.Wait(ctx, callID)
		return tgclient.Status{Result: &res}, err
	})
}

func (a *api) respond(w http.ResponseWriter, r *http.Request, p Principal, callID string, wait time.Duration,
	waitFor func(context.Context, string) (tgclient.Status, error)) {
	ctx := r.Context()
	var st tgclient.Status
	var err error
	if wait > 0 {
		// Ends at wait, or when the server shuts down (waitContext).
		wctx, cancel := waitContext(ctx, wait)
		st, err = waitFor(wctx, callID)
		cancel()
	}
	if wait == 0 || errors.Is(err, context.DeadlineExceeded) {
		st, err = a.calls.Status(ctx, callID)
	}
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	if st.Result != nil {
		if !mayRead(p, st.Result.Call()) {
			writeError(w, notFound(callID))
			return
		}
		writeJSON(w, http.StatusOK, st.Result)
		return
	}
	if !mayRead(p, st.State.Call) {
		writeError(w, notFound(callID))
		return
	}
	writeJSON(w, http.StatusAccepted, tgclient.WaitingView(st))
}

// reportWait bounds how long a report's answer waits for the final Result
// (the after-call checks run on the reported output).
const reportWait = 30 * time.Second

// report completes an approved agent-executed call with the agent's
// output or error, then answers like GET /v1/calls/{id}?wait=30s.
func (a *api) report(w http.ResponseWriter, r *http.Request, p Principal) {
	var rep tgclient.Report
	if err := decodeBodyLimit(w, r, &rep, maxReportBody); err != nil {
		writeError(w, err)
		return
	}
	callID := r.PathValue("call_id")
	if err := a.calls.Report(r.Context(), callID, p.Name, rep); err != nil {
		writeError(w, a.ownCallError(r.Context(), p, callID, err))
		return
	}
	a.logger.Info("Agent reported", zap.String("call_id", callID), zap.String("agent", p.Name), zap.Bool("error", rep.Error != ""))
	a.respondResult(w, r, p, callID, reportWait)
}

// claim takes an approved agent-executed call's approval for one run of
// its tool: 204 once per call (and again for the same run), 409
// already_claimed for another run, 409 not_waiting when the call is not
// approved and waiting for its run; another agent's call is 404, as an
// unknown one.
func (a *api) claim(w http.ResponseWriter, r *http.Request, p Principal) {
	var cl tgclient.Claim
	if err := decodeBodyLimit(w, r, &cl, 4<<10); err != nil {
		writeError(w, err)
		return
	}
	callID := r.PathValue("call_id")
	if err := a.calls.Claim(r.Context(), callID, p.Name, cl); err != nil {
		writeError(w, a.ownCallError(r.Context(), p, callID, err))
		return
	}
	a.logClaim(callID, p, cl)
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) logClaim(callID string, p Principal, cl tgclient.Claim) {
	a.logger.Info("Agent claimed an approval", zap.String("call_id", callID), zap.String("agent", p.Name), zap.String("run", cl.Run), zap.Bool("no_report", cl.NoReport))
}

// ownCallError is the answer to a refused claim or report. An agent that
// names a call it may not read (another agent's) gets the answer an
// unknown call gets, the same 404 and body, whatever the refusal was
// (not its call, not waiting, already claimed): no answer tells another
// agent's call from none. A refusal of the request itself (a bad body)
// does not depend on the call and stands; so does an admin's, who may
// read every call.
func (a *api) ownCallError(ctx context.Context, p Principal, callID string, err error) error {
	var input *tgclient.InputError
	switch {
	case errors.Is(err, tgclient.ErrUnknownCall):
		return notFound(callID)
	case p.Role != RoleAgent || errors.As(err, &input):
		return a.mapError(err)
	}
	call, rerr := a.calls.Request(ctx, callID)
	if errors.Is(rerr, tgclient.ErrUnknownCall) || (rerr == nil && !mayRead(p, call)) {
		return notFound(callID)
	}
	return a.mapError(err)
}

// maxReportBody leaves room around the largest output a report may carry.
const maxReportBody = 1<<20 + 64<<10

// mayRead: agents read only the calls they submitted.
func mayRead(p Principal, c policy.Call) bool {
	return p.Role != RoleAgent || c.Requester == p.Name
}

func (a *api) listCalls(w http.ResponseWriter, r *http.Request, p Principal) {
	q := r.URL.Query()
	if err := onlyParams(q, "session", "tool", "status", "requester", "page_size", "page_token"); err != nil {
		writeError(w, err)
		return
	}
	page, err := pageParams(q)
	if err != nil {
		writeError(w, err)
		return
	}
	f := tgclient.ListFilter{Session: q.Get("session"), Tool: q.Get("tool"), Status: q.Get("status")}
	if p.Role == RoleAgent {
		f.Requester = p.Name
	} else {
		f.Requester = q.Get("requester")
	}
	out, err := a.calls.ListPage(r.Context(), f, page)
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// pending lists the waiting calls the token may decide (an auditor: every
// waiting call), oldest first, a page at a time; every filter applies
// before paging.
func (a *api) pending(w http.ResponseWriter, r *http.Request, p Principal) {
	q := r.URL.Query()
	if err := onlyParams(q, "session", "tool", "min_age", "page_size", "page_token"); err != nil {
		writeError(w, err)
		return
	}
	minAge, err := durationParam(q.Get("min_age"), "min_age")
	if err != nil {
		writeError(w, err)
		return
	}
	page, err := pageParams(q)
	if err != nil {
		writeError(w, err)
		return
	}
	decider := p.viewer()
	f := tgclient.ListFilter{Session: q.Get("session"), Tool: q.Get("tool"), DecidableBy: &decider}
	if minAge > 0 {
		f.Before = time.Now().Add(-minAge)
	}
	out, err := a.calls.Pending(r.Context(), f, page)
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// onlyParams refuses a query parameter the route does not take: a filter
// that is silently ignored lists calls the caller meant to leave out.
func onlyParams(q url.Values, known ...string) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(known, name) {
			return badRequest(name, "is not a query parameter of this list; it takes "+strings.Join(known, ", "))
		}
	}
	return nil
}

// pageParams reads ?page_size= (1 to tgclient.MaxPageSize; default
// tgclient.DefaultPageSize) and ?page_token= (the next_page_token of the
// page before).
func pageParams(q url.Values) (tgclient.PageRequest, error) {
	page := tgclient.PageRequest{Token: q.Get("page_token")}
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > tgclient.MaxPageSize {
			return page, badRequest("page_size", fmt.Sprintf("must be a whole number from 1 to %d", tgclient.MaxPageSize))
		}
		page.Size = n
	}
	return page, nil
}

func (a *api) session(w http.ResponseWriter, r *http.Request, p Principal) {
	view, err := a.calls.SessionFor(r.Context(), r.PathValue("session"), p.viewer())
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, view)
}

func (a *api) revoke(w http.ResponseWriter, r *http.Request, p Principal) {
	session, key := r.PathValue("session"), r.PathValue("tool")
	if err := a.calls.Revoke(r.Context(), session, key, p.approver()); err != nil {
		writeError(w, a.mapError(err))
		return
	}
	a.logger.Info("Sticky decision revoked", zap.String("session", session), zap.String("tool", key), zap.String("approver", p.Name))
	writeJSON(w, http.StatusOK, map[string]any{"session": session, "revoked": key})
}

func (a *api) endSession(w http.ResponseWriter, r *http.Request, p Principal) {
	session := r.PathValue("session")
	denied, err := a.calls.EndSession(r.Context(), session, p.approver())
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"session": session, "ended": true, "denied_calls": denied})
}

func waitParam(r *http.Request) (time.Duration, error) {
	d, err := durationParam(r.URL.Query().Get("wait"), "wait")
	if err == nil && d > MaxWait {
		return 0, badRequest("wait", fmt.Sprintf("is at most %s", MaxWait))
	}
	return d, err
}

func durationParam(v, name string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, badRequest(name, "must be a duration such as 30s")
	}
	return d, nil
}

// decodeBody reads a JSON body strictly: size-capped, unknown fields
// refused, nothing after the JSON value.
func decodeBody(w http.ResponseWriter, r *http.Request, into any) error {
	return decodeBodyLimit(w, r, into, MaxBodyBytes)
}

// decodeBodyLimit is decodeBody with another size cap.
func decodeBodyLimit(w http.ResponseWriter, r *http.Request, into any, limit int64) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return &apiError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body is over the %d-byte limit", limit)}
	case err != nil:
		return &apiError{http.StatusBadRequest, "malformed_json", "request body could not be read: " + err.Error()}
	case !utf8.Valid(body):
		// encoding/json would turn the bad bytes into U+FFFD silently: the
		// call would run with arguments nobody sent.
		return &apiError{http.StatusBadRequest, "malformed_json", "request body is not valid UTF-8"}
	}
	if problem := duplicateKey(body); problem != "" {
		return &apiError{http.StatusBadRequest, "malformed_json", problem}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			field := typeErr.Field
			if field == "" {
				field = "request body"
			}
			return badRequest(field, fmt.Sprintf("must be a JSON %s, not %s", jsonTypeOf(typeErr.Type), jsonValueName(typeErr.Value)))
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return badRequest(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "is not a known field")
		}
		return &apiError{http.StatusBadRequest, "malformed_json", "request body is not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &apiError{http.StatusBadRequest, "malformed_json", "request body has data after its JSON value"}
	}
	return nil
}

// duplicateKey names the first key that occurs twice in one object of
// the JSON document data ("" when none does, or when data is not JSON,
// which decoding reports): encoding/json keeps the last, so a reviewer
// and the tool could read different values.
func duplicateKey(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	type level struct {
		keys    map[string]bool // nil for an array
		path    string
		wantKey bool
	}
	var stack []*level
	path := func() string {
		if len(stack) == 0 || stack[len(stack)-1].path == "" {
			return "the request body"
		}
		return stack[len(stack)-1].path
	}
	var lastKey string
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		top := (*level)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.keys != nil && top.wantKey {
			if key, ok := tok.(string); ok {
				if top.keys[key] {
					return fmt.Sprintf("request body has the key %q twice in %s", key, path())
				}
				top.keys[key], top.wantKey, lastKey = true, false, key
				continue
			}
		}
		child := ""
		if top != nil && top.keys != nil {
			child = top.path + "/" + lastKey
			top.wantKey = true
		} else if top != nil {
			child = top.path + "/[]"
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{keys: map[string]bool{}, path: child, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &level{path: child})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return ""
			}
		}
	}
}

// jsonTypeOf names, in JSON's words, what a Go type decodes from.
func jsonTypeOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	}
	return "value of another type"
}

// jsonValueName names what a json.UnmarshalTypeError found: "an array",
// "a number" (its Value is e.g. "number -5" or "bool").
func jsonValueName(value string) string {
	kind, _, _ := strings.Cut(value, " ")
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "a boolean"
	case "null":
		return "null"
	}
	return "a " + kind
}
