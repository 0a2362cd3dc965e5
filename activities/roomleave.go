package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
)

// RoomLeave is a waiting room's leave that a call's tool activity sends
// for it, while the tool runs: the call then has no signal of its own to
// be told of between its decision and its result.
type RoomLeave struct {
	// WorkflowID is the room's; Signal and CallID are its leave.
	WorkflowID string `json:"workflow_id"`
	Signal     string `json:"signal"`
	CallID     string `json:"call_id"`
}

// leaveTimeout bounds the leave: a room that misses it forgets the call at
// its deadline.
const leaveTimeout = 10 * time.Second

// leaveRoom sends l beside the tool's run and returns a wait for it, so
// the leave lands before the call can end. A room that has closed holds
// nobody; any other failure is logged.
func leaveRoom(ctx context.Context, c client.Client, l *RoomLeave) (wait func()) {
	if l == nil || c == nil { // activity tests without a server
		return func() {}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	done := make(chan error, 1)
	go func() { done <- c.SignalWorkflow(sctx, l.WorkflowID, "", l.Signal, l.CallID) }()
	return func() {
		defer cancel()
		var nf *serviceerror.NotFound
		if err := <-done; err != nil && !errors.As(err, &nf) {
			activity.GetLogger(ctx).Warn("Could not tell the waiting room the call no longer waits; it forgets the call at its deadline",
				"room", l.WorkflowID, "callID", l.CallID, "error", err)
		}
	}
}
