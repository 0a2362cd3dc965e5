package analytics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/analytics"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
)

// outcome is how a scripted call went, as the script chooses it.
type outcome int

const (
	personApprove outcome = iota + 1
	personEdit
	personDeny
	stickyApprove
	stickyDeny
	handlerApprove
	handlerDeny
	timeoutDeny
	timeoutApprove
	cancelled
	sessionEnded
	waiting
	failed
	policyAllow
	policyDeny
	unjudged
)

// scripted is one scripted call.
type scripted struct {
	rule, tool string
	args       string
	out        outcome
	// reason of a denial by a person or a handler ("" for none).
	reason string
	// legacy: written before the ledger recorded verdicts.
	legacy bool
	sealed bool
	shadow *ledger.Shadow
	// id reuses an earlier call's ID (a new run of it); "" for a new one.
	id string
	// early: submitted before the window, decided in it.
	early bool
}

// expect is what the report must say about a set of calls, booked by
// the script from its own choices.
type expect struct {
	c                         analytics.Counts
	times                     []time.Duration
	reasons, channels, groups map[string]int
}

func newExpect() *expect {
	return &expect{reasons: map[string]int{}, channels: map[string]int{}, groups: map[string]int{}}
}

// script makes a ledger's entries up, deterministically, and books what
// each call must add to the report.
type script struct {
	rng     *rand.Rand
	ring    *keyring.Keyring
	t0      time.Time
	entries []ledger.Entry
	n       int
	ids     map[string][]string // rule -> call IDs made
	byTool  map[[2]string]*expect
	byRule  map[string]*expect
	shadows map[string]*analytics.ShadowReport
	changes map[string]map[string]int
	// docsApproved: approvals of writes under docs/; docsWrites: writes
	// calls under docs/ (any outcome); readable: calls a policy can be
	// evaluated on (arguments not sealed, judged).
	docsApproved, docsWrites, readable int
}

var (
	channels = []string{"inbox", "slack", "email", "cli", "api", "client"}
	people   = []string{"alice", "bob", "carol"}
	groupSet = [][]string{{"ops"}, {"dev"}, {"ops", "sec"}, nil}
)

func (s *script) pick(xs []string) string { return xs[s.rng.IntN(len(xs))] }

func (s *script) book(c scripted, f func(e *expect)) {
	key := [2]string{c.rule, c.tool}
	if s.byTool[key] == nil {
		s.byTool[key] = newExpect()
	}
	if s.byRule[c.rule] == nil {
		s.byRule[c.rule] = newExpect()
	}
	f(s.byTool[key])
	f(s.byRule[c.rule])
}

