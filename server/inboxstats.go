package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/analytics"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/ledger/callrecord"
)

// The stats page (/stats) is `toolgate stats` for admins and auditors:
// the approval analytics of the calls the decision ledger holds, over a
// window back from now (?since=30d), for one rule if ?rule= says so. Its
// reads are bounded: the window is at most maxStatsWindow, and at most
// maxStatsEntries entries are read; the page says when that cut the
// window short. It carries no policy diff: the server does not hold the
// policy file (the CLI's --policy does).

// maxStatsWindow is the longest window the page reads.
const maxStatsWindow = 366 * 24 * time.Hour

// maxStatsEntries is the most entries one page reads (a variable for
// tests).
var maxStatsEntries = 200_000

// mayReadStats reports whether p may read the approval analytics.
func mayReadStats(p Principal) bool { return p.Role == RoleAdmin || p.Role == RoleAuditor }

// statsView is the stats page.
type statsView struct {
	// Off: the deployment keeps no ledger.
	Off bool
	// Problem says why there is no report (the ledger could not be read).
	Problem string
	// Since and Rule are the form's values; Window says the span.
	Since, Rule, Window string
	Calls               int
	Rules               []statsRuleView
	Shadow              []statsShadowView
	Suggestions         []string
	MinAsks             int
	Threshold           string
	// Capped: the window held more than Limit entries; the oldest Limit
	// were counted.
	Capped bool
	Limit  int
	// AllURL is the page without the rule filter.
	AllURL string
}

// statsRuleView is one rule: a row per tool (and one for all of them),
// and its channels, groups and denial reasons.
type statsRuleView struct {
	Rule, URL                 string
	Rows                      []statsRowView
	Channels, Groups, Reasons []analytics.Count
}

type statsRowView struct {
	Tool                                             string
	Total                                            bool
	Calls, Allowed, Denied, Asked, Approved, Refused int
	Rate, Median, P95                                string
	Timeouts, Edits, Sticky, Handler, Waiting        int
}

type statsShadowView struct {
	Rule          string
	Calls, Differ int
	Changes       []analytics.Count
}

func (i *inbox) statsPage(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	if !mayReadStats(s.principal) {
		i.logger.Info("Inbox stats refused: not an admin or auditor", zap.String("approver", s.principal.Name), zap.String("role", string(s.principal.Role)))
		i.renderError(w, s, http.StatusForbidden, fmt.Sprintf("The approval statistics are for admins and auditors; %s holds a token with role %s.",
			s.principal.Name, s.principal.Role))
		return
	}
	q := r.URL.Query()
	view := statsView{Since: q.Get("since"), Rule: q.Get("rule"), Limit: maxStatsEntries}
	if view.Since == "" {
		view.Since = "30d"
	}
	span, err := parseStatsWindow(view.Since)
	if err != nil {
		i.renderError(w, s, http.StatusBadRequest, err.Error())
		return
	}
	view.AllURL = statsURL(view.Since, "")
	if i.ledger == nil {
		view.Off = true
		i.render(w, http.StatusOK, "stats", i.pageData(s, "Stats", view))
		return
	}
	now := i.now()
	src := &boundedSource{l: i.ledger, left: maxStatsEntries}
	records, err := callrecord.Read(r.Context(), src, now.Add(-span), time.Time{})
	if err != nil {
		i.logger.Error("Ledger read failed", zap.String("page", "stats"), zap.Error(err))
		view.Problem = "The decision ledger could not be read (see the server log)."
		i.render(w, http.StatusOK, "stats", i.pageData(s, "Stats", view))
		return
	}
	rep, err := analytics.Compute(records, analytics.Options{Since: now.Add(-span), Until: now, Rule: view.Rule})
	if err != nil { // only a policy file fails it, and none is given
		i.logger.Error("Stats failed", zap.Error(err))
		view.Problem = "The statistics could not be computed (see the server log)."
		i.render(w, http.StatusOK, "stats", i.pageData(s, "Stats", view))
		return
	}
	view.fill(rep)
	view.Capped = src.capped
	i.render(w, http.StatusOK, "stats", i.pageData(s, "Stats", view))
}

