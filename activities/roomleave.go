package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
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

// leaveRoom sends l beside the tool's run. The tool's result does not wait
// for it: a client's signal, unlike a workflow's, is not dropped when the
// call ends, and a room that counts an approved call a few milliseconds
// longer refuses nobody anything it would not have refused while the tool
// ran. A worker that stops waits for the leaves in flight (Drain). A room
// that has closed holds nobody; any other failure is logged, and the room
// forgets the call at its deadline.
func (a *Activities) leaveRoom(ctx context.Context, l *RoomLeave) {
	if l == nil || a.Client == nil { // activity tests without a server
		return
	}
	logger := activity.GetLogger(ctx)
	a.leaves.Add(1)
	go func() {
		defer a.leaves.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
		defer cancel()
		var nf *serviceerror.NotFound
		if err := a.Client.SignalWorkflow(sctx, l.WorkflowID, "", l.Signal, l.CallID); err != nil && !errors.As(err, &nf) {
			logger.Warn("Could not tell the waiting room the call no longer waits; it forgets the call at its deadline",
				"room", l.WorkflowID, "callID", l.CallID, "error", err)
		}
	}()
}

// Drain waits until the room leaves a's tool activities sent have landed
// (each within leaveTimeout): a worker calls it once it stopped taking
// tasks, before its process ends. (A function, not a method: every
// method of Activities is registered as an activity.)
func Drain(a *Activities) { a.leaves.Wait() }
