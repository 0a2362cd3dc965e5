// Package analytics turns the calls the decision ledger holds
// (callrecord.Record) into a report of how each rule's asks went: how
// many calls it asked about, who decided them and through which channel,
// how fast, how often they were approved and why they were denied, what
// the shadow rules would have done, and which rules ask about calls
// people (nearly) always approve, with a change to the policy file that
// would stop them asking (suggest.go, policydiff.go).
//
// Compute reads nothing and writes nothing: the caller reads the records
// (callrecord.Read) and, for diffs, the policy file.
package analytics

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/ledger/callrecord"
	"github.com/toolgate/toolgate/policy"
)

// Defaults of Options.
const (
	DefaultMinAsks   = 20
	DefaultThreshold = 0.98
)

// Options say what to count and what to suggest.
type Options struct {
	// Since and Until are the window the records were read from, which
	// the report and its suggestions name. A zero Since: the whole
	// ledger; a zero Until: now.
	Since, Until time.Time
	// Rule keeps only the calls this rule decided, and the shadow rule of
	// that name; "" keeps every call.
	Rule string
	// MinAsks: a rule that asked fewer times gets no suggestion; 0 means
	// DefaultMinAsks.
	MinAsks int
	// Threshold: a rule whose asked calls were approved less often (of
	// those a person, a handler or a sticky decision decided) gets no
	// suggestion; 0 means DefaultThreshold.
	Threshold float64
	// Policy is the policy file each suggestion's diff is written
	// against. Optional: without it suggestions carry no diff.
	Policy *PolicyFile
}

// Report is what the records say, rule by rule. Every list is sorted by
// its key, so that the same records always give the same report.
type Report struct {
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Window says the span in words: "30 days", or "since 2026-11-02"
	// for the whole ledger.
	Window string `json:"window"`
	// Rule is the filter, if one was given.
	Rule string `json:"rule,omitempty"`
	// Calls counts the calls in Rules.
	Calls       int            `json:"calls"`
	Rules       []RuleReport   `json:"rules"`
	Shadow      []ShadowReport `json:"shadow"`
	Suggestions []Suggestion   `json:"suggestions"`
	MinAsks     int            `json:"min_asks"`
	Threshold   float64        `json:"threshold"`
	// Policy names the policy file the diffs are against.
	Policy string `json:"policy,omitempty"`
}

// RuleReport is one rule's calls ("" for calls no rule judged: a refused
// submission, an unknown tool), in all and tool by tool.
type RuleReport struct {
	Rule string `json:"rule"`
	Counts
	Tools []ToolReport `json:"tools"`
}

// ToolReport is one tool's calls under a rule.
type ToolReport struct {
	Tool string `json:"tool"`
	Counts
}

// Counts are the figures of a set of calls. Approved, Denied, ByPerson,
// ByHandler, BySticky, Timeouts, Waiting, Other and Edits count asked
// calls only; Asked = Approved + Denied + Timeouts + Waiting + Other.
type Counts struct {
	Calls int `json:"calls"`
	// Asked: the policy asked (verdict ask).
	Asked int `json:"asked"`
	// AutoApproved: the policy allowed (verdict allow).
	AutoApproved int `json:"auto_approved"`
	// PolicyDenied: the policy denied (verdict deny).
	PolicyDenied int `json:"policy_denied"`
	// Unjudged: the policy never judged the call.
	Unjudged int `json:"unjudged"`
	// Approved and Denied: decided by a person, a coded handler or a
	// sticky decision of the session.
	Approved int `json:"approved"`
	Denied   int `json:"denied"`
	// ApprovalRate is Approved / (Approved + Denied); 0 when neither.
	ApprovalRate float64 `json:"approval_rate"`
	// ByPerson, ByHandler, BySticky: who decided the Approved and Denied.
	ByPerson  int `json:"by_person"`
	ByHandler int `json:"by_handler"`
	BySticky  int `json:"by_sticky"`
	// Timeouts: nobody answered in time (denied at the deadline, or
	// approved by a rule's on_timeout: allow).
	Timeouts int `json:"timeouts"`
	// Waiting: still waiting for a person.
	Waiting int `json:"waiting"`
	// Other: cancelled, ended with its session, or failed before a
	// decision.
	Other int `json:"other"`
	// Edits: approved with edited arguments.
	Edits int `json:"edits"`
	// MedianDecision and P95Decision are the time from submission to a
	// person's decision (nearest rank), over the TimedDecisions calls a
	// person decided; sticky decisions, handlers and timeouts are left
	// out.
	MedianDecision Seconds `json:"median_decision_seconds"`
	P95Decision    Seconds `json:"p95_decision_seconds"`
	TimedDecisions int     `json:"timed_decisions"`
	// DenialReasons counts the reasons of Denied: "(sealed)" when the
	// reason is encrypted and no key here opened it, "(no reason given)"
	// when the decision had none.
	DenialReasons []Count `json:"denial_reasons"`
	// Channels counts the decisions of all the calls by channel;
	// Groups by the approver groups the decider acted for.
	Channels []Count `json:"channels"`
	Groups   []Count `json:"groups"`
}

