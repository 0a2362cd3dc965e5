package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
)

// statsEntries are 30 writes under docs/ a person approved in the inbox
// after six seconds, one under src/ denied with a reason full of HTML,
// and five reads the policy allowed; a day before auditAt, four calls of
// the shell that rule old-shell asked about.
func statsEntries() []ledger.Entry {
	var out []ledger.Entry
	add := func(id string, at time.Time, rule, tool, verdict, args string, d *ledger.Decision) {
		out = append(out, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: id + "/r/" + ledger.KindCallSubmitted, At: at, CallID: id, Session: "s1",
			Requester: "agent-1", Tool: tool, Args: json.RawMessage(args), Rule: rule, Verdict: verdict})
		d.At = at.Add(6 * time.Second)
		out = append(out, ledger.Entry{Kind: ledger.KindCallDecided, Event: id + "/r/" + ledger.KindCallDecided, At: d.At, CallID: id, Session: "s1", Decision: d})
	}
	for n := range 30 {
		add(fmt.Sprintf("w%d", n), auditAt.Add(time.Duration(n)*time.Minute), "writes", "write_file", "ask", fmt.Sprintf(`{"path":"docs/%d.md"}`, n),
			&ledger.Decision{Kind: "approved", DecidedBy: "bob", Channel: "inbox", Groups: []string{"ops"}})
	}
	add("w-src", auditAt, "writes", "write_file", "ask", `{"path":"src/a.go"}`,
		&ledger.Decision{Kind: "denied_with_reason", DecidedBy: "bob", Channel: "slack", Reason: `<script>alert("src")</script>`})
	for n := range 5 {
		add(fmt.Sprintf("r%d", n), auditAt, "reads", "read_file", "allow", `{"path":"a"}`, &ledger.Decision{Kind: "approved", DecidedBy: "policy", Channel: "policy"})
	}
	for n := range 4 {
		add(fmt.Sprintf("old%d", n), auditAt.Add(-24*time.Hour), "old-shell", "shell", "ask", `{"command":"ls"}`,
			&ledger.Decision{Kind: "approved", DecidedBy: "bob", Channel: "cli"})
	}
	return out
}

func TestTheStatsPageIsForAdminsAndAuditors(t *testing.T) {
	l, _, _ := testLedger(t)
	appendEntries(t, l, statsEntries()...)
	i, h := newAuditInbox(t, Config{Ledger: l})
	cookies := map[string]*http.Cookie{}
	for _, token := range []string{"admin-token", "auditor-token", "approver-token"} {
		cookies[token] = signIn(t, h, token)
	}
	i.now = func() time.Time { return auditAt.Add(12 * time.Hour) } // the page's now; the sessions keep the real one

	for _, token := range []string{"admin-token", "auditor-token"} {
		c := cookies[token]
		rec := getPage(h, "/stats", c)
		require.Equal(t, http.StatusOK, rec.Code, token)
		body := rec.Body.String()
		assert.Contains(t, body, `<a href="/stats" id="nav-stats">Stats</a>`, token)
		assert.Contains(t, body, "From the decision ledger: 40 calls submitted in the last 30 days.", token)
		assert.Regexp(t, row("writes", "write_file", 31, 0, 0, 31, 30, 1, "96.8 %", "6 s"), body, token)
		assert.Regexp(t, row("reads", "read_file", 5, 5, 0, 0, 0, 0, "–", "–"), body, token)
		assert.Regexp(t, row("old-shell", "shell", 4, 0, 0, 4, 4, 0, "100.0 %", "6 s"), body, token)
		assert.Contains(t, body, "via inbox 30, slack 1")
		assert.Contains(t, body, "for ops 30")
		assert.Contains(t, body, `refused: <q>&lt;script&gt;alert(&#34;src&#34;)&lt;/script&gt;</q> 1`, "the reason is escaped")
		assert.NotContains(t, body, `<script>alert`)
		assert.Contains(t, body, `id="stats-no-suggestions"`, "30 asks at 96.8 %: under the bar")
	}

	// Approvers and agents are refused, and the approver's pages do not
	// link the page.
	rec := getPage(h, "/stats", cookies["approver-token"])
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Contains(t, rec.Body.String(), "The approval statistics are for admins and auditors; alice holds a token with role approver.")
	assert.NotContains(t, rec.Body.String(), "nav-stats")
	assert.NotContains(t, rec.Body.String(), "write_file")
	agent := i.sessions.create(Principal{Name: "agent-1", Role: RoleAgent})
	rec = getPage(h, "/stats", &http.Cookie{Name: InboxSessionCookie, Value: agent.id})
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Contains(t, rec.Body.String(), "agent-1 holds a token with role agent")
	rec = getPage(h, "/stats", &http.Cookie{Name: InboxSessionCookie, Value: "nobody"})
	assert.Equal(t, http.StatusSeeOther, rec.Code, "signed out: to the sign-in page")
}

