package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// The decisions a person (or an integration) sends to a waiting call: the
// decide update, the same request as a signal, and cancel. Each is held,
// inside the workflow, to the rules of who may decide: the approver's
// groups at this moment (escalation included), never the call's own
// requester.

func (c *callRun) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryCall, func() (CallState, error) { return c.state, nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryCheckDecision, func(req DecideRequest) (DecisionCheck, error) {
		// Changes nothing, so it needs no statement: the update checks it.
		return checkOf(c.checkDecisionRequest(ctx, req)), nil
	}); err != nil {
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
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateClaim, c.claim,
		workflow.UpdateHandlerOptions{Validator: c.validateClaim}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateFirstAnswer, c.firstAnswer,
		workflow.UpdateHandlerOptions{Validator: c.validateFirstAnswer}); err != nil {
		return err
	}
	// The plain signal takes the same path, validated here because a
	// signal cannot be refused to its sender.
	decideCh := workflow.GetSignalChannel(ctx, SignalDecide)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var req DecideRequest
			decideCh.Receive(ctx, &req)
			// A decision sent before the call waits for a person waits
			// with it.
			_ = workflow.Await(ctx, func() bool { return c.state.Status != StatusEvaluating })
			if err := c.checkDecisionRequest(ctx, req); err != nil {
				workflow.GetLogger(ctx).Warn("Ignored invalid decision signal", "callID", c.state.Call.ID, "error", err)
				continue
			}
			if c.version(ctx, versionStatements, 1) >= 1 {
				want := callWant(ctx, req.Decision.Statement, policy.DecisionStatement(c.submitted(), req.Decision, c.stickyKey), false) //workflowcheck:ignore
				if err := checkRecorded(ctx, c.doors, "decide signal", c.state.Call.ID, req.Decision.Statement, want, workflow.Now(ctx)); err != nil {
					continue // logged and counted
				}
			}
			if _, err := c.decide(ctx, req); err != nil {
				workflow.GetLogger(ctx).Warn("Ignored refused decision signal", "callID", c.state.Call.ID, "error", err)
			}
		}
	})
	roomCh := workflow.GetSignalChannel(ctx, SignalSessionDecision)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var sd SessionDecision
			roomCh.Receive(ctx, &sd)
			if c.takeSessionDecision(ctx, sd) {
				c.joined = false // the room that handed it forgot the call
			}
		}
	})
	return nil
}

// validateDecision refuses, before anything reaches history, a decision
// that cannot apply to this call (checkDecisionRequest) or that no
// statement of a trusted door makes its author's.
func (c *callRun) validateDecision(ctx workflow.Context, req DecideRequest) error {
	err := c.checkDecisionRequest(ctx, req)
	if err == nil {
		err = c.checkCallStatement(ctx, "decide", req.Decision.Statement, policy.DecisionStatement(c.submitted(), req.Decision, c.stickyKey)) //workflowcheck:ignore
	}
	if err != nil {
		workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"reason": checkOf(err).RefusalType}).Counter(MetricDecisionsRefused).Inc(1)
	}
	return err
}

// checkDecisionRequest refuses a decision that cannot apply to this call:
// another call's, a late one, a malformed one, one that claims a reserved
// channel, or one its author may not take (their groups do not cover the
// call's groups at this moment, escalation included, or they requested
// the call).
func (c *callRun) checkDecisionRequest(_ workflow.Context, req DecideRequest) error {
	if err := c.checkDecision(req); err != nil {
		return err
	}
	if err := req.Decision.ValidateIncoming(); err != nil {
		return temporal.NewApplicationError("invalid decision: "+err.Error(), ErrTypeInvalidDecision)
	}
	if len(req.Decision.EditedArgs) > policy.MaxArgsBytes {
		return temporal.NewApplicationError(fmt.Sprintf("invalid decision: edited arguments are %d bytes, over the %d-byte limit", len(req.Decision.EditedArgs), policy.MaxArgsBytes), ErrTypeInvalidDecision)
	}
	if c.checking != "" {
		return temporal.NewApplicationError("call "+c.state.Call.ID+" is being decided: another approver's "+c.checking+" is being checked", ErrTypeNotWaiting)
	}
	if err := c.passkeyMissing(req.Decision); err != nil {
		return err
	}
	if err := req.Decision.MayDecide(c.deciders()); err != nil {
		return refusalOf(req.Decision.DecidedBy, c.state.Call.ID, err)
	}
	return c.validateApproval(req.Decision)
}

// checkOf is the DecisionCheck of a validator's answer.
func checkOf(err error) DecisionCheck {
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return DecisionCheck{}
	case errors.As(err, &appErr):
		return DecisionCheck{RefusalType: appErr.Type(), Refusal: appErr.Message()}
	}
	return DecisionCheck{RefusalType: ErrTypeInvalidDecision, Refusal: err.Error()}
}

// deciders is who may decide the call now: its groups at this moment
// (escalation included), its acting user if its rule says so, never its
// requester.
func (c *callRun) deciders() policy.Deciders {
	if c.state.Request == nil {
		return policy.Deciders{Requester: c.state.Call.Requester}
	}
	return policy.DecidersOf(c.state.Call, *c.state.Request, c.state.Request.Groups)
}

