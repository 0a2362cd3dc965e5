package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// ToolgateSession keeps one agent session's sticky decisions and its quota
// counts. It ends on UpdateEnd or when idle.
//
// Calls that wait for a person do not register with it (from
// changeFindWaiting on): parking a call writes nothing to the session,
// so thousands of calls park as fast as independent workflows. The session
// finds the waiting calls through visibility when it has something to tell
// them: a new sticky decision is handed to the calls of its key by one
// ReleaseWaiting activity, and the end denies every waiting call the same
// way. It shows its news in its memo first (MemoSticky, MemoEnded); a call
// reads the memo once listings show it waiting (AwaitListed), so a call
// and the session that race each other never miss each other. A session
// therefore holds no per-call state: 10,000 waiting calls cost it nothing
// until a decision, and then one activity (ten visibility pages and 10,000
// signals sent from a client, 32 at a time).
//
// The rest of this comment is about calls that still register (runs of
// calls started before call-v2 version 2), which it keeps serving.
//
// Built for sessions with many waiting calls (numbers for 10,000):
//   - Handlers only change state; the main loop does all sending. Answers
//     wait in an outbox and go out in batches of up to maxBatch signals,
//     sent together and awaited together: a fan-out to 1,000 calls costs
//     four workflow tasks, not a thousand.
//   - Every batch starts by taking the messages that arrived meanwhile,
//     sticky decisions first, so no call is told to ask a person after an
//     approve-for-session that covers it arrived.
//   - A waiting call costs one WaitingCall (~70 bytes of JSON with a
//     41-character call ID); what calls share (tool, key, requester, groups,
//     escalation, timeout) is one CallProfile. 10,000 waiting calls carry
//     ~0.7 MB across continue-as-new, and an outbox of 10,000 answers
//     another ~0.4 MB: under the 2 MiB input limit even together.
//   - Continue-as-new is checked between batches: when the server suggests
//     it, or after maxSignalsPerRun messages (Temporal allows 10,000
//     signals per run).
//   - A waiting call is forgotten when it says it is done, when an answer
//     to it fails (it ended, or was terminated), or at its deadline (one
//     pruning timer). A fresh run (not a continuation) asks the calls that
//     visibility lists as waiting in the session to register again, so a
//     terminated session's calls are not orphaned.
func ToolgateSession(ctx workflow.Context, in SessionInput) error {
	s := newSessionRun(in)
	s.signalByActivity = workflow.GetVersion(ctx, changeSignalByActivity, workflow.DefaultVersion, 1) >= 1
	s.stickyMemo = workflow.GetVersion(ctx, changeStickyMemo, workflow.DefaultVersion, 1) >= 1
	s.findWaiting = workflow.GetVersion(ctx, changeFindWaiting, workflow.DefaultVersion, 1) >= 1
	s.showSticky(ctx) // every run: readers tell "none" from "not shown"
	if err := s.registerHandlers(ctx); err != nil {
		return err
	}
	return s.run(ctx)
}

const (
	// maxBatch bounds the signals in flight at once, well under the
	// server's limit on pending signals of one workflow (2,000).
	maxBatch = 250
	// maxInlineSignals: a batch of more answers goes out from one
	// activity (deliverByActivity) in runs from changeSignalByActivity on.
	maxInlineSignals = 8
	// maxSignalsPerRun continues the session as new before Temporal's
	// 10,000 signals per run.
	maxSignalsPerRun = 4000
	// pruneGrace leaves a call that reaches its deadline the time to say it
	// is done before it is dropped.
	pruneGrace = time.Minute
)

type sessionRun struct {
	in    SessionInput
	state SessionState
	// index maps a waiting call's ID to its place in state.Calls; a
	// forgotten call leaves an empty CallID until the next compaction.
	index map[string]int
	// queued maps a call's ID to its answer in state.Outbox; sent counts
	// the answers at the head of the outbox already sent. Both keep the
	// work of a batch proportional to the batch, not to the session.
	queued map[string]int
	sent   int
	// pruneAt is the earliest deadline of a waiting call: nothing is
	// pruned before it.
	pruneAt time.Time
	// received counts this run's messages, for continue-as-new.
	received int
	// rebuild is the visibility listing of a fresh run, until handled.
	rebuild workflow.Future
	// waitingShown is the waiting count last written to the search
	// attribute.
	waitingShown int
	// answers caches the index in state.Decisions of a sticky decision
	// (by key) or of the end's denial (""), so the calls it answers share
	// one entry. Cleared with state.Decisions.
	answers map[string]int
	// signalByActivity: large batches of answers go out from an activity.
	// Runs started before changeSignalByActivity replay without.
	signalByActivity bool
	// stickyMemo: the run shows its sticky decisions in its memo
	// (MemoSticky). Runs started before changeStickyMemo replay without.
	stickyMemo bool
	// findWaiting: the run finds waiting calls through visibility and
	// shows its end in its memo. Runs started before changeFindWaiting
	// replay without.
	findWaiting bool
	// releasing are the ReleaseWaiting activities started, in the order
	// of state.Releases: releasing[i] hands out state.Releases[i].
	releasing []workflow.Future
	// endDenial is the denial of the session's end, once it ended.
	endDenial *policy.Decision
}

