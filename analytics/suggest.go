package analytics

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/toolgate/toolgate/ledger/callrecord"
)

// Suggestion is a rule whose asks look like noise: it asked at least
// Options.MinAsks times and its asked calls were approved at least
// Options.Threshold of the time. Prefix narrows it to a path prefix the
// approved calls share.
type Suggestion struct {
	Rule           string  `json:"rule"`
	Asked          int     `json:"asked"`
	Approved       int     `json:"approved"`
	Denied         int     `json:"denied"`
	ApprovalRate   float64 `json:"approval_rate"`
	Timeouts       int     `json:"timeouts"`
	Edits          int     `json:"edits"`
	MedianDecision Seconds `json:"median_decision_seconds"`
	TimedDecisions int     `json:"timed_decisions"`
	// Prefix is the first path segment ("docs/") that most approved
	// calls' `path` argument starts with and no denied call's does; ""
	// suggests the whole rule. UnderPrefix counts the approvals there.
	Prefix      string `json:"prefix,omitempty"`
	UnderPrefix int    `json:"under_prefix,omitempty"`
	// Text says it all in a line, for people.
	Text string `json:"text"`
	// Diff is the change to the policy file (a unified diff, never
	// applied), when one was given and the change could be made and
	// checked; NoDiff says why not otherwise.
	Diff   string `json:"diff,omitempty"`
	NoDiff string `json:"no_diff,omitempty"`
	// Checked counts the recorded calls the changed file was evaluated
	// on (those whose arguments could be read); Allowed those of them
	// the change would have allowed. Every other one keeps its verdict.
	Checked int `json:"checked,omitempty"`
	Allowed int `json:"allowed,omitempty"`
}

// prefixShare is how many of a rule's approvals one path prefix must
// hold ("most of them") to be suggested instead of the whole rule.
const prefixShare = 0.8

// suggest lists the rules of rep that ask about calls people approve.
// asked holds each rule's asked calls; all every call read, on which a
// diff is checked.
func suggest(rep Report, asked map[string][]callrecord.Record, all []callrecord.Record, opts Options) ([]Suggestion, error) {
	var ed *policyEditor
	if opts.Policy != nil {
		var err error
		if ed, err = opts.Policy.editor(); err != nil {
			return nil, err
		}
	}
	out := []Suggestion{}
	for _, rr := range rep.Rules {
		c := rr.Counts
		if rr.Rule == "" || c.Asked < opts.MinAsks || c.Approved+c.Denied == 0 || c.ApprovalRate < opts.Threshold {
			continue
		}
		s := Suggestion{Rule: rr.Rule, Asked: c.Asked, Approved: c.Approved, Denied: c.Denied, ApprovalRate: c.ApprovalRate,
			Timeouts: c.Timeouts, Edits: c.Edits, MedianDecision: c.MedianDecision, TimedDecisions: c.TimedDecisions}
		s.Prefix, s.UnderPrefix = sharedPrefix(asked[rr.Rule])
		s.Text = s.text(rep.Window)
		if ed != nil {
			ed.propose(&s, all)
		}
		out = append(out, s)
	}
	return out, nil
}

// text is the suggestion in a line: "rule `writes` asked 412 times in 30
// days, approved 409 (99.3 %), median 6 s: consider `allow` for paths
// under `docs/` (...)".
func (s Suggestion) text(window string) string {
	var b strings.Builder
	in := "in " + window
	if strings.HasPrefix(window, "since ") {
		in = window
	}
	fmt.Fprintf(&b, "rule `%s` asked %d times %s, approved %d", s.Rule, s.Asked, in, s.Approved)
	if decided := s.Approved + s.Denied; decided == s.Asked {
		fmt.Fprintf(&b, " (%s)", Percent(s.ApprovalRate))
	} else {
		fmt.Fprintf(&b, " of the %d decided (%s)", decided, Percent(s.ApprovalRate))
	}
	if s.Timeouts > 0 {
		fmt.Fprintf(&b, ", %d timed out", s.Timeouts)
	}
	if s.Edits > 0 {
		fmt.Fprintf(&b, ", %d approved with edits", s.Edits)
	}
	if s.TimedDecisions > 0 {
		fmt.Fprintf(&b, ", median %s", Human(time.Duration(s.MedianDecision)))
	}
	if s.Prefix != "" {
		fmt.Fprintf(&b, ": consider `allow` for paths under `%s` (%d of the %d approvals, no denial there)", s.Prefix, s.UnderPrefix, s.Approved)
	} else {
		b.WriteString(": consider `allow` for the whole rule")
	}
	return b.String()
}

