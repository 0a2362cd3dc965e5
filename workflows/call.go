package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// a is only used to name activity methods; workflow code never calls it.
var a *activities.Activities

// localOptions bound the short steps (policy, hooks, handler). They are
// retried by Temporal if the worker dies; their errors as data (a refusal)
// are results, not failures.
var localOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
}

// notifyOptions retry notifications for a while: a channel being down must
// not lose the notification, and never blocks the wait for a decision.
var notifyOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: time.Minute, MaximumAttempts: 20},
}

// ToolCallWorkflow judges one tool call, asks a person when the policy says
// so, runs the tool and returns a Result. It fails only on infrastructure
// errors: every outcome for the agent, denials included, is a Result.
func ToolCallWorkflow(ctx workflow.Context, in CallInput) (Result, error) {
	c := newCallRun(ctx, in)
	if v := workflow.GetVersion(ctx, changeCallV2, workflow.DefaultVersion, 2); v >= 1 {
		c.strictDecisions, c.batchedSession, c.tellAsync = true, true, true
		c.parkDirect = v >= 2
	} else {
		c.strictDecisions = workflow.GetVersion(ctx, changeAuthorizeSticky, workflow.DefaultVersion, 1) >= 1
		c.batchedSession = workflow.GetVersion(ctx, changeBatchedSession, workflow.DefaultVersion, 1) >= 1
	}
	if c.batchedSession {
		c.showIdentity(ctx)
	}
	if err := c.registerHandlers(ctx); err != nil {
		return Result{}, err
	}
	r, err := c.run(ctx)
	if ctx.Err() != nil && c.batchedSession {
		// Cancelled through Temporal (`temporal workflow cancel`): the
		// call still ends with a Result, and tells its session.
		ctx, _ = workflow.NewDisconnectedContext(ctx)
		if err != nil || !r.Status.Final() {
			r, err = c.cancelled(ctx, "an operator (a Temporal cancel request)"), nil
		}
	}
	c.awaitTold(ctx)
	c.handOverNotices(ctx)
	return r, err
}

// cancelled ends a call that was cancelled before its tool ran: a denial,
// and the session forgets it.
func (c *callRun) cancelled(ctx workflow.Context, by string) Result {
	if c.state.Decision == nil {
		c.apply(ctx, policy.Decision{Kind: policy.DeniedWithReason, Reason: "cancelled by " + by, DecidedBy: by, Channel: ChannelCancel})
	}
	if c.stickyKey != "" && !c.parkDirect {
		c.told = workflow.SignalExternalWorkflow(ctx, SessionWorkflowID(c.state.Call.Session), "", SignalDone, c.state.Call.ID)
	}
	return c.finish(ctx, StatusDenied, denialReason(c.state.Decision), nil)
}

// callRun is the state of one call. Handlers read and write it; the main
// flow in run moves it forward.
type callRun struct {
	state       CallState
	requestedAt time.Time
	eval        activities.Evaluation
	// registered: the session answered our registration (a decision, or
	// "parked, ask a person").
	registered bool
	// told is the signal to the session still in flight, if any.
	told workflow.Future
	// notices carries messages to the call's NoticesWorkflow, once one is
	// started; noticesBusy is set while they are being delivered.
	notices     workflow.Channel
	noticesBusy bool
	// sent and announcing are the notices and outcome announcements of
	// runs from before the NoticesWorkflow, which sent them themselves.
	sent       []sent
	announcing int
	// originalArgs and note are set when an approver edited the arguments.
	originalArgs json.RawMessage
	note         string
	// strictDecisions: every decision is held to the groups and requester
	// rules (sticky ones and signals too), edits are checked when they are
	// made, and decided_at is the workflow's clock. Runs started before
	// changeAuthorizeSticky replay without.
	strictDecisions bool
	// checkingEdit is set while edited arguments are checked by the
	// policy; other decisions wait. editEval is the policy's verdict on
	// edited arguments accepted at decision time.
	checkingEdit bool
	editEval     *activities.Evaluation
	// scheduleFrom is when the approval schedule (escalation) counts
	// from: the request (or, for the first registering calls, when the
	// call asked its session), as the session counts.
	scheduleFrom time.Time
	// batchedSession: the call talks to a ToolgateSession (registration
	// with deadline, re-registration, a bounded wait for its answer), its
	// deadline and escalation count from its request, a decide signal that
	// arrives early waits, and it shows its own search attributes. Runs
	// started before changeBatchedSession replay without.
	batchedSession bool
	// stickyKey is the key the call registered under.
	stickyKey string
	// tellAsync: the tool runs while the signal to the session travels
	// (changeTellSessionAsync, or changeCallV2).
	tellAsync bool
	// noReport: an agent-executed call that ends at its decision.
	noReport bool
	// parkDirect: the call waits without registering with its session,
	// which finds it through visibility (call-v2 version 2; see
	// ToolgateSession). It shows its sticky key, and reads the session's
	// memo once listings show it waiting.
	parkDirect bool
}

// changeBatchedSession is the workflow.GetVersion change ID of the calls
// that talk to the batched ToolgateSession.
const changeBatchedSession = "batched-session"

// changeCallV2 stands for changeAuthorizeSticky, changeBatchedSession and
// changeTellSessionAsync together: a run from it on records one version
// marker instead of three, and the SDK's TemporalChangeVersion search
// attribute is written once, not three times (once in the decision's
// workflow task, on the path of every decided call). Its version 2 parks
// calls without registering with the session (parkDirect).
const changeCallV2 = "call-v2"

// sessionAnswerTimeout bounds the wait for the session's answer to a
// registration: a slow or broken session never keeps a person from being
// asked.
const sessionAnswerTimeout = time.Minute