// changeGuardStickyReplace is the workflow.GetVersion change ID of the
// rule that a sticky decision replaces another of its key only if its
// author may revoke that one. Asked only when a replacement is refused, so
// histories without one replay unchanged.
const changeGuardStickyReplace = "guard-sticky-replace"

// changeFindWaiting is the workflow.GetVersion change ID of the sessions
// that find their waiting calls through visibility.
const changeFindWaiting = "find-waiting"

// MemoEnded is the session's memo key that shows the denial of its end
// (null while it runs): who ended it, with their groups.
const MemoEnded = "ended"

// changeStickyMemo is the workflow.GetVersion change ID of the sticky
// decisions shown in the session's memo.
const changeStickyMemo = "sticky-memo"

// MemoSticky is the session's memo key holding its sticky decisions by key,
// as a call applies them. A call's policy evaluation reads them with a
// DescribeWorkflowExecution, which the server answers, where a query would
// wait for the busy session's worker.
const MemoSticky = "sticky"

// showSticky writes the sticky decisions to the memo. It runs in the same
// workflow task as the change, so no reader sees a revoked decision after
// the revoke returned.
func (s *sessionRun) showSticky(ctx workflow.Context) {
	if !s.stickyMemo {
		return
	}
	shown := map[string]*policy.Decision{}
	if !s.state.Ended {
		for _, d := range s.state.Sticky {
			shown[d.Key] = fromSticky(d)
		}
	}
	memo := map[string]any{MemoSticky: shown}
	if s.findWaiting {
		memo[MemoEnded] = s.endDenial
	}
	if err := workflow.UpsertMemo(ctx, memo); err != nil {
		workflow.GetLogger(ctx).Warn("Could not show the sticky decisions", "session", s.in.Session, "error", err)
	}
}

// changeSignalByActivity is the workflow.GetVersion change ID of sending
// large batches of answers from an activity.
const changeSignalByActivity = "signal-by-activity"

func newSessionRun(in SessionInput) *sessionRun {
	s := &sessionRun{in: in, state: in.State, waitingShown: -1, answers: map[string]int{}}
	s.adoptLegacyWaiting()
	s.reindex()
	return s
}

// adoptLegacyWaiting moves the waiting calls of a LegacySessionWorkflow
// run into the compact form.
func (s *sessionRun) adoptLegacyWaiting() {
	for _, r := range s.state.Waiting {
		s.state.Calls = append(s.state.Calls, WaitingCall{CallID: r.CallID, Profile: s.profileOf(r), RequestedAt: unixMilliUp(r.At)})
	}
	s.state.Waiting = nil
}

// reindex drops forgotten calls and sent answers from the state and
// rebuilds the maps: O(calls), so only when the garbage is as large as the
// rest, or before the state is carried across continue-as-new.
func (s *sessionRun) reindex() {
	s.state.Calls = slices.DeleteFunc(s.state.Calls, func(w WaitingCall) bool { return w.CallID == "" })
	s.index = make(map[string]int, len(s.state.Calls))
	for i, w := range s.state.Calls {
		s.index[w.CallID] = i
	}
	s.state.Outbox = slices.Clone(s.state.Outbox[s.sent:])
	s.sent = 0
	s.queued = make(map[string]int, len(s.state.Outbox))
	for i, d := range s.state.Outbox {
		s.queued[d.CallID] = i
	}
}

// tidy compacts the state when forgotten calls or sent answers make up
// half of it.
func (s *sessionRun) tidy() {
	if len(s.state.Calls) > 2*len(s.index)+64 || s.sent > len(s.state.Outbox)/2+64 {
		s.reindex()
	}
}

// pending is the outbox's answers not yet sent.
func (s *sessionRun) pending() []Delivery { return s.state.Outbox[s.sent:] }

func (s *sessionRun) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QuerySession, func() (SessionView, error) { return s.view(), nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QuerySticky, s.state.stickyFor); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRevoke, s.revoke,
		workflow.UpdateHandlerOptions{Validator: s.validateRevoke}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnd, s.end,
		workflow.UpdateHandlerOptions{Validator: s.validateEnd})
}

// inbox is the session's signal channels.
type inbox struct {
	register, sticky, done, quota workflow.ReceiveChannel
}

func (in inbox) pending() bool {
	return in.register.Len() > 0 || in.sticky.Len() > 0 || in.done.Len() > 0 || in.quota.Len() > 0
}

