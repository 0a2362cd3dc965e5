package main

import (
	"context"
	"fmt"

	toolgate "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// baseline records calls that begin at versionBaseline and leave their
// waiting room from their tool's activity, as prefix-approve (its room
// hears the leave from the activity), prefix-deny (the leave is its own
// signal) and the approved call's room, once idle (prefix-approve-room).
// The baseline-* histories were recorded by the release whose calls
// recorded versionBaseline's marker; this release's calls take it from
// their evaluation, recorded as evaluated-baseline-*; joined-* were
// recorded once workers gathered registrations (the join's result names
// the room; the room keeps its timer). A lone call's batch goes to the
// room of its ID.
func (r *recorder) baseline(prefix string) func(context.Context) error {
	return func(ctx context.Context) error { return r.baselineCalls(ctx, prefix) }
}

func (r *recorder) baselineCalls(ctx context.Context, prefix string) error {
	session := "replay-" + prefix
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	for _, c := range []struct {
		id   string
		kind policy.DecisionKind
		want workflows.Status
	}{{prefix + "-approve", policy.Approved, workflows.StatusOK}, {prefix + "-deny", policy.Denied, workflows.StatusDenied}} {
		id, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: c.id, Session: session, Tool: "write",
			Args: []byte(`{"path":"` + prefix + `.txt","content":"hi"}`), Requester: agent})
		if err != nil {
			return err
		}
		if err := r.waitPending(ctx, id); err != nil {
			return err
		}
		if err := r.decide(ctx, id, c.kind); err != nil {
			return err
		}
		if err := r.expectResult(ctx, id, c.want, c.kind, "cli"); err != nil {
			return err
		}
		if err := r.writeHistory(ctx, c.id, workflows.CallWorkflowID(id), ""); err != nil {
			return err
		}
	}
	room := workflows.RoomWorkflowID(session, workflows.RoomOf(prefix+"-approve"))
	if err := r.tc.GetWorkflow(ctx, room, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("room %s: %w", room, err)
	}
	return r.writeHistory(ctx, prefix+"-approve-room", room, "")
}
