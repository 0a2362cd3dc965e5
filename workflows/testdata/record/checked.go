package main

import (
	"context"

	toolgate "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// checked records calls that run their tool as RunToolChecked, with the
// checks beside it: checked-auto (its evaluation ran the before-call
// checks; no local activity but Evaluate and the ledger's) and
// checked-approve (a person approved it; its tool's activity carries the
// room leave and every check).
func (r *recorder) checked(ctx context.Context) error {
	const session = "replay-checked"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "checked-auto", Session: session, Tool: "echo", Args: []byte(`{"text":"hi"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "checked-auto", workflows.StatusOK, policy.Approved, "policy"); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "checked-auto", workflows.CallWorkflowID("checked-auto"), ""); err != nil {
		return err
	}
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "checked-approve", Session: session, Tool: "write", Args: []byte(`{"path":"checked.txt","content":"hi"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.waitPending(ctx, "checked-approve"); err != nil {
		return err
	}
	if err := r.decide(ctx, "checked-approve", policy.Approved); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "checked-approve", workflows.StatusOK, policy.Approved, "cli"); err != nil {
		return err
	}
	return r.writeHistory(ctx, "checked-approve", workflows.CallWorkflowID("checked-approve"), "")
}