// showIdentity sets the call's identifying search attributes when whoever
// started it did not (e.g. `temporal workflow start`), so listings find it.
func (c *callRun) showIdentity(ctx workflow.Context) {
	sa := workflow.GetTypedSearchAttributes(ctx)
	if _, ok := sa.GetKeyword(AttrSession); ok {
		return
	}
	call := c.state.Call
	err := workflow.UpsertTypedSearchAttributes(ctx, AttrSession.ValueSet(call.Session), AttrTool.ValueSet(call.Tool),
		AttrRequester.ValueSet(call.Requester), AttrRequestedAt.ValueSet(c.requestedAt))
	if err != nil {
		workflow.GetLogger(ctx).Warn("Could not set the call's search attributes", "callID", call.ID, "error", err)
	}
}

func newCallRun(ctx workflow.Context, in CallInput) *callRun {
	return &callRun{
		state:       CallState{Call: in.Call, Status: StatusEvaluating},
		requestedAt: workflow.GetInfo(ctx).WorkflowStartTime,
		noReport:    in.NoReport && in.Call.Execution == policy.ExecutionAgent,
	}
}

func (c *callRun) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryCall, func() (CallState, error) { return c.state, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateDecide, c.decide,
		workflow.UpdateHandlerOptions{Validator: c.validateDecision}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel, c.cancel,
		workflow.UpdateHandlerOptions{Validator: c.validateCancel}); err != nil {
		return err
	}
	// The plain signal takes the same path, validated here because a
	// signal cannot be refused to its sender.
	decideCh := workflow.GetSignalChannel(ctx, SignalDecide)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var req DecideRequest
			decideCh.Receive(ctx, &req)
			if c.batchedSession {
				// A decision sent before the call waits for a person
				// (the session may still be answering) waits with it.
				_ = workflow.Await(ctx, func() bool { return c.state.Status != StatusEvaluating })
			}
			if err := c.validateSignalledDecision(ctx, req); err != nil {
				workflow.GetLogger(ctx).Warn("Ignored invalid decision signal", "callID", c.state.Call.ID, "error", err)
				continue
			}
			if _, err := c.decide(ctx, req); err != nil {
				workflow.GetLogger(ctx).Warn("Ignored refused decision signal", "callID", c.state.Call.ID, "error", err)
			}
		}
	})
	reregisterCh := workflow.GetSignalChannel(ctx, SignalReregister)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			reregisterCh.Receive(ctx, nil)
			if c.stickyKey != "" && !c.parkDirect && c.state.Decision == nil && !c.state.Status.Final() {
				if err := c.registerWithSession(ctx, c.stickyKey); err != nil {
					workflow.GetLogger(ctx).Warn("Could not register again", "callID", c.state.Call.ID, "error", err)
				}
			}
		}
	})
	sessionCh := workflow.GetSignalChannel(ctx, SignalSessionDecision)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var sd SessionDecision
			sessionCh.Receive(ctx, &sd)
			if c.parkDirect {
				c.takeSessionDecision(ctx, sd)
				continue
			}
			c.registered = true
			if sd.Decision != nil && c.state.Decision == nil && !c.state.Status.Final() {
				c.apply(ctx, *sd.Decision)
			}
		}
	})
	return nil
}

// validateSignalledDecision is validateDecision for the signal, which
// replays: runs started before the groups rule replay without it.
func (c *callRun) validateSignalledDecision(ctx workflow.Context, req DecideRequest) error {
	if !c.strictDecisions {
		return c.validateDecisionV0(req)
	}
	return c.validateDecision(ctx, req)
}

// validateDecision refuses, before anything reaches history, a decision
// that cannot apply to this call: another call's, a late one, a malformed
// one, one that claims a reserved channel, or one its author may not take
// (their groups do not cover the call's groups at this moment, escalation
// included, or they requested the call).
func (c *callRun) validateDecision(ctx workflow.Context, req DecideRequest) error {
	if err := c.validateDecisionV0(req); err != nil {
		return err
	}
	if err := req.Decision.ValidateIncoming(); err != nil {
		return temporal.NewApplicationError("invalid decision: "+err.Error(), ErrTypeInvalidDecision)
	}
	if len(req.Decision.EditedArgs) > policy.MaxArgsBytes {
		return temporal.NewApplicationError(fmt.Sprintf("invalid decision: edited arguments are %d bytes, over the %d-byte limit", len(req.Decision.EditedArgs), policy.MaxArgsBytes), ErrTypeInvalidDecision)
	}
	if c.checkingEdit {
		return temporal.NewApplicationError("call "+c.state.Call.ID+" is being decided: another approver's edited arguments are being checked", ErrTypeNotWaiting)
	}
	if err := req.Decision.Approver().MayDecide(c.state.Call.Requester, c.state.Request.Groups); err != nil {
		return refusalOf(req.Decision.DecidedBy, c.state.Call.ID, err)
	}
	return nil
}

// refusalOf turns a policy.Approver refusal into the update's error.
func refusalOf(by, callID string, err error) error {
	if errors.Is(err, policy.ErrSelfApproval) {
		return temporal.NewApplicationError(by+" requested call "+callID+" and cannot decide it", ErrTypeSelfApproval)
	}
	return temporal.NewApplicationError(fmt.Sprintf("%s may not decide call %s: %v", by, callID, err), ErrTypeNotAuthorized)
}

