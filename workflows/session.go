package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// ToolgateSession is one agent session: it belongs to the agent that opened
// it (SessionInput.Owner), takes its sticky decisions (a call that a person
// approved or denied for the session signals it), its revokes and its end,
// and counts its quotas. It holds no waiting calls: they wait in the
// session's WaitingRooms, and every change of the session's news
// (activities.SessionNews) goes to each room, which hands it to the calls
// it covers. The news is also in the memo (activities.MemoNews), where a
// call's policy evaluation reads it with a describe.
//
// An ended session keeps running until it has been idle for its idle
// timeout, refusing what comes (a sticky decision, a quota count); its
// closed run's memo keeps the end after that. A session that idles out without
// an end forgets its sticky decisions.
func ToolgateSession(ctx workflow.Context, in SessionInput) error {
	s := &sessionRun{in: in, state: in.State, doors: doorsOf(ctx)}
	if err := s.registerHandlers(ctx); err != nil {
		return err
	}
	s.showNews(ctx) // every run: readers tell "none" from "not shown"
	if in.Owner != "" {
		if err := workflow.UpsertMemo(ctx, map[string]any{activities.MemoOwner: in.Owner}); err != nil {
			return err
		}
	}
	return s.run(ctx)
}

type sessionRun struct {
	in    SessionInput
	state SessionState
	// received counts this run's messages, for continue-as-new.
	received int
	// publishing are the SignalNews signals in flight to the rooms.
	publishing []workflow.Future
	// replies are the quota answers in flight.
	replies []workflow.Future
	// logged is the session's side of the ledger.
	logged sessionLog
	// doors are the doors whose statements it trusts.
	doors *statement.Doors
}

func (s *sessionRun) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QuerySession, func() (SessionView, error) { return s.view(), nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRevoke, s.revoke,
		workflow.UpdateHandlerOptions{Validator: s.validateRevoke}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnd, s.end,
		workflow.UpdateHandlerOptions{Validator: s.validateEnd})
}

// sessionInbox is the session's signal channels.
type sessionInbox struct {
	sticky, quota workflow.ReceiveChannel
}

func (in sessionInbox) pending() bool {
	return in.sticky.Len() > 0 || in.quota.Len() > 0
}

func (s *sessionRun) run(ctx workflow.Context) error {
	box := sessionInbox{
		sticky: workflow.GetSignalChannel(ctx, SignalSticky),
		quota:  workflow.GetSignalChannel(ctx, SignalQuota),
	}
	idle := s.in.IdleTimeout
	if idle <= 0 {
		idle = DefaultSessionIdleTimeout
	}
	for {
		gotWork, err := awaitWithTimeout(ctx, idle, box.pending)
		if err != nil {
			return err
		}
		if !gotWork && !box.pending() {
			return s.closeIdle(ctx)
		}
		s.drain(ctx, box)
		s.awaitSent(ctx)
		if s.continueAsNewNow(ctx) {
			// Finish updates in flight and take every signal already
			// delivered, so nothing is lost across the boundary.
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			s.drain(ctx, box)
			s.awaitSent(ctx)
			next := s.in
			next.State = s.state
			return workflow.NewContinueAsNewError(ctx, SessionWorkflowType, next)
		}
	}
}

// closeIdle ends an idle session. One that did not end forgets its sticky
// decisions, and tells its rooms so.
func (s *sessionRun) closeIdle(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	if s.state.End == nil && len(s.state.Sticky) > 0 {
		s.state.Sticky = nil
		awaitAll(ctx, s.publish(ctx))
	}
	workflow.GetLogger(ctx).Info("Session idle, closing", "session", s.in.Session, "ended", s.state.End != nil)
	return nil
}

