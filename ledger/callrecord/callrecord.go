// Package callrecord reads the calls the decision ledger holds: one Record
// per call, folded from its call.submitted, call.decided and call.finished
// entries. The ledger keeps every call for as long as the company keeps
// it, long after Temporal's retention forgot them, so `toolgate stats`
// counts these and `toolgate policy whatif` replays them.
package callrecord

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
)

// Verdicts, as the ledger records them.
const (
	VerdictAllow = "allow"
	VerdictAsk   = "ask"
	VerdictDeny  = "deny"
)

// Record is one call as the ledger tells it.
type Record struct {
	CallID     string
	Session    string
	Tool       string
	Requester  string
	ActingUser string
	Execution  policy.Execution
	// Args are the arguments as the agent asked (an approver's edit is in
	// Decision); nil when they are sealed and no key opened them (Sealed).
	Args   json.RawMessage
	Sealed bool
	// Rule and PolicyVersion: the rule that decided and the policy's
	// version then.
	Rule          string
	PolicyVersion string
	// Verdict is what the policy said (VerdictAllow, VerdictAsk,
	// VerdictDeny); "" when it never judged the call (a refused
	// submission, an unknown tool). Inferred from the decision for entries
	// written before the ledger recorded it.
	Verdict string
	// Shadow is what a shadow rule would have decided.
	Shadow      *ledger.Shadow
	SubmittedAt time.Time
	// Decision is the call's decision (nil: none, yet or ever).
	Decision  *ledger.Decision
	DecidedAt time.Time
	// Status is how the call ended ("" while it has not).
	Status     string
	FinishedAt time.Time
	Backfilled bool
}

// Call is the record as the policy sees a call.
func (r Record) Call() policy.Call {
	return policy.Call{ID: r.CallID, Session: r.Session, Tool: r.Tool, Args: r.Args,
		Requester: r.Requester, ActingUser: r.ActingUser, Execution: r.Execution}
}

// Asked reports whether the call waited for a person (or a handler, or a
// sticky decision) because the policy asked.
func (r Record) Asked() bool { return r.Verdict == VerdictAsk }

// Source is where the entries come from: a *ledger.Ledger.
type Source interface {
	EntriesBetween(ctx context.Context, start int64, since, until time.Time, limit int) ([]ledger.Stored, error)
	Read(s ledger.Stored) (ledger.Entry, error)
}

// pageSize is how many entries one read takes.
const pageSize = 2000

// Read folds the calls submitted in [since, until) (a zero since: from the
// first entry; a zero until: to the last), in the order they were
// submitted. A call whose submission lies before since is left out, even
// if it was decided after. An entry whose sealed part the source's keys
// do not open is read sealed (Record.Sealed), not refused.
func Read(ctx context.Context, src Source, since, until time.Time) ([]Record, error) {
	if until.IsZero() {
		until = time.Now().Add(24 * time.Hour) // entries are timed by the workers' clocks
	}
	f := newFolder()
	for start := int64(0); ; {
		page, err := src.EntriesBetween(ctx, start, since, until, pageSize)
		if err != nil {
			return nil, fmt.Errorf("read the ledger: %w", err)
		}
		for _, s := range page {
			e, err := src.Read(s)
			if err != nil && (e.Kind == "" || e.Sealed == nil) {
				return nil, fmt.Errorf("ledger entry %d: %w", s.Index, err)
			}
			// An entry whose sealed part no key here opens (a retired
			// key, another keyring) is read sealed, as without keys.
			f.add(e)
		}
		if len(page) < pageSize {
			return f.records(), nil
		}
		start = page[len(page)-1].Index + 1
	}
}

// Fold folds entries (in the ledger's order) into records.
func Fold(entries []ledger.Entry) []Record {
	f := newFolder()
	for _, e := range entries {
		f.add(e)
	}
	return f.records()
}

type folder struct {
	byRun map[string]*Record
	order []string
}

func newFolder() *folder { return &folder{byRun: map[string]*Record{}} }

// runOf names the run of a call an entry belongs to: its event ID
// without the kind ("call/run"), since a call ID may come back after its
// workflow was deleted.
func runOf(e ledger.Entry) string {
	return strings.TrimSuffix(e.Event, "/"+e.Kind)
}

func (f *folder) add(e ledger.Entry) {
	switch e.Kind {
	case ledger.KindCallSubmitted, ledger.KindCallDecided, ledger.KindCallFinished:
	default:
		return
	}
	key := runOf(e)
	r := f.byRun[key]
	if r == nil {
		r = &Record{CallID: e.CallID, Session: e.Session}
		f.byRun[key] = r
		f.order = append(f.order, key)
	}
	switch e.Kind {
	case ledger.KindCallSubmitted:
		r.Tool, r.Requester, r.ActingUser = e.Tool, e.Requester, e.ActingUser
		r.Execution = policy.ExecutionToolgate
		if e.Execution == "agent" {
			r.Execution = policy.ExecutionAgent
		}
		r.Args, r.Sealed = e.Args, e.Sealed != nil
		r.Rule, r.PolicyVersion, r.Verdict, r.Shadow = e.Rule, e.PolicyVersion, e.Verdict, e.Shadow
		r.SubmittedAt, r.Backfilled = e.At, e.Backfilled
		if e.Verdict == "" && e.Reason != "" {
			r.Verdict = unjudged // a refused submission or a problem
		}
	case ledger.KindCallDecided:
		r.Decision, r.DecidedAt = e.Decision, e.At
	case ledger.KindCallFinished:
		r.Status, r.FinishedAt = e.Status, e.At
	}
}

// unjudged marks, while folding, a call the policy never judged.
const unjudged = "-"

func (f *folder) records() []Record {
	out := make([]Record, 0, len(f.order))
	for _, key := range f.order {
		r := *f.byRun[key]
		if r.SubmittedAt.IsZero() {
			continue // submitted before the range read
		}
		switch r.Verdict {
		case unjudged:
			r.Verdict = ""
		case "":
			r.Verdict = inferVerdict(r)
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b Record) int { return a.SubmittedAt.Compare(b.SubmittedAt) })
	return out
}

// inferVerdict is the verdict of a call whose entry predates the ledger's
// verdict field: the policy's own decision says allow or deny; any other
// decider, a timeout, or a call still waiting says it asked.
func inferVerdict(r Record) string {
	d := r.Decision
	switch {
	case d == nil && (r.Status == "" || r.Status == "timed_out"):
		return VerdictAsk
	case d == nil:
		return ""
	case d.Channel == "policy" && d.DecidedBy == "policy" && strings.HasPrefix(d.Kind, "approved"):
		return VerdictAllow
	case d.Channel == "policy" && d.DecidedBy == "policy":
		return VerdictDeny
	case d.Channel == "policy", d.Channel == "session" && d.Sticky == "":
		return "" // a reserved tool, a call outside its session, an ended session
	}
	return VerdictAsk
}