func (s *sessionRun) run(ctx workflow.Context) error {
	box := inbox{
		register: workflow.GetSignalChannel(ctx, SignalRegister),
		sticky:   workflow.GetSignalChannel(ctx, SignalSticky),
		done:     workflow.GetSignalChannel(ctx, SignalDone),
		quota:    workflow.GetSignalChannel(ctx, SignalQuota),
	}
	if workflow.GetInfo(ctx).ContinuedExecutionRunID == "" && !s.findWaiting {
		s.startRebuild(ctx)
	}
	s.pruneAt = s.nextPrune(ctx)
	idle := s.in.IdleTimeout
	if idle <= 0 {
		idle = DefaultSessionIdleTimeout
	}
	for {
		gotWork, err := s.awaitWork(ctx, box, idle)
		if err != nil {
			return err
		}
		s.prune(ctx)
		if !gotWork && len(s.index) == 0 && !s.state.Ended && !s.callsWait(ctx) {
			workflow.GetLogger(ctx).Info("Session idle, ending", "session", s.in.Session)
			return nil
		}
		s.drain(ctx, box)
		s.collectReleases(ctx)
		s.startReleases(ctx)
		s.takeRebuild(ctx)
		s.flush(ctx, box)
		if !box.pending() {
			s.showWaiting(ctx) // once a burst is over, not per batch
		}
		if s.state.Ended && !s.owes() {
			// Finish updates and releases in flight; what arrives
			// meanwhile is refused with "the session has ended".
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) && s.allReleased() }); err != nil {
				return err
			}
			s.drain(ctx, box)
			s.flush(ctx, box)
			workflow.GetLogger(ctx).Info("Session ended", "session", s.in.Session)
			return nil
		}
		if s.continueAsNewNow(ctx) {
			// Finish updates and releases in flight and take every signal
			// already delivered, so nothing is lost across the boundary;
			// answers and releases not yet started travel in the state.
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) && s.allReleased() }); err != nil {
				return err
			}
			s.collectReleases(ctx)
			s.drain(ctx, box)
			s.reindex()
			next := s.in
			next.State = s.state
			return workflow.NewContinueAsNewError(ctx, SessionWorkflowType, next)
		}
	}
}

// awaitWork waits for a message, an answer to send, the end, or the next
// deadline of a waiting call; with no call waiting, for at most idle. It
// reports whether there is work.
func (s *sessionRun) awaitWork(ctx workflow.Context, box inbox, idle time.Duration) (bool, error) {
	hasWork := func() bool {
		return box.pending() || s.owes() || s.state.Ended || (s.rebuild != nil && s.rebuild.IsReady()) ||
			s.someReleased() || len(s.state.Releases) > len(s.releasing)
	}
	if hasWork() {
		return true, nil
	}
	wait := idle
	if len(s.index) > 0 {
		wait = max(s.pruneAt.Sub(workflow.Now(ctx)), time.Second)
	}
	return awaitWithTimeout(ctx, wait, hasWork)
}

// owes reports whether answers wait to be sent.
func (s *sessionRun) owes() bool {
	return len(s.pending()) > 0 || len(s.state.QuotaReplies) > 0
}

// drain handles every message already delivered, sticky decisions first
// and registrations last, so a sticky decision that arrived in the same
// batch already applies to them. It only changes state.
func (s *sessionRun) drain(ctx workflow.Context, box inbox) {
	for {
		var d StickyDecision
		if !box.sticky.ReceiveAsync(&d) {
			break
		}
		s.received++
		s.recordSticky(ctx, d)
	}
	for {
		var callID string
		if !box.done.ReceiveAsync(&callID) {
			break
		}
		s.received++
		s.forget(callID)
	}
	for {
		var r Registration
		if !box.register.ReceiveAsync(&r) {
			break
		}
		s.received++
		s.register(ctx, r)
	}
	for {
		var q QuotaRequest
		if !box.quota.ReceiveAsync(&q) {
			break
		}
		s.received++
		s.countQuota(ctx, q)
	}
}

// flush sends the answers owed, in batches sent together and awaited
// together. Between batches it takes new messages first, and stops early
// when the run should continue as new (the rest stays in the outbox).
func (s *sessionRun) flush(ctx workflow.Context, box inbox) {
	for s.owes() {
		n := min(len(s.pending()), maxBatch)
		batch := slices.Clone(s.pending()[:n])
		replies := s.state.QuotaReplies[:min(len(s.state.QuotaReplies), maxBatch-n)]
		var sent []workflow.Future
		callIDs := make([]string, 0, len(batch)+len(replies))
		if s.signalByActivity && len(batch) > maxInlineSignals {
			sent = append(sent, s.deliverByActivity(ctx, batch))
			callIDs = append(callIDs, "") // the activity names the calls it could not reach
		} else {
			for _, d := range batch {
				sent = append(sent, s.deliver(ctx, d))
				callIDs = append(callIDs, d.CallID)
			}
		}
		for _, q := range replies {
			sent = append(sent, workflow.SignalExternalWorkflow(ctx, CallWorkflowID(q.CallID), "", SignalQuotaAnswer, q.Answer))
			callIDs = append(callIDs, q.CallID)
		}
		for _, d := range batch {
			delete(s.queued, d.CallID)
		}
		s.sent += n
		s.state.QuotaReplies = slices.Clone(s.state.QuotaReplies[len(replies):])
		for i, f := range sent {
			if callIDs[i] == "" {
				s.forgetUnreachable(ctx, f)
				continue
			}
			if err := f.Get(ctx, nil); err != nil {
				// The call ended meanwhile (its own deadline, a decision,
				// termination): it waits no longer.
				workflow.GetLogger(ctx).Info("Could not reach call", "session", s.in.Session, "callID", callIDs[i], "error", err)
				s.forget(callIDs[i])
			}
		}
		if len(s.pending()) == 0 {
			s.state.Outbox, s.sent = nil, 0
			s.state.Decisions = nil
			clear(s.answers)
		}
		s.tidy()
		s.drain(ctx, box)
		if s.continueAsNewNow(ctx) {
			return
		}
	}
}

