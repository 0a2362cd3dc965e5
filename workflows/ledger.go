package workflows

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
)

// The decision ledger (package ledger) gets every call's submission,
// decision and outcome, and the sessions' sticky decisions, revokes and
// ends, written by the workflows as they happen. An append is a local
// activity, idempotent by the entry's event ID (derived from the workflow's
// run, so a retry, a replay or a crashed worker never logs an event
// twice). A ledger that is down makes the workflow wait, and retry, never
// go on unlogged.

// ledgerOptions retry an append a few times quickly; appendToLedger then
// waits longer between tries, and says why.
var ledgerOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 2 * time.Second, MaximumAttempts: 3},
}

// maxLedgerWait is the longest pause between appends to a ledger that is
// down (each costs a few history events: a day's outage is ~2,000).
const maxLedgerWait = time.Minute

// appendToLedger writes entries, retrying until the ledger has them or ctx
// ends. waiting is told why it waits ("" once it no longer does). off says
// this worker keeps no ledger.
func appendToLedger(ctx workflow.Context, entries []ledger.Entry, waiting func(string)) (off bool, err error) {
	lctx := workflow.WithLocalActivityOptions(ctx, ledgerOptions)
	since := time.Time{}
	for pause := 2 * time.Second; ; pause = min(2*pause, maxLedgerWait) {
		var res activities.AppendLedgerResult
		err := workflow.ExecuteLocalActivity(lctx, a.AppendLedger, activities.AppendLedgerInput{Entries: entries}).Get(ctx, &res)
		if err == nil {
			if !since.IsZero() {
				waiting("")
			}
			return res.Off, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if since.IsZero() {
			since = workflow.Now(ctx)
		}
		waiting("the ledger cannot be written since " + since.UTC().Format(time.RFC3339) + " (" + rootCause(err) + "); toolgate waits for it and tries again")
		workflow.GetLogger(ctx).Warn("Waiting for the ledger", "error", err, "entries", len(entries))
		if err := workflow.Sleep(ctx, pause); err != nil {
			return false, err
		}
	}
}

// callLog is what a call has written to the ledger.
type callLog struct {
	checked, on        bool
	submitted, decided bool
}

// ledgerOn reports whether the call writes to the ledger: a run that began
// before the ledger existed does not, and neither does one on a worker
// without a ledger (its evaluation says so, or its first append answers
// Off).
func (c *callRun) ledgerOn(ctx workflow.Context) bool {
	if !c.logged.checked {
		c.logged.checked = true
		c.logged.on = c.version(ctx, versionLedger, 1) >= 1 && !c.eval.LedgerOff
	}
	return c.logged.on
}

// logSubmitted writes the call's call.submitted entry.
func (c *callRun) logSubmitted(ctx workflow.Context) error {
	return c.logUpTo(ctx, nil, false)
}

// logDecided writes the call's call.submitted and call.decided entries,
// those not yet written: the tool does not start before.
func (c *callRun) logDecided(ctx workflow.Context) error {
	return c.logUpTo(ctx, nil, true)
}

// logFinished writes what is left of the call's entries, and its
// call.finished: the Result is not returned before.
func (c *callRun) logFinished(ctx workflow.Context, r Result) error {
	return c.logUpTo(ctx, &r, true)
}

func (c *callRun) logUpTo(ctx workflow.Context, finished *Result, decided bool) error {
	if !c.ledgerOn(ctx) {
		return nil
	}
	var entries []ledger.Entry
	if !c.logged.submitted {
		entries = append(entries, c.submittedEntry(ctx))
	}
	if decided && !c.logged.decided && c.state.Decision != nil {
		entries = append(entries, c.decidedEntry(ctx))
	}
	if finished != nil {
		entries = append(entries, finishedEntry(*finished, callEventID(ctx, c.state.Call.ID, ledger.KindCallFinished), c.noReport))
		if e, ok := pinsEntry(ctx, *finished); ok {
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	off, err := appendToLedger(ctx, entries, func(why string) { c.state.LedgerWait = why })
	if err != nil {
		return err
	}
	c.logged.submitted = true
	c.logged.decided = c.logged.decided || (decided && c.state.Decision != nil)
	c.logged.on = !off
	return nil
}

// callEventID names an event of a call's run: a call ID may come back
// after its workflow is deleted; its run ID does not.
func callEventID(ctx workflow.Context, callID, kind string) string {
	return callID + "/" + workflow.GetInfo(ctx).WorkflowExecution.RunID + "/" + kind
}

func (c *callRun) submittedEntry(ctx workflow.Context) ledger.Entry {
	call := c.state.Call
	args := call.Args
	if c.originalArgs != nil {
		args = c.originalArgs // as the agent asked; an edit is in call.decided
	}
	e := ledger.Entry{
		Kind: ledger.KindCallSubmitted, Event: callEventID(ctx, call.ID, ledger.KindCallSubmitted), At: c.requestedAt,
		CallID: call.ID, Session: call.Session, Requester: call.Requester, ActingUser: call.ActingUser,
		Tool: call.Tool, Execution: executionName(call.Execution), Args: args,
		Rule: c.eval.Rule, PolicyVersion: c.eval.PolicyVersion, Statement: c.submission,
	}
	if c.judged {
		e.Verdict = c.eval.Verdict()
	}
	if s := c.eval.Shadow; s != nil {
		e.Shadow = &ledger.Shadow{Rule: s.Rule, Action: s.Action}
	}
	if p := c.eval.Preview; p != nil {
		e.Preview = p
	}
	if r := c.eval.Ask; r != nil && r.Passkey {
		e.PasskeyRule = true
	}
	if c.eval.Unsubmitted != "" {
		// Nobody a door authenticated asked for it: the entry says so
		// beside the requester it claims.
		e.Reason = c.eval.Unsubmitted
	}
	if c.eval.Problem != "" {
		e.Reason = c.eval.Problem
	}
	return e
}

func executionName(x policy.Execution) string {
	if x == policy.ExecutionAgent {
		return "agent"
	}
	return "server"
}

func (c *callRun) decidedEntry(ctx workflow.Context) ledger.Entry {
	call := c.state.Call
	e := ledger.Entry{
		Kind: ledger.KindCallDecided, Event: callEventID(ctx, call.ID, ledger.KindCallDecided), At: workflow.Now(ctx),
		CallID: call.ID, Session: call.Session, Decision: ledgerDecision(*c.state.Decision, call.Session),
	}
	e.Decision.Approvals = ledgerApprovals(c.state.Approvals)
	if e.Decision.Passkey != nil || slices.ContainsFunc(e.Decision.Approvals, func(a ledger.Approval) bool { return a.Passkey != nil }) {
		e.Decision.Run = c.state.Run
	}
	return e
}

// ledgerApprovals are a four-eyes call's counted approvals, as the ledger
// records them.
func ledgerApprovals(a *Approvals) []ledger.Approval {
	if a == nil {
		return nil
	}
	var out []ledger.Approval
	for _, g := range a.Given {
		ap := ledger.Approval{By: g.By, Channel: g.Channel, At: g.At, Identity: ledgerIdentity(g.Identity), Passkey: g.Passkey}
		if g.Group != "" {
			ap.Groups = []string{g.Group}
		}
		out = append(out, ap)
	}
	return out
}

// ledgerDecision is a decision as the ledger records it. One handed on by
// the session names the session.sticky entry it came from.
func ledgerDecision(d policy.Decision, session string) *ledger.Decision {
	return &ledger.Decision{
		Kind: d.Kind.String(), DecidedBy: d.DecidedBy, Groups: d.DeciderGroups, Channel: d.Channel,
		Reason: d.Reason, Comment: d.Comment, User: d.User, EditedArgs: d.EditedArgs, At: d.DecidedAt,
		Sticky: stickyRef(d.Channel, d.Comment, session), Identity: ledgerIdentity(d.Identity), Statement: d.Statement,
		Passkey: d.Passkey,
	}
}

func ledgerIdentity(id *policy.Identity) *ledger.Identity {
	if id == nil {
		return nil
	}
	return &ledger.Identity{Issuer: id.Issuer, Subject: id.Subject}
}

// withIdentity adds who the person is to an entry's details.
func withIdentity(details map[string]any, id *policy.Identity) map[string]any {
	if id != nil {
		details["identity"] = ledgerIdentity(id)
	}
	return details
}

// stickyRef names the session.sticky entry of a decision the session
// handed on ("" for any other).
func stickyRef(channel, comment, session string) string {
	if from, ok := stickyOrigin(comment); ok && channel == "session" {
		return stickyEventID(session, from)
	}
	return ""
}

// stickyOrigin reads the call a sticky decision was taken on from the
// comment the session hands it with (stickyComment).
func stickyOrigin(comment string) (string, bool) {
	const on = " on call "
	i := strings.LastIndex(comment, on)
	if !strings.HasPrefix(comment, "sticky decision ") || i < 0 {
		return "", false
	}
	return comment[i+len(on):], true
}

// stickyEventID names the session.sticky entry of the sticky decision
// taken on a call: one call takes at most one.
func stickyEventID(session, fromCall string) string {
	return "session/" + session + "/sticky/" + fromCall
}

// finishedEntry is a call's call.finished entry, from its Result.
func finishedEntry(r Result, event string, noReport bool) ledger.Entry {
	e := ledger.Entry{
		Kind: ledger.KindCallFinished, Event: event, At: r.FinishedAt,
		CallID: r.CallID, Session: r.Session, Status: string(r.Status), Output: r.Output, Reason: r.Reason,
	}
	if r.Claim != nil {
		e.Claim = r.Claim
	}
	if r.Execution == policy.ExecutionAgent {
		e.Report = agentReport{Reported: !noReport && r.Claim != nil}
	}
	details := map[string]any{}
	if r.Note != "" {
		details["note"] = r.Note
	}
	if r.Redactions > 0 {
		details["redactions"] = r.Redactions
	}
	if len(details) > 0 {
		e.Details = details
	}
	return e
}

// agentReport is the report part of an agent-executed call's entry.
type agentReport struct {
	Reported bool `json:"reported"`
}

// pinsEntry is the pins.approved or pins.denied entry of a
// definition_change call that ended approved (ran) or denied.
func pinsEntry(ctx workflow.Context, r Result) (ledger.Entry, bool) {
	kind := ""
	switch {
	case r.Tool != policy.DefinitionChangeTool:
		return ledger.Entry{}, false
	case r.Status == StatusOK:
		kind = ledger.KindPinsApproved
	case r.Status == StatusDenied || r.Status == StatusTimedOut:
		kind = ledger.KindPinsDenied
	default:
		return ledger.Entry{}, false
	}
	var ch policy.DefinitionChange
	// Decoding into a struct without maps is deterministic; the decoder's
	// type cache is what workflowcheck sees.
	_ = json.Unmarshal(r.Args, &ch) //workflowcheck:ignore
	e := ledger.Entry{
		Kind: kind, Event: callEventID(ctx, r.CallID, kind), At: r.FinishedAt, CallID: r.CallID, Session: r.Session,
		Tool: ch.Tool, By: r.DecidedBy, Reason: r.Reason,
		Details: map[string]any{"server": ch.Server, "change": ch.Change, "hash": ch.Hash},
	}
	return e, true
}

// sessionLog is the session's side of the ledger.
type sessionLog struct {
	checked, on bool
	// wait says why the session waits for the ledger, while it does.
	wait string
}

func (s *sessionRun) ledgerOn(ctx workflow.Context) bool {
	if !s.logged.checked {
		s.logged.checked = true
		s.logged.on = workflow.GetVersion(ctx, versionLedger, workflow.DefaultVersion, 1) >= 1
	}
	return s.logged.on
}

// log writes the session's entries before their news goes out.
func (s *sessionRun) log(ctx workflow.Context, entries ...ledger.Entry) error {
	if len(entries) == 0 || !s.ledgerOn(ctx) {
		return nil
	}
	off, err := appendToLedger(ctx, entries, func(why string) { s.logged.wait = why })
	s.logged.on = !off
	return err
}

func (s *sessionRun) stickyEntry(ctx workflow.Context, d StickyDecision, replaced *StickyDecision) ledger.Entry {
	details := map[string]any{"key": d.Key}
	if len(d.Groups) > 0 {
		details["groups"] = d.Groups
	}
	if replaced != nil {
		details["replaces"] = stickyEventID(s.in.Session, replaced.FromCall)
	}
	return ledger.Entry{
		Kind: ledger.KindSessionSticky, Event: stickyEventID(s.in.Session, d.FromCall), At: workflow.Now(ctx),
		CallID: d.FromCall, Session: s.in.Session, Tool: d.Tool, Decision: ledgerDecision(d.Decision, s.in.Session), Details: details,
	}
}

func (s *sessionRun) revokedEntry(ctx workflow.Context, req RevokeRequest, removed StickyDecision) ledger.Entry {
	return ledger.Entry{
		Kind: ledger.KindSessionRevoked, Event: stickyEventID(s.in.Session, removed.FromCall) + "/revoked", At: workflow.Now(ctx),
		Session: s.in.Session, Tool: removed.Tool, By: req.By, Statement: req.Statement,
		Details: withIdentity(map[string]any{"key": req.Key, "sticky": stickyEventID(s.in.Session, removed.FromCall), "groups": req.Groups}, req.Identity),
	}
}

func (s *sessionRun) endedEntry(end policy.Decision, waiting int) ledger.Entry {
	return ledger.Entry{
		Kind: ledger.KindSessionEnded, Event: "session/" + s.in.Session + "/ended/" + end.DecidedAt.UTC().Format(time.RFC3339Nano), At: end.DecidedAt,
		Session: s.in.Session, By: end.DecidedBy, Reason: end.Reason, Statement: end.Statement,
		Counts: map[string]int{"waiting": waiting}, Details: withIdentity(map[string]any{"groups": end.DeciderGroups}, end.Identity),
	}
}

// BackfillEntries are the ledger entries of a call that finished before
// the ledger existed, from its Result and its run's ID: call.submitted,
// call.decided (when it was decided) and call.finished, marked
// backfilled, with the event IDs the call would have written itself, so
// that backfilling twice logs nothing twice.
func BackfillEntries(r Result, runID string) []ledger.Entry {
	event := func(kind string) string { return r.CallID + "/" + runID + "/" + kind }
	submitted := ledger.Entry{
		Kind: ledger.KindCallSubmitted, Event: event(ledger.KindCallSubmitted), At: r.RequestedAt,
		CallID: r.CallID, Session: r.Session, Requester: r.Requester, Tool: r.Tool, Execution: executionName(r.Execution),
		Args: r.Args, Rule: r.Rule, PolicyVersion: r.PolicyVersion, Backfilled: true,
	}
	if r.OriginalArgs != nil {
		submitted.Args = r.OriginalArgs
	}
	if p := r.PreviewShown; p != nil {
		submitted.Preview = p
	} else if r.Preview != nil {
		submitted.Preview = r.Preview
	}
	out := []ledger.Entry{submitted}
	if r.Decision != "" && r.Decision != "timed_out" {
		d := &ledger.Decision{Kind: r.Decision, DecidedBy: r.DecidedBy, Channel: r.Channel, Comment: r.Comment, At: r.DecidedAt,
			Sticky: stickyRef(r.Channel, r.Comment, r.Session), Approvals: ledgerApprovals(r.Approvals), Identity: ledgerIdentity(r.Identity)}
		if r.OriginalArgs != nil {
			d.EditedArgs = r.Args
		}
		out = append(out, ledger.Entry{Kind: ledger.KindCallDecided, Event: event(ledger.KindCallDecided), At: r.DecidedAt,
			CallID: r.CallID, Session: r.Session, Decision: d, Backfilled: true})
	}
	finished := finishedEntry(r, event(ledger.KindCallFinished), r.Claim == nil)
	finished.Backfilled = true
	return append(out, finished)
}