// Percent writes a rate as people read it: "99.3 %".
func Percent(rate float64) string { return fmt.Sprintf("%.1f %%", rate*100) }

// Human writes a time to decision roughly: "6 s", "4 min", "3 h", "2 d".
func Human(d time.Duration) string {
	switch {
	case d < 90*time.Second:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	case d < 90*time.Minute:
		return fmt.Sprintf("%d min", int(d.Round(time.Minute)/time.Minute))
	case d < 36*time.Hour:
		return fmt.Sprintf("%d h", int(d.Round(time.Hour)/time.Hour))
	}
	return fmt.Sprintf("%d d", int(d.Round(24*time.Hour)/(24*time.Hour)))
}

// sharedPrefix finds the first path segment that at least prefixShare
// of the approved calls' `path` starts with, when no denied call's does.
// A denial whose arguments are sealed cannot be placed, so none is
// claimed then. Approved calls whose arguments are sealed count against
// the share.
func sharedPrefix(asked []callrecord.Record) (prefix string, under int) {
	counts := map[string]int{}
	approved := 0
	var denied []string
	for _, r := range asked {
		if who := deciderOf(r); who != person && who != handler && who != sticky {
			continue
		}
		path, readable := pathArg(r)
		if !approves(r.Decision.Kind) {
			if !readable {
				return "", 0
			}
			denied = append(denied, path)
			continue
		}
		approved++
		if seg := firstSegment(path); seg != "" {
			counts[seg]++
		}
	}
	best := ""
	for _, seg := range sortedKeys(counts) {
		if counts[seg] > counts[best] {
			best = seg
		}
	}
	if best == "" || float64(counts[best]) < prefixShare*float64(approved) {
		return "", 0
	}
	for _, p := range denied {
		if underPrefix(p, best) {
			return "", 0
		}
	}
	return best, counts[best]
}

// pathArg is the call's string argument `path` ("" when it has none);
// readable is false when its arguments are sealed and no key opened them.
func pathArg(r callrecord.Record) (path string, readable bool) {
	if r.Sealed {
		return "", false
	}
	var args struct {
		Path any `json:"path"`
	}
	if json.Unmarshal(r.Args, &args) != nil {
		return "", true
	}
	s, _ := args.Path.(string)
	return s, true
}

// segmentRe is a first path segment a suggestion names: plain characters
// only, so that it reads the same in CEL, YAML and on a page.
var segmentRe = regexp.MustCompile(`^/?[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*/$`)

// firstSegment is the directory a path starts in, with its slash:
// "docs/" of "docs/a/b.md", "/srv/" of "/srv/x"; "" for a file at the
// top, a path through "..", or an unusual name.
func firstSegment(path string) string {
	if strings.Contains(path, "..") {
		return ""
	}
	rest := strings.TrimPrefix(path, "/")
	i := strings.Index(rest, "/")
	if i <= 0 {
		return ""
	}
	seg := path[:len(path)-len(rest)+i+1]
	if !segmentRe.MatchString(seg) {
		return ""
	}
	return seg
}

// underPrefix is the condition the policy diff writes in CEL
// (underPrefixCEL): the path starts with prefix and never goes up.
func underPrefix(path, prefix string) bool {
	return strings.HasPrefix(path, prefix) && !strings.Contains(path, "..")
}

// underPrefixCEL is underPrefix as a rule's condition.
func underPrefixCEL(prefix string) string {
	return fmt.Sprintf(`has(args.path) && args.path.startsWith(%q) && !args.path.contains("..")`, prefix)
}
