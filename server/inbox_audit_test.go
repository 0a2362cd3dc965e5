package server

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// newAuditInbox is the inbox with one token of each role (auditTokens).
func newAuditInbox(t *testing.T, cfg Config) (*inbox, http.Handler) {
	t.Helper()
	cfg.Tokens, cfg.Logger = auditTokens(t), zap.NewNop()
	i := newInbox(cfg, &people{})
	mux := http.NewServeMux()
	i.routes(mux)
	return i, mux
}

// An auditor signs in and reads; every post of the inbox that changes
// something refuses it, walked from the inbox's route table (Calls is
// nil: reaching Temporal would panic). Signing in and out change no call.
func TestTheInboxShowsAnAuditorNoButtonsAndRefusesItsPosts(t *testing.T) {
	i, h := newAuditInbox(t, Config{})
	c := signIn(t, h, "auditor-token")
	sess, ok := i.sessions.get(c.Value)
	require.True(t, ok)
	require.Equal(t, RoleAuditor, sess.principal.Role)

	walked := 0
	for _, r := range i.table() {
		if r.method == "GET" || r.pattern == "/login" || r.pattern == "/logout" {
			continue
		}
		walked++
		path := strings.NewReplacer("{call_id}", "c1", "{session}", "s1").Replace(r.pattern)
		for _, d := range []string{"approve", "approve_for_session", "deny", "deny_always", "approve_edited"} {
			rec := postForm(h, path, url.Values{"csrf": {sess.csrf}, "decision": {d}, "key": {"shell"}, "args": {`{}`}}, c)
			assert.Equal(t, http.StatusForbidden, rec.Code, "%s %s", path, d)
			assert.Contains(t, rec.Body.String(), "audrey holds an auditor token", path)
			assert.Contains(t, rec.Body.String(), "Nothing was done.", path)
		}
	}
	assert.Equal(t, 7, walked, "decide, a decision's passkey challenge, revoke, end; a passkey's options, registration and removal")

	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	pending := tgclient.Status{State: &workflows.CallState{
		Call:   policy.Call{ID: "c1", Session: "s1", Tool: "shell", Args: json.RawMessage(`{}`), Requester: "agent-1"},
		Status: workflows.StatusPending, Request: &policy.ApprovalRequest{Message: "Run?"}, WaitingSince: now,
	}}
	page := func(p Principal, name string, body any) string {
		s := i.sessions.create(p)
		rec := httptest.NewRecorder()
		i.render(rec, http.StatusOK, name, i.pageData(s, name, body))
		require.Equal(t, http.StatusOK, rec.Code)
		return rec.Body.String()
	}
	auditor := Principal{Name: "audrey", Role: RoleAuditor}
	approver := Principal{Name: "alice", Role: RoleApprover}

	body := page(auditor, "call", newCallView(pending, auditor, now, decisionForm{}))
	assert.NotContains(t, body, `id="decide"`)
	assert.NotContains(t, body, `value="approve"`)
	assert.Contains(t, body, "You hold an auditor token: you read calls and decide none.")
	assert.Contains(t, body, `<small id="read-only">(auditor: reads only)</small>`)
	assert.Contains(t, page(approver, "call", newCallView(pending, approver, now, decisionForm{})), `id="decide"`, "an approver's page has the buttons")

	session := workflows.SessionView{Session: "s1", Sticky: []workflows.StickyDecision{{Key: "shell", Tool: "shell", FromCall: "c0",
		Decision: policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "inbox"}}}}
	ro := newSessionView(session, now)
	ro.ReadOnly = true
	body = page(auditor, "session", ro)
	assert.Contains(t, body, "shell", "the auditor reads the sticky decision")
	assert.NotContains(t, body, ">Revoke</button>")
	assert.NotContains(t, body, "End session")
	body = page(approver, "session", newSessionView(session, now))
	assert.Contains(t, body, ">Revoke</button>")
	assert.Contains(t, body, "End session")

	// Signing out is the auditor's own.
	rec := postForm(h, "/logout", url.Values{"csrf": {sess.csrf}}, c)
	assert.Equal(t, http.StatusSeeOther, rec.Code)
	_, ok = i.sessions.get(c.Value)
	assert.False(t, ok)
}