// add writes the call's entries and books it.
func (s *script) add(t *testing.T, c scripted) {
	s.n++
	id, run := fmt.Sprintf("c%04d", s.n), "r1"
	if c.id != "" {
		id, run = c.id, "r2"
	}
	s.ids[c.rule] = append(s.ids[c.rule], id)
	session := fmt.Sprintf("s%d", s.n%40)
	at := s.t0.Add(time.Duration(s.rng.Int64N(int64(29 * 24 * time.Hour))))
	if c.early {
		at = s.t0.Add(-time.Hour)
	}
	verdict := "ask"
	switch c.out {
	case policyAllow:
		verdict = "allow"
	case policyDeny:
		verdict = "deny"
	case unjudged:
		verdict = ""
	}
	sub := ledger.Entry{Kind: ledger.KindCallSubmitted, Event: id + "/" + run + "/" + ledger.KindCallSubmitted, At: at, CallID: id, Session: session,
		Requester: "agent-1", Tool: c.tool, Execution: "server", Args: json.RawMessage(c.args), Rule: c.rule, PolicyVersion: "sha256:v1"}
	if !c.legacy {
		sub.Verdict, sub.Shadow = verdict, c.shadow
	}
	if c.out == unjudged {
		sub.Reason = "unknown tool " + c.tool
	}

	var d *ledger.Decision
	delay := time.Duration(1+s.rng.IntN(3*3600)) * time.Second
	switch c.out {
	case personApprove, personEdit, personDeny:
		d = &ledger.Decision{Kind: "approved", DecidedBy: s.pick(people), Channel: s.pick(channels), Groups: groupSet[s.rng.IntN(len(groupSet))]}
		switch c.out {
		case personEdit:
			d.Kind, d.EditedArgs = "approved_with_edits", json.RawMessage(`{"edited":true}`)
		case personDeny:
			d.Kind, d.Reason = "denied_with_reason", c.reason
			if c.reason == "" {
				d.Kind = "denied"
			}
		}
	case stickyApprove, stickyDeny:
		d = &ledger.Decision{Kind: "approved_for_session", DecidedBy: "session", Channel: "session", Sticky: "session/" + session + "/sticky/c0001"}
		if c.out == stickyDeny {
			d.Kind, c.reason = "denied_always", "" // a sticky denial carries no reason of its own
		}
		delay = time.Second
	case handlerApprove, handlerDeny:
		d = &ledger.Decision{Kind: "approved", DecidedBy: "handler", Channel: "handler"}
		if c.out == handlerDeny {
			d.Kind, d.Reason = "denied_with_reason", c.reason
		}
	case timeoutApprove:
		d = &ledger.Decision{Kind: "approved", DecidedBy: "timeout", Channel: "timeout", Comment: "nobody answered"}
	case cancelled:
		d = &ledger.Decision{Kind: "denied_with_reason", DecidedBy: "agent-1", Channel: "cancel", Reason: "cancelled by agent-1"}
	case sessionEnded:
		d = &ledger.Decision{Kind: "denied_with_reason", DecidedBy: "session", Channel: "session", Reason: "the session has ended"}
	case policyAllow:
		d, delay = &ledger.Decision{Kind: "approved", DecidedBy: "policy", Channel: "policy"}, 0
	case policyDeny:
		d, delay = &ledger.Decision{Kind: "denied_with_reason", DecidedBy: "policy", Channel: "policy", Reason: "no deletes"}, 0
	}
	decidedAt := at.Add(delay)
	if c.early {
		decidedAt = s.t0.Add(10 * time.Minute)
	}
	entries := []ledger.Entry{sub}
	if d != nil {
		d.At = decidedAt
		entries = append(entries, ledger.Entry{Kind: ledger.KindCallDecided, Event: id + "/" + run + "/" + ledger.KindCallDecided, At: decidedAt,
			CallID: id, Session: session, Decision: d})
	}
	status := map[outcome]string{personDeny: "denied", stickyDeny: "denied", handlerDeny: "denied", timeoutDeny: "timed_out", cancelled: "denied",
		sessionEnded: "denied", waiting: "", failed: "error", policyDeny: "denied", unjudged: "error"}
	st, ok := status[c.out]
	if !ok {
		st = "ok"
	}
	if st != "" {
		entries = append(entries, ledger.Entry{Kind: ledger.KindCallFinished, Event: id + "/" + run + "/" + ledger.KindCallFinished,
			At: decidedAt.Add(time.Second), CallID: id, Session: session, Status: st, Output: json.RawMessage(`{"ok":true}`)})
	}
	if c.sealed {
		for i := range entries {
			var err error
			entries[i], err = entries[i].Seal(s.ring)
			require.NoError(t, err)
		}
	}
	s.entries = append(s.entries, entries...)
	if c.early {
		return // left out of the window: nothing to book
	}
	s.bookCall(c, d, delay, verdict)
}

