package server

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/workflows"
)

// EmailChannel is the channel email-link decisions record.
const EmailChannel = notify.ChannelEmail

// Email links: GET /email/decide?t=TOKEN shows what the link would decide
// and a form; only POST /email/decide (t in the form body) decides. Mail
// scanners and link previews fetch links, so a GET never changes anything.
//
// The signed token is the capability, so the form needs no CSRF token; a
// cross-site POST is still refused by its Origin / Sec-Fetch-Site headers,
// as the inbox's forms are. The decision is taken as the approver whose
// address the link was sent to, with that approver's groups from the
// approvers file; someone removed from the file can no longer use links
// sent to them.
//
// Links are single-use: the IDs of links that decided are kept in memory
// until the link expires. A restart forgets them, which is harmless: a
// link decides one call, and the call's workflow refuses any decision
// after the first, so a reused link can never decide twice.

// maxEmailForm caps the form a link posts.
const maxEmailForm = 64 << 10

// maxReason caps a reason typed on the confirmation page.
const maxReason = 2000

// emailLinks serves /email/decide.
type emailLinks struct {
	people    *people
	calls     *tgclient.Client
	approvers *notify.Approvers
	links     *notify.LinkSigner
	logger    *zap.Logger
	errs      *api
	used      *usedLinks
	now       func() time.Time
}

// newEmailLinks returns the endpoint, or nil when email is not configured.
func newEmailLinks(cfg Config, signedIn *people) *emailLinks {
	n := cfg.Notify
	if !n.EmailEnabled() {
		return nil
	}
	if err := n.Validate(); err != nil {
		cfg.Logger.Error("Email links are off: the settings are incomplete", zap.Error(err))
		return nil
	}
	return &emailLinks{
		calls:     cfg.Calls,
		approvers: n.Approvers,
		links:     n.LinkSigner(),
		logger:    cfg.Logger.Named("email"),
		errs:      &api{calls: cfg.Calls, tokens: cfg.Tokens, logger: cfg.Logger},
		used:      &usedLinks{ids: map[string]time.Time{}},
		now:       time.Now,
		people:    signedIn,
	}
}

func (e *emailLinks) routes(mux *http.ServeMux) {
	mux.Handle("GET /email/decide", secureHeaders(http.HandlerFunc(e.confirmPage)))
	mux.Handle("POST /email/decide", secureHeaders(crossOrigin.Handler(http.HandlerFunc(e.decide))))
}

// usedLinks remembers the links that decided, until they expire.
type usedLinks struct {
	mu  sync.Mutex
	ids map[string]time.Time
}

// take marks a link used; false when it already was. Expired entries are
// dropped on the way, so the map holds only live links.
func (u *usedLinks) take(id string, expires, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k, exp := range u.ids {
		if !now.Before(exp) {
			delete(u.ids, k)
		}
	}
	if _, ok := u.ids[id]; ok {
		return false
	}
	u.ids[id] = expires
	return true
}

// give back a link whose decision failed for a reason other than the call
// (Temporal unreachable): the approver may try again.
func (u *usedLinks) giveBack(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.ids, id)
}

// emailView is the confirmation page, or the page after a decision.
type emailView struct {
	Token, Decision, Action, Button string
	Deny                            bool
	CallID, Tool, Session, Message  string
	Requester, AskedOf, Rule        string
	Args, Deadline, TimeLeft        string
	Name, Address, Expires          string
	InboxURL                        string
	// Done is set after the decision was taken.
	Done string
}

var emailPage = template.Must(template.Must(template.New("email").Funcs(pageFuncs).
	ParseFS(webFS, "web/templates/layout.html")).Parse(`{{define "content" -}}
{{- with .Body}}
<section class="card">
  {{- if .Done}}
  <h1>{{.Done}}</h1>
  <p>You can close this page. <a href="{{.InboxURL}}">Open the call in the inbox</a>.</p>
  {{- else}}
  <h1>{{.Action}} <span class="tool">{{.Tool}}</span> <span class="id">{{.CallID}}</span>?</h1>
  {{- with .Message}}<p class="message">{{template "shown" .}}</p>{{end}}
  <dl class="facts">
    <dt>Session</dt><dd>{{.Session}}</dd>
    {{- with .Requester}}<dt>Requested by</dt><dd>{{.}}</dd>{{end}}
    {{- with .Rule}}<dt>Rule</dt><dd>{{.}}</dd>{{end}}
    <dt>Asked of</dt><dd>{{.AskedOf}}</dd>
    {{- with .Deadline}}<dt>Deadline</dt><dd>{{.}}{{with $.Body.TimeLeft}} <small>({{.}} left)</small>{{end}}</dd>{{end}}
    <dt>Deciding as</dt><dd>{{.Name}} <small>({{.Address}})</small></dd>
    <dt>This link</dt><dd>{{.Decision}}, until {{.Expires}}</dd>
  </dl>
  <h2>Arguments</h2>
  <pre class="json">{{template "shown" .Args}}</pre>
  <p class="notice">Nothing is decided until you press the button.</p>
  <form method="post" action="/email/decide" class="decide" id="email-decide">
    <input type="hidden" name="t" value="{{.Token}}">
    {{- if .Deny}}
    <label for="reason">Reason <small>(optional; sent to the agent with the denial)</small></label>
    <textarea id="reason" name="reason" rows="3" maxlength="2000"></textarea>
    {{- end}}
    <div class="buttons">
      <button type="submit" class="{{if .Deny}}danger{{else}}primary{{end}}">{{.Button}}</button>
    </div>
  </form>
  <p><small>Or <a href="{{.InboxURL}}">decide in the inbox</a>.</small></p>
  {{- end}}
</section>
{{- else}}
<section class="card narrow">
  <h1>{{.Title}}</h1>
  <p>Nothing was decided by this page.</p>
</section>
{{- end}}
{{- end}}`))

