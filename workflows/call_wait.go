package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// A call the policy asks a person about: covered by a sticky decision the
// session already shows, it never waits. Otherwise it joins its session's
// waiting room (room.go) and reads the session's news in one step: what
// the session decided before, the call applies itself; what it decides
// later, the room hands it. Only then is a person notified.

// askForDecision gets the call decided: by a sticky decision of the
// session, by the coded handler, or by a person before the deadline. It
// returns with a Decision set or the status timed_out.
func (c *callRun) askForDecision(ctx workflow.Context, req policy.ApprovalRequest) error {
	req.Preview = c.eval.Preview
	c.state.Request = &req
	c.needsApprovals(req)
	c.stickyKey = req.StickyKeyFor(c.state.Call)
	switch {
	case c.eval.Sticky != nil && c.stickyCovers(*c.eval.Sticky) && c.stickyHolds(ctx, *c.eval.Sticky): // the session shows one: nobody is asked
		c.apply(ctx, *c.eval.Sticky)
		return nil
	case c.eval.SessionEnded:
		c.apply(ctx, sessionEndedDenial)
		return nil
	}
	timeout := req.EffectiveTimeout()
	if c.eval.HasHandler {
		var d *policy.Decision
		lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
		in := activities.AskHandlerInput{Call: c.state.Call, Request: req}
		if err := workflow.ExecuteLocalActivity(lctx, a.AskHandler, in).Get(ctx, &d); err != nil {
			return fmt.Errorf("approval handler: %w", err)
		}
		if d != nil && c.state.Decision == nil && c.approvalCounts(*d) && !c.needsPasskey(*d) {
			c.apply(ctx, *d)
		}
	}
	if c.state.Decision == nil {
		if err := c.waitForPerson(ctx, req, timeout); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err // cancelled while it waited
	}
	c.countAsked(ctx)
	c.tellSession(ctx)
	return nil
}

// countAsked records how an asked call was decided: the time it took, by
// rule, channel and outcome, and whether a sticky decision covered it.
func (c *callRun) countAsked(ctx workflow.Context) {
	tags := map[string]string{"rule": c.eval.Rule, "channel": "timeout", "outcome": string(StatusTimedOut)}
	if d := c.state.Decision; d != nil {
		tags["channel"], tags["outcome"] = d.Channel, "denied"
		if d.Kind.Approves() {
			tags["outcome"] = "approved"
		}
		if _, sticky := stickyOrigin(d.Comment); sticky && d.Channel == "session" {
			workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"rule": c.eval.Rule, "tool": c.state.Call.Tool, "decision": d.Kind.String()}).
				Counter(MetricStickyCovered).Inc(1)
		}
	}
	workflow.GetMetricsHandler(ctx).WithTags(tags).Timer(MetricTimeToDecision).Record(workflow.Now(ctx).Sub(c.requestedAt))
}

// stickyHolds checks the statement of a sticky decision the session's
// memo showed (runs from before statements take it on the memo's word).
func (c *callRun) stickyHolds(ctx workflow.Context, d policy.Decision) bool {
	if c.version(ctx, versionStatements, 1) == workflow.DefaultVersion {
		return true
	}
	return c.checkHandedOn(ctx, "sticky decision", d, false) == nil
}

// stickyCovers reports whether a sticky decision found at evaluation may
// decide this call: its author could have decided it directly.
func (c *callRun) stickyCovers(d policy.Decision) bool {
	return c.approvalCounts(d) && !c.needsPasskey(d) && d.MayDecide(c.deciders()) == nil
}