// validateDecisionV0 is the check of the first release, kept for the
// signals of runs started before the groups rule.
func (c *callRun) validateDecisionV0(req DecideRequest) error {
	if req.CallID != c.state.Call.ID {
		return temporal.NewApplicationError(fmt.Sprintf("decision names call %q but this is call %q", req.CallID, c.state.Call.ID), ErrTypeInvalidDecision)
	}
	d := req.Decision
	if c.state.Decision != nil {
		return temporal.NewApplicationError("call "+c.state.Call.ID+" was already decided: "+describeDecision(c.state.Decision), ErrTypeAlreadyDecided)
	}
	if c.state.Status == StatusTimedOut {
		return temporal.NewApplicationError("call "+c.state.Call.ID+" timed out: nobody decided it in time", ErrTypeAlreadyDecided)
	}
	if c.state.Status != StatusPending {
		return temporal.NewApplicationError(fmt.Sprintf("call %s is not waiting for a decision (status %s)", c.state.Call.ID, c.state.Status), ErrTypeNotWaiting)
	}
	if err := d.Validate(); err != nil {
		return temporal.NewApplicationError("invalid decision: "+err.Error(), ErrTypeInvalidDecision)
	}
	if c.state.Call.Requester != "" && d.DecidedBy == c.state.Call.Requester {
		return temporal.NewApplicationError(d.DecidedBy+" requested call "+c.state.Call.ID+" and cannot decide it", ErrTypeSelfApproval)
	}
	return nil
}

// validateCancel lets the call's requester, or an approver who may act on
// its groups, cancel it while it waits for a person.
func (c *callRun) validateCancel(req CancelRequest) error {
	if req.CallID != c.state.Call.ID {
		return temporal.NewApplicationError(fmt.Sprintf("cancel names call %q but this is call %q", req.CallID, c.state.Call.ID), ErrTypeInvalidDecision)
	}
	if err := policy.CheckIdentity("who cancels (by)", req.By); err != nil {
		return temporal.NewApplicationError("cancel: "+err.Error(), ErrTypeInvalidDecision)
	}
	if c.state.Decision != nil {
		return temporal.NewApplicationError("call "+c.state.Call.ID+" was already decided: "+describeDecision(c.state.Decision), ErrTypeAlreadyDecided)
	}
	if c.state.Status != StatusPending {
		return temporal.NewApplicationError(fmt.Sprintf("call %s cannot be cancelled: only a call waiting for a person can (status %s)", c.state.Call.ID, c.state.Status), ErrTypeNotWaiting)
	}
	if req.By == c.state.Call.Requester {
		return nil
	}
	if err := (policy.Approver{Name: req.By, Groups: req.Groups}).MayAct(c.state.Request.Groups); err != nil {
		return temporal.NewApplicationError(fmt.Sprintf("%s may not cancel call %s: %v", req.By, c.state.Call.ID, err), ErrTypeNotAuthorized)
	}
	return nil
}

// cancel denies the waiting call with "cancelled by <who>".
func (c *callRun) cancel(ctx workflow.Context, req CancelRequest) (policy.Decision, error) {
	c.apply(ctx, policy.Decision{Kind: policy.DeniedWithReason, Reason: "cancelled by " + req.By,
		DecidedBy: req.By, DeciderGroups: req.Groups, Channel: ChannelCancel, DecidedAt: workflow.Now(ctx)})
	return *c.state.Decision, nil
}

// decide applies a validated decision and returns it as recorded. Edited
// arguments are checked by the policy first: a refusal goes back to the
// approver and the call keeps waiting.
func (c *callRun) decide(ctx workflow.Context, req DecideRequest) (policy.Decision, error) {
	d := req.Decision
	if c.strictDecisions {
		d.DecidedAt = workflow.Now(ctx) // never taken from the request
		if d.Kind == policy.ApprovedWithEdits {
			if err := c.checkEditAtDecision(ctx, d); err != nil {
				return policy.Decision{}, err
			}
		}
	}
	c.apply(ctx, d)
	return *c.state.Decision, nil
}

// checkEditAtDecision runs the policy on edited arguments while the
// approver waits for the answer. The edit is refused when the tool's
// schema or the policy refuses it, or when the policy would ask groups
// the approver is not in (an edit must not move a call to another group's
// rule). On success the verdict is kept for the tool's run.
func (c *callRun) checkEditAtDecision(ctx workflow.Context, d policy.Decision) error {
	c.checkingEdit = true
	defer func() { c.checkingEdit = false }()
	edited := c.state.Call
	edited.Args = d.EditedArgs
	var ev activities.Evaluation
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	if err := workflow.ExecuteLocalActivity(lctx, a.Evaluate, activities.EvaluateInput{Call: edited}).Get(ctx, &ev); err != nil {
		return temporal.NewApplicationError("edited arguments could not be checked: "+err.Error(), ErrTypeInvalidEdit)
	}
	refuse := func(why string) error {
		return temporal.NewApplicationError("edited arguments refused: "+why+"; the call still waits for a decision", ErrTypeInvalidEdit)
	}
	switch {
	case ev.Problem != "":
		return refuse(ev.Problem)
	case ev.Denied:
		return refuse("the policy denies them: " + ev.Reason)
	case ev.Ask != nil:
		if err := d.Approver().MayDecide(c.state.Call.Requester, ev.Ask.Groups); err != nil {
			return refuse(fmt.Sprintf("with them the call is asked of %v: %v", ev.Ask.Groups, err))
		}
	}
	if c.state.Decision != nil || c.state.Status != StatusPending {
		return temporal.NewApplicationError("call "+c.state.Call.ID+" stopped waiting while the edit was checked (status "+string(c.state.Status)+")", ErrTypeNotWaiting)
	}
	c.editEval = &ev
	return nil
}

func (c *callRun) apply(ctx workflow.Context, d policy.Decision) {
	if d.DecidedAt.IsZero() {
		d.DecidedAt = workflow.Now(ctx)
	}
	c.state.Decision = &d
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"decision": d.Kind.String(), "channel": d.Channel}).
		Counter(MetricDecisions).Inc(1)
}