// refusalOf turns a policy.Approver refusal into the update's error.
func refusalOf(by, callID string, err error) error {
	if errors.Is(err, policy.ErrSelfApproval) {
		return temporal.NewApplicationError(by+" requested call "+callID+" and cannot decide it", ErrTypeSelfApproval)
	}
	return temporal.NewApplicationError(fmt.Sprintf("%s may not decide call %s: %v", by, callID, err), ErrTypeNotAuthorized)
}

// checkDecision refuses a decision for another call, for a call that no
// longer waits, a malformed one, and one by the call's requester.
func (c *callRun) checkDecision(req DecideRequest) error {
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

// validateCancel lets the call's requester acting as itself, or an
// approver who may act on its groups, cancel it while it waits for a
// person. A name alone cancels nothing: an approver named like the
// requester still needs the call's groups.
func (c *callRun) validateCancel(ctx workflow.Context, req CancelRequest) error {
	if err := c.checkCancel(req); err != nil {
		return err
	}
	by := policy.Approver{Name: req.By, Groups: req.Groups, Identity: req.Identity}
	return c.checkCallStatement(ctx, "cancel", req.Statement, policy.CancelStatement(c.submitted(), by, req.AsRequester)) //workflowcheck:ignore
}

func (c *callRun) checkCancel(req CancelRequest) error {
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
	if req.AsRequester {
		if req.By != c.state.Call.Requester {
			return temporal.NewApplicationError(fmt.Sprintf("%s did not request call %s and cannot withdraw it", req.By, c.state.Call.ID), ErrTypeNotAuthorized)
		}
		return nil
	}
	if req.By == c.state.Call.Requester {
		return temporal.NewApplicationError(fmt.Sprintf("%s may not cancel call %s as an approver: it requested the call, and withdraws it only as its requester", req.By, c.state.Call.ID), ErrTypeNotAuthorized)
	}
	if err := (policy.Approver{Name: req.By, Groups: req.Groups}).MayAct(c.state.Request.Groups); err != nil {
		return temporal.NewApplicationError(fmt.Sprintf("%s may not cancel call %s: %v", req.By, c.state.Call.ID, err), ErrTypeNotAuthorized)
	}
	return nil
}

// cancel denies the waiting call with "cancelled by <who>".
func (c *callRun) cancel(ctx workflow.Context, req CancelRequest) (policy.Decision, error) {
	c.apply(ctx, policy.Decision{Kind: policy.DeniedWithReason, Reason: "cancelled by " + req.By,
		DecidedBy: req.By, DeciderGroups: req.Groups, Identity: req.Identity, Channel: ChannelCancel, DecidedAt: workflow.Now(ctx),
		Statement: req.Statement})
	return *c.state.Decision, nil
}

// decide applies a validated decision and returns it as recorded. Edited
// arguments are checked by the policy first: a refusal goes back to the
// approver and the call keeps waiting.
func (c *callRun) decide(ctx workflow.Context, req DecideRequest) (policy.Decision, error) {
	d := req.Decision
	d.DecidedAt = workflow.Now(ctx) // never taken from the request
	if d.Kind == policy.ApprovedWithEdits {
		if err := c.checkEditAtDecision(ctx, d); err != nil {
			return policy.Decision{}, err
		}
	}
	if err := c.verifyPasskey(ctx, d); err != nil {
		return policy.Decision{}, err
	}
	if !c.approvalCounts(d) {
		c.countApproval(ctx, d)
		if c.state.Decision == nil {
			return d, nil // counted; the call waits for more
		}
		return *c.state.Decision, nil
	}
	c.apply(ctx, d)
	return *c.state.Decision, nil
}

// checkEditAtDecision runs the policy on edited arguments while the
// approver waits for the answer. The rule the edited arguments fall under
// governs the edit: it is refused when the tool's schema or the policy
// refuses them, when that rule would not let the approver decide (its
// groups, its acting user), or when it needs more than one approval (four
// eyes counts no edit). On success the verdict is kept for the tool's run.
func (c *callRun) checkEditAtDecision(ctx workflow.Context, d policy.Decision) error {
	c.checking = "edit"
	defer func() { c.checking = "" }()
	edited := c.state.Call
	edited.Args = d.EditedArgs
	var ev activities.Evaluation
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	if err := workflow.ExecuteLocalActivity(lctx, a.Evaluate, activities.EvaluateInput{Call: edited, Preview: true}).Get(ctx, &ev); err != nil {
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
		if err := d.MayDecide(policy.DecidersOf(edited, *ev.Ask, ev.Ask.Groups)); err != nil {
			return refuse(fmt.Sprintf("with them the call is asked of %v: %v", ev.Ask.Groups, err))
		}
		if ev.Ask.Approvals > 1 && c.version(ctx, versionEditRuleGoverns, 1) >= 1 {
			// Four eyes counts no edit: the edit alone would run
			// arguments that need more people.
			return refuse(fmt.Sprintf("with them the call falls under rule %s, which needs %d approvals from distinct people, and an edit counts as none; "+
				"approve or deny the call as it is, or deny it with a reason that says which arguments to ask for", ev.Ask.Rule, ev.Ask.Approvals))
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