// row matches a table row of the stats page: rule, tool and the first
// columns.
func row(rule, tool string, calls, allowed, denied, asked, approved, refused int, rate, median string) *regexp.Regexp {
	cells := []string{fmt.Sprint(calls), fmt.Sprint(allowed), fmt.Sprint(denied), fmt.Sprint(asked), fmt.Sprint(approved), fmt.Sprint(refused), rate, median}
	re := `<a href="/stats\?rule=` + regexp.QuoteMeta(rule) + `&amp;since=30d">` + regexp.QuoteMeta(rule) + `</a></td>\s*<td>` + regexp.QuoteMeta(tool) + `</td>`
	for _, c := range cells {
		re += `\s*<td class="n[^"]*">` + regexp.QuoteMeta(c) + `</td>`
	}
	return regexp.MustCompile(re)
}

func TestTheStatsPageWindowFilterAndBounds(t *testing.T) {
	l, _, _ := testLedger(t)
	entries := statsEntries()
	for n := range 20 { // twenty more approvals: 50 of 51
		at := auditAt.Add(time.Hour + time.Duration(n)*time.Second)
		entries = append(entries, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: fmt.Sprintf("x%d/r/%s", n, ledger.KindCallSubmitted), At: at, CallID: fmt.Sprintf("x%d", n),
			Tool: "write_file", Rule: "writes", Verdict: "ask", Args: json.RawMessage(`{"path":"docs/x.md"}`)},
			ledger.Entry{Kind: ledger.KindCallDecided, Event: fmt.Sprintf("x%d/r/%s", n, ledger.KindCallDecided), At: at.Add(time.Minute), CallID: fmt.Sprintf("x%d", n),
				Decision: &ledger.Decision{Kind: "approved", DecidedBy: "bob", Channel: "email"}})
	}
	appendEntries(t, l, entries...)
	i, h := newAuditInbox(t, Config{Ledger: l})
	c := signIn(t, h, "auditor-token")
	i.now = func() time.Time { return auditAt.Add(12 * time.Hour) } // the page's now; the session keeps the real one

	body := getPage(h, "/stats?since=13h", c).Body.String()
	assert.Contains(t, body, "56 calls submitted in the last 13 hours", "old-shell's calls are a day old")
	assert.NotContains(t, body, "old-shell")
	assert.Contains(t, body, "rule `writes` asked 51 times in 13 hours, approved 50 (98.0 %), median 6 s: consider `allow` for paths under `docs/` (50 of the 50 approvals, no denial there)")

	body = getPage(h, "/stats?rule=reads", c).Body.String()
	assert.Contains(t, body, "5 calls submitted in the last 30 days that rule reads decided")
	assert.NotContains(t, body, "write_file")
	assert.Contains(t, body, `<a href="/stats?since=30d">all rules</a>`)

	for _, bad := range []string{"0", "-1h", "367d", "a month", "1y"} {
		rec := getPage(h, "/stats?since="+url.QueryEscape(bad), c)
		assert.Equal(t, http.StatusBadRequest, rec.Code, bad)
		assert.Contains(t, rec.Body.String(), "since must be a span of time back from now, such as 30d, 12h or 90m, up to 366d", bad)
	}

	defer func(n int) { maxStatsEntries = n }(maxStatsEntries)
	maxStatsEntries = 25
	body = getPage(h, "/stats", c).Body.String()
	assert.Contains(t, body, "The window holds more than 25 ledger entries; the oldest 25 were counted.")
	assert.Contains(t, body, "From the decision ledger: 13 calls", "25 entries: 12 calls' two, and one call's first")
}

func TestTheStatsPageWithoutALedgerSaysSo(t *testing.T) {
	_, h := newAuditInbox(t, Config{})
	rec := getPage(h, "/stats", signIn(t, h, "admin-token"))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "This deployment keeps no decision ledger")
	assert.False(t, strings.Contains(rec.Body.String(), `id="stats"`))
}