func (c *callRun) run(ctx workflow.Context) (Result, error) {
	call := c.state.Call
	if err := c.evaluate(ctx, call, true); err != nil {
		return Result{}, err
	}
	switch {
	case c.eval.Problem != "":
		r := c.finish(ctx, StatusError, c.eval.Problem, nil)
		r.InvalidRequest = c.eval.InvalidRequest
		return r, nil
	case c.eval.Denied:
		d := policy.Decision{Kind: policy.DeniedWithReason, Reason: c.eval.Reason, DecidedBy: "policy", Channel: "policy"}
		c.apply(ctx, d)
		return c.finish(ctx, StatusDenied, c.eval.Reason, nil), nil
	case c.eval.Ask == nil:
		c.apply(ctx, policy.Decision{Kind: policy.Approved, DecidedBy: "policy", Channel: "policy"})
	default:
		if err := c.askForDecision(ctx, *c.eval.Ask); err != nil {
			return Result{}, err
		}
		if c.state.Status == StatusTimedOut {
			return c.finish(ctx, StatusTimedOut, c.timeoutReason(), nil), nil
		}
		if !c.state.Decision.Kind.Approves() {
			return c.finish(ctx, StatusDenied, denialReason(c.state.Decision), nil), nil
		}
		if c.state.Decision.Kind == policy.ApprovedWithEdits {
			if r, stop := c.useEditedArgs(ctx); stop {
				return r, nil
			}
		}
	}
	r, err := c.execute(ctx)
	if err == nil {
		c.announce(ctx, activities.Outcome{Event: activities.EventExecuted, Status: string(r.Status), At: r.FinishedAt, Reason: r.Reason})
	}
	return r, err
}

func (c *callRun) evaluate(ctx workflow.Context, call policy.Call, lookupSticky bool) error {
	in := activities.EvaluateInput{Call: call}
	if lookupSticky {
		in.Session = c.sessionLookup()
	}
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	if err := workflow.ExecuteLocalActivity(lctx, a.Evaluate, in).Get(ctx, &c.eval); err != nil {
		return fmt.Errorf("evaluate policy: %w", err)
	}
	return nil
}

// askForDecision gets the call decided: by a sticky decision of the
// session, by the coded handler, or by a person before the deadline. It
// returns with a Decision set or the status timed_out.
func (c *callRun) askForDecision(ctx workflow.Context, req policy.ApprovalRequest) error {
	c.state.Request = &req
	if c.eval.Sticky != nil && c.stickyCovers(*c.eval.Sticky) { // found at evaluation: the session is not asked
		c.apply(ctx, *c.eval.Sticky)
		return nil
	}
	key := req.StickyKeyFor(c.state.Call)
	c.stickyKey = key
	timeout := req.EffectiveTimeout()
	if c.parkDirect {
		c.scheduleFrom = c.requestedAt
		if c.eval.SessionEnded {
			c.apply(ctx, sessionEndedDenial)
			return nil
		}
	} else if err := c.awaitRegistration(ctx, key, timeout); err != nil || c.state.Decision != nil {
		return err // a sticky decision: nobody is asked
	}
	if c.eval.HasHandler {
		var d *policy.Decision
		lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
		in := activities.AskHandlerInput{Call: c.state.Call, Request: req}
		if err := workflow.ExecuteLocalActivity(lctx, a.AskHandler, in).Get(ctx, &d); err != nil {
			return fmt.Errorf("approval handler: %w", err)
		}
		if d != nil && c.state.Decision == nil {
			c.apply(ctx, *d)
		}
	}
	if c.state.Decision == nil {
		c.waitForPerson(ctx, req, timeout)
	}
	if err := ctx.Err(); err != nil && c.batchedSession {
		return err // cancelled while it waited
	}
	c.tellSession(ctx, key)
	return nil
}

// awaitRegistration parks the call in its session and waits for the
// session's answer: a sticky decision, or "ask a person" (calls before
// parkDirect).
func (c *callRun) awaitRegistration(ctx workflow.Context, key string, timeout time.Duration) error {
	if err := c.registerWithSession(ctx, key); err != nil {
		return err
	}
	answerTimeout := timeout
	if c.batchedSession {
		answerTimeout = sessionAnswerTimeout
	}
	_, err := awaitWithTimeout(ctx, answerTimeout, func() bool { return c.registered })
	return err
}

// sessionEndedDenial answers a call that would wait in a session that has
// ended.
var sessionEndedDenial = policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session has ended", DecidedBy: "session", Channel: "session"}

// hearSession reads what the session says to the call once listings show
// it waiting (so a session that lists its waiting calls after writing its
// news cannot miss it), and applies it: a sticky decision of the call's key
// that may decide it, or the session's end. It waits for that at most
// sessionAnswerTimeout before a person is asked; a person who decides
// meanwhile wins.
func (c *callRun) hearSession(ctx workflow.Context) {
	info := workflow.GetInfo(ctx)
	in := activities.ListedInput{
		Listed:  fmt.Sprintf("WorkflowId = '%s' AND RunId = '%s'", quoteQuery(info.WorkflowExecution.ID), quoteQuery(info.WorkflowExecution.RunID)),
		Session: c.sessionLookup(),
		Key:     c.stickyKey,
	}
	f := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, listedOptions), a.AwaitListed, in)
	heard := false
	workflow.Go(ctx, func(ctx workflow.Context) {
		var word activities.SessionWord
		if err := f.Get(ctx, &word); err != nil {
			workflow.GetLogger(ctx).Warn("Could not hear from the session", "callID", c.state.Call.ID, "error", err)
		}
		heard = true
		switch {
		case word.End != nil:
			c.takeSessionDecision(ctx, SessionDecision{Decision: word.End, Ended: true})
		case word.Sticky != nil:
			c.takeSessionDecision(ctx, SessionDecision{Decision: word.Sticky, Key: c.stickyKey})
		}
	})
	_, _ = awaitWithTimeout(ctx, sessionAnswerTimeout, func() bool { return heard || c.state.Decision != nil })
}

