package workflows

import (
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// NoticeRecord is one notice a waiting call sent, kept for the audit view.
type NoticeRecord struct {
	Kind   activities.NoticeKind `json:"kind"`
	At     time.Time             `json:"at"`
	Groups []string              `json:"groups,omitempty"`
}

// sent is a notice in flight through one channel; its receipt arrives
// later.
type sent struct {
	channel string
	receipt workflow.Future
}

// waitWithSchedule waits for a decision until the deadline, sending
// reminders every RemindAfter and escalating once after EscalateAfter
// (which also lets the EscalateTo groups decide). It reports whether a
// decision came.
func (c *callRun) waitWithSchedule(ctx workflow.Context, req policy.ApprovalRequest, deadline time.Time) bool {
	var remindAt, escalateAt time.Time
	if req.RemindAfter > 0 {
		remindAt = c.state.WaitingSince.Add(req.RemindAfter)
	}
	if req.EscalateAfter > 0 && len(req.EscalateTo) > 0 {
		// From the request, as the waiting room counts, so a sticky
		// decision and a direct one see the same groups at any moment.
		escalateAt = c.requestedAt.Add(req.EscalateAfter)
	}
	decided := func() bool { return c.state.Decision != nil }
	for {
		next := deadline
		for _, t := range []time.Time{remindAt, escalateAt} {
			if !t.IsZero() && t.Before(next) {
				next = t
			}
		}
		if ok, err := awaitWithTimeout(ctx, next.Sub(workflow.Now(ctx)), decided); ok || err != nil {
			return ok
		}
		now := workflow.Now(ctx)
		if !now.Before(deadline) {
			return false
		}
		if !escalateAt.IsZero() && !now.Before(escalateAt) {
			escalateAt = time.Time{}
			for _, g := range req.EscalateTo {
				if !slices.Contains(c.state.Request.Groups, g) {
					c.state.Request.Groups = append(c.state.Request.Groups, g)
				}
			}
			// Listings filter by the memo's groups: the escalation groups
			// now see the call they may decide.
			c.upsertWaitingMemo(ctx, *c.state.Request)
			c.upsertStatus(ctx, StatusPending, AttrGroups.ValueSet(c.state.Request.Groups))
			c.notify(ctx, activities.NoticeEscalation, req.EscalateTo)
		}
		if !remindAt.IsZero() && !now.Before(remindAt) {
			remindAt = now.Add(req.RemindAfter)
			c.notify(ctx, activities.NoticeReminder, c.state.Request.Groups)
		}
	}
}

// notify records a notice and sends it through every channel, without
// waiting: a slow channel never delays a decision. A NoticesWorkflow sends
// it, and later tells the channels the outcome, apart from the call.
func (c *callRun) notify(ctx workflow.Context, kind activities.NoticeKind, groups []string) {
	now := workflow.Now(ctx)
	c.state.Notices = append(c.state.Notices, NoticeRecord{Kind: kind, At: now, Groups: groups})
	n := activities.Notice{Kind: kind, Call: c.state.Call, Request: *c.state.Request, Groups: groups,
		Deadline: c.state.Deadline, Seq: len(c.state.Notices)}
	if len(c.eval.Channels) == 0 {
		return
	}
	if c.notices == nil {
		c.startNotices(ctx, n)
		return
	}
	c.notices.Send(ctx, NoticesMessage{Notice: &n})
}

// startNotices starts the call's NoticesWorkflow with its first notice; the
// call never waits for it, and it outlives the call. Later messages go to
// it one at a time, in order.
func (c *callRun) startNotices(ctx workflow.Context, first activities.Notice) {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:        NoticesWorkflowID(c.state.Call.ID),
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
	})
	child := workflow.ExecuteChildWorkflow(cctx, NoticesWorkflowType, NoticesInput{Channels: c.eval.Channels, First: first})
	queue := workflow.NewBufferedChannel(ctx, maxNoticeMessages)
	c.notices = queue
	c.noticesBusy = true
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { c.noticesBusy = false }()
		logger := workflow.GetLogger(ctx)
		if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
			logger.Warn("Could not start the notices workflow", "callID", c.state.Call.ID, "error", err)
			return
		}
		var m NoticesMessage
		for queue.Receive(ctx, &m) {
			if err := child.SignalChildWorkflow(ctx, SignalNotices, m).Get(ctx, nil); err != nil {
				logger.Warn("Could not reach the notices workflow", "callID", c.state.Call.ID, "error", err)
			}
			m = NoticesMessage{}
		}
	})
}