func (v *statsView) fill(rep analytics.Report) {
	v.Window, v.Calls, v.MinAsks, v.Threshold = rep.Window, rep.Calls, rep.MinAsks, analytics.Percent(rep.Threshold)
	for _, rr := range rep.Rules {
		rv := statsRuleView{Rule: rr.Rule, URL: statsURL(v.Since, rr.Rule), Channels: rr.Channels, Groups: rr.Groups, Reasons: rr.DenialReasons}
		if rr.Rule == "" {
			rv.URL = "" // no filter names calls no rule judged
		}
		for _, tr := range rr.Tools {
			rv.Rows = append(rv.Rows, statsRow(tr.Tool, tr.Counts))
		}
		if len(rr.Tools) > 1 {
			total := statsRow("all tools", rr.Counts)
			total.Total = true
			rv.Rows = append(rv.Rows, total)
		}
		v.Rules = append(v.Rules, rv)
	}
	for _, sh := range rep.Shadow {
		v.Shadow = append(v.Shadow, statsShadowView{Rule: sh.Rule, Calls: sh.Calls, Differ: sh.Differ, Changes: sh.Changes})
	}
	for _, s := range rep.Suggestions {
		v.Suggestions = append(v.Suggestions, s.Text)
	}
}

func statsRow(tool string, c analytics.Counts) statsRowView {
	row := statsRowView{Tool: tool, Calls: c.Calls, Allowed: c.AutoApproved, Denied: c.PolicyDenied, Asked: c.Asked, Approved: c.Approved,
		Refused: c.Denied, Rate: "–", Median: "–", P95: "–", Timeouts: c.Timeouts, Edits: c.Edits, Sticky: c.BySticky, Handler: c.ByHandler, Waiting: c.Waiting}
	if c.Approved+c.Denied > 0 {
		row.Rate = analytics.Percent(c.ApprovalRate)
	}
	if c.TimedDecisions > 0 {
		row.Median, row.P95 = analytics.Human(time.Duration(c.MedianDecision)), analytics.Human(time.Duration(c.P95Decision))
	}
	return row
}

// statsURL is the stats page of a window and a rule ("" for all).
func statsURL(since, rule string) string {
	q := url.Values{"since": {since}}
	if rule != "" {
		q.Set("rule", rule)
	}
	return "/stats?" + q.Encode()
}

// parseStatsWindow reads ?since=: days ("30d") or a Go duration ("12h"),
// more than zero and at most maxStatsWindow.
func parseStatsWindow(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n > int(maxStatsWindow/(24*time.Hour)) {
			n = -1
		}
		d = time.Duration(n) * 24 * time.Hour
	} else if p, err := time.ParseDuration(s); err == nil {
		d = p
	} else {
		d = -1
	}
	if d <= 0 || d > maxStatsWindow {
		return 0, fmt.Errorf("since must be a span of time back from now, such as 30d, 12h or 90m, up to %dd: toolgate stats reads any span", maxStatsWindow/(24*time.Hour))
	}
	return d, nil
}

// boundedSource reads the ledger for callrecord.Read, at most left
// entries more; capped says it stopped for that.
type boundedSource struct {
	l      *ledger.Ledger
	left   int
	capped bool
}

func (b *boundedSource) EntriesBetween(ctx context.Context, start int64, since, until time.Time, limit int) ([]ledger.Stored, error) {
	page, err := b.l.EntriesBetween(ctx, start, since, until, min(limit, b.left+1))
	if len(page) > b.left {
		page, b.capped = page[:b.left], true
	}
	b.left -= len(page)
	return page, err
}

func (b *boundedSource) Read(s ledger.Stored) (ledger.Entry, error) { return b.l.Read(s) }

var _ callrecord.Source = (*boundedSource)(nil)