// listedOptions bound AwaitListed: visibility follows in well under a
// minute even under a burst.
var listedOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 2 * time.Minute,
	HeartbeatTimeout:    30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
}

// takeSessionDecision applies what the session tells a waiting call: its
// end, if whoever ended it may act on the call's groups at this moment (a
// call that began to wait while the session was being ended was not in
// the ender's check), or a sticky decision of the call's key whose author
// could have decided the call directly (groups at this moment, escalation
// included, and never the call's requester). Anything else leaves it
// waiting for a person.
func (c *callRun) takeSessionDecision(ctx workflow.Context, sd SessionDecision) {
	if sd.Decision == nil || c.state.Decision != nil || c.state.Status != StatusPending {
		return
	}
	var err error
	switch {
	case sd.Ended:
		err = sd.Decision.Approver().MayAct(c.state.Request.Groups)
	case sd.Key != c.stickyKey:
		return // another tool's
	default:
		err = sd.Decision.Approver().MayDecide(c.state.Call.Requester, c.state.Request.Groups)
	}
	if err != nil {
		workflow.GetLogger(ctx).Info("The session's decision does not cover the call; it waits for a person",
			"callID", c.state.Call.ID, "by", sd.Decision.DecidedBy, "reason", err)
		return
	}
	c.apply(ctx, *sd.Decision)
}

// sessionLookup names where the call's session shows its sticky decisions
// and its end.
func (c *callRun) sessionLookup() activities.StickyLookup {
	return activities.StickyLookup{WorkflowID: SessionWorkflowID(c.state.Call.Session), Query: QuerySticky, Memo: MemoSticky, Ended: MemoEnded}
}

func (c *callRun) waitForPerson(ctx workflow.Context, req policy.ApprovalRequest, timeout time.Duration) {
	now := workflow.Now(ctx)
	c.state.Status = StatusPending
	c.state.WaitingSince = now
	c.state.Deadline = now.Add(timeout)
	switch {
	case c.parkDirect:
		c.state.Deadline = c.requestedAt.Add(timeout)
		c.upsertStatus(ctx, StatusPending, AttrGroups.ValueSet(groupsShown(req.Groups)), AttrStickyKey.ValueSet(c.stickyKey))
	case c.batchedSession:
		c.state.Deadline = c.requestedAt.Add(timeout) // counts from the request
		c.upsertStatus(ctx, StatusPending, AttrGroups.ValueSet(groupsShown(req.Groups)))
	default:
		c.upsertStatus(ctx, StatusPending)
	}
	c.upsertWaitingMemo(ctx, req)
	if c.parkDirect {
		c.hearSession(ctx) // before anyone is notified
	}
	decided := c.state.Decision != nil
	if !decided && ctx.Err() == nil {
		c.notify(ctx, activities.NoticeWaiting, req.Groups)
		decided = c.waitWithSchedule(ctx, req, c.state.Deadline)
	}
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"tool": c.state.Call.Tool}).
		Timer(MetricApprovalWait).Record(workflow.Now(ctx).Sub(now))
	if ctx.Err() != nil && c.batchedSession && !decided {
		return // cancelled: not a timeout
	}
	switch {
	case decided:
	case req.OnTimeout == policy.TimeoutApprove:
		c.apply(ctx, policy.Decision{Kind: policy.Approved, DecidedBy: "timeout", Channel: "timeout",
			Comment: "nobody answered within " + timeout.String() + "; the rule approves on timeout"})
	default:
		c.state.Status = StatusTimedOut
		c.announce(ctx, activities.Outcome{Event: activities.EventTimedOut, Status: string(StatusTimedOut), At: workflow.Now(ctx), Reason: c.timeoutReason(),
			Decision: "timed_out", DecidedBy: "timeout", Channel: "timeout"})
		return
	}
	// The decided event says what happens next: the tool runs, or not.
	next := StatusRunning
	switch {
	case !c.state.Decision.Kind.Approves():
		next = StatusDenied
	case c.state.Call.Execution == policy.ExecutionAgent:
		next = StatusApproved
	}
	c.announce(ctx, activities.Outcome{Event: activities.EventDecided, Status: string(next), At: workflow.Now(ctx), Reason: c.state.Decision.Reason})
}

func (c *callRun) timeoutReason() string {
	return fmt.Sprintf("no approver answered within %s; the call was denied", c.state.Request.EffectiveTimeout())
}

// groupsShown is the ToolgateGroups value of a call asked of groups: "*"
// when any approver may decide it.
func groupsShown(groups []string) []string {
	if len(groups) == 0 {
		return []string{"*"}
	}
	return groups
}

// stickyCovers reports whether a sticky decision found at evaluation may
// decide this call: its author could have decided it directly.
func (c *callRun) stickyCovers(d policy.Decision) bool {
	return !c.strictDecisions || d.Approver().MayDecide(c.state.Call.Requester, c.state.Request.Groups) == nil
}

