package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
)

// SessionWorkflow keeps one agent session's sticky decisions and the calls
// waiting for a person. Calls register only when their policy asks a
// person, so auto-approved calls never touch it. It continues-as-new
// before its history grows large and ends on UpdateEnd or when idle.
func SessionWorkflow(ctx workflow.Context, in SessionInput) error {
	s := &sessionRun{in: in, state: in.State}
	if err := s.registerHandlers(ctx); err != nil {
		return err
	}
	return s.run(ctx)
}

type sessionRun struct {
	in    SessionInput
	state SessionState
	// handled counts the messages of this run, for the test-only
	// continue-as-new limit.
	handled int
}

func (s *sessionRun) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QuerySession, func() (SessionView, error) {
		return SessionView{Session: s.in.Session, SessionState: s.state}, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QuerySticky, func(key string) (*policy.Decision, error) {
		if i := s.stickyIndex(key); i >= 0 && !s.state.Ended {
			return fromSticky(s.state.Sticky[i]), nil
		}
		return nil, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRevoke, s.revoke,
		workflow.UpdateHandlerOptions{Validator: s.validateRevoke}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnd, s.end,
		workflow.UpdateHandlerOptions{Validator: s.validateEnd})
}

func (s *sessionRun) run(ctx workflow.Context) error {
	register := workflow.GetSignalChannel(ctx, SignalRegister)
	sticky := workflow.GetSignalChannel(ctx, SignalSticky)
	done := workflow.GetSignalChannel(ctx, SignalDone)
	quota := workflow.GetSignalChannel(ctx, SignalQuota)
	idle := s.in.IdleTimeout
	if idle <= 0 {
		idle = DefaultSessionIdleTimeout
	}
	logger := workflow.GetLogger(ctx)
	hasWork := func() bool {
		return register.Len() > 0 || sticky.Len() > 0 || done.Len() > 0 || quota.Len() > 0 || s.state.Ended
	}
	for {
		// The idle clock runs only while no call waits: a waiting call ends
		// by its own deadline and says so.
		if len(s.state.Waiting) > 0 {
			if err := workflow.Await(ctx, hasWork); err != nil {
				return err
			}
		} else if gotWork, err := awaitWithTimeout(ctx, idle, hasWork); err != nil {
			return err
		} else if !gotWork {
			logger.Info("Session idle, ending", "session", s.in.Session)
			return nil
		}
		s.drain(ctx, register, sticky, done, quota)
		if s.state.Ended || s.continueAsNewNow(ctx) {
			// Finish updates in flight and take every signal already
			// delivered, so nothing is lost across the boundary.
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			s.drain(ctx, register, sticky, done, quota)
			if s.state.Ended {
				logger.Info("Session ended", "session", s.in.Session)
				return nil
			}
			next := s.in
			next.State = s.state
			return workflow.NewContinueAsNewError(ctx, SessionWorkflow, next)
		}
	}
}

func (s *sessionRun) continueAsNewNow(ctx workflow.Context) bool {
	if s.in.ContinueAsNewAfter > 0 && s.handled >= s.in.ContinueAsNewAfter {
		return true
	}
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// drain handles every message already delivered, registrations last so a
// sticky decision that arrived in the same batch already applies to them.
func (s *sessionRun) drain(ctx workflow.Context, register, sticky, done, quota workflow.ReceiveChannel) {
	for {
		var d StickyDecision
		if !sticky.ReceiveAsync(&d) {
			break
		}
		s.recordSticky(ctx, d)
	}
	for {
		var callID string
		if !done.ReceiveAsync(&callID) {
			break
		}
		s.handled++
		s.removeWaiting(callID)
	}
	for {
		var r Registration
		if !register.ReceiveAsync(&r) {
			break
		}
		s.register(ctx, r)
	}
	for {
		var q QuotaRequest
		if !quota.ReceiveAsync(&q) {
			break
		}
		s.countQuota(ctx, q)
	}
}

// countQuota counts a run under its quota if the sliding window has room,
// and answers the call either way.
func (s *sessionRun) countQuota(ctx workflow.Context, q QuotaRequest) {
	s.handled++
	now := workflow.Now(ctx)
	i := slices.IndexFunc(s.state.Quotas, func(u QuotaUse) bool { return u.Name == q.Quota.Name })
	if i < 0 {
		s.state.Quotas = append(s.state.Quotas, QuotaUse{Name: q.Quota.Name})
		i = len(s.state.Quotas) - 1
	}
	use := &s.state.Quotas[i]
	use.Times = slices.DeleteFunc(use.Times, func(t time.Time) bool { return !t.After(now.Add(-q.Quota.Per)) })
	var answer QuotaAnswer
	if len(use.Times) >= q.Quota.Max {
		next := use.Times[len(use.Times)-q.Quota.Max].Add(q.Quota.Per)
		answer.Refusal = fmt.Sprintf("quota %s: at most %d %s calls per %s in this session; the next one is allowed after %s",
			q.Quota.Name, q.Quota.Max, q.Tool, q.Quota.Per, next.UTC().Format(time.RFC3339))
	} else {
		use.Times = append(use.Times, now)
	}
	err := workflow.SignalExternalWorkflow(ctx, CallWorkflowID(q.CallID), "", SignalQuotaAnswer, answer).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Info("Could not reach call", "session", s.in.Session, "callID", q.CallID, "error", err)
	}
}