// emailActions name the decision of a link on its page.
var emailActions = map[string]struct{ action, button, done string }{
	"approve":             {"Approve", "Approve this call", "Approved"},
	"approve_for_session": {"Approve for the session", "Approve this call and the session's later calls of this tool", "Approved for the session"},
	"deny":                {"Deny", "Deny this call", "Denied"},
	"deny_always":         {"Deny always", "Deny this call and the session's later calls of this tool", "Denied for the session"},
}

// render writes an email-link page; d.Error, when set, is the refusal
// shown.
func (e *emailLinks) render(w http.ResponseWriter, status int, d pageData) {
	if err := writeEmailPage(w, status, d); err != nil {
		e.logger.Error("Render email page", zap.Error(err))
		http.Error(w, "internal error; see the server log", http.StatusInternalServerError)
	}
}

func writeEmailPage(w http.ResponseWriter, status int, d pageData) error {
	var buf strings.Builder
	if err := emailPage.ExecuteTemplate(&buf, "layout", d); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, err := w.Write([]byte(buf.String()))
	return err
}

// refuse renders a refusal page: nothing was decided.
func (e *emailLinks) refuse(w http.ResponseWriter, status int, title, msg string) {
	e.render(w, status, pageData{Title: title, Error: msg})
}

// linkRefusal maps a link that failed verification to its page.
func (e *emailLinks) linkRefusal(w http.ResponseWriter, err error) {
	var le *notify.LinkError
	if !errors.As(err, &le) {
		e.refuse(w, http.StatusBadRequest, "Link not valid", "This link is not valid.")
		return
	}
	switch le.Problem {
	case notify.LinkExpired:
		e.refuse(w, http.StatusGone, "Link expired", "This link expired at "+clock(le.Expired)+"; nothing was decided. Decide in the inbox if the call still waits.")
	case notify.LinkTampered:
		e.refuse(w, http.StatusBadRequest, "Link not valid", "This link was changed or was not issued by this toolgate; nothing was decided.")
	default:
		e.refuse(w, http.StatusBadRequest, "Link not valid", "This link is incomplete (was it cut by the mail program?); nothing was decided. Copy the whole link, or decide in the inbox.")
	}
}

// verified is a link that passed every check before the call is looked at.
type verified struct {
	claims    notify.LinkClaims
	principal Principal
	approver  notify.Approver
}

// verify checks the token and finds its approver; on failure it has
// written the refusal page.
func (e *emailLinks) verify(w http.ResponseWriter, token string) (verified, bool) {
	if token == "" {
		e.refuse(w, http.StatusBadRequest, "Link not valid", "This link has no token; open the link from the email as it is.")
		return verified{}, false
	}
	c, err := e.links.Verify(token, e.now())
	if err != nil {
		e.logger.Info("Email link refused", zap.Error(err))
		e.linkRefusal(w, err)
		return verified{}, false
	}
	ap, ok := e.approvers.ByEmail(c.Recipient)
	if !ok {
		e.logger.Warn("Email link for an address that is no longer an approver", zap.String("to", c.Recipient), zap.String("callID", c.CallID))
		e.refuse(w, http.StatusForbidden, "Not an approver", c.Recipient+" is not in toolgate's approvers file (any more), so this link cannot decide; nothing was decided.")
		return verified{}, false
	}
	return verified{claims: c, principal: approverPrincipal(ap, e.people), approver: ap}, true
}

// usedRefusal explains a link that decided already, with how the call
// was decided.
func (e *emailLinks) usedRefusal(ctx context.Context, w http.ResponseWriter, callID string) {
	msg := "This link was already used; nothing more was decided."
	if st, err := e.calls.Status(ctx, callID); err == nil && st.Result != nil {
		msg = "This link was already used: " + e.calls.AlreadyDecided(ctx, callID).Error() + "."
	}
	e.refuse(w, http.StatusConflict, "Already decided", msg)
}