// deliverByActivity sends a batch of answers from one activity, in
// parallel: signals sent from the workflow each also write to the
// session's own history, one after another, which made a large release
// several times slower than the same signals from a client. The activity
// returns the workflow IDs of the calls that no longer run.
func (s *sessionRun) deliverByActivity(ctx workflow.Context, batch []Delivery) workflow.Future {
	signals := make([]outgoingSignal, 0, len(batch))
	for _, d := range batch {
		sig := outgoingSignal{WorkflowID: CallWorkflowID(d.CallID), Name: SignalSessionDecision}
		switch d.Decision {
		case DeliverReregister:
			sig.Name = SignalReregister
		case DeliverAskPerson:
			sig.Arg = SessionDecision{}
		default:
			decision := s.state.Decisions[d.Decision]
			sig.Arg = SessionDecision{Decision: &decision}
		}
		signals = append(signals, sig)
	}
	// By name: the input is activities.SignalsInput in the JSON it encodes to.
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, signalsOptions), "SendSignals", outgoingSignals{Signals: signals})
}

// outgoingSignals is activities.SignalsInput as the workflow writes it:
// each argument is encoded with the activity's input, where
// activities.Signal holds it as raw JSON.
type outgoingSignals struct {
	Signals []outgoingSignal `json:"signals"`
}

type outgoingSignal struct {
	WorkflowID string `json:"workflow_id"`
	Name       string `json:"name"`
	Arg        any    `json:"arg,omitempty"`
}

// signalsOptions retry a batch of answers for a while: the calls take a
// repeated answer as one.
var signalsOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, MaximumAttempts: 30},
}

// forgetUnreachable forgets the calls a batch could not reach; a batch
// that could not be sent at all leaves its calls waiting, to be asked to
// register again by the next run.
func (s *sessionRun) forgetUnreachable(ctx workflow.Context, f workflow.Future) {
	var gone []string
	if err := f.Get(ctx, &gone); err != nil {
		workflow.GetLogger(ctx).Warn("Could not send a batch of answers", "session", s.in.Session, "error", err)
		return
	}
	for _, wid := range gone {
		callID := strings.TrimPrefix(wid, CallWorkflowID(""))
		workflow.GetLogger(ctx).Info("Could not reach call", "session", s.in.Session, "callID", callID)
		s.forget(callID)
	}
}

// deliver sends one answer.
func (s *sessionRun) deliver(ctx workflow.Context, d Delivery) workflow.Future {
	id := CallWorkflowID(d.CallID)
	switch d.Decision {
	case DeliverReregister:
		return workflow.SignalExternalWorkflow(ctx, id, "", SignalReregister, nil)
	case DeliverAskPerson:
		return workflow.SignalExternalWorkflow(ctx, id, "", SignalSessionDecision, SessionDecision{})
	}
	decision := s.state.Decisions[d.Decision]
	return workflow.SignalExternalWorkflow(ctx, id, "", SignalSessionDecision, SessionDecision{Decision: &decision})
}

// enqueue owes callID an answer; a later answer to the same call replaces
// one not yet sent (a sticky decision replaces "ask a person").
func (s *sessionRun) enqueue(callID string, decision int) {
	if i, ok := s.queued[callID]; ok {
		s.state.Outbox[i].Decision = decision
		return
	}
	s.queued[callID] = len(s.state.Outbox)
	s.state.Outbox = append(s.state.Outbox, Delivery{CallID: callID, Decision: decision})
}

// answer returns the index in state.Decisions of the decision cached
// under key, storing d there first if there is none.
func (s *sessionRun) answer(key string, d policy.Decision) int {
	if i, ok := s.answers[key]; ok {
		return i
	}
	s.state.Decisions = append(s.state.Decisions, d)
	s.answers[key] = len(s.state.Decisions) - 1
	return s.answers[key]
}

// Keys of answers that are not sticky decisions: the denial of the calls
// waiting when the session ends, and of calls that register after.
const (
	endKey   = "\x00end"
	endedKey = "\x00ended"
)

