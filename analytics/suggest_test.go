package analytics_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/analytics"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/ledger/callrecord"
)

var at = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// asked is a call the rule asked about and a person decided in the
// inbox after a minute: approved, or denied when kind says so.
func asked(rule, tool, args, kind string) callrecord.Record {
	r := callrecord.Record{CallID: fmt.Sprintf("%s-%s", rule, args), Rule: rule, Tool: tool, Verdict: callrecord.VerdictAsk,
		SubmittedAt: at, DecidedAt: at.Add(time.Minute), Status: "ok",
		Decision: &ledger.Decision{Kind: kind, DecidedBy: "alice", Channel: "inbox"}}
	if args != "" {
		r.Args = json.RawMessage(args)
	}
	if kind != "approved" {
		r.Status = "denied"
	}
	return r
}

// rule is n asked calls of a rule, the first denied of them denied.
func rule(name string, n, denied int, args func(i int) string) []callrecord.Record {
	var out []callrecord.Record
	for i := range n {
		kind := "approved"
		if i < denied {
			kind = "denied"
		}
		a := fmt.Sprintf(`{"n":%d}`, i)
		if args != nil {
			a = args(i)
		}
		out = append(out, asked(name, "tool-"+name, a, kind))
	}
	return out
}

func suggested(t *testing.T, records []callrecord.Record, opts analytics.Options) map[string]analytics.Suggestion {
	t.Helper()
	rep, err := analytics.Compute(records, opts)
	require.NoError(t, err)
	out := map[string]analytics.Suggestion{}
	for _, s := range rep.Suggestions {
		out[s.Rule] = s
	}
	return out
}

func TestASuggestionNeedsEnoughAsksAndApprovals(t *testing.T) {
	var records []callrecord.Record
	records = append(records, rule("twenty", 20, 0, nil)...)   // N asks, all approved
	records = append(records, rule("nineteen", 19, 0, nil)...) // below N
	records = append(records, rule("at-98", 50, 1, nil)...)    // 49 of 50: exactly the threshold
	records = append(records, rule("at-97", 100, 3, nil)...)   // below it
	records = append(records, rule("at-99.5", 200, 1, nil)...) // above it
	for i := range 30 {                                        // asked, never decided: no rate
		r := asked("silent", "t", fmt.Sprintf(`{"n":%d}`, i), "approved")
		r.Decision, r.Status = nil, "timed_out"
		records = append(records, r)
	}
	for i := range 40 { // allowed by the policy: never asked
		r := asked("allowed", "t", fmt.Sprintf(`{"n":%d}`, i), "approved")
		r.Verdict, r.Decision.Channel, r.Decision.DecidedBy = callrecord.VerdictAllow, "policy", "policy"
		records = append(records, r)
	}

	got := suggested(t, records, analytics.Options{})
	assert.ElementsMatch(t, []string{"twenty", "at-98", "at-99.5"}, keys(got))
	assert.Equal(t, 49, got["at-98"].Approved)
	assert.Equal(t, 1, got["at-98"].Denied)
	assert.Equal(t, "rule `at-98` asked 50 times since 2026-12-01, approved 49 (98.0 %), median 60 s: consider `allow` for the whole rule",
		got["at-98"].Text)

	got = suggested(t, records, analytics.Options{MinAsks: 10, Threshold: 0.9})
	assert.ElementsMatch(t, []string{"twenty", "nineteen", "at-98", "at-97", "at-99.5"}, keys(got), "the flags move both bars")
}

func keys(m map[string]analytics.Suggestion) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestAPrefixIsNamedOnlyWhereNoDenialIs(t *testing.T) {
	path := func(format string) func(int) string {
		return func(i int) string { return fmt.Sprintf(`{"path":%q}`, fmt.Sprintf(format, i)) }
	}
	mostlyDocs := func(i int) string { // 90 % under docs/
		if i%10 == 9 {
			return path("src/%d.go")(i)
		}
		return path("docs/%d.md")(i)
	}
	sealedDenial := rule("w", 100, 1, mostlyDocs)
	sealedDenial[0].Args, sealedDenial[0].Sealed = nil, true
	sealedApprovals := rule("w", 100, 0, path("docs/%d.md"))
	for i := range 25 {
		sealedApprovals[i].Args, sealedApprovals[i].Sealed = nil, true
	}
	docsDenied := rule("w", 100, 1, mostlyDocs) // call 0's path is docs/0.md
	srcDenied := rule("w", 100, 0, mostlyDocs)
	srcDenied[9].Decision.Kind = "denied" // src/9.go
	for _, c := range []struct {
		name    string
		records []callrecord.Record
		prefix  string
	}{
		{"all under docs/", rule("w", 100, 0, path("docs/%d.md")), "docs/"},
		{"a denial under src/ only", srcDenied, "docs/"},
		{"a denial under docs/", docsDenied, ""},
		{"a sealed denial, which could be anywhere", sealedDenial, ""},
		{"a quarter of the approvals sealed", sealedApprovals, ""},
		{"half and half", rule("w", 100, 0, func(i int) string { return path([]string{"docs/%d", "src/%d"}[i%2])(i) }), ""},
		{"through ..", rule("w", 100, 0, path("docs/../secret/%d")), ""},
		{"files at the top", rule("w", 100, 0, path("notes-%d.md")), ""},
		{"absolute", rule("w", 100, 0, path("/srv/www/%d.html")), "/srv/"},
		{"no path argument", rule("w", 100, 0, nil), ""},
		{"a hidden directory", rule("w", 100, 0, path(".git/%d")), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := suggested(t, c.records, analytics.Options{Threshold: 0.9})
			require.Contains(t, got, "w")
			assert.Equal(t, c.prefix, got["w"].Prefix)
		})
	}
}