// bookCall books what the call adds to the report, from the script's own
// choice of outcome.
func (s *script) bookCall(c scripted, d *ledger.Decision, delay time.Duration, verdict string) {
	if !c.sealed && verdict != "" {
		s.readable++
	}
	if c.shadow != nil && !c.legacy {
		sr := s.shadows[c.shadow.Rule]
		if sr == nil {
			sr = &analytics.ShadowReport{Rule: c.shadow.Rule}
			s.shadows[c.shadow.Rule] = sr
			s.changes[c.shadow.Rule] = map[string]int{}
		}
		sr.Calls++
		if c.shadow.Action != verdict {
			sr.Differ++
			s.changes[c.shadow.Rule][verdict+" -> "+c.shadow.Action]++
		}
	}
	s.book(c, func(e *expect) {
		e.c.Calls++
		if d != nil {
			e.channels[d.Channel]++
			for _, g := range d.Groups {
				e.groups[g]++
			}
		}
		shown := c.reason
		switch {
		case c.sealed:
			shown = analytics.ReasonSealed
		case shown == "":
			shown = analytics.ReasonNone
		}
		switch c.out {
		case policyAllow:
			e.c.AutoApproved++
			return
		case policyDeny:
			e.c.PolicyDenied++
			return
		case unjudged:
			e.c.Unjudged++
			return
		}
		e.c.Asked++
		switch c.out {
		case personApprove:
			e.c.Approved++
			e.c.ByPerson++
			e.times = append(e.times, delay)
		case personEdit:
			e.c.Approved++
			e.c.ByPerson++
			e.c.Edits++
			e.times = append(e.times, delay)
		case personDeny:
			e.c.Denied++
			e.c.ByPerson++
			e.reasons[shown]++
			e.times = append(e.times, delay)
		case stickyApprove:
			e.c.Approved++
			e.c.BySticky++
		case stickyDeny:
			e.c.Denied++
			e.c.BySticky++
			e.reasons[shown]++
		case handlerApprove:
			e.c.Approved++
			e.c.ByHandler++
		case handlerDeny:
			e.c.Denied++
			e.c.ByHandler++
			e.reasons[shown]++
		case timeoutDeny, timeoutApprove:
			e.c.Timeouts++
		case cancelled, sessionEnded, failed:
			e.c.Other++
		case waiting:
			e.c.Waiting++
		}
	})
}

// counts is what the report must say, from the booking: rates and
// quantiles computed here, by the nearest-rank method.
func (e *expect) counts() analytics.Counts {
	c := e.c
	if n := c.Approved + c.Denied; n > 0 {
		c.ApprovalRate = float64(c.Approved) / float64(n)
	}
	ts := slices.Clone(e.times)
	slices.Sort(ts)
	if n := len(ts); n > 0 {
		c.MedianDecision = analytics.Seconds(ts[(n+1)/2-1])
		c.P95Decision = analytics.Seconds(ts[(95*n+99)/100-1])
	}
	c.TimedDecisions = len(ts)
	list := func(m map[string]int) []analytics.Count {
		out := []analytics.Count{}
		for k, n := range m {
			out = append(out, analytics.Count{Key: k, N: n})
		}
		slices.SortFunc(out, func(a, b analytics.Count) int {
			if a.Key < b.Key {
				return -1
			}
			return 1
		})
		return out
	}
	c.DenialReasons, c.Channels, c.Groups = list(e.reasons), list(e.channels), list(e.groups)
	return c
}

