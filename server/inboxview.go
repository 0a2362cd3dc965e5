package server

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/visible"
	"github.com/toolgate/toolgate/workflows"
)

// webFS holds the inbox's templates and assets: the binary serves them,
// nothing is built with Node.
//
//go:embed web/templates web/static
var webFS embed.FS

// inboxPages are the page templates, each parsed with the layout.
var inboxPages = func() map[string]*template.Template {
	funcs := pageFuncs
	pages := map[string]*template.Template{}
	for _, name := range []string{"login", "list", "call", "session", "audit", "stats", "error"} {
		pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(webFS, "web/templates/layout.html", "web/templates/"+name+".html"))
	}
	return pages
}()

// pageFuncs are the functions the pages' templates call. parts splits a
// call's text (arguments, preview, message, reason, output) for the
// "shown" template, which marks each escape of what a browser would obey
// or hide (bidi overrides and isolates, zero-width and control
// characters); plain escapes it the same way without marks, for a
// textarea.
var pageFuncs = template.FuncMap{"join": strings.Join, "parts": parts, "plain": visible.JSON}

// textPart is a run of a text as the page shows it: plain text, or one
// escape toolgate made (Esc), which the page marks apart from text that
// only looks like one.
type textPart struct {
	Text string
	Esc  bool
}

func parts(s string) []textPart {
	var out []textPart
	visible.Each(s, true, func(part string, escaped bool) { out = append(out, textPart{part, escaped}) })
	return out
}