// drain handles every message already delivered. Sticky decisions come
// first, and the news they make goes out once for all of them.
func (s *sessionRun) drain(ctx workflow.Context, box sessionInbox) {
	var recorded []ledger.Entry
	for {
		var d StickyDecision
		if !box.sticky.ReceiveAsync(&d) {
			break
		}
		s.received++
		if e, ok := s.recordSticky(ctx, d); ok {
			recorded = append(recorded, e)
		}
	}
	if len(recorded) > 0 {
		// In the ledger before any call hears of them.
		_ = s.log(ctx, recorded...) // fails only when the session is cancelled
		s.publish(ctx)
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

// awaitSent waits for the news and quota answers in flight. A room that
// does not run reads the news when it starts; a call that no longer runs
// needs no answer.
func (s *sessionRun) awaitSent(ctx workflow.Context) {
	sent := append(s.publishing, s.replies...)
	s.publishing, s.replies = nil, nil
	awaitAll(ctx, sent)
}

// news is what the session tells calls and rooms.
func (s *sessionRun) news() activities.SessionNews {
	n := activities.SessionNews{Revision: s.state.Revision, End: s.state.End}
	if s.state.End == nil {
		for _, d := range s.state.Sticky {
			n.Sticky = append(n.Sticky, activities.KeyedDecision{Key: d.Key, Since: d.Since, Decision: *fromSticky(d)})
		}
	}
	return n
}

// publish records a change: a new revision, shown in the memo in the same
// workflow task (so no reader sees a revoked decision after the revoke
// returned) and sent to every room.
// It returns the signals, for an update that waits until every room has
// the news.
func (s *sessionRun) publish(ctx workflow.Context) []workflow.Future {
	s.state.Revision = max(s.state.Revision+1, workflow.Now(ctx).UnixNano())
	s.showNews(ctx)
	sent := make([]workflow.Future, Rooms)
	for room := range Rooms {
		sent[room] = workflow.SignalExternalWorkflow(ctx, RoomWorkflowID(s.in.Session, room), "", SignalNews, s.news())
	}
	s.publishing = append(s.publishing, sent...)
	return sent
}

// awaitAll waits for signals whose failure only means that the receiver
// does not run.
func awaitAll(ctx workflow.Context, fs []workflow.Future) {
	for _, f := range fs {
		_ = f.Get(ctx, nil)
	}
}

func (s *sessionRun) showNews(ctx workflow.Context) {
	if err := workflow.UpsertMemo(ctx, map[string]any{activities.MemoNews: s.news()}); err != nil {
		workflow.GetLogger(ctx).Warn("Could not show the session's news", "session", s.in.Session, "error", err)
	}
}

// recordSticky stores a new sticky decision, and reports whether it did,
// with its ledger entry. Replacing one revokes it: only who may revoke it
// may, else the new decision stands for its own call alone. After the end
// nothing is stored.
func (s *sessionRun) recordSticky(ctx workflow.Context, d StickyDecision) (ledger.Entry, bool) {
	if s.state.End != nil {
		return ledger.Entry{}, false
	}
	if workflow.GetVersion(ctx, versionStatements, workflow.DefaultVersion, 1) >= 1 {
		if slices.Contains(s.state.StickyFrom, d.FromCall) {
			workflow.GetLogger(ctx).Warn("Sticky decision not recorded: its call's sticky decision was recorded before",
				"session", s.in.Session, "key", d.Key, "fromCall", d.FromCall)
			return ledger.Entry{}, false
		}
		session := s.in.Session
		err := recordedVerdict(ctx, s.doors, "sticky", s.in.Session, func(doors *statement.Doors) error {
			return policy.CheckHandedOn(doors, d.Decision, session, d.Key, d.FromCall, false) //workflowcheck:ignore
		})
		if err != nil {
			return ledger.Entry{}, false // logged and counted
		}
		s.state.StickyFrom = append(s.state.StickyFrom, d.FromCall)
	}
	d.Since = max(s.state.Revision+1, workflow.Now(ctx).UnixNano())
	if i := s.stickyIndex(d.Key); i >= 0 {
		if err := d.Decision.Approver().MayAct(s.state.Sticky[i].Groups); err != nil {
			workflow.GetLogger(ctx).Warn("Sticky decision not recorded: it would replace one its author may not revoke",
				"session", s.in.Session, "key", d.Key, "by", d.Decision.DecidedBy, "kept", s.state.Sticky[i].Decision.DecidedBy, "error", err)
			return ledger.Entry{}, false
		}
		replaced := s.state.Sticky[i]
		s.state.Sticky[i] = d
		return s.stickyEntry(ctx, d, &replaced), true
	}
	s.state.Sticky = append(s.state.Sticky, d)
	return s.stickyEntry(ctx, d, nil), true
}

// countQuota counts a run under its quota if the sliding window has room,
// and answers the call either way.
func (s *sessionRun) countQuota(ctx workflow.Context, q QuotaRequest) {
	answer := QuotaAnswer{Refusal: "the session has ended"}
	if s.state.End == nil {
		answer = s.state.takeQuota(q, workflow.Now(ctx))
	}
	s.replies = append(s.replies, workflow.SignalExternalWorkflow(ctx, CallWorkflowID(q.CallID), "", SignalQuotaAnswer, answer))
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

func (s *sessionRun) continueAsNewNow(ctx workflow.Context) bool {
	if s.in.ContinueAsNewAfter > 0 && s.received >= s.in.ContinueAsNewAfter {
		return true
	}
	return s.received >= maxMessagesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// stickyIndex is the place of key's sticky decision in Sticky, or -1.
func (s *sessionRun) stickyIndex(key string) int {
	return slices.IndexFunc(s.state.Sticky, func(d StickyDecision) bool { return d.Key == key })
}

// view is the QuerySession answer; the client adds the waiting calls.
func (s *sessionRun) view() SessionView {
	v := SessionView{Session: s.in.Session, Owner: s.in.Owner, Quotas: s.state.Quotas, Ended: s.state.End != nil, End: s.state.End, LedgerWait: s.logged.wait}
	if s.state.End == nil {
		v.Sticky = s.state.Sticky
	}
	return v
}

func (s *sessionRun) validateRevoke(ctx workflow.Context, req RevokeRequest) error {
	if err := s.checkRevoke(req); err != nil {
		return err
	}
	return checkNow(ctx, s.doors, "revoke", s.in.Session, req.Statement, policy.RevokeStatement(s.in.Session, req.Key, req.approver())) //workflowcheck:ignore
}

func (s *sessionRun) checkRevoke(req RevokeRequest) error {
	if err := policy.CheckIdentity("who revokes (by)", req.By); err != nil {
		return temporal.NewApplicationError("revoke: "+err.Error(), ErrTypeInvalidDecision)
	}
	if s.state.End != nil {
		return temporal.NewApplicationError("session "+s.in.Session+" has ended: it holds no sticky decision", ErrTypeSessionEnded)
	}
	i := s.stickyIndex(req.Key)
	if i < 0 {
		return temporal.NewApplicationError(fmt.Sprintf("session %s has no sticky decision for %q", s.in.Session, req.Key), ErrTypeNoSticky)
	}
	if err := req.approver().MayAct(s.state.Sticky[i].Groups); err != nil {
		return temporal.NewApplicationError(fmt.Sprintf("%s may not revoke the sticky decision for %q: %v", req.By, req.Key, err), ErrTypeNotAuthorized)
	}
	return nil
}

// revoke forgets a sticky decision: the next call of that key asks again.
// It returns once every room has the news, so a release in flight stops
// before its next batch.
func (s *sessionRun) revoke(ctx workflow.Context, req RevokeRequest) (StickyDecision, error) {
	i := s.stickyIndex(req.Key)
	removed := s.state.Sticky[i]
	s.state.Sticky = slices.Delete(s.state.Sticky, i, i+1)
	if err := s.log(ctx, s.revokedEntry(ctx, req, removed)); err != nil {
		return StickyDecision{}, err
	}
	awaitAll(ctx, s.publish(ctx))
	workflow.GetLogger(ctx).Info("Sticky decision revoked", "session", s.in.Session, "key", req.Key, "approver", req.By)
	return removed, nil
}

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
		User:          d.Decision.User,
		Identity:      d.Decision.Identity,
		// The statement that made it its author's goes with it: the call
		// checks it.
		Statement: d.Decision.Statement,
		Channel:   "session",
		Comment:   stickyComment(d.Decision, d.FromCall),
	}
}

// stickyComment says which sticky decision a call received: who took it,
// through what, on which call. It tells one sticky decision from another
// of the same key and author (a revoke and a new one).
func stickyComment(d policy.Decision, fromCall string) string {
	return fmt.Sprintf("sticky decision %s taken by %s via %s on call %s", d.Kind, d.DecidedBy, d.Channel, fromCall)
}