// Count is a number of calls under a key.
type Count struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// ShadowReport is what a `mode: shadow` rule would have done.
type ShadowReport struct {
	Rule string `json:"rule"`
	// Calls it would have decided, and how many of those differently
	// from the enforced verdict.
	Calls  int `json:"calls"`
	Differ int `json:"differ"`
	// Changes counts the differences by "enforced -> shadow", e.g.
	// "ask -> allow".
	Changes []Count `json:"changes"`
}

// Seconds is a span of time that JSON carries as a number of seconds.
type Seconds time.Duration

// MarshalJSON writes the span in seconds.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(time.Duration(s).Seconds()*1000) / 1000)
}

// UnmarshalJSON reads a number of seconds.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("seconds: %w", err)
	}
	*s = Seconds(time.Duration(f * float64(time.Second)))
	return nil
}

// Compute makes the report of records (as callrecord.Read returns them).
// It fails only when opts.Policy is given and does not load.
func Compute(records []callrecord.Record, opts Options) (Report, error) {
	if opts.MinAsks <= 0 {
		opts.MinAsks = DefaultMinAsks
	}
	if opts.Threshold <= 0 {
		opts.Threshold = DefaultThreshold
	}
	rep := Report{Since: opts.Since, Until: opts.Until, Rule: opts.Rule, MinAsks: opts.MinAsks, Threshold: opts.Threshold,
		Rules: []RuleReport{}, Shadow: []ShadowReport{}, Suggestions: []Suggestion{}}
	rep.Window = window(opts.Since, opts.Until, records)
	byRule := map[string]*tally{}
	byTool := map[ruleTool]*tally{}
	asked := map[string][]callrecord.Record{}
	shadows := map[string]*shadowTally{}
	for _, r := range records {
		if s := r.Shadow; s != nil && (opts.Rule == "" || s.Rule == opts.Rule) {
			st := shadows[s.Rule]
			if st == nil {
				st = &shadowTally{changes: map[string]int{}}
				shadows[s.Rule] = st
			}
			st.add(r)
		}
		if opts.Rule != "" && r.Rule != opts.Rule {
			continue
		}
		rep.Calls++
		tallyOf(byRule, r.Rule).add(r)
		key := ruleTool{r.Rule, r.Tool}
		if byTool[key] == nil {
			byTool[key] = newTally()
		}
		byTool[key].add(r)
		if r.Asked() {
			asked[r.Rule] = append(asked[r.Rule], r)
		}
	}
	for _, rule := range sortedKeys(byRule) {
		rr := RuleReport{Rule: rule, Counts: byRule[rule].counts(), Tools: []ToolReport{}}
		for _, key := range slices.SortedFunc(maps.Keys(byTool), ruleTool.compare) {
			if key.rule == rule {
				rr.Tools = append(rr.Tools, ToolReport{Tool: key.tool, Counts: byTool[key].counts()})
			}
		}
		rep.Rules = append(rep.Rules, rr)
	}
	for _, rule := range sortedKeys(shadows) {
		rep.Shadow = append(rep.Shadow, shadows[rule].report(rule))
	}
	var err error
	rep.Suggestions, err = suggest(rep, asked, records, opts)
	if opts.Policy != nil {
		rep.Policy = opts.Policy.Name
	}
	return rep, err
}

func tallyOf(m map[string]*tally, key string) *tally {
	t := m[key]
	if t == nil {
		t = newTally()
		m[key] = t
	}
	return t
}

// decider is who decided an asked call.
type decider int

const (
	nobody decider = iota + 1
	person
	handler
	sticky
	timeout
	// system: a cancel, the session's end, a refusal of toolgate's own.
	system
)

// deciderOf reads who decided from the decision's channel: a reserved
// channel is toolgate's own (policy.ReservedChannels), any other is a
// person's door (inbox, slack, email, cli, api, client, ...).
func deciderOf(r callrecord.Record) decider {
	d := r.Decision
	switch {
	case d == nil && r.Status == "timed_out":
		return timeout
	case d == nil:
		return nobody
	case d.Channel == "timeout":
		return timeout
	case d.Channel == "handler":
		return handler
	case d.Channel == "session" && d.Sticky != "":
		return sticky
	case slices.Contains(policy.ReservedChannels, d.Channel):
		return system
	}
	return person
}

// approves reports whether a decision's kind lets the call run.
func approves(kind string) bool { return strings.HasPrefix(kind, "approved") }