// register answers a call that needs a decision: with the sticky decision
// for its key if one covers it, otherwise by parking it.
func (s *sessionRun) register(ctx workflow.Context, r Registration) {
	if s.state.Ended {
		s.enqueue(r.CallID, s.answer(endedKey, policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session has ended", DecidedBy: "session", Channel: "session"}))
		return
	}
	requested := r.RequestedAt
	for _, t := range []time.Time{r.At, workflow.Now(ctx)} { // from older calls
		if requested.IsZero() {
			requested = t
		}
	}
	w := WaitingCall{CallID: r.CallID, Profile: s.profileOf(r), RequestedAt: unixMilliUp(requested)}
	if i := s.stickyIndex(r.StickyKey); i >= 0 && s.mayHand(ctx, s.state.Sticky[i], w) {
		s.forget(r.CallID)
		s.enqueue(r.CallID, s.answer(r.StickyKey, *fromSticky(s.state.Sticky[i])))
		return
	}
	if _, known := s.index[r.CallID]; !known {
		s.index[r.CallID] = len(s.state.Calls)
		s.state.Calls = append(s.state.Calls, w)
		if d := s.deadlineOf(w); s.pruneAt.IsZero() || d.Before(s.pruneAt) {
			s.pruneAt = d
		}
	}
	s.enqueue(r.CallID, DeliverAskPerson)
}

// profileOf returns the index of r's profile, adding it when new.
func (s *sessionRun) profileOf(r Registration) int {
	p := CallProfile{Tool: r.Tool, Key: r.StickyKey, Requester: r.Requester, Groups: r.Groups,
		EscalateTo: r.EscalateTo, EscalateAfter: r.EscalateAfter, Timeout: r.Timeout}
	if i := slices.IndexFunc(s.state.Profiles, func(q CallProfile) bool { return sameProfile(p, q) }); i >= 0 {
		return i
	}
	s.state.Profiles = append(s.state.Profiles, p)
	return len(s.state.Profiles) - 1
}

func sameProfile(a, b CallProfile) bool {
	return a.Tool == b.Tool && a.Key == b.Key && a.Requester == b.Requester && slices.Equal(a.Groups, b.Groups) &&
		slices.Equal(a.EscalateTo, b.EscalateTo) && a.EscalateAfter == b.EscalateAfter && a.Timeout == b.Timeout
}

// recordSticky stores a new sticky decision and hands it to every call of
// the same key waiting at this moment that its author may decide.
func (s *sessionRun) recordSticky(ctx workflow.Context, d StickyDecision) {
	s.forget(d.FromCall)
	if i := s.stickyIndex(d.Key); i >= 0 {
		if err := d.Decision.Approver().MayAct(s.state.Sticky[i].Groups); err != nil &&
			workflow.GetVersion(ctx, changeGuardStickyReplace, workflow.DefaultVersion, 1) >= 1 {
			// Replacing a sticky decision revokes it: only who may revoke
			// it may. The new decision stands for its own call alone.
			workflow.GetLogger(ctx).Warn("Sticky decision not recorded: it would replace one its author may not revoke",
				"session", s.in.Session, "key", d.Key, "by", d.Decision.DecidedBy, "kept", s.state.Sticky[i].Decision.DecidedBy, "error", err)
			return
		}
		s.state.Sticky[i] = d
	} else {
		s.state.Sticky = append(s.state.Sticky, d)
	}
	delete(s.answers, d.Key) // a new decision for the key
	s.showSticky(ctx)
	if s.findWaiting {
		s.state.Releases = append(s.state.Releases, Release{Key: d.Key, Decision: *fromSticky(d)})
	}
	for _, w := range s.state.Calls {
		if w.CallID == "" || s.state.Profiles[w.Profile].Key != d.Key || !s.mayHand(ctx, d, w) {
			continue
		}
		s.forget(w.CallID)
		s.enqueue(w.CallID, s.answer(d.Key, *fromSticky(d)))
	}
}

// mayHand reports whether the sticky decision d may decide the waiting call
// w: only if its author could have decided w directly, with w's groups at
// this moment (escalation included) and w's requester. A call it may not
// decide keeps waiting for a person.
func (s *sessionRun) mayHand(ctx workflow.Context, d StickyDecision, w WaitingCall) bool {
	p := s.state.Profiles[w.Profile]
	groups := p.Groups
	if p.EscalateAfter > 0 && !workflow.Now(ctx).Before(time.UnixMilli(w.RequestedAt).Add(p.EscalateAfter)) {
		groups = append(slices.Clone(groups), p.EscalateTo...)
	}
	return d.Decision.Approver().MayDecide(p.Requester, groups) == nil
}

// forget drops a waiting call; the slot is reclaimed at the next reindex.
func (s *sessionRun) forget(callID string) {
	if i, ok := s.index[callID]; ok {
		s.state.Calls[i].CallID = ""
		delete(s.index, callID)
	}
}

// prune forgets the calls past their deadline (and a grace period): they
// ended without saying so, e.g. terminated. It looks at the calls only once
// the earliest deadline has come.
func (s *sessionRun) prune(ctx workflow.Context) {
	now := workflow.Now(ctx)
	if now.Before(s.pruneAt) {
		return
	}
	for _, w := range s.state.Calls {
		if w.CallID != "" && !now.Before(s.deadlineOf(w)) {
			s.forget(w.CallID)
		}
	}
	s.pruneAt = s.nextPrune(ctx)
}

// deadlineOf is when w is dropped if it never says it is done.
func (s *sessionRun) deadlineOf(w WaitingCall) time.Time {
	timeout := s.state.Profiles[w.Profile].Timeout
	if timeout <= 0 {
		timeout = DefaultSessionIdleTimeout // a legacy registration: deadline unknown
	}
	return time.UnixMilli(w.RequestedAt).Add(timeout + pruneGrace)
}

// nextPrune is the earliest deadline of a waiting call.
func (s *sessionRun) nextPrune(ctx workflow.Context) time.Time {
	next := workflow.Now(ctx).Add(DefaultSessionIdleTimeout)
	for _, w := range s.state.Calls {
		if w.CallID != "" {
			if d := s.deadlineOf(w); d.Before(next) {
				next = d
			}
		}
	}
	return next
}

// waitingQuery finds the calls waiting for a person in a session and, with
// a key, those of that sticky key.
func waitingQuery(session, key string) string {
	q := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND %s = '%s' AND %s = '%s'",
		ToolCallWorkflowType, AttrSession.GetName(), quoteQuery(session), AttrStatus.GetName(), StatusPending)
	if key != "" {
		q += fmt.Sprintf(" AND %s = '%s'", AttrStickyKey.GetName(), quoteQuery(key))
	}
	return q
}

// maxReleased bounds the calls one ReleaseWaiting tells.
const maxReleased = 100_000

// releaseOptions: a release of 10,000 calls takes minutes on a small
// server; the heartbeat tells a lost worker from a long release.
var releaseOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Minute,
	HeartbeatTimeout:    time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, MaximumAttempts: 10},
}