// register answers a call that needs a decision: with the sticky decision
// for its key if there is one, otherwise by parking it.
func (s *sessionRun) register(ctx workflow.Context, r Registration) {
	s.handled++
	if s.state.Ended {
		s.send(ctx, r.CallID, &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session has ended", DecidedBy: "session", Channel: "session"})
		return
	}
	if i := s.stickyIndex(r.StickyKey); i >= 0 {
		s.send(ctx, r.CallID, fromSticky(s.state.Sticky[i]))
		return
	}
	if !slices.ContainsFunc(s.state.Waiting, func(w Registration) bool { return w.CallID == r.CallID }) {
		s.state.Waiting = append(s.state.Waiting, r)
	}
	s.send(ctx, r.CallID, nil)
}

// recordSticky stores a new sticky decision and hands it to every other
// call of the same key waiting at this moment.
func (s *sessionRun) recordSticky(ctx workflow.Context, d StickyDecision) {
	s.handled++
	s.removeWaiting(d.FromCall)
	if i := s.stickyIndex(d.Key); i >= 0 {
		s.state.Sticky[i] = d
	} else {
		s.state.Sticky = append(s.state.Sticky, d)
	}
	var still []Registration
	for _, w := range s.state.Waiting {
		if w.StickyKey == d.Key {
			s.send(ctx, w.CallID, fromSticky(d))
		} else {
			still = append(still, w)
		}
	}
	s.state.Waiting = still
}

// fromSticky is the decision a call receives from a sticky decision: the
// original approver, through the session.
func fromSticky(d StickyDecision) *policy.Decision {
	return &policy.Decision{
		Kind:      d.Decision.Kind,
		Reason:    d.Decision.Reason,
		DecidedBy: d.Decision.DecidedBy,
		Channel:   "session",
		Comment:   fmt.Sprintf("sticky decision %s taken by %s via %s on call %s", d.Decision.Kind, d.Decision.DecidedBy, d.Decision.Channel, d.FromCall),
	}
}

func (s *sessionRun) send(ctx workflow.Context, callID string, d *policy.Decision) {
	err := workflow.SignalExternalWorkflow(ctx, CallWorkflowID(callID), "", SignalSessionDecision, SessionDecision{Decision: d}).Get(ctx, nil)
	if err != nil {
		// The call finished meanwhile (its own timeout, or a decision).
		workflow.GetLogger(ctx).Info("Could not reach call", "session", s.in.Session, "callID", callID, "error", err)
	}
}

func (s *sessionRun) removeWaiting(callID string) {
	s.state.Waiting = slices.DeleteFunc(s.state.Waiting, func(w Registration) bool { return w.CallID == callID })
}

func (s *sessionRun) stickyIndex(key string) int {
	return slices.IndexFunc(s.state.Sticky, func(d StickyDecision) bool { return d.Key == key })
}

func (s *sessionRun) validateRevoke(key string) error {
	if s.stickyIndex(key) < 0 {
		return temporal.NewApplicationError(fmt.Sprintf("session %s has no sticky decision for %q", s.in.Session, key), ErrTypeNoSticky)
	}
	return nil
}

// revoke forgets a sticky decision: the next call of that key asks again.
func (s *sessionRun) revoke(ctx workflow.Context, key string) (StickyDecision, error) {
	s.handled++
	i := s.stickyIndex(key)
	removed := s.state.Sticky[i]
	s.state.Sticky = slices.Delete(s.state.Sticky, i, i+1)
	workflow.GetLogger(ctx).Info("Sticky decision revoked", "session", s.in.Session, "key", key)
	return removed, nil
}

func (s *sessionRun) validateEnd(by string) error {
	if by == "" {
		return temporal.NewApplicationError("ending a session needs the identity of who ends it", ErrTypeInvalidDecision)
	}
	if s.state.Ended {
		return temporal.NewApplicationError("session "+s.in.Session+" has already ended", ErrTypeSessionEnded)
	}
	return nil
}

// end denies every waiting call and ends the session; it returns how many
// calls were denied.
func (s *sessionRun) end(ctx workflow.Context, by string) (int, error) {
	s.handled++
	waiting := s.state.Waiting
	s.state.Waiting = nil
	s.state.Ended = true
	for _, w := range waiting {
		s.send(ctx, w.CallID, &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by " + by, DecidedBy: by, Channel: "session"})
	}
	return len(waiting), nil
}