// confirmPage shows what the link would decide. It decides nothing.
func (e *emailLinks) confirmPage(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("t")
	v, ok := e.verify(w, token)
	if !ok {
		return
	}
	ctx := r.Context()
	if e.used.has(v.claims.ID) {
		e.usedRefusal(ctx, w, v.claims.CallID)
		return
	}
	if err := e.errs.checkDecidable(ctx, v.principal, decisionRequest{CallID: v.claims.CallID, Decision: v.claims.Decision}, map[string]bool{}); err != nil {
		ae := asAPIError(e.errs.mapError(err))
		title := "Cannot decide"
		switch ae.code {
		case "already_decided", "not_waiting":
			title = "Already decided"
		case "passkey_required":
			title, ae.message = "Needs your passkey", ae.message+" ("+callURL(v.claims.CallID)+")"
		}
		e.refuse(w, ae.status, title, ae.message+"; nothing was decided.")
		return
	}
	st, err := e.calls.Status(ctx, v.claims.CallID)
	if err != nil || st.State == nil {
		e.refuse(w, http.StatusConflict, "Cannot decide", "The call is no longer waiting; nothing was decided.")
		return
	}
	e.render(w, http.StatusOK, pageData{Title: "Confirm: " + emailActions[v.claims.Decision].action, Body: e.view(token, v, st.State)})
}

// view builds the confirmation page of a waiting call.
func (e *emailLinks) view(token string, v verified, cs *workflows.CallState) emailView {
	a := emailActions[v.claims.Decision]
	out := emailView{
		Token: token, Decision: v.claims.Decision, Action: a.action, Button: a.button, Deny: strings.HasPrefix(v.claims.Decision, "deny"),
		CallID: cs.Call.ID, Tool: cs.Call.Tool, Session: cs.Call.Session, Requester: cs.Call.Requester,
		AskedOf: "any approver", Args: pretty(cs.Call.Args),
		Name: v.approver.Name, Address: v.approver.Email, Expires: clock(v.claims.Expires), InboxURL: callURL(cs.Call.ID),
	}
	if req := cs.Request; req != nil {
		out.Message, out.Rule = req.Message, req.Rule
		if len(req.Groups) > 0 {
			out.AskedOf = strings.Join(req.Groups, ", ")
		}
	}
	if !cs.Deadline.IsZero() {
		out.Deadline, out.TimeLeft = clock(cs.Deadline), timeLeft(cs.Deadline, e.now())
	}
	return out
}

// decide takes the link's decision. The token is read from the form body
// only, never from the URL.
func (e *emailLinks) decide(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxEmailForm)
	if err := r.ParseForm(); err != nil {
		e.refuse(w, http.StatusBadRequest, "Form not valid", "The form could not be read; nothing was decided.")
		return
	}
	token := r.PostForm.Get("t")
	if token == "" && r.URL.Query().Has("t") {
		e.refuse(w, http.StatusBadRequest, "Form not valid", "The link's token must be sent in the form, not the URL; nothing was decided. Open the link and press the button.")
		return
	}
	v, ok := e.verify(w, token)
	if !ok {
		return
	}
	ctx := r.Context()
	c := v.claims
	if !e.used.take(c.ID, c.Expires, e.now()) {
		e.usedRefusal(ctx, w, c.CallID)
		return
	}
	req := decisionRequest{Decision: c.Decision}
	if strings.HasPrefix(c.Decision, "deny") {
		req.Reason = strings.TrimSpace(r.PostForm.Get("reason"))
		if len(req.Reason) > maxReason {
			e.used.giveBack(c.ID)
			e.refuse(w, http.StatusBadRequest, "Reason too long", fmt.Sprintf("The reason is over %d characters; nothing was decided. Go back and shorten it.", maxReason))
			return
		}
	}
	applied, err := Decide(ctx, e.calls, v.principal, c.CallID, req, EmailChannel)
	if err != nil {
		e.used.giveBack(c.ID)
		ae := asAPIError(e.errs.mapError(err))
		title := "Cannot decide"
		switch ae.code {
		case "already_decided", "not_waiting":
			title = "Already decided"
		case "passkey_required":
			title, ae.message = "Needs your passkey", ae.message+" ("+callURL(c.CallID)+")"
		}
		e.logger.Info("Email decision refused", zap.String("callID", c.CallID), zap.String("approver", v.principal.Name), zap.String("decision", c.Decision), zap.String("refusal", ae.message))
		e.refuse(w, ae.status, title, ae.message+"; nothing was decided.")
		return
	}
	e.logger.Info("Decision", zap.String("callID", c.CallID), zap.Stringer("decision", applied.Kind), zap.String("approver", v.principal.Name), zap.String("channel", EmailChannel))
	done := fmt.Sprintf("%s call %s as %s", emailActions[c.Decision].done, c.CallID, v.principal.Name)
	notice := "Decision recorded: " + applied.Kind.String() + "."
	if ap := approvalsLeft(ctx, e.calls, c.CallID, applied); ap != nil {
		notice = fmt.Sprintf("Approval recorded: %d of %d approvals; the call waits for another approver.", len(ap.Given), ap.Needed)
	}
	e.render(w, http.StatusOK, pageData{Title: done, Notice: notice, Body: emailView{Done: done, InboxURL: callURL(c.CallID)}})
}

// has reports whether a link decided already.
func (u *usedLinks) has(id string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.ids[id]
	return ok
}
