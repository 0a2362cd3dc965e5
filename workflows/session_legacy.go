package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
)

// LegacySessionWorkflow is the session workflow of the first releases,
// registered under LegacySessionWorkflowType so that sessions started by
// them replay and run to their end; new sessions are ToolgateSession. It
// answers one message per workflow task. Delete it once no run started
// before ToolgateSession is left.
func LegacySessionWorkflow(ctx workflow.Context, in SessionInput) error {
	s := &legacySession{in: in, state: in.State}
	s.strictDecisions = workflow.GetVersion(ctx, changeAuthorizeSticky, workflow.DefaultVersion, 1) >= 1
	if err := s.registerHandlers(ctx); err != nil {
		return err
	}
	return s.run(ctx)
}

type legacySession struct {
	in    SessionInput
	state SessionState
	// handled counts the messages of this run, for the test-only
	// continue-as-new limit.
	handled int
	// strictDecisions: hand a sticky decision only to calls its author may
	// decide. Runs started before changeAuthorizeSticky replay without it.
	strictDecisions bool
}

func (s *legacySession) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QuerySession, func() (SessionView, error) {
		return SessionView{Session: s.in.Session, Sticky: s.state.Sticky, Waiting: s.state.Waiting,
			WaitingCount: len(s.state.Waiting), Quotas: s.state.Quotas, Ended: s.state.Ended}, nil
	}); err != nil {
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

func (s *legacySession) run(ctx workflow.Context) error {
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
			return workflow.NewContinueAsNewError(ctx, LegacySessionWorkflowType, next)
		}
	}
}

func (s *legacySession) continueAsNewNow(ctx workflow.Context) bool {
	if s.in.ContinueAsNewAfter > 0 && s.handled >= s.in.ContinueAsNewAfter {
		return true
	}
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// drain handles every message already delivered, registrations last so a
// sticky decision that arrived in the same batch already applies to them.
func (s *legacySession) drain(ctx workflow.Context, register, sticky, done, quota workflow.ReceiveChannel) {
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
func (s *legacySession) countQuota(ctx workflow.Context, q QuotaRequest) {
	s.handled++
	answer := s.state.takeQuota(q, workflow.Now(ctx))
	err := workflow.SignalExternalWorkflow(ctx, CallWorkflowID(q.CallID), "", SignalQuotaAnswer, answer).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Info("Could not reach call", "session", s.in.Session, "callID", q.CallID, "error", err)
	}
}

// register answers a call that needs a decision: with the sticky decision
// for its key if there is one, otherwise by parking it.
func (s *legacySession) register(ctx workflow.Context, r Registration) {
	s.handled++
	if s.state.Ended {
		s.send(ctx, r.CallID, &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session has ended", DecidedBy: "session", Channel: "session"})
		return
	}
	if i := s.stickyIndex(r.StickyKey); i >= 0 && s.mayHand(ctx, s.state.Sticky[i], r) {
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
func (s *legacySession) recordSticky(ctx workflow.Context, d StickyDecision) {
	s.handled++
	s.removeWaiting(d.FromCall)
	if i := s.stickyIndex(d.Key); i >= 0 {
		s.state.Sticky[i] = d
	} else {
		s.state.Sticky = append(s.state.Sticky, d)
	}
	var still []Registration
	for _, w := range s.state.Waiting {
		if w.StickyKey == d.Key && s.mayHand(ctx, d, w) {
			s.send(ctx, w.CallID, fromSticky(d))
		} else {
			still = append(still, w)
		}
	}
	s.state.Waiting = still
}

// mayHand reports whether the sticky decision d may decide the waiting or
// registering call r: only if its author could have decided r directly,
// with r's groups at this moment (escalation included) and r's requester.
// A call it may not decide keeps waiting for a person.
func (s *legacySession) mayHand(ctx workflow.Context, d StickyDecision, r Registration) bool {
	if !s.strictDecisions {
		return true
	}
	err := d.Decision.Approver().MayDecide(r.Requester, r.groupsAt(workflow.Now(ctx)))
	if err != nil {
		workflow.GetLogger(ctx).Info("Sticky decision does not cover call", "session", s.in.Session, "callID", r.CallID, "error", err)
	}
	return err == nil
}

func (s *legacySession) send(ctx workflow.Context, callID string, d *policy.Decision) {
	err := workflow.SignalExternalWorkflow(ctx, CallWorkflowID(callID), "", SignalSessionDecision, SessionDecision{Decision: d}).Get(ctx, nil)
	if err != nil {
		// The call finished meanwhile (its own timeout, or a decision).
		workflow.GetLogger(ctx).Info("Could not reach call", "session", s.in.Session, "callID", callID, "error", err)
	}
}

func (s *legacySession) removeWaiting(callID string) {
	s.state.Waiting = slices.DeleteFunc(s.state.Waiting, func(w Registration) bool { return w.CallID == callID })
}

func (s *legacySession) stickyIndex(key string) int { return s.state.stickyIndex(key) }

func (s *legacySession) validateRevoke(req RevokeRequest) error {
	return checkRevoke(s.in.Session, s.state.Sticky, req)
}

// revoke forgets a sticky decision: the next call of that key asks again.
func (s *legacySession) revoke(ctx workflow.Context, req RevokeRequest) (StickyDecision, error) {
	s.handled++
	i := s.stickyIndex(req.Key)
	removed := s.state.Sticky[i]
	s.state.Sticky = slices.Delete(s.state.Sticky, i, i+1)
	workflow.GetLogger(ctx).Info("Sticky decision revoked", "session", s.in.Session, "key", req.Key, "approver", req.By)
	return removed, nil
}

// validateEnd allows ending the session to whoever may act on every call
// waiting in it and every sticky decision it holds (an admin's "*" always
// may): ending denies the first and forgets the second.
func (s *legacySession) validateEnd(ctx workflow.Context, req EndRequest) error {
	if err := policy.CheckIdentity("who ends the session (by)", req.By); err != nil {
		return temporal.NewApplicationError("end session: "+err.Error(), ErrTypeInvalidDecision)
	}
	if s.state.Ended {
		return temporal.NewApplicationError("session "+s.in.Session+" has already ended", ErrTypeSessionEnded)
	}
	now := workflow.Now(ctx)
	for _, w := range s.state.Waiting {
		if err := req.approver().MayAct(w.groupsAt(now)); err != nil {
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

// end denies every waiting call and ends the session; it returns how many
// calls were denied.
func (s *legacySession) end(ctx workflow.Context, req EndRequest) (int, error) {
	s.handled++
	waiting := s.state.Waiting
	s.state.Waiting = nil
	s.state.Ended = true
	for _, w := range waiting {
		s.send(ctx, w.CallID, &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by " + req.By,
			DecidedBy: req.By, DeciderGroups: req.Groups, Channel: "session"})
	}
	return len(waiting), nil
}