// outcomes lists n of each outcome, shuffled.
func (s *script) outcomes(counts map[outcome]int) []outcome {
	var out []outcome
	for o := personApprove; o <= unjudged; o++ {
		for range counts[o] {
			out = append(out, o)
		}
	}
	s.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func approving(o outcome) bool {
	return o == personApprove || o == personEdit || o == stickyApprove || o == handlerApprove
}

// scriptedLedger makes the script's calls:
//   - writes (write_file) asks 500 times; 99 % approved, nine in ten
//     approvals under docs/, every denial under src/; the last ten calls
//     are new runs of earlier calls' IDs;
//   - shell-asks (shell) asks; 70 % approved; a hundred calls sealed;
//     some written before verdicts were recorded; a shadow rule
//     shell-strict would deny a hundred of them;
//   - no-rm (shell) denies; shell-strict would deny some too;
//   - fetch (http_get, http_post) asks; 99 % approved; some sealed;
//   - deploys (deploy) asks 15 times, always approved (below 20 asks);
//   - reads (read_file, list_dir) allows; reads-ask would ask about some;
//   - calls of an unknown tool, never judged; calls submitted before the
//     window and decided in it.
func scriptedLedger(t *testing.T) *script {
	ring, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	s := &script{rng: rand.New(rand.NewPCG(49, 3)), ring: ring, t0: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		ids: map[string][]string{}, byTool: map[[2]string]*expect{}, byRule: map[string]*expect{},
		shadows: map[string]*analytics.ShadowReport{}, changes: map[string]map[string]int{}}

	writes := s.outcomes(map[outcome]int{personApprove: 470, personEdit: 10, personDeny: 3, stickyApprove: 5, handlerApprove: 2,
		timeoutDeny: 3, timeoutApprove: 2, cancelled: 3, waiting: 2})
	for i, o := range writes {
		dir := []string{"docs", "src"}[s.rng.IntN(2)]
		switch {
		case approving(o) && s.rng.IntN(10) < 9:
			dir = "docs"
		case approving(o):
			dir = "src"
		case o == personDeny:
			dir = "src"
		}
		c := scripted{rule: "writes", tool: "write_file", out: o, reason: "not this file",
			args: fmt.Sprintf(`{"path":"%s/page-%d.md","content":"x"}`, dir, i)}
		if i >= len(writes)-10 {
			c.id = s.ids["writes"][i-len(writes)+10]
		}
		if dir == "docs" {
			s.docsWrites++
			if approving(o) {
				s.docsApproved++
			}
		}
		s.add(t, c)
	}

	shell := s.outcomes(map[outcome]int{personApprove: 560, personDeny: 200, stickyDeny: 20, handlerDeny: 10, timeoutDeny: 10})
	reasons := []string{"not now", "too broad", ""}
	for i, o := range shell {
		c := scripted{rule: "shell-asks", tool: "shell", out: o, reason: reasons[i%3], args: fmt.Sprintf(`{"command":"make build-%d"}`, i)}
		c.sealed = i%8 == 0
		c.legacy = o == personApprove && i%11 == 0
		if i%7 == 0 {
			c.shadow = &ledger.Shadow{Rule: "shell-strict", Action: "deny"}
		}
		s.add(t, c)
	}
	for i := range 150 {
		c := scripted{rule: "no-rm", tool: "shell", out: policyDeny, args: fmt.Sprintf(`{"command":"rm -rf out-%d"}`, i), legacy: i%7 == 0}
		if i%3 == 0 {
			c.shadow = &ledger.Shadow{Rule: "shell-strict", Action: "deny"}
		}
		s.add(t, c)
	}

	fetch := s.outcomes(map[outcome]int{personApprove: 380, stickyApprove: 16, personDeny: 4})
	for i, o := range fetch {
		tool := []string{"http_get", "http_get", "http_get", "http_post"}[i%4]
		s.add(t, scripted{rule: "fetch", tool: tool, out: o, reason: "not that host", sealed: i%20 == 0,
			args: fmt.Sprintf(`{"url":"https://example.com/%d"}`, i)})
	}
	for i := range 15 {
		s.add(t, scripted{rule: "deploys", tool: "deploy", out: personApprove, args: fmt.Sprintf(`{"env":"staging-%d"}`, i)})
	}
	for i := range 800 {
		tool := []string{"read_file", "read_file", "read_file", "list_dir"}[i%4]
		c := scripted{rule: "reads", tool: tool, out: policyAllow, args: fmt.Sprintf(`{"path":"notes/%d.txt"}`, i), legacy: i%20 == 0}
		if tool == "read_file" && i%10 == 1 {
			c.shadow = &ledger.Shadow{Rule: "reads-ask", Action: "ask"}
		}
		s.add(t, c)
	}
	for i := range 30 {
		s.add(t, scripted{rule: "", tool: "nope", out: unjudged, args: fmt.Sprintf(`{"n":%d}`, i)})
	}
	for i := range 20 {
		s.add(t, scripted{rule: "writes", tool: "write_file", out: personDeny, reason: "too early", early: true,
			args: fmt.Sprintf(`{"path":"docs/early-%d.md"}`, i)})
	}
	return s
}

// write appends the script's entries to a real ledger (SQLite, in a
// temporary directory) and returns it opened without the keyring, as a
// reader without keys would: sealed parts stay sealed.
func (s *script) write(t *testing.T) *ledger.Ledger {
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	ctx := context.Background()
	l, err := ledger.Open(ctx, ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	for chunk := range slices.Chunk(s.entries, 500) {
		_, err := l.Append(ctx, chunk...)
		require.NoError(t, err)
	}
	return l
}