// maxNoticeMessages bounds the messages queued for the NoticesWorkflow; a
// call sends a few notices and at most three outcomes.
const maxNoticeMessages = 1000

// announce tells every channel that sent a notice what became of the call.
func (c *callRun) announce(ctx workflow.Context, o activities.Outcome) {
	o.Call = c.state.Call
	if d := c.state.Decision; d != nil && o.Decision == "" {
		o.Decision, o.DecidedBy, o.Channel = d.Kind.String(), d.DecidedBy, d.Channel
	}
	if c.notices == nil {
		return // no notice was sent
	}
	last := o.Event != activities.EventDecided || o.Status == string(StatusDenied)
	c.notices.Send(ctx, NoticesMessage{Outcome: &o, Last: last})
	if last {
		c.notices.Close()
		c.notices = nil
	}
}

// handOverNotices waits until the NoticesWorkflow has every message (not
// until the channels took them: that is its job), telling it the call ended
// if no outcome did.
func (c *callRun) handOverNotices(ctx workflow.Context) {
	if c.notices != nil {
		c.notices.Send(ctx, NoticesMessage{Last: true})
		c.notices.Close()
		c.notices = nil
	}
	_ = workflow.Await(ctx, func() bool { return !c.noticesBusy })
}

// NoticesWorkflow sends one waiting call's notices through its channels
// and, when the call is decided or ends, tells each channel the outcome with
// the receipts of its notices (e.g. to update a Slack message in place). It
// runs apart from the call, with its own retry budget, so a channel that is
// down never holds back the agent's Result.
func NoticesWorkflow(ctx workflow.Context, in NoticesInput) error {
	n := &noticesRun{in: in}
	return n.run(ctx)
}

type noticesRun struct {
	in   NoticesInput
	sent []sent
}

// noticesIdleLimit ends a NoticesWorkflow whose call never said it ended
// (e.g. it was terminated) this long after its deadline.
const noticesIdleLimit = 24 * time.Hour

func (n *noticesRun) run(ctx workflow.Context) error {
	messages := workflow.GetSignalChannel(ctx, SignalNotices)
	n.send(ctx, n.in.First)
	for {
		limit := max(n.in.First.Deadline.Sub(workflow.Now(ctx)), 0) + noticesIdleLimit
		ok, err := awaitWithTimeout(ctx, limit, func() bool { return messages.Len() > 0 })
		if err != nil {
			return err
		}
		if !ok {
			workflow.GetLogger(ctx).Warn("Call never said it ended; notices stop", "callID", n.in.First.Call.ID)
			return nil
		}
		var m NoticesMessage
		messages.ReceiveAsync(&m)
		if m.Notice != nil {
			n.send(ctx, *m.Notice)
		}
		if m.Outcome != nil {
			n.resolve(ctx, *m.Outcome)
		}
		if m.Last {
			return nil
		}
	}
}

// send sends a notice through every channel, one activity each.
func (n *noticesRun) send(ctx workflow.Context, notice activities.Notice) {
	actx := workflow.WithActivityOptions(ctx, notifyOptions)
	for _, ch := range n.in.Channels {
		f := workflow.ExecuteActivity(actx, a.Notify, activities.NotifyInput{Channel: ch, Notice: notice})
		n.sent = append(n.sent, sent{channel: ch, receipt: f})
	}
}

// resolve waits for the receipts of the notices sent so far, then tells
// every channel the outcome and waits for them, so outcomes arrive in order.
func (n *noticesRun) resolve(ctx workflow.Context, o activities.Outcome) {
	receipts := collectReceipts(ctx, n.sent)
	resolveOutcome(ctx, n.in.Channels, o, receipts)
}

func collectReceipts(ctx workflow.Context, sentNow []sent) map[string][]activities.Receipt {
	receipts := map[string][]activities.Receipt{}
	for _, s := range sentNow {
		var r activities.Receipt
		if err := s.receipt.Get(ctx, &r); err == nil {
			receipts[s.channel] = append(receipts[s.channel], r)
		}
	}
	return receipts
}

func resolveOutcome(ctx workflow.Context, channels []string, o activities.Outcome, receipts map[string][]activities.Receipt) {
	actx := workflow.WithActivityOptions(ctx, notifyOptions)
	var fs []workflow.Future
	for _, ch := range channels {
		fs = append(fs, workflow.ExecuteActivity(actx, a.Resolve, activities.ResolveInput{Channel: ch, Outcome: o, Receipts: receipts[ch]}))
	}
	for _, f := range fs {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("Could not tell a channel the outcome", "callID", o.Call.ID, "error", err)
		}
	}
}