func renderCallPage(t *testing.T, i *inbox, v callView) string {
	t.Helper()
	s := i.sessions.create(Principal{Name: "alice", Role: RoleApprover, Groups: []string{"ops"}})
	rec := httptest.NewRecorder()
	i.render(rec, http.StatusOK, "call", i.pageData(s, "Call "+v.ID, v))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

func TestTheCallPageShowsTheCallsLedgerEntriesProved(t *testing.T) {
	l, keys, dsn := testLedger(t)
	ctx := context.Background()
	appendEntries(t, l, callEntries("c1", "agent-1")...)
	appendEntries(t, l, callEntries("c2", "agent-1")...)
	i, _ := newAuditInbox(t, Config{Ledger: l})
	now := auditAt.Add(time.Hour)
	decided := tgclient.Status{Result: &workflows.Result{CallID: "c1", Session: "s1", Tool: "shell", Status: workflows.StatusOK,
		Decision: "approved", DecidedBy: "bob", Channel: "inbox", Args: json.RawMessage(`{}`)}}

	// No checkpoint yet, and a server that cannot sign one: the entries
	// are shown, not as proved.
	reader, err := ledger.Open(ctx, ledger.Options{DSN: dsn, Keys: ledger.Keys{Verifier: keys.Verifier, VerifierKey: keys.VerifierKey}})
	require.NoError(t, err)
	defer reader.Close()
	ri, _ := newAuditInbox(t, Config{Ledger: reader})
	v := newCallView(decided, Principal{Name: "alice", Role: RoleApprover}, now, decisionForm{})
	v.Ledger, _ = ri.ledgerView(ctx, "c1")
	body := renderCallPage(t, ri, v)
	assert.Contains(t, body, "entry #0, call.submitted at 2026-12-03 10:00:00 UTC, not in a signed checkpoint yet")
	assert.NotContains(t, body, "signature valid")

	// The server signs (toolgate dev): the page proves the entries.
	v.Ledger, _ = i.ledgerView(ctx, "c1")
	require.True(t, v.Ledger.Verified)
	body = renderCallPage(t, i, v)
	for _, want := range []string{
		`<section id="ledger" class="ledger">`,
		"Every entry below is in the signed checkpoint 6 of toolgate/test",
		"entry #0, call.submitted at 2026-12-03 10:00:00 UTC, in checkpoint 6, signature valid",
		"entry #1, call.decided at 2026-12-03 10:01:00 UTC, in checkpoint 6, signature valid",
		"entry #2, call.finished at 2026-12-03 10:02:00 UTC, in checkpoint 6, signature valid",
		`&#34;decided_by&#34;: &#34;bob&#34;`,
	} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, "entry #3", "only the call's own entries")

	// An entry changed in the database after its checkpoint: the page says
	// the receipt does not verify, and nothing is called valid.
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`UPDATE ledger_entries SET entry = replace(entry, '"bob"', '"eve"') WHERE idx = 1`)
	require.NoError(t, err)
	v.Ledger, _ = i.ledgerView(ctx, "c1")
	body = renderCallPage(t, i, v)
	assert.Contains(t, body, `<p class="error" id="ledger-problem">The ledger&#39;s receipt for this call does NOT verify: entry #1 (call.decided c1/decided) was changed: it is not the log&#39;s entry #1 in the checkpoint of size 6`)
	assert.NotContains(t, body, "signature valid")
	assert.Contains(t, body, "entry #1, call.decided at 2026-12-03 10:01:00 UTC, not verified")

	// A call the ledger has no entry of; a deployment without a ledger.
	v.Ledger, _ = i.ledgerView(ctx, "c9")
	assert.Contains(t, renderCallPage(t, i, v), "The ledger holds no entry of this call")
	off, _ := newAuditInbox(t, Config{})
	v.Ledger, _ = off.ledgerView(ctx, "c1")
	assert.Contains(t, renderCallPage(t, off, v), "This deployment keeps no decision ledger")
}

