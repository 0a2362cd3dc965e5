package activities

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/tool"
)

// progressEvery spaces the heartbeats that carry a tool's progress: a
// tool may report many times a second, the server hears the latest.
const progressEvery = 2 * time.Second

// IsToolStep reports whether an activity type is a call's tool step
// (RunTool, or RunToolChecked, as the worker registers them), whose
// heartbeat a status reads.
func IsToolStep(activityType string) bool {
	return activityType == "RunTool" || activityType == "RunToolChecked"
}

// ToolHeartbeat is what the heartbeat of a tool step carries: for a tool
// that is not idempotent, the mark that it began (a later attempt that
// finds it knows the tool may have run), and the tool's latest progress
// (tool.ReportProgress), which client.Status shows.
type ToolHeartbeat struct {
	Started  bool           `json:"started,omitempty"`
	Progress *tool.Progress `json:"progress,omitempty"`
}

// stepHeartbeat sends a tool step's heartbeats: every third of its
// heartbeat timeout, proof that its worker is alive, and soon after the
// tool reports progress.
type stepHeartbeat struct {
	mu      sync.Mutex
	details ToolHeartbeat
	poke    chan struct{}
}

func newStepHeartbeat(details ToolHeartbeat) *stepHeartbeat {
	return &stepHeartbeat{details: details, poke: make(chan struct{}, 1)}
}

// report takes the tool's progress.
func (h *stepHeartbeat) report(p tool.Progress) {
	h.mu.Lock()
	h.details.Progress = &p
	h.mu.Unlock()
	select {
	case h.poke <- struct{}{}:
	default: // a heartbeat is on its way; it takes the latest
	}
}

func (h *stepHeartbeat) current() ToolHeartbeat {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.details
}

// run sends heartbeats until stop is called: every third of timeout
// (none when 0) through the SDK, and the progress with send.
func (h *stepHeartbeat) run(ctx context.Context, timeout time.Duration, send func(ToolHeartbeat)) (stop func()) {
	done := make(chan struct{})
	go func() {
		var tick <-chan time.Time
		if timeout > 0 {
			t := time.NewTicker(timeout / 3)
			defer t.Stop()
			tick = t.C
		}
		var sent time.Time
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick:
				activity.RecordHeartbeat(ctx, h.current())
			case <-h.poke:
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				case <-time.After(time.Until(sent.Add(progressEvery))):
				}
				sent = time.Now()
				send(h.current())
			}
		}
	}()
	return func() { close(done) }
}

// progressSender sends a tool's progress straight to the server (c): the
// SDK's heartbeats are throttled to most of the heartbeat timeout, so
// progress sent through them would reach the server late.
func progressSender(ctx context.Context, c client.Client) func(ToolHeartbeat) {
	if c == nil { // activity tests without a server
		return func(hb ToolHeartbeat) { activity.RecordHeartbeat(ctx, hb) }
	}
	token := activity.GetInfo(ctx).TaskToken
	return func(hb ToolHeartbeat) {
		if err := c.RecordActivityHeartbeat(ctx, token, hb); err != nil {
			activity.GetLogger(ctx).Debug("Could not record the tool's progress", "error", err)
		}
	}
}
