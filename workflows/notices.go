package workflows

import (
	"slices"
	"time"

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
		escalateAt = c.state.WaitingSince.Add(req.EscalateAfter)
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
			c.notify(ctx, activities.NoticeEscalation, req.EscalateTo)
		}
		if !remindAt.IsZero() && !now.Before(remindAt) {
			remindAt = now.Add(req.RemindAfter)
			c.notify(ctx, activities.NoticeReminder, c.state.Request.Groups)
		}
	}
}

// notify records a notice and sends it through every channel, without
// waiting: a slow channel never delays a decision.
func (c *callRun) notify(ctx workflow.Context, kind activities.NoticeKind, groups []string) {
	now := workflow.Now(ctx)
	c.state.Notices = append(c.state.Notices, NoticeRecord{Kind: kind, At: now, Groups: groups})
	n := activities.Notice{Kind: kind, Call: c.state.Call, Request: *c.state.Request, Groups: groups,
		Deadline: c.state.Deadline, Seq: len(c.state.Notices)}
	actx := workflow.WithActivityOptions(ctx, notifyOptions)
	for _, ch := range c.eval.Channels {
		f := workflow.ExecuteActivity(actx, a.Notify, activities.NotifyInput{Channel: ch, Notice: n})
		c.sent = append(c.sent, sent{channel: ch, receipt: f})
	}
}

// announce tells every channel that sent a notice what became of the call,
// with the receipts of its notices. It runs beside the rest of the call;
// ToolCallWorkflow waits for it before it returns.
func (c *callRun) announce(ctx workflow.Context, o activities.Outcome) {
	if len(c.sent) == 0 {
		return
	}
	o.Call = c.state.Call
	if d := c.state.Decision; d != nil {
		o.Decision, o.DecidedBy, o.Channel = d.Kind.String(), d.DecidedBy, d.Channel
	}
	sentNow := slices.Clone(c.sent)
	c.announcing++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { c.announcing-- }()
		receipts := map[string][]activities.Receipt{}
		for _, s := range sentNow {
			var r activities.Receipt
			if err := s.receipt.Get(ctx, &r); err == nil {
				receipts[s.channel] = append(receipts[s.channel], r)
			}
		}
		actx := workflow.WithActivityOptions(ctx, notifyOptions)
		var fs []workflow.Future
		for _, ch := range c.eval.Channels {
			fs = append(fs, workflow.ExecuteActivity(actx, a.Resolve, activities.ResolveInput{Channel: ch, Outcome: o, Receipts: receipts[ch]}))
		}
		for _, f := range fs {
			if err := f.Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("Could not tell a channel the outcome", "callID", c.state.Call.ID, "error", err)
			}
		}
	})
}

// awaitAnnouncements waits until every channel was told the outcome.
func (c *callRun) awaitAnnouncements(ctx workflow.Context) {
	_ = workflow.Await(ctx, func() bool { return c.announcing == 0 })
}