// A call whose workflow Temporal no longer has (retention, `temporal
// workflow delete`) is still shown, from the ledger alone, with its
// entries proved; a call neither has is not found.
func TestTheCallPageShowsACallTemporalForgotFromTheLedger(t *testing.T) {
	l, _, _ := testLedger(t)
	appendEntries(t, l, callEntries("c1", "agent-1")...)
	appendEntries(t, l, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "c3/submitted", At: auditAt, CallID: "c3", Session: "s2",
		Requester: "agent-2", Tool: "deploy", Args: json.RawMessage(`{}`)})
	forgetful := tgclient.New(&oneCallTemporal{call: policy.Call{ID: "elsewhere", Requester: "agent-1"}}, "").WithDoor(testDoor)
	_, h := newAuditInbox(t, Config{Calls: forgetful, Ledger: l})

	for _, token := range []string{"approver-token", "auditor-token", "admin-token"} {
		c := signIn(t, h, token)
		get := func(path string) *httptest.ResponseRecorder {
			req := httptest.NewRequest("GET", path, nil)
			req.AddCookie(c)
			return serve(h, req)
		}
		rec := get("/calls/c1")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", token, rec.Body.String())
		body := rec.Body.String()
		for _, want := range []string{
			`<p class="notice" id="from-ledger">Temporal no longer has this call (its retention passed, or its workflow was deleted): this page shows it from the decision ledger alone.</p>`,
			`<span class="tool">shell</span>`, "<dt>Requested by</dt><dd>agent-1</dd>", "<dt>Rule</dt><dd>shell-asks</dd>",
			"decided: approved by bob via inbox", `<dd id="status" class="status-ok">ok</dd>`,
			"<dt>Finished at</dt><dd>2026-12-03 10:02:00 UTC</dd>",
			`&#34;command&#34;: &#34;echo &lt;b&gt;&amp;&lt;/b&gt;&#34;`, `&#34;stdout&#34;`,
			"entry #2, call.finished at 2026-12-03 10:02:00 UTC, in checkpoint 4, signature valid",
		} {
			assert.Contains(t, body, want, token)
		}
		assert.NotContains(t, body, `id="decide"`, "a call from the ledger is final")

		rec = get("/calls/c3")
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Contains(t, rec.Body.String(), "The ledger holds no outcome of it.")
		assert.Contains(t, rec.Body.String(), `<dd id="status" class="status-">no outcome recorded</dd>`)

		rec = get("/calls/c9")
		assert.Equal(t, http.StatusNotFound, rec.Code)
		assert.Contains(t, rec.Body.String(), "unknown call")
	}

	// Without a ledger the forgotten call is not found, as before.
	_, h = newAuditInbox(t, Config{Calls: forgetful})
	c := signIn(t, h, "approver-token")
	req := httptest.NewRequest("GET", "/calls/c1", nil)
	req.AddCookie(c)
	assert.Equal(t, http.StatusNotFound, serve(h, req).Code)
}

// decidedCalls appends n calls to the ledger, each submitted, decided and
// finished, with the event IDs calls write (<call>/<run>/<kind>): k000
// first. Even calls are of session s1, odd ones of s2; every tenth runs
// the tool deploy, k007 a tool named with HTML.
func decidedCalls(t *testing.T, l *ledger.Ledger, n int) {
	t.Helper()
	for i := range n {
		id, session, tool := fmt.Sprintf("k%03d", i), "s"+strconv.Itoa(1+i%2), "shell"
		switch {
		case i%10 == 0:
			tool = "deploy"
		case i == 7:
			tool = "<b>x</b>"
		}
		at := auditAt.Add(time.Duration(i) * time.Minute)
		ev := func(kind string) string { return id + "/run-1/" + kind }
		appendEntries(t, l,
			ledger.Entry{Kind: ledger.KindCallSubmitted, Event: ev(ledger.KindCallSubmitted), At: at, CallID: id, Session: session, Requester: "agent-1", Tool: tool},
			ledger.Entry{Kind: ledger.KindCallDecided, Event: ev(ledger.KindCallDecided), At: at.Add(time.Second), CallID: id, Session: session,
				Decision: &ledger.Decision{Kind: "approved", DecidedBy: "bob", Channel: "inbox"}},
			ledger.Entry{Kind: ledger.KindCallFinished, Event: ev(ledger.KindCallFinished), At: at.Add(2 * time.Second), CallID: id, Session: session, Status: "ok"})
	}
}

