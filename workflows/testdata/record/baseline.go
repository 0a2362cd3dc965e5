package main

import (
	"context"
	"fmt"

	toolgate "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// baseline: calls that begin at versionBaseline, which records one marker
// for every change before it and leaves its waiting room from its tool's
// activity. One asks and is approved (its room hears the leave from the
// activity), one asks and is denied (the leave is its own signal); then
// the approved call's room, once idle.
func (r *recorder) baseline(ctx context.Context) error {
	const session = "replay-baseline"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	for _, c := range []struct {
		id   string
		kind policy.DecisionKind
		want workflows.Status
	}{{"baseline-approve", policy.Approved, workflows.StatusOK}, {"baseline-deny", policy.Denied, workflows.StatusDenied}} {
		id, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: c.id, Session: session, Tool: "write",
			Args: []byte(`{"path":"baseline.txt","content":"hi"}`), Requester: agent})
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
	room := workflows.RoomWorkflowID(session, workflows.RoomOf("baseline-approve"))
	if err := r.tc.GetWorkflow(ctx, room, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("room %s: %w", room, err)
	}
	return r.writeHistory(ctx, "baseline-approve-room", room, "")
}
