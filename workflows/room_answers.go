package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
)

// What a waiting room owes its calls, and how it sends it.

// answer is one decision a batch hands a call.
type answer struct {
	callID  string
	message SessionDecision
}

// answerFor works out what callID is owed now, if anything: the end, if
// its ender may act on the call's groups at this moment; else a sticky
// decision of its key whose author could have decided it directly (its
// groups at this moment, escalation included, and never its requester).
// The call checks the same again.
func (r *roomRun) answerFor(ctx workflow.Context, callID string) (answer, bool) {
	i, waiting := r.index[callID]
	if !waiting {
		return answer{}, false // done meanwhile
	}
	news := r.state.News
	w := r.state.Calls[i]
	p := r.state.Profiles[w.Profile]
	groups := r.groupsAt(w, workflow.Now(ctx))
	switch d := news.StickyFor(p.Key); {
	case news.End != nil && news.End.Approver().MayAct(groups) == nil:
		return answer{callID: callID, message: SessionDecision{Decision: news.End, Ended: true}}, true
	case news.End == nil && d != nil && d.Decision.MayDecide(policy.Deciders{Requester: p.Requester, Groups: groups, User: p.User}) == nil:
		return answer{callID: callID, message: SessionDecision{Decision: &d.Decision, Key: d.Key}}, true
	}
	return answer{}, false
}

// groupsAt are the groups that may decide w at now.
func (r *roomRun) groupsAt(w WaitingCall, now time.Time) []string {
	p := r.state.Profiles[w.Profile]
	if p.EscalateAfter > 0 && !now.Before(time.UnixMilli(w.RequestedAt).Add(p.EscalateAfter)) {
		return append(slices.Clone(p.Groups), p.EscalateTo...)
	}
	return p.Groups
}

// flush sends what is owed, in batches. Between batches it takes the
// messages that arrived meanwhile, so a revoke stops a release before the
// next batch, and it stops early when the run should continue as new.
func (r *roomRun) flush(ctx workflow.Context, box roomInbox) {
	for len(r.state.Owed) > 0 {
		n := min(len(r.state.Owed), maxBatch)
		var batch []answer
		for _, id := range r.state.Owed[:n] {
			delete(r.owed, id)
			if a, ok := r.answerFor(ctx, id); ok {
				batch = append(batch, a)
			}
		}
		r.state.Owed = slices.Clone(r.state.Owed[n:])
		r.send(ctx, batch)
		for _, a := range batch {
			r.forget(a.callID) // decided, or gone
		}
		if len(r.index) < len(r.state.Calls)/2 {
			r.reindex()
		}
		r.drain(ctx, box)
		if r.continueAsNewNow(ctx) {
			return
		}
	}
}

// send delivers a batch: a small one from the workflow, a large one from
// SendSignals, retried until it is sent. A call that no longer runs needs
// nothing.
func (r *roomRun) send(ctx workflow.Context, batch []answer) {
	if len(batch) <= maxInlineSignals {
		sent := make([]workflow.Future, len(batch))
		for i, a := range batch {
			sent[i] = workflow.SignalExternalWorkflow(ctx, CallWorkflowID(a.callID), "", SignalSessionDecision, a.message)
		}
		awaitAll(ctx, sent)
		return
	}
	signals := make([]outgoingSignal, len(batch))
	for i, a := range batch {
		signals[i] = outgoingSignal{WorkflowID: CallWorkflowID(a.callID), Name: SignalSessionDecision, Arg: a.message}
	}
	// By name: the input is activities.SignalsInput in the JSON it encodes to.
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, signalsOptions), "SendSignals", outgoingSignals{Signals: signals}).Get(ctx, nil)
	if err != nil {
		// Retries have no cap: only a cancelled room gets here.
		workflow.GetLogger(ctx).Warn("Could not send a batch of answers", "session", r.in.Session, "room", r.in.Room, "error", err)
	}
}

// outgoingSignals is activities.SignalsInput as the workflow writes it:
// each argument is encoded with the activity's input, where
// activities.Signal holds it as raw JSON.
type outgoingSignals struct {
	Signals []outgoingSignal `json:"signals"`
}

type outgoingSignal struct {
	WorkflowID string `json:"workflow_id"`
	Name       string `json:"name"`
	Arg        any    `json:"arg,omitempty"`
}

// signalsOptions retry a batch of answers until it is sent (the calls
// take a repeated answer as one); SendSignals keeps its progress in its
// heartbeat.
var signalsOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 5 * time.Minute,
	HeartbeatTimeout:    time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
}