// Reasons of denials that have none to show.
const (
	ReasonSealed = "(sealed)"
	ReasonNone   = "(no reason given)"
)

// denialReason is what a denial's reason is shown as. The reason is
// sealed with the call's arguments: a record whose arguments no key here
// opened had its reason sealed too, if it had one.
func denialReason(r callrecord.Record) string {
	switch {
	case r.Decision.Reason != "":
		return r.Decision.Reason
	case r.Sealed:
		return ReasonSealed
	}
	return ReasonNone
}

// tally adds calls up into Counts.
type tally struct {
	c                         Counts
	reasons, channels, groups map[string]int
	times                     []time.Duration
}

func newTally() *tally {
	return &tally{reasons: map[string]int{}, channels: map[string]int{}, groups: map[string]int{}}
}

func (t *tally) add(r callrecord.Record) {
	c := &t.c
	c.Calls++
	if d := r.Decision; d != nil {
		ch := d.Channel
		if ch == "" {
			ch = "(none)"
		}
		t.channels[ch]++
		for i, g := range d.Groups {
			if !slices.Contains(d.Groups[:i], g) {
				t.groups[g]++
			}
		}
	}
	switch r.Verdict {
	case callrecord.VerdictAllow:
		c.AutoApproved++
		return
	case callrecord.VerdictDeny:
		c.PolicyDenied++
		return
	case callrecord.VerdictAsk:
		c.Asked++
	default:
		c.Unjudged++
		return
	}
	who := deciderOf(r)
	switch who {
	case timeout:
		c.Timeouts++
		return
	case system:
		c.Other++
		return
	case nobody:
		if r.Status == "" {
			c.Waiting++
		} else {
			c.Other++
		}
		return
	}
	d := r.Decision
	if approves(d.Kind) {
		c.Approved++
	} else {
		c.Denied++
		t.reasons[denialReason(r)]++
	}
	if d.Kind == "approved_with_edits" {
		c.Edits++
	}
	switch who {
	case person:
		c.ByPerson++
		if !r.DecidedAt.IsZero() {
			t.times = append(t.times, max(0, r.DecidedAt.Sub(r.SubmittedAt)))
		}
	case handler:
		c.ByHandler++
	case sticky:
		c.BySticky++
	}
}

func (t *tally) counts() Counts {
	c := t.c
	if n := c.Approved + c.Denied; n > 0 {
		c.ApprovalRate = float64(c.Approved) / float64(n)
	}
	c.TimedDecisions = len(t.times)
	c.MedianDecision = Seconds(nearestRank(t.times, 0.50))
	c.P95Decision = Seconds(nearestRank(t.times, 0.95))
	c.DenialReasons, c.Channels, c.Groups = counted(t.reasons), counted(t.channels), counted(t.groups)
	return c
}

// nearestRank is the p-th quantile of ds by the nearest-rank method: the
// smallest value that at least p of them do not exceed; 0 for none.
func nearestRank(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, i)]
}

// counted lists a map's counts by key.
func counted(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, Count{Key: k, N: m[k]})
	}
	return out
}

// shadowTally adds up a shadow rule's verdicts.
type shadowTally struct {
	calls, differ int
	changes       map[string]int
}

func (s *shadowTally) add(r callrecord.Record) {
	s.calls++
	if r.Shadow.Action != r.Verdict {
		s.differ++
		s.changes[orNone(r.Verdict)+" -> "+r.Shadow.Action]++
	}
}

func (s *shadowTally) report(rule string) ShadowReport {
	return ShadowReport{Rule: rule, Calls: s.calls, Differ: s.differ, Changes: counted(s.changes)}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// ruleTool keys a rule's calls of one tool.
type ruleTool struct{ rule, tool string }

func (a ruleTool) compare(b ruleTool) int {
	return cmp.Or(strings.Compare(a.rule, b.rule), strings.Compare(a.tool, b.tool))
}

// window says the report's span in words: "30 days", "12 hours", or
// "since 2026-11-02" (the first call's day) for the whole ledger.
func window(since, until time.Time, records []callrecord.Record) string {
	if since.IsZero() {
		if len(records) == 0 {
			return "the whole ledger"
		}
		return "since " + records[0].SubmittedAt.UTC().Format(time.DateOnly)
	}
	if until.IsZero() {
		until = time.Now()
	}
	return Span(until.Sub(since))
}

// Span says a span of time in words: whole days as days, whole hours as
// hours, anything else as Go writes it.
func Span(d time.Duration) string {
	plural := func(n int64, unit string) string {
		if n == 1 {
			return "1 " + unit
		}
		return fmt.Sprintf("%d %ss", n, unit)
	}
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return plural(int64(d/(24*time.Hour)), "day")
	case d >= time.Hour && d%time.Hour == 0:
		return plural(int64(d/time.Hour), "hour")
	}
	return d.Round(time.Second).String()
}