func (c *callRun) waitForPerson(ctx workflow.Context, req policy.ApprovalRequest, timeout time.Duration) error {
	now := workflow.Now(ctx)
	c.state.Status = StatusPending
	c.state.WaitingSince = now
	c.state.Deadline = c.requestedAt.Add(timeout) // counts from the request, as the room counts
	c.upsertStatus(ctx, StatusPending, AttrGroups.ValueSet(groupsShown(req.Groups)))
	c.upsertWaitingMemo(ctx, req)
	if err := c.joinRoom(ctx); err != nil {
		return err
	}
	decided := c.state.Decision != nil
	if !decided && ctx.Err() == nil {
		c.notify(ctx, activities.NoticeWaiting, req.Groups)
		decided = c.waitWithSchedule(ctx, req, c.state.Deadline)
	}
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"tool": c.state.Call.Tool}).
		Timer(MetricApprovalWait).Record(workflow.Now(ctx).Sub(now))
	if ctx.Err() != nil && !decided {
		return nil // cancelled: not a timeout
	}
	switch {
	case decided:
	case req.OnTimeout == policy.TimeoutApprove && !req.Passkey: // a passkey rule's approvals are people's
		c.apply(ctx, policy.Decision{Kind: policy.Approved, DecidedBy: "timeout", Channel: "timeout",
			Comment: "nobody answered within " + timeout.String() + "; the rule approves on timeout"})
	default:
		c.state.Status = StatusTimedOut
		c.announce(ctx, activities.Outcome{Event: activities.EventTimedOut, Status: string(StatusTimedOut), At: workflow.Now(ctx), Reason: c.timeoutReason(),
			Decision: "timed_out", DecidedBy: "timeout", Channel: "timeout"})
		return nil
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
	return nil
}

// joinRoom registers the call with its waiting room and applies what the
// session decided so far. It fails only when the call is cancelled.
func (c *callRun) joinRoom(ctx workflow.Context) error {
	req := c.state.Request
	reg := Registration{CallID: c.state.Call.ID, Tool: c.state.Call.Tool, StickyKey: c.stickyKey, Requester: c.state.Call.Requester,
		User: c.deciders().User, Groups: req.Groups, RequestedAt: c.requestedAt, Timeout: req.EffectiveTimeout()}
	if req.EscalateAfter > 0 && len(req.EscalateTo) > 0 {
		reg.EscalateTo, reg.EscalateAfter = req.EscalateTo, req.EscalateAfter
	}
	in := activities.JoinInput{
		CallID: c.state.Call.ID, Registration: reg, Rooms: roomStarts(c.state.Call.Session),
		WorkflowType: RoomWorkflowType, TaskQueue: workflow.GetInfo(ctx).TaskQueueName, SignalName: SignalRegisterAll,
		Session: SessionWorkflowID(c.state.Call.Session), Key: c.stickyKey,
	}
	// A local activity, inside the call's workflow task: parking costs the
	// call no workflow task of its own.
	var word activities.Joined
	lctx := workflow.WithLocalActivityOptions(ctx, signalOrStartOptions)
	if err := workflow.ExecuteLocalActivity(lctx, a.JoinWaitingRoom, in).Get(ctx, &word); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Only a worker without a Temporal client gets here (the join is
		// retried until it works): a person is asked all the same.
		workflow.GetLogger(ctx).Error("Could not join the waiting room: the call waits for a person without hearing its session",
			"callID", c.state.Call.ID, "error", err)
		return nil
	}
	c.joined = true
	c.room = RoomOf(c.state.Call.ID) // the room of a join recorded before the worker picked it
	if word.Room != nil {
		c.room = *word.Room
	}
	switch {
	case word.End != nil:
		// The session had ended when the call began to wait.
		c.apply(ctx, sessionEndedDenial)
	case word.Sticky != nil:
		c.takeSessionDecision(ctx, SessionDecision{Decision: word.Sticky, Key: c.stickyKey})
	}
	return nil
}

// takeSessionDecision applies what the session tells a waiting call: the
// end, if whoever ended the session may act on the call's groups at this
// moment (a call that began to wait while the session was being ended was
// not in the ender's census), or a sticky decision of the call's key whose
// author could have decided the call directly (groups at this moment,
// escalation included, and never the call's requester). Anything else
// leaves it waiting for a person. It reports whether it applied one.
func (c *callRun) takeSessionDecision(ctx workflow.Context, sd SessionDecision) bool {
	if sd.Decision == nil || c.state.Decision != nil || c.state.Status != StatusPending {
		return false
	}
	var err error
	switch {
	case sd.Ended:
		err = sd.Decision.Approver().MayAct(c.state.Request.Groups)
	case sd.Key != c.stickyKey:
		return false // another tool's
	case !c.approvalCounts(*sd.Decision), c.needsPasskey(*sd.Decision):
		return false // four eyes, or a passkey: people approve it one by one
	default:
		err = sd.Decision.MayDecide(c.deciders())
	}
	if err != nil {
		workflow.GetLogger(ctx).Info("The session's decision does not cover the call; it waits for a person",
			"callID", c.state.Call.ID, "by", sd.Decision.DecidedBy, "reason", err)
		return false
	}
	if c.version(ctx, versionStatements, 1) >= 1 {
		if err := c.checkHandedOn(ctx, "session decision", *sd.Decision, sd.Ended); err != nil {
			return false // logged and counted; the call waits for a person
		}
	}
	c.apply(ctx, *sd.Decision)
	return true
}