// registerWithSession parks the call in its session. The session answers
// with SignalSessionDecision.
func (c *callRun) registerWithSession(ctx workflow.Context, key string) error {
	now := workflow.Now(ctx)
	reg := Registration{CallID: c.state.Call.ID, Tool: c.state.Call.Tool, StickyKey: key, At: now}
	if c.strictDecisions {
		req := c.state.Request
		base := now
		if c.batchedSession {
			base = c.requestedAt
			reg.RequestedAt, reg.Timeout = c.requestedAt, req.EffectiveTimeout()
		}
		reg.Requester, reg.Groups = c.state.Call.Requester, req.Groups
		if req.EscalateAfter > 0 && len(req.EscalateTo) > 0 {
			reg.EscalateTo, reg.EscalateAt, reg.EscalateAfter = req.EscalateTo, base.Add(req.EscalateAfter), req.EscalateAfter
		}
		if c.scheduleFrom.IsZero() {
			c.scheduleFrom = base
		}
	}
	return c.signalSession(ctx, SignalRegister, reg)
}

// signalSession signals the call's session. If the session does not exist
// yet, a local activity creates it atomically with the signal
// (signal-with-start), so many first calls of a session cannot race.
func (c *callRun) signalSession(ctx workflow.Context, name string, payload any) error {
	sessionID := SessionWorkflowID(c.state.Call.Session)
	if err := workflow.SignalExternalWorkflow(ctx, sessionID, "", name, payload).Get(ctx, nil); err == nil {
		return nil
	}
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	start := activities.SignalWithStartInput{
		WorkflowID:   sessionID,
		WorkflowType: SessionWorkflowType,
		TaskQueue:    workflow.GetInfo(ctx).TaskQueueName,
		SignalName:   name,
		Signal:       payload,
		StartInput:   SessionInput{Session: c.state.Call.Session},
	}
	if err := workflow.ExecuteLocalActivity(lctx, a.SignalWithStart, start).Get(ctx, nil); err != nil {
		return fmt.Errorf("signal session %s: %w", c.state.Call.Session, err)
	}
	return nil
}

// quotaAnswerTimeout bounds the wait for the session's count; the session
// answers at once unless it is broken.
const quotaAnswerTimeout = time.Minute

// takeQuota asks the session to count this run under the tool's quota and
// returns the refusal, or "" when the call may run.
func (c *callRun) takeQuota(ctx workflow.Context) (string, error) {
	q := *c.eval.Quota
	if err := c.signalSession(ctx, SignalQuota, QuotaRequest{CallID: c.state.Call.ID, Tool: c.state.Call.Tool, Quota: q}); err != nil {
		return "", err
	}
	answers := workflow.GetSignalChannel(ctx, SignalQuotaAnswer)
	if ok, err := awaitWithTimeout(ctx, quotaAnswerTimeout, func() bool { return answers.Len() > 0 }); err != nil || !ok {
		return "quota " + q.Name + " could not be checked: the session did not answer", err
	}
	var ans QuotaAnswer
	answers.ReceiveAsync(&ans)
	return ans.Refusal, nil
}

// tellSession reports how the call ended its wait: a new sticky decision
// (which the session hands to the other waiting calls), or just that the
// call no longer waits.
func (c *callRun) tellSession(ctx workflow.Context, key string) {
	sessionID := SessionWorkflowID(c.state.Call.Session)
	d := c.state.Decision
	var f workflow.Future
	switch {
	case d != nil && d.Channel == "session":
		return // the session decided it and already forgot the call
	case c.parkDirect && d != nil && d.Kind.Sticky():
		// The session may not run yet (no call registers any more):
		// signal-with-start, while the tool runs.
		sticky := StickyDecision{Key: key, Tool: c.state.Call.Tool, Decision: *d, FromCall: c.state.Call.ID, Groups: c.state.Request.Groups}
		told, settle := workflow.NewFuture(ctx)
		workflow.Go(ctx, func(ctx workflow.Context) { settle.Set(nil, c.signalSession(ctx, SignalSticky, sticky)) })
		c.told = told
		return
	case c.parkDirect:
		return // the session does not know the call
	case d != nil && d.Kind.Sticky():
		sticky := StickyDecision{Key: key, Tool: c.state.Call.Tool, Decision: *d, FromCall: c.state.Call.ID}
		if c.strictDecisions {
			sticky.Groups = c.state.Request.Groups
		}
		f = workflow.SignalExternalWorkflow(ctx, sessionID, "", SignalSticky, sticky)
	default:
		f = workflow.SignalExternalWorkflow(ctx, sessionID, "", SignalDone, c.state.Call.ID)
	}
	c.told = f
	// Version 1 lets the tool run while the signal travels; the first
	// histories waited for it here.
	if !c.tellAsync && workflow.GetVersion(ctx, changeTellSessionAsync, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		c.awaitTold(ctx)
	}
}

// changeTellSessionAsync is the workflow.GetVersion change ID of telling
// the session without waiting for the signal's delivery.
const changeTellSessionAsync = "tell-session-async"

// awaitTold waits for the signal to the session, if one is in flight.
func (c *callRun) awaitTold(ctx workflow.Context) {
	if c.told == nil {
		return
	}
	if err := c.told.Get(ctx, nil); err != nil {
		// The session ended meanwhile; the call's own outcome stands.
		workflow.GetLogger(ctx).Warn("Could not tell the session", "session", c.state.Call.Session, "callID", c.state.Call.ID, "error", err)
	}
	c.told = nil
}

// useEditedArgs switches the call to arguments an approver edited. An edit
// taken through the decide update or signal was checked when it was made;
// one from the coded handler (or a run from before that check) is checked
// now: the person has seen them, so "ask" counts as approved; a refusal or
// a problem stops the call.
func (c *callRun) useEditedArgs(ctx workflow.Context) (Result, bool) {
	c.originalArgs = c.state.Call.Args
	c.state.Call.Args = c.state.Decision.EditedArgs
	c.note = fmt.Sprintf("%s edited the arguments before approving: %s became %s",
		c.state.Decision.DecidedBy, compact(c.originalArgs), compact(c.state.Call.Args))
	if c.editEval != nil {
		c.eval = *c.editEval
		return Result{}, false
	}
	if err := c.evaluate(ctx, c.state.Call, false); err != nil {
		return c.finish(ctx, StatusError, err.Error(), nil), true
	}
	switch {
	case c.eval.Problem != "":
		return c.finish(ctx, StatusError, "edited arguments refused: "+c.eval.Problem, nil), true
	case c.eval.Denied:
		return c.finish(ctx, StatusDenied, "edited arguments refused by policy: "+c.eval.Reason, nil), true
	}
	return Result{}, false
}

