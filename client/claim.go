package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/workflows"
)

// Claim is an agent taking the approval of an agent-executed call for one
// run of its tool.
type Claim struct {
	// Run names the run, e.g. a hook's tool_use_id: at most
	// workflows.MaxRunBytes bytes.
	Run string `json:"run"`
	// NoReport: the agent will not report how the run went; the call ends
	// at the claim (status ok).
	NoReport bool `json:"no_report,omitempty"`
}

// Validate refuses a claim without a run name, or with one that is too
// long.
func (cl Claim) Validate() error {
	if strings.TrimSpace(cl.Run) == "" || len(cl.Run) > workflows.MaxRunBytes {
		return &InputError{Field: "run", Problem: fmt.Sprintf("must name the run, in 1 to %d bytes, not only spaces", workflows.MaxRunBytes)}
	}
	return nil
}

// IsApprovalUsed reports whether err says a call's approval cannot be
// taken (any more): another run took it, the call ended, or the approval
// was voided (its session ended, its sticky decision was revoked).
func IsApprovalUsed(err error) bool {
	var refused *RefusedError
	return errors.As(err, &refused) && (refused.Type == workflows.ErrTypeAlreadyClaimed || refused.Type == workflows.ErrTypeNotWaiting ||
		refused.Type == workflows.ErrTypeApprovalVoided)
}

// Claim takes an approved agent-executed call's approval for the run
// cl.Run. It succeeds once per call, and again for the same run; the
// workflow decides, so no copy of what an agent remembers can use one
// approval twice. Another run's claim is refused with a *RefusedError of
// type workflows.ErrTypeAlreadyClaimed; a call that is not approved and
// waiting for its run (still waiting for a person, denied, reported,
// ended) with workflows.ErrTypeNotWaiting. Only the call's requester may
// claim it.
func (c *Client) Claim(ctx context.Context, callID, requester string, cl Claim) error {
	if err := ValidateID("call_id", callID); err != nil {
		return err
	}
	if err := cl.Validate(); err != nil {
		return err
	}
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.CallWorkflowID(callID),
		UpdateName:   workflows.UpdateClaim,
		Args:         []any{workflows.ClaimRequest{CallID: callID, By: requester, Run: cl.Run, NoReport: cl.NoReport}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return c.claimOfEnded(ctx, callID, err)
	}
	if err != nil {
		return refusal(err)
	}
	return nil
}

// claimOfEnded explains a claim that found no running call.
func (c *Client) claimOfEnded(ctx context.Context, callID string, err error) error {
	err = c.mapNotFound(ctx, callID, err)
	var decided *AlreadyDecidedError
	if errors.As(err, &decided) {
		return &RefusedError{Type: workflows.ErrTypeNotWaiting, Message: fmt.Sprintf("call %s already ended: its approval can no longer be taken", callID)}
	}
	return err
}