// staticFiles serves web/static under /static/, without directory
// listings.
var staticFiles = func() http.Handler {
	sub, err := fs.Sub(webFS, "web")
	if err != nil {
		panic(err)
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}()

// pageData is what the layout needs, plus the page's own view in Body.
type pageData struct {
	Title string
	// User is the signed-in approver; empty on the sign-in page.
	User string
	// CSRF goes into every form's hidden csrf field.
	CSRF string
	// Auditor: the signed-in token reads only.
	Auditor bool
	// Stats: the signed-in token may read the approval statistics
	// (inboxstats.go), which the navigation then links.
	Stats  bool
	Error  string
	Notice string
	Body   any
}

func (i *inbox) pageData(s *inboxSession, title string, body any) pageData {
	return pageData{Title: title, User: s.principal.Name, CSRF: s.csrf, Auditor: s.principal.Role == RoleAuditor, Stats: mayReadStats(s.principal), Body: body}
}

// render writes a page; a template error is logged and answered with a
// bare 500, never half a page.
func (i *inbox) render(w http.ResponseWriter, status int, name string, d pageData) {
	if err := writePage(w, status, name, d); err != nil {
		i.logger.Error("Render inbox page", zap.String("page", name), zap.Error(err))
		http.Error(w, "internal error; see the server log", http.StatusInternalServerError)
	}
}

func writePage(w http.ResponseWriter, status int, name string, d pageData) error {
	var buf bytes.Buffer
	if err := inboxPages[name].ExecuteTemplate(&buf, "layout", d); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}

// renderError renders a refusal or failure as a page with the status.
func (i *inbox) renderError(w http.ResponseWriter, s *inboxSession, status int, msg string) {
	d := i.pageData(s, http.StatusText(status), nil)
	d.Error = msg
	i.render(w, status, "error", d)
}

// renderForbidden is the 403 page of a refused form; it shows no session
// data, since the request may not come from the signed-in browser.
func renderForbidden(w http.ResponseWriter, msg string) {
	if err := writePage(w, http.StatusForbidden, "error", pageData{Title: "Refused", Error: msg}); err != nil {
		http.Error(w, msg, http.StatusForbidden)
	}
}

// pendingRow is one waiting call in the list, as the page renders it and
// pending.json sends it.
type pendingRow struct {
	CallID  string `json:"call_id"`
	URL     string `json:"url"`
	Session string `json:"session"`
	Tool    string `json:"tool"`
	Args    string `json:"args"`
	Message string `json:"message"`
	Age     string `json:"age"`
}

func newPendingRow(c tgclient.CallSummary, now time.Time) pendingRow {
	msg := c.Message
	if c.Approvals != "" { // four eyes: how far it is
		msg = "[" + c.Approvals + "] " + msg
	}
	return pendingRow{
		CallID: c.CallID, URL: callURL(c.CallID), Session: c.Session, Tool: c.Tool,
		Args: visible.Line(c.Args), Message: visible.Line(msg), Age: ago(now.Sub(c.RequestedAt)),
	}
}

// pendingView is the waiting list: one page of the calls the approver may
// decide, oldest first, as the page renders it and pending.json sends it.
type pendingView struct {
	Calls []pendingRow `json:"calls"`
	// Total counts every call the approver may decide, on all pages.
	Total int64 `json:"total"`
	// Later: this is not the first page.
	Later bool `json:"later"`
	// NextURL is the next page; empty on the last one. FirstURL is set on
	// later pages.
	NextURL  string `json:"next_url,omitempty"`
	FirstURL string `json:"first_url,omitempty"`
	// LiveURL is what the page script polls: this same page.
	LiveURL string `json:"-"`
}

func newPendingView(p tgclient.Page, token string, now time.Time) pendingView {
	v := pendingView{Calls: []pendingRow{}, Total: p.Total, Later: token != "", LiveURL: "/inbox/pending.json"}
	for _, c := range p.Calls {
		v.Calls = append(v.Calls, newPendingRow(c, now))
	}
	if p.NextPageToken != "" {
		v.NextURL = "/?page_token=" + url.QueryEscape(p.NextPageToken)
	}
	if token != "" {
		v.FirstURL = "/"
		v.LiveURL += "?page_token=" + url.QueryEscape(token)
	}
	return v
}

// callView is a call's page: its live state while it runs, its Result
// once final.
type callView struct {
	ID, URL, Session, SessionURL, Tool, Requester string
	Status                                        workflows.Status
	Message, Rule                                 string
	Groups                                        []string
	// Args are pretty-printed.
	Args string
	// Preview is what the call will change (or changed, once final).
	Preview *previewView
	// Approvals says how far a four-eyes call is: "1 of 2 approvals: alice".
	Approvals string
	// User is the person running the agent, when the rule lets them
	// decide the call in the agent's client.
	User          string
	Age, TimeLeft string
	Deadline      string
	Decided       string
	DecidedAt     string
	// Identity is who the decider's identity provider says they are.
	Identity string
	// Notified lists the notices sent (waiting, reminders, escalation).
	Notified       []string
	Final, Pending bool
	// Passkey: its rule needs the approver's passkey for every approval.
	Passkey bool
	// CanDecide: the call waits and the signed-in approver may decide it;
	// otherwise Why says why not.
	CanDecide bool
	Why       string
	Result    *resultView
	// Form is what the decision form shows; its Args default to the call's.
	Form decisionForm
	// Ledger is the call's entries in the decision ledger.
	Ledger *ledgerView
	// FromLedger, when set, says the page shows the call from the ledger
	// alone: Temporal no longer has it.
	FromLedger string
}

// resultView is the part of a Result the call page shows.
type resultView struct {
	Reason, Note, Comment, Args, OriginalArgs, Output string
	FinishedAt                                        string
	// RanAfterEnd: the tool ran although the call ended denied or timed
	// out.
	RanAfterEnd *ranAfterEndView
}

// identityText names a person as their identity provider does.
func identityText(id *policy.Identity) string {
	if id == nil {
		return ""
	}
	return id.Subject + " at " + id.Issuer
}

func newCallView(st tgclient.Status, p Principal, now time.Time, form decisionForm) callView {
	var v callView
	if r := st.Result; r != nil {
		v = callView{
			ID: r.CallID, Session: r.Session, Tool: r.Tool, Requester: r.Requester, Status: r.Status, Rule: r.Rule,
			Args: pretty(r.Args), Decided: decidedText(r.Decision, r.DecidedBy, r.Channel), DecidedAt: clock(r.DecidedAt), Final: true,
			Result: &resultView{Reason: r.Reason, Note: r.Note, Comment: r.Comment, Args: pretty(r.Args), OriginalArgs: pretty(r.OriginalArgs), Output: pretty(r.Output), FinishedAt: clock(r.FinishedAt)},
		}
		v.Identity = identityText(r.Identity)
		v.Result.RanAfterEnd = newRanAfterEndView(r.RanAfterEnd)
		v.Notified = notified(r.Notices)
		v.Preview = newPreviewView(r.Preview)
		v.Approvals = approvalsText(r.Approvals)
	} else {
		cs := st.State
		v = callView{ID: cs.Call.ID, Session: cs.Call.Session, Tool: cs.Call.Tool, Requester: cs.Call.Requester, Status: cs.Status, Args: pretty(cs.Call.Args)}
		if cs.Request != nil {
			v.Message, v.Rule, v.Groups = cs.Request.Message, cs.Request.Rule, cs.Request.Groups
			v.Passkey = cs.Request.Passkey
			v.Preview = newPreviewView(cs.Request.Preview)
			v.User = policy.DecidersOf(cs.Call, *cs.Request, nil).User
		}
		v.Approvals = approvalsText(cs.Approvals)
		v.Notified = notified(cs.Notices)
		v.Pending = cs.Status == workflows.StatusPending
		if v.Pending && !cs.WaitingSince.IsZero() {
			v.Age = ago(now.Sub(cs.WaitingSince))
		}
		if v.Pending && !cs.Deadline.IsZero() {
			v.TimeLeft, v.Deadline = timeLeft(cs.Deadline, now), clock(cs.Deadline)
		}
		if d := cs.Decision; d != nil {
			v.Decided, v.DecidedAt = decidedText(d.Kind.String(), d.DecidedBy, d.Channel), clock(d.DecidedAt)
			v.Identity = identityText(d.Identity)
		}
		switch {
		case !v.Pending:
		case p.Role == RoleAuditor:
			v.Why = "You hold an auditor token: you read calls and decide none."
		case cs.Call.Requester == p.Name:
			v.Why = "You requested this call; another approver must decide it."
		case !p.mayDecide(v.Groups):
			v.Why = fmt.Sprintf("This call is asked of %s; you are not in those groups.", strings.Join(v.Groups, ", "))
		default:
			v.CanDecide = true
		}
	}
	v.URL, v.SessionURL = callURL(v.ID), sessionURL(v.Session)
	v.Form = form
	if v.Form.Args == "" {
		v.Form.Args = v.Args
	}
	return v
}

// notified describes each notice: kind, groups, time.
func notified(ns []workflows.NoticeRecord) []string {
	var out []string
	for _, n := range ns {
		who := "every approver"
		if len(n.Groups) > 0 {
			who = strings.Join(n.Groups, ", ")
		}
		out = append(out, fmt.Sprintf("%s to %s at %s", n.Kind, who, clock(n.At)))
	}
	return out
}

// callLive is state.json: what the call page script updates.
type callLive struct {
	CallID   string           `json:"call_id"`
	Status   workflows.Status `json:"status"`
	Pending  bool             `json:"pending"`
	Final    bool             `json:"final"`
	Decided  string           `json:"decided,omitempty"`
	Age      string           `json:"age,omitempty"`
	TimeLeft string           `json:"time_left,omitempty"`
}

func (v callView) live() callLive {
	return callLive{CallID: v.ID, Status: v.Status, Pending: v.Pending, Final: v.Final, Decided: v.Decided, Age: v.Age, TimeLeft: v.TimeLeft}
}

// decidedText says who decided: "approved by bob via inbox".
func decidedText(decision, by, channel string) string {
	if by == "" {
		return ""
	}
	return fmt.Sprintf("%s by %s via %s", decision, by, channel)
}

// sessionView is a session's page.
type sessionView struct {
	Session, RevokeURL, EndURL, AuditURL string
	Ended                                bool
	// ReadOnly: an auditor's page, without the revoke and end buttons.
	ReadOnly bool
	Sticky   []stickyRow
	Waiting  []waitingRow
}

type stickyRow struct {
	Key, Tool, Decision, DecidedBy, Channel, DecidedAt string
	FromCall, FromCallURL                              string
}

type waitingRow struct {
	CallID, URL, Tool, Age string
}

func newSessionView(v workflows.SessionView, now time.Time) sessionView {
	u := sessionURL(v.Session)
	out := sessionView{Session: v.Session, RevokeURL: u + "/revoke", EndURL: u + "/end", AuditURL: "/audit?session=" + url.QueryEscape(v.Session), Ended: v.Ended}
	for _, s := range v.Sticky {
		out.Sticky = append(out.Sticky, stickyRow{
			Key: s.Key, Tool: s.Tool, Decision: s.Decision.Kind.String(), DecidedBy: s.Decision.DecidedBy, Channel: s.Decision.Channel,
			DecidedAt: clock(s.Decision.DecidedAt), FromCall: s.FromCall, FromCallURL: callURL(s.FromCall),
		})
	}
	for _, w := range v.Waiting {
		out.Waiting = append(out.Waiting, waitingRow{CallID: w.CallID, URL: callURL(w.CallID), Tool: w.Tool, Age: ago(now.Sub(w.RequestedAt))})
	}
	return out
}

// auditView is the audit page: decided calls, newest first. With a
// decision ledger they are read from it, of any age, a page at a time;
// without one from Temporal's visibility, which forgets a call with its
// namespace's retention.
type auditView struct {
	Rows []auditRow
	// Filter describes the session or tool filter, if any.
	Filter string
	// Capped: there may be more than the page shows (from Temporal).
	Capped bool
	Limit  int
	// FromLedger: the rows are the ledger's; OlderURL is the next page
	// (none on the last), Paged says this is not the first.
	FromLedger bool
	OlderURL   string
	Paged      bool
}

// auditRow is one decided call. Decision, Index and ReceiptURL are the
// ledger's: the decision, its entry's index and the call's receipt.
type auditRow struct {
	CallID, URL, Session, SessionURL, Tool, Status, DecidedBy, Channel, When, Ago string
	Decision, ReceiptURL                                                          string
	Index                                                                         int64
}

func newAuditView(calls []tgclient.CallSummary, f tgclient.ListFilter, now time.Time) auditView {
	v := auditView{Capped: len(calls) >= f.Limit, Limit: f.Limit, Filter: auditFilter(f)}
	for _, c := range calls {
		v.Rows = append(v.Rows, auditRow{
			CallID: c.CallID, URL: callURL(c.CallID), Session: c.Session, SessionURL: sessionURL(c.Session), Tool: c.Tool,
			Status: c.Status, DecidedBy: c.DecidedBy, Channel: c.Channel, When: clock(c.ClosedAt), Ago: ago(now.Sub(c.ClosedAt)),
		})
	}
	return v
}

// maxPretty caps what a page shows of arguments or output.
const maxPretty = 64 << 10

// pretty indents JSON for reading; empty stays empty.
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	out := string(raw)
	if json.Indent(&buf, raw, "", "  ") == nil {
		out = buf.String()
	}
	if len(out) > maxPretty {
		out = out[:maxPretty] + "\n… (cut at 64 KiB)"
	}
	return out
}