// execute runs BeforeCall, the tool, the output middleware and AfterCall.
func (c *callRun) execute(ctx workflow.Context) (Result, error) {
	c.state.Status = StatusRunning
	if c.batchedSession && c.state.Request != nil {
		c.upsertStatus(ctx, StatusRunning) // visible as soon as the decision lets it run
	}
	call := c.state.Call
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	if c.eval.Quota != nil {
		refusal, err := c.takeQuota(ctx)
		if err != nil {
			return Result{}, err
		}
		if refusal != "" {
			return c.finish(ctx, StatusError, refusal, nil), nil
		}
	}

	var before activities.HookOutcome
	if err := workflow.ExecuteLocalActivity(lctx, a.BeforeCall, call).Get(ctx, &before); err != nil {
		return Result{}, fmt.Errorf("before-call hook: %w", err)
	}
	if before.Refusal != "" {
		return c.finish(ctx, StatusError, "refused before the call: "+before.Refusal, nil), nil
	}

	var output json.RawMessage
	var err error
	if call.Execution == policy.ExecutionAgent {
		if c.noReport {
			c.note = joinNotes(c.note, "the agent runs the tool itself and does not report how it went")
			return c.finish(ctx, StatusOK, "", nil), nil
		}
		err = c.awaitReport(ctx, &output)
	} else {
		err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, toolActivityOptions(c.eval)), a.RunTool, call).Get(ctx, &output)
	}
	if err != nil {
		return c.toolFailed(ctx, err), nil
	}

	var after activities.AfterCallOutcome
	in := activities.AfterCallInput{Call: call, Output: output}
	if err := workflow.ExecuteLocalActivity(lctx, a.AfterCall, in).Get(ctx, &after); err != nil {
		return Result{}, fmt.Errorf("after-call hook: %w", err)
	}
	if after.Refusal != "" {
		r := c.finish(ctx, StatusError, "refused after the call: "+after.Refusal, nil)
		r.Redactions = after.Redactions
		return r, nil
	}
	r := c.finish(ctx, StatusOK, "", after.Output)
	r.Redactions = after.Redactions
	return r, nil
}

// awaitReport is the tool step of an agent-executed call: the call shows
// status approved, and an activity waits for the agent's report, which
// completes it (asynchronous completion by workflow ID and
// ReportActivityID). One attempt: Temporal cannot retry the agent's run.
func (c *callRun) awaitReport(ctx workflow.Context, output *json.RawMessage) error {
	c.state.Status = StatusApproved
	c.upsertStatus(ctx, StatusApproved)
	opts := workflow.ActivityOptions{
		ActivityID:          ReportActivityID,
		StartToCloseTimeout: c.eval.ReportTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), a.AwaitReport, c.state.Call).Get(ctx, output)
}

// toolFailed ends a call whose tool step failed: unknown when the tool may
// have had its effect, else error.
func (c *callRun) toolFailed(ctx workflow.Context, err error) Result {
	const checkFirst = ". Do not assume either; check its effects before asking to run it again"
	agent := c.state.Call.Execution == policy.ExecutionAgent
	var appErr *temporal.ApplicationError
	isApp := errors.As(err, &appErr)
	switch {
	case ctx.Err() != nil && (c.batchedSession || agent):
		return c.finish(ctx, StatusUnknown, "the call was cancelled while the tool ran: it may or may not have run"+checkFirst, nil)
	case agent && isApp && appErr.Type() == activities.ErrTypeAgentReported:
		return c.finish(ctx, StatusError, "the agent reported that the tool failed: "+appErr.Message(), nil)
	case agent:
		var timeoutErr *temporal.TimeoutError
		if errors.As(err, &timeoutErr) {
			return c.finish(ctx, StatusUnknown, fmt.Sprintf("the agent did not say whether it ran the tool: no report within %s", c.eval.ReportTimeout), nil)
		}
		return c.finish(ctx, StatusUnknown, "the agent's report was lost ("+rootCause(err)+"): the tool may or may not have run"+checkFirst, nil)
	case isApp && appErr.Type() == activities.ErrTypeOutcomeUnknown:
		return c.finish(ctx, StatusUnknown, "the tool may or may not have run: "+appErr.Message()+checkFirst, nil)
	}
	if lost, ok := lostAttempt(err); ok && !c.eval.ToolOptions.Idempotent {
		return c.finish(ctx, StatusUnknown, "the tool may or may not have run: "+lost+checkFirst, nil)
	}
	return c.finish(ctx, StatusError, "tool failed: "+rootCause(err), nil)
}

// lostAttemptRetries is how many attempts a tool that is not idempotent
// gets: RunTool's start mark lets an attempt lost before the tool began be
// retried, and ends the call unknown once an attempt that began is lost.
const lostAttemptRetries = 3

func toolActivityOptions(ev activities.Evaluation) workflow.ActivityOptions {
	o := ev.ToolOptions
	if !o.Idempotent {
		o.Retry.MaxAttempts = lostAttemptRetries
	}
	return workflow.ActivityOptions{
		StartToCloseTimeout: o.Timeout,
		HeartbeatTimeout:    o.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    o.Retry.InitialInterval,
			BackoffCoefficient: 2,
			MaximumInterval:    o.Retry.MaxInterval,
			MaximumAttempts:    o.Retry.MaxAttempts,
		},
	}
}