// outgoingRelease is activities.ReleaseInput as the workflow writes it
// (the signal's argument as a value; the activity holds it as raw JSON).
type outgoingRelease struct {
	Query string `json:"query"`
	Name  string `json:"name"`
	Arg   any    `json:"arg,omitempty"`
	Limit int    `json:"limit"`
}

// startRelease hands a decision to the calls waiting in the session (of
// key, or all when key is empty) from one activity. The memo must already
// show the news: the activity is scheduled in the same workflow task, so
// it lists only after the memo was written.
func (s *sessionRun) startRelease(ctx workflow.Context, key string, sd SessionDecision) workflow.Future {
	in := outgoingRelease{Query: waitingQuery(s.in.Session, key), Name: SignalSessionDecision, Arg: sd, Limit: maxReleased}
	// By name: the input is activities.ReleaseInput in the JSON it encodes to.
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, releaseOptions), "ReleaseWaiting", in)
}

// startReleases starts a release for every sticky decision recorded and
// not yet handed out.
func (s *sessionRun) startReleases(ctx workflow.Context) {
	for _, r := range s.state.Releases[len(s.releasing):] {
		d := r.Decision
		s.releasing = append(s.releasing, s.startRelease(ctx, r.Key, SessionDecision{Decision: &d, Key: r.Key}))
	}
}

// collectReleases forgets the releases that finished. One that failed
// leaves its calls waiting for a person.
func (s *sessionRun) collectReleases(ctx workflow.Context) {
	for i := 0; i < len(s.releasing); {
		f := s.releasing[i]
		if !f.IsReady() {
			i++
			continue
		}
		key := s.state.Releases[i].Key
		var told int
		if err := f.Get(ctx, &told); err != nil {
			workflow.GetLogger(ctx).Warn("Could not hand the sticky decision to the waiting calls", "session", s.in.Session, "key", key, "error", err)
		} else {
			workflow.GetLogger(ctx).Info("Sticky decision handed to the waiting calls", "session", s.in.Session, "key", key, "calls", told)
		}
		s.releasing = slices.Delete(s.releasing, i, i+1)
		s.state.Releases = slices.Delete(s.state.Releases, i, i+1)
	}
}

func (s *sessionRun) someReleased() bool {
	return slices.ContainsFunc(s.releasing, workflow.Future.IsReady)
}

func (s *sessionRun) allReleased() bool {
	return !slices.ContainsFunc(s.releasing, func(f workflow.Future) bool { return !f.IsReady() })
}

// callsWait reports whether visibility lists calls waiting in the
// session: an idle session whose calls still wait keeps its sticky
// decisions. Runs before changeFindWaiting know their calls.
func (s *sessionRun) callsWait(ctx workflow.Context) bool {
	if !s.findWaiting {
		return false
	}
	var ids []string
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, listOptions), a.ListWorkflowIDs,
		activities.ListInput{Query: waitingQuery(s.in.Session, ""), Limit: 1}).Get(ctx, &ids)
	if err != nil {
		workflow.GetLogger(ctx).Warn("Could not list the calls waiting in the session; staying", "session", s.in.Session, "error", err)
		return true
	}
	return len(ids) > 0
}

// listOptions bound a visibility listing.
var listOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
}

// countQuota counts a run under its quota if the sliding window has room,
// and owes the call the answer either way.
func (s *sessionRun) countQuota(ctx workflow.Context, q QuotaRequest) {
	answer := s.state.takeQuota(q, workflow.Now(ctx))
	s.state.QuotaReplies = append(s.state.QuotaReplies, QuotaReply{CallID: q.CallID, Answer: answer})
}

// takeQuota counts a run at now under its quota if the sliding window has
// room, and returns the answer for the call: a refusal when it has none.
func (st *SessionState) takeQuota(q QuotaRequest, now time.Time) QuotaAnswer {
	i := slices.IndexFunc(st.Quotas, func(u QuotaUse) bool { return u.Name == q.Quota.Name })
	if i < 0 {
		st.Quotas = append(st.Quotas, QuotaUse{Name: q.Quota.Name})
		i = len(st.Quotas) - 1
	}
	use := &st.Quotas[i]
	use.Times = slices.DeleteFunc(use.Times, func(t time.Time) bool { return !t.After(now.Add(-q.Quota.Per)) })
	var answer QuotaAnswer
	if len(use.Times) >= q.Quota.Max {
		next := use.Times[len(use.Times)-q.Quota.Max].Add(q.Quota.Per)
		answer.Refusal = fmt.Sprintf("quota %s: at most %d %s calls per %s in this session; the next one is allowed after %s",
			q.Quota.Name, q.Quota.Max, q.Tool, q.Quota.Per, next.UTC().Format(time.RFC3339))
	} else {
		use.Times = append(use.Times, now)
	}
	return answer
}

