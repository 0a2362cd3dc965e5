package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/policy"
)

// NoticeKind is why approvers are told about a call.
type NoticeKind string

// Notices a waiting call sends.
const (
	NoticeWaiting    NoticeKind = "waiting"
	NoticeReminder   NoticeKind = "reminder"
	NoticeEscalation NoticeKind = "escalation"
)

// Notice tells approvers that a call waits for them.
type Notice struct {
	Kind    NoticeKind             `json:"kind"`
	Call    policy.Call            `json:"call"`
	Request policy.ApprovalRequest `json:"request"`
	// Groups are the approver groups to reach: the request's, or the
	// escalation groups. Empty means every approver.
	Groups   []string  `json:"groups,omitempty"`
	Deadline time.Time `json:"deadline"`
	// Seq numbers the call's notices from 1; with the call ID it identifies
	// this notice across retries of its activity.
	Seq int `json:"seq"`
}

// Receipt is what a channel sent for a notice, so it can update it later
// (e.g. the Slack message's channel and timestamp).
type Receipt struct {
	Channel string            `json:"channel"`
	Ref     map[string]string `json:"ref,omitempty"`
}

// Event says what happened to a call that approvers were told about.
type Event string

// Events of a call's life after a notice.
const (
	// EventDecided: a decision was taken (by anyone, through any channel).
	EventDecided Event = "decided"
	// EventTimedOut: nobody decided in time.
	EventTimedOut Event = "timed_out"
	// EventExecuted: the approved tool ran (the outcome's Status says how).
	EventExecuted Event = "executed"
)

// Outcome is how a call ended, for channels that show it.
type Outcome struct {
	Event     Event       `json:"event"`
	Call      policy.Call `json:"call"`
	Status    string      `json:"status"`
	Decision  string      `json:"decision,omitempty"`
	DecidedBy string      `json:"decided_by,omitempty"`
	Channel   string      `json:"channel,omitempty"`
	At        time.Time   `json:"at"`
	Reason    string      `json:"reason,omitempty"`
}

// Channel is one way to reach approvers: Slack, email, a webhook.
type Channel interface {
	// Name identifies the channel in receipts, logs and metrics.
	Name() string
	// Notify sends a notice and returns what it sent.
	Notify(ctx context.Context, n Notice) (Receipt, error)
	// Resolve tells the channel what happened, with the receipts of every
	// notice it sent for the call (e.g. to update messages in place).
	Resolve(ctx context.Context, o Outcome, receipts []Receipt) error
}

// NotifyInput is the argument of Notify.
type NotifyInput struct {
	Channel string `json:"channel"`
	Notice  Notice `json:"notice"`
}

// Notify sends a notice through one channel. One activity per channel, so
// a failing channel is retried alone and never makes another send twice.
func (a *Activities) Notify(ctx context.Context, in NotifyInput) (Receipt, error) {
	ch, err := a.channel(in.Channel)
	if err != nil {
		return Receipt{}, err
	}
	r, err := ch.Notify(ctx, in.Notice)
	if err != nil {
		activity.GetMetricsHandler(ctx).WithTags(map[string]string{"channel": in.Channel}).Counter(MetricNotificationFailures).Inc(1)
		return Receipt{}, keepRetryability(fmt.Sprintf("notify via %s", in.Channel), err)
	}
	r.Channel = in.Channel
	return r, nil
}

// ResolveInput is the argument of Resolve.
type ResolveInput struct {
	Channel  string    `json:"channel"`
	Outcome  Outcome   `json:"outcome"`
	Receipts []Receipt `json:"receipts,omitempty"`
}

// Resolve tells one channel what happened to a call it announced.
func (a *Activities) Resolve(ctx context.Context, in ResolveInput) error {
	ch, err := a.channel(in.Channel)
	if err != nil {
		return err
	}
	if err := ch.Resolve(ctx, in.Outcome, in.Receipts); err != nil {
		activity.GetMetricsHandler(ctx).WithTags(map[string]string{"channel": in.Channel}).Counter(MetricNotificationFailures).Inc(1)
		return keepRetryability(fmt.Sprintf("resolve via %s", in.Channel), err)
	}
	return nil
}

func (a *Activities) channel(name string) (Channel, error) {
	for _, c := range a.Channels {
		if c.Name() == name {
			return c, nil
		}
	}
	return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no notification channel %q on this worker", name), "UnknownChannel", nil)
}

// channelNames lists the configured channels, in order.
func (a *Activities) channelNames() []string {
	names := make([]string, len(a.Channels))
	for i, c := range a.Channels {
		names[i] = c.Name()
	}
	return names
}

// keepRetryability adds context to a channel's error without hiding a
// non-retryable application error from Temporal, which reads only the
// outermost error: a bad token must not be retried twenty times.
func keepRetryability(what string, err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() {
		return temporal.NewNonRetryableApplicationError(what+": "+appErr.Message(), appErr.Type(), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