// finish records the outcome and builds the Result.
func (c *callRun) finish(ctx workflow.Context, status Status, reason string, output json.RawMessage) Result {
	call := c.state.Call
	r := Result{
		CallID: call.ID, Session: call.Session, Tool: call.Tool, Requester: call.Requester,
		Status: status, Execution: call.Execution, Output: output, Reason: reason, Note: c.note,
		Args: call.Args, OriginalArgs: c.originalArgs, Notices: c.state.Notices,
		Rule: c.eval.Rule, PolicyVersion: c.eval.PolicyVersion,
		RequestedAt: c.requestedAt, FinishedAt: workflow.Now(ctx),
	}
	if d := c.state.Decision; d != nil {
		r.Decision, r.DecidedBy, r.Channel, r.DecidedAt, r.Comment = d.Kind.String(), d.DecidedBy, d.Channel, d.DecidedAt, d.Comment
	}
	if status == StatusTimedOut {
		r.Decision, r.DecidedBy, r.Channel = "timed_out", "timeout", "timeout"
	}
	if len(r.Args)+len(r.OriginalArgs)+len(r.Output) > maxResultBytes {
		// Edited arguments, the agent's and the output could pass
		// Temporal's 2 MiB payload limit together; the agent's own
		// arguments stay in the call's history.
		r.OriginalArgs = nil
		r.Note += " (the original arguments are left out of this result for size; the call's history has them)"
	}
	r.ModelMessage = modelMessage(r, c.noReport, c.originalArgs != nil)
	c.state.Status = status
	c.state.Result = &r
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"tool": call.Tool, "status": string(status)}).
		Counter(MetricCallsFinished).Inc(1)
	c.upsertStatus(ctx, status, AttrDecidedBy.ValueSet(r.DecidedBy), AttrChannel.ValueSet(r.Channel))
	return r
}

// maxResultBytes bounds a Result's arguments and output together, under
// Temporal's 2 MiB payload limit: arguments are capped at
// policy.MaxArgsBytes and outputs at activities.DefaultMaxOutputBytes.
const maxResultBytes = 1536 << 10

// denialReason is what the model reads when a person refused.
func denialReason(d *policy.Decision) string {
	if d.Reason != "" {
		return d.Reason
	}
	if d.Kind == policy.DeniedAlways {
		return "denied by " + d.DecidedBy + " for the rest of the session"
	}
	return "denied by " + d.DecidedBy
}

func (c *callRun) upsertStatus(ctx workflow.Context, s Status, more ...temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, append(more, AttrStatus.ValueSet(string(s)))...); err != nil {
		workflow.GetLogger(ctx).Warn("Could not update the status search attribute", "callID", c.state.Call.ID, "error", err)
	}
}

// Memo keys of a waiting call, read by "pending" listings without a query
// to each workflow.
const (
	MemoMessage  = "message"
	MemoArgs     = "args"
	MemoRule     = "rule"
	MemoGroups   = "groups"
	MemoDeadline = "deadline"
)

// maxMemoArgs abridges arguments in the memo; the full ones are in the
// call's state.
const maxMemoArgs = 512

func (c *callRun) upsertWaitingMemo(ctx workflow.Context, req policy.ApprovalRequest) {
	args := compact(c.state.Call.Args)
	if len(args) > maxMemoArgs {
		args = args[:maxMemoArgs] + "…"
	}
	memo := map[string]any{
		MemoMessage: req.Message, MemoArgs: args, MemoRule: req.Rule,
		MemoGroups: req.Groups, MemoDeadline: c.state.Deadline,
	}
	if err := workflow.UpsertMemo(ctx, memo); err != nil {
		workflow.GetLogger(ctx).Warn("Could not update the memo", "callID", c.state.Call.ID, "error", err)
	}
}

// compact renders JSON on one line for messages.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// lostAttempt says how an attempt was lost when Temporal stopped waiting
// for it (no heartbeat: the worker died; past its start-to-close timeout)
// rather than hearing the tool fail: the tool may have had its effect.
func lostAttempt(err error) (string, bool) {
	var timeoutErr *temporal.TimeoutError
	if !errors.As(err, &timeoutErr) {
		return "", false
	}
	switch timeoutErr.TimeoutType() {
	case enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return "its worker stopped answering while it ran (heartbeat timeout)", true
	case enumspb.TIMEOUT_TYPE_START_TO_CLOSE:
		return "it did not finish within its timeout", true
	}
	return "", false
}

// rootCause unwraps Temporal's activity error to the tool's own message.
func rootCause(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return "timed out (" + timeoutErr.TimeoutType().String() + ")"
	}
	return err.Error()
}

// awaitWithTimeout is workflow.AwaitWithTimeout with a timer that is
// cancelled when the condition is met. (SDK v1.50 leaves that timer pending
// unless an SDK flag is set, so every wait would leave a timer behind to
// wake the workflow later for nothing.) It returns ctx's error when ctx is
// cancelled first.
func awaitWithTimeout(ctx workflow.Context, d time.Duration, condition func() bool) (bool, error) {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timer := workflow.NewTimer(tctx, d)
	if err := workflow.Await(ctx, func() bool { return condition() || timer.IsReady() }); err != nil {
		return false, err
	}
	// A cancelled ctx cancels the timer, whose future is then ready: that
	// is the cancellation, not the timeout (callers that loop until a
	// deadline would otherwise spin).
	if err := ctx.Err(); err != nil && !condition() {
		return false, err
	}
	return condition(), nil
}