// startRebuild lists, through visibility, the calls that wait in this
// session: after a termination they are unknown to a fresh run.
func (s *sessionRun) startRebuild(ctx workflow.Context) {
	s.rebuild = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, listOptions), a.ListWorkflowIDs,
		activities.ListInput{Query: waitingQuery(s.in.Session, ""), Limit: maxRebuild})
}

// maxRebuild bounds the waiting calls a fresh run asks to register again.
const maxRebuild = 100_000

// quoteQuery escapes a value for a single-quoted visibility query string.
func quoteQuery(v string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v)
}

// takeRebuild asks the calls found waiting to register again, once the
// listing is done; they answer with SignalRegister.
func (s *sessionRun) takeRebuild(ctx workflow.Context) {
	if s.rebuild == nil || !s.rebuild.IsReady() {
		return
	}
	var workflowIDs []string
	if err := s.rebuild.Get(ctx, &workflowIDs); err != nil {
		workflow.GetLogger(ctx).Warn("Could not list the calls waiting in the session", "session", s.in.Session, "error", err)
	}
	s.rebuild = nil
	for _, wid := range workflowIDs {
		id := strings.TrimPrefix(wid, CallWorkflowID(""))
		if _, known := s.index[id]; !known {
			if _, owed := s.queued[id]; !owed {
				s.enqueue(id, DeliverReregister)
			}
		}
	}
}

// showWaiting keeps the session's search attributes current, so operators
// find sessions with waiting calls by query.
func (s *sessionRun) showWaiting(ctx workflow.Context) {
	if s.findWaiting {
		// The calls waiting are found by query (waitingQuery); the
		// session only says who it is.
		if s.waitingShown < 0 {
			s.waitingShown = 0
			if err := workflow.UpsertTypedSearchAttributes(ctx, AttrSession.ValueSet(s.in.Session)); err != nil {
				workflow.GetLogger(ctx).Warn("Could not update the session's search attributes", "session", s.in.Session, "error", err)
			}
		}
		return
	}
	if n := len(s.index); n != s.waitingShown {
		s.waitingShown = n
		err := workflow.UpsertTypedSearchAttributes(ctx, AttrSession.ValueSet(s.in.Session), AttrWaiting.ValueSet(int64(n)))
		if err != nil {
			workflow.GetLogger(ctx).Warn("Could not update the session's search attributes", "session", s.in.Session, "error", err)
		}
	}
}