// clock formats an instant for the pages, in UTC.
func clock(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago formats a duration for a glance: 42s, 3m05s, 2h10m, 3d04h.
func ago(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func timeLeft(deadline, now time.Time) string {
	if !now.Before(deadline) {
		return "due now"
	}
	return ago(deadline.Sub(now))
}

// previewView is a preview as the call page shows it: a diff line by
// line, each with its class (add, del, hunk, meta), for highlighting.
type previewView struct {
	Kind, By string
	// Hidden counts the characters of the text shown escaped.
	Hidden    int
	Lines     []previewLine
	Truncated bool
}

type previewLine struct{ Text, Class string }

func newPreviewView(p *policy.Preview) *previewView {
	if p == nil {
		return nil
	}
	v := &previewView{Kind: p.Kind, Truncated: p.Truncated, Hidden: visible.Hidden(p.Text)}
	if p.ComputedBy == policy.ComputedByAgent {
		v.By = "preview computed by the agent: its claim, not checked by toolgate"
	}
	for _, line := range strings.Split(strings.TrimRight(p.Text, "\n"), "\n") {
		class := ""
		if p.Kind == policy.PreviewDiff {
			switch {
			case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"), strings.HasPrefix(line, "new file"):
				class = "meta"
			case strings.HasPrefix(line, "@@"):
				class = "hunk"
			case strings.HasPrefix(line, "+"):
				class = "add"
			case strings.HasPrefix(line, "-"):
				class = "del"
			}
		}
		v.Lines = append(v.Lines, previewLine{Text: line, Class: class})
	}
	return v
}

// approvalsText is a four-eyes call's count and who gave them.
func approvalsText(a *workflows.Approvals) string {
	if a == nil {
		return ""
	}
	text := fmt.Sprintf("%d of %d approvals", len(a.Given), a.Needed)
	var by []string
	for _, g := range a.Given {
		who := g.By + " via " + g.Channel
		if g.Group != "" {
			who += " for " + g.Group
		}
		by = append(by, who)
	}
	if len(by) > 0 {
		text += ": " + strings.Join(by, ", ")
	}
	return text
}
