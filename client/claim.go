package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
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
	sd, err := c.signCall(ctx, callID, func(call policy.Call) (statement.Statement, error) {
		if call.Requester != requester {
			return statement.Statement{}, &RefusedError{Type: workflows.ErrTypeNotAuthorized, Message: "only the agent that requested call " + callID + " may take its approval"}
		}
		return policy.ClaimStatement(call, cl.Run), nil
	})
	if err != nil {
		return err
	}
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.CallWorkflowID(callID),
		UpdateName:   workflows.UpdateClaim,
		Args:         []any{workflows.ClaimRequest{CallID: callID, By: requester, Run: cl.Run, NoReport: cl.NoReport, Statement: sd}},
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

// FirstAnswer is where a new agent-executed call stands once its first
// workflow task has settled it (see SubmitAndClaim).
type FirstAnswer struct {
	// Status is the call: its Result when it ended, else its State
	// (workflows.StatusPending while it asks a person,
	// workflows.StatusApproved while it waits for its run).
	Status Status
	// Claimed: the approval was taken for the claim's run.
	Claimed bool
	// ClaimErr is why the approval could not be taken, as Claim would
	// have said it (a *RefusedError).
	ClaimErr error
}

// FastAgent is an Agent that submits an agent-executed call, learns its
// decision and takes its approval in one round trip: this client
// (update-with-start) and the HTTP API's (a claim in the submission).
type FastAgent interface {
	Agent
	SubmitAndClaim(ctx context.Context, req CallRequest, cl Claim) (*FirstAnswer, error)
}

// SubmitAndClaim submits an agent-executed call with update-with-start
// and returns where it stands once its workflow has settled it: ended,
// asking a person, or approved; an approved call's approval is taken for
// cl.Run then, through the same checks as Claim (an empty cl.Run takes
// nothing). A call the policy decides settles in its first workflow task,
// so it is submitted, decided and claimed in one round trip.
//
// It returns a nil answer and no error when the call is submitted but
// did not answer this way: its ID was taken by the same call before
// (resubmitted, checked as Submit does), its worker predates the update,
// or ctx ended before the call was settled (a worker that is slow or
// down, a ledger that is down). Wait for such a call with WaitDecided
// and claim it with Claim.
func (c *Client) SubmitAndClaim(ctx context.Context, req CallRequest, cl Claim) (*FirstAnswer, error) {
	if req.Execution != policy.ExecutionAgent {
		return nil, &InputError{Field: "execution", Problem: `must be "agent": only an agent-executed call is claimed`}
	}
	if cl.Run != "" {
		if err := cl.Validate(); err != nil {
			return nil, err
		}
	}
	in, err := c.prepare(ctx, &req)
	if err != nil {
		return nil, err
	}
	// Its run is not known before it starts: the claim's statement names
	// the call, its arguments and the run of the agent's tool.
	claimed, err := c.sign(policy.ClaimStatement(in.Call, cl.Run))
	if err != nil {
		return nil, err
	}
	start := c.tc.NewWithStartWorkflowOperation(c.startOptions(req), workflows.ToolCallWorkflow, in)
	h, err := c.tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   workflows.UpdateFirstAnswer,
			Args:         []any{workflows.ClaimRequest{CallID: req.CallID, By: req.Requester, Run: cl.Run, NoReport: cl.NoReport, Statement: claimed}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil, c.checkSameCall(ctx, req)
	}
	if err != nil && ctx.Err() != nil && wasStarted(start) {
		return nil, nil // started; ctx ended before the call was settled
	}
	if err != nil {
		return nil, fmt.Errorf("start call %s: %w", req.CallID, err)
	}
	var ans workflows.FirstAnswer
	if err := h.Get(ctx, &ans); err != nil {
		// Started, but not answered (ctx ended first, or an older worker
		// refused the update): the caller waits for it as for any call.
		return nil, nil
	}
	first := &FirstAnswer{Status: Status{State: &ans.State}, Claimed: ans.Claimed}
	if r := ans.State.Result; r != nil {
		first.Status = Status{Result: r}
	}
	if rf := ans.ClaimRefused; rf != nil {
		first.ClaimErr = &RefusedError{Type: rf.Type, Message: rf.Message}
	}
	return first, nil
}

// wasStarted reports whether the server answered that start's workflow
// started; the SDK records that as soon as an answer arrives, so a short
// look is enough.
func wasStarted(start client.WithStartWorkflowOperation) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	run, err := start.Get(ctx)
	return err == nil && run != nil
}