func (s *sessionRun) continueAsNewNow(ctx workflow.Context) bool {
	if s.in.ContinueAsNewAfter > 0 && s.received >= s.in.ContinueAsNewAfter {
		return true
	}
	return s.received >= maxSignalsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

func (s *sessionRun) stickyIndex(key string) int { return s.state.stickyIndex(key) }

// stickyIndex is the place of key's sticky decision in Sticky, or -1.
func (st *SessionState) stickyIndex(key string) int {
	return slices.IndexFunc(st.Sticky, func(d StickyDecision) bool { return d.Key == key })
}

// stickyFor answers QuerySticky: key's sticky decision as a call applies
// it, or nil (none, or the session ended).
func (st *SessionState) stickyFor(key string) (*policy.Decision, error) {
	if i := st.stickyIndex(key); i >= 0 && !st.Ended {
		return fromSticky(st.Sticky[i]), nil
	}
	return nil, nil
}

// view is the QuerySession answer.
func (s *sessionRun) view() SessionView {
	v := SessionView{Session: s.in.Session, Sticky: s.state.Sticky, WaitingCount: len(s.index), Quotas: s.state.Quotas, Ended: s.state.Ended}
	for _, w := range s.state.Calls {
		if w.CallID == "" {
			continue
		}
		if len(v.Waiting) == MaxWaitingShown {
			break
		}
		p := s.state.Profiles[w.Profile]
		v.Waiting = append(v.Waiting, Registration{CallID: w.CallID, Tool: p.Tool, StickyKey: p.Key, At: time.UnixMilli(w.RequestedAt),
			Requester: p.Requester, Groups: p.Groups, RequestedAt: time.UnixMilli(w.RequestedAt)})
	}
	return v
}

func (s *sessionRun) validateRevoke(req RevokeRequest) error {
	return checkRevoke(s.in.Session, s.state.Sticky, req)
}

// checkRevoke allows revoking a sticky decision to whoever may act on the
// call it was taken on (its groups, or "*").
func checkRevoke(session string, sticky []StickyDecision, req RevokeRequest) error {
	if err := policy.CheckIdentity("who revokes (by)", req.By); err != nil {
		return temporal.NewApplicationError("revoke: "+err.Error(), ErrTypeInvalidDecision)
	}
	i := slices.IndexFunc(sticky, func(d StickyDecision) bool { return d.Key == req.Key })
	if i < 0 {
		return temporal.NewApplicationError(fmt.Sprintf("session %s has no sticky decision for %q", session, req.Key), ErrTypeNoSticky)
	}
	if err := req.approver().MayAct(sticky[i].Groups); err != nil {
		return temporal.NewApplicationError(fmt.Sprintf("%s may not revoke the sticky decision for %q: %v", req.By, req.Key, err), ErrTypeNotAuthorized)
	}
	return nil
}

// revoke forgets a sticky decision: the next call of that key asks again.
func (s *sessionRun) revoke(ctx workflow.Context, req RevokeRequest) (StickyDecision, error) {
	i := s.stickyIndex(req.Key)
	removed := s.state.Sticky[i]
	s.state.Sticky = slices.Delete(s.state.Sticky, i, i+1)
	s.showSticky(ctx)
	workflow.GetLogger(ctx).Info("Sticky decision revoked", "session", s.in.Session, "key", req.Key, "approver", req.By)
	return removed, nil
}

// validateEnd allows ending the session to whoever may act on every call
// waiting in it and every sticky decision it holds (an admin's "*" always
// may): ending denies the first and forgets the second.
func (s *sessionRun) validateEnd(ctx workflow.Context, req EndRequest) error {
	if err := policy.CheckIdentity("who ends the session (by)", req.By); err != nil {
		return temporal.NewApplicationError("end session: "+err.Error(), ErrTypeInvalidDecision)
	}
	if s.state.Ended {
		return temporal.NewApplicationError("session "+s.in.Session+" has already ended", ErrTypeSessionEnded)
	}
	now := workflow.Now(ctx)
	for _, w := range s.state.Calls {
		if w.CallID == "" {
			continue
		}
		p := s.state.Profiles[w.Profile]
		groups := p.Groups
		if p.EscalateAfter > 0 && !now.Before(time.UnixMilli(w.RequestedAt).Add(p.EscalateAfter)) {
			groups = append(slices.Clone(groups), p.EscalateTo...)
		}
		if err := req.approver().MayAct(groups); err != nil {
			return temporal.NewApplicationError(fmt.Sprintf("%s may not end session %s: waiting call %s: %v", req.By, s.in.Session, w.CallID, err), ErrTypeNotAuthorized)
		}
	}
	for _, d := range s.state.Sticky {
		if err := req.approver().MayAct(d.Groups); err != nil {
			return temporal.NewApplicationError(fmt.Sprintf("%s may not end session %s: sticky decision for %q: %v", req.By, s.in.Session, d.Key, err), ErrTypeNotAuthorized)
		}
	}
	return nil
}

// end ends the session: every waiting call is owed a denial. Calls that
// registered are denied by the main loop; calls found through visibility
// (changeFindWaiting) by an activity here, once the memo shows the end, and
// only after an activity found none that the ender may not act on. It
// returns how many calls are denied.
func (s *sessionRun) end(ctx workflow.Context, req EndRequest) (int, error) {
	if s.findWaiting {
		if err := s.checkMayEnd(ctx, req); err != nil {
			return 0, err
		}
	}
	denial := policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by " + req.By,
		DecidedBy: req.By, DeciderGroups: req.Groups, Channel: "session"}
	s.state.Ended, s.endDenial = true, &denial
	s.showSticky(ctx)
	n := 0
	for _, w := range s.state.Calls {
		if w.CallID == "" {
			continue
		}
		s.forget(w.CallID)
		s.enqueue(w.CallID, s.answer(endKey, denial))
		n++
	}
	if s.findWaiting {
		var told int
		if err := s.startRelease(ctx, "", SessionDecision{Decision: &denial, Ended: true}).Get(ctx, &told); err != nil {
			workflow.GetLogger(ctx).Warn("Could not deny the calls waiting in the ended session", "session", s.in.Session, "error", err)
		}
		n += told
	}
	workflow.GetLogger(ctx).Info("Session ending", "session", s.in.Session, "by", req.By, "denied", n)
	return n, nil
}

// checkMayEnd refuses the end when visibility lists a call waiting in the
// session that the ender may not act on (the validator checked the calls
// that registered), or when another end came first meanwhile.
func (s *sessionRun) checkMayEnd(ctx workflow.Context, req EndRequest) error {
	var refusal string
	in := activities.CheckWaitingInput{Query: waitingQuery(s.in.Session, ""), Approver: req.approver()}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, listOptions), a.CheckWaiting, in).Get(ctx, &refusal); err != nil {
		return temporal.NewApplicationError("end session "+s.in.Session+": could not list its waiting calls: "+err.Error(), ErrTypeUnavailable)
	}
	if refusal != "" {
		return temporal.NewApplicationError(fmt.Sprintf("%s may not end session %s: %s", req.By, s.in.Session, refusal), ErrTypeNotAuthorized)
	}
	if s.state.Ended {
		return temporal.NewApplicationError("session "+s.in.Session+" has already ended", ErrTypeSessionEnded)
	}
	return nil
}

// unixMilliUp is t in Unix milliseconds, rounded up.
func unixMilliUp(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

// changeAuthorizeSticky is the workflow.GetVersion change ID of the rule
// that a sticky decision decides only calls its author could decide
// directly (groups, escalation, no self-approval), in both workflows.
const changeAuthorizeSticky = "authorize-sticky"

// fromSticky is the decision a call receives from a sticky decision: the
// original approver, through the session.
func fromSticky(d StickyDecision) *policy.Decision {
	return &policy.Decision{
		Kind:      d.Decision.Kind,
		Reason:    d.Decision.Reason,
		DecidedBy: d.Decision.DecidedBy,
		// The author's groups go along, so the call can tell who may
		// have decided it.
		DeciderGroups: d.Decision.DeciderGroups,
		Channel:       "session",
		Comment:       fmt.Sprintf("sticky decision %s taken by %s via %s on call %s", d.Decision.Kind, d.Decision.DecidedBy, d.Decision.Channel, d.FromCall),
	}
}