// tellSession tells the room the call no longer waits, and sends a new
// sticky decision to the session, which hands it to every other call it
// covers. Both travel while the tool runs: the leave of an approved call
// toolgate runs goes with its tool's activity (handLeaveToTool), in a
// call that began at versionBaseline.
func (c *callRun) tellSession(ctx workflow.Context) {
	d := c.state.Decision
	if !c.leavesWithTool(ctx) {
		c.leaveRoom(ctx)
	}
	if d == nil || !d.Kind.Sticky() || d.Channel == "session" {
		return
	}
	sticky := StickyDecision{Key: c.stickyKey, Tool: c.state.Call.Tool, Decision: *d, FromCall: c.state.Call.ID, Groups: c.state.Request.Groups}
	start := activities.SignalWithStartInput{
		WorkflowID: SessionWorkflowID(c.state.Call.Session), WorkflowType: SessionWorkflowType,
		SignalName: SignalSticky, Signal: sticky,
		StartInput:  SessionInput{Session: c.state.Call.Session, Owner: c.state.Call.Requester},
		Memo:        map[string]any{activities.MemoOwner: c.state.Call.Requester},
		UnlessEnded: true,
	}
	told, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) { settle.Set(nil, c.signalOrStart(ctx, start)) })
	c.told = append(c.told, told)
}

// leavesWithTool reports whether the call's leave of its room goes with
// its tool's activity: it was approved, toolgate runs the tool, and it
// began at versionBaseline.
func (c *callRun) leavesWithTool(ctx workflow.Context) bool {
	d := c.state.Decision
	return c.joined && d != nil && d.Kind.Approves() && c.state.Call.Execution != policy.ExecutionAgent && c.atBaseline(ctx)
}

// leaveRoom tells the room the call no longer waits, as soon as it no
// longer does, so the room's census (who may end the session, how many
// calls its end denies) leaves it out. The call does not wait for it; a
// room that missed it forgets the call at its deadline.
func (c *callRun) leaveRoom(ctx workflow.Context) {
	if c.joined {
		c.joined = false
		room := RoomWorkflowID(c.state.Call.Session, c.room)
		left := workflow.SignalExternalWorkflow(ctx, room, "", SignalDone, c.state.Call.ID)
		if c.version(ctx, versionLeaveDelivered, 1) >= 1 {
			c.left = left
		}
	}
}

// awaitLeft waits until the room has the call's leave: Temporal drops a
// signal whose sender has closed, and a room that never hears it counts
// the call as waiting until its deadline (and so refuses the session's end
// to whoever may not act on it).
func (c *callRun) awaitLeft(ctx workflow.Context) {
	if c.left == nil {
		return
	}
	if err := c.left.Get(ctx, nil); err != nil {
		// The room closed (idle, or continued as new): it holds nobody.
		workflow.GetLogger(ctx).Debug("The waiting room did not take the call's leave", "callID", c.state.Call.ID, "error", err)
	}
	c.left = nil
}

// awaitTold waits until the session has the call's sticky decision.
func (c *callRun) awaitTold(ctx workflow.Context) {
	for _, f := range c.told {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Error("Could not tell the session a sticky decision", "session", c.state.Call.Session, "callID", c.state.Call.ID, "error", err)
		}
	}
	c.told = nil
}

// signalOrStartOptions retry the start of a room or session until it
// works: a decision the session must hear is not dropped.
var signalOrStartOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 30 * time.Second},
}

// signalOrStart signals a workflow that runs; if it does not, a local
// activity starts it atomically with the signal (signal-with-start), so
// many first calls cannot race.
func (c *callRun) signalOrStart(ctx workflow.Context, in activities.SignalWithStartInput) error {
	if err := workflow.SignalExternalWorkflow(ctx, in.WorkflowID, "", in.SignalName, in.Signal).Get(ctx, nil); err == nil {
		return nil
	}
	in.TaskQueue = workflow.GetInfo(ctx).TaskQueueName
	lctx := workflow.WithLocalActivityOptions(ctx, signalOrStartOptions)
	return workflow.ExecuteLocalActivity(lctx, a.SignalWithStart, in).Get(ctx, nil)
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