var (
	auditRowRE   = regexp.MustCompile(`<td><a href="/calls/([^"/]+)">`)
	auditOlderRE = regexp.MustCompile(`<p id="audit-older"><a href="([^"]+)">`)
)

// auditPage reads the Audit page at path: the calls it lists, in order,
// and its link to the older calls ("" on the last page).
func auditPage(t *testing.T, get func(string) *httptest.ResponseRecorder, path string) (calls []string, older, body string) {
	t.Helper()
	rec := get(path)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	body = rec.Body.String()
	for _, m := range auditRowRE.FindAllStringSubmatch(body, -1) {
		calls = append(calls, m[1])
	}
	if m := auditOlderRE.FindStringSubmatch(body); m != nil {
		older = html.UnescapeString(m[1])
	}
	return calls, older, body
}

// The Audit page reads the ledger: calls Temporal never had (nor will
// have: its retention passed) are listed, newest first, a page of 50 at
// a time, each linked to its page and to its receipt, which verifies.
func TestTheAuditPageListsTheLedgersDecidedCallsPaged(t *testing.T) {
	l, keys, _ := testLedger(t)
	decidedCalls(t, l, 100)
	appendEntries(t, l,
		ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "t1/run-1/call.submitted", At: auditAt.Add(3 * time.Hour), CallID: "t1", Session: "s1", Tool: "shell"},
		ledger.Entry{Kind: ledger.KindCallFinished, Event: "t1/run-1/call.finished", At: auditAt.Add(4 * time.Hour), CallID: "t1", Session: "s1", Status: "timed_out"},
		ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "r1/run-1/call.submitted", At: auditAt.Add(5 * time.Hour), CallID: "r1", Session: "s1", Tool: "shell"},
		ledger.Entry{Kind: ledger.KindCallDecided, Event: "r1/run-1/call.decided", At: auditAt.Add(5 * time.Hour), CallID: "r1", Session: "s1",
			Decision: &ledger.Decision{Kind: "approved", DecidedBy: "carol", Channel: "slack"}})
	_, err := l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	forgetful := tgclient.New(&oneCallTemporal{call: policy.Call{ID: "elsewhere", Requester: "agent-1"}}, "").WithDoor(testDoor)
	i, h := newAuditInbox(t, Config{Calls: forgetful, Ledger: l})
	i.now = func() time.Time { return auditAt.Add(400 * 24 * time.Hour) } // long past any retention

	for _, token := range []string{"approver-token", "auditor-token"} {
		c := signIn(t, h, token)
		get := func(path string) *httptest.ResponseRecorder {
			req := httptest.NewRequest("GET", path, nil)
			req.AddCookie(c)
			return serve(h, req)
		}
		var all []string
		path, pages := "/audit", 0
		for path != "" {
			calls, older, body := auditPage(t, get, path)
			if pages++; pages == 1 {
				assert.Contains(t, body, "From the decision ledger, newest first: every call decided, of any age")
				require.GreaterOrEqual(t, len(calls), 3)
				assert.Equal(t, []string{"r1", "t1", "k099"}, calls[:3], "newest first; a call that timed out undecided is listed by its outcome")
				assert.Contains(t, body, `<td>approved</td>
      <td class="status-">no outcome yet</td>
      <td>carol</td>`)
				assert.Contains(t, body, `<td class="status-timed_out">timed_out</td>`)
				assert.Contains(t, body, `<a href="/calls/k099/receipt" download title="entry #`)
			}
			assert.LessOrEqual(t, len(calls), 50, path)
			all = append(all, calls...)
			path = older
		}
		assert.Equal(t, 3, pages, token)
		require.Len(t, all, 102, "every call once")
		assert.Equal(t, "k000", all[101])
		for n := range 100 {
			assert.Equal(t, fmt.Sprintf("k%03d", 99-n), all[2+n])
		}

		// Filtered by session (in the query) and by tool (read from the
		// calls' submissions), with the filter kept on the older page.
		calls, older, _ := auditPage(t, get, "/audit?session=s2")
		assert.Len(t, calls, 50)
		assert.Empty(t, older, "the 50 calls of s2 fill one page")
		calls, older, _ = auditPage(t, get, "/audit?tool=deploy")
		assert.Equal(t, []string{"k090", "k080", "k070", "k060", "k050", "k040", "k030", "k020", "k010", "k000"}, calls)
		assert.Empty(t, older)
		_, older, _ = auditPage(t, get, "/audit?session=s1")
		assert.Contains(t, older, "session=s1")
		calls, _, _ = auditPage(t, get, older)
		for _, id := range calls {
			n, err := strconv.Atoi(strings.TrimPrefix(id, "k"))
			require.NoError(t, err, id)
			assert.Equal(t, 0, n%2, "%s is of session s1", id)
		}
		_, _, body := auditPage(t, get, "/audit?before=30")
		assert.Contains(t, body, "&lt;b&gt;x&lt;/b&gt;", "what the ledger holds is escaped")
		assert.NotContains(t, body, "<b>x</b>")

		rec := get("/audit?before=-1")
		assert.Equal(t, http.StatusBadRequest, rec.Code)
		assert.Contains(t, rec.Body.String(), "before must be an entry index")

		// The receipt link downloads the call's receipt; it verifies, laid
		// out anew too.
		rec = get("/calls/k050/receipt")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		assert.Equal(t, `attachment; filename=k050.receipt`, rec.Header().Get("Content-Disposition"))
		var pretty bytes.Buffer
		require.NoError(t, json.Indent(&pretty, rec.Body.Bytes(), "", "  "))
		for _, data := range [][]byte{rec.Body.Bytes(), pretty.Bytes()} {
			var r ledger.Receipt
			require.NoError(t, json.Unmarshal(data, &r))
			require.Len(t, r.Entries, 3)
			_, err := ledger.VerifyReceipt(r, keys.Verifier)
			assert.NoError(t, err)
		}
		rec = get("/calls/k999/receipt")
		assert.Equal(t, http.StatusNotFound, rec.Code)
		assert.Contains(t, rec.Body.String(), "unknown call")
	}

	// Signed out, the receipt asks to sign in first.
	rec := serve(h, httptest.NewRequest("GET", "/calls/k050/receipt", nil))
	assert.Equal(t, http.StatusSeeOther, rec.Code)
	assert.Equal(t, "/login?next=%2Fcalls%2Fk050%2Freceipt", rec.Header().Get("Location"))
}

// Without a ledger the Audit page is Temporal's, and says where it ends.
func TestTheAuditPageWithoutALedgerSaysItEndsAtTemporalsRetention(t *testing.T) {
	i, _ := newAuditInbox(t, Config{})
	now := auditAt.Add(time.Hour)
	v := newAuditView([]tgclient.CallSummary{{CallID: "c1", Session: "s1", Tool: "shell", Status: "ok", DecidedBy: "bob", Channel: "inbox", ClosedAt: auditAt}},
		tgclient.ListFilter{Status: "decided", Limit: auditLimit}, now)
	rec := httptest.NewRecorder()
	i.render(rec, http.StatusOK, "audit", pageData{Title: "Audit", User: "audrey", Auditor: true, Body: v})
	body := rec.Body.String()
	assert.Contains(t, body, "From Temporal: a call leaves this list when its namespace's retention ends.")
	assert.Contains(t, body, `<td><a href="/calls/c1">c1</a></td>`)
	assert.NotContains(t, body, "receipt")
	assert.NotContains(t, body, "audit-older")
}
