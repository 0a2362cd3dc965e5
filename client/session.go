package client

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/workflows"
)

// ErrNotYourSession refuses a call into a session that belongs to another
// agent. It says nothing about what the session holds; the HTTP API
// answers it with 403.
var ErrNotYourSession = errors.New("the session belongs to another agent")

// claimSession makes sure session belongs to agent: a session belongs to
// the agent (the requester: a token's name) whose call opened it, for as
// long as its workflow runs, and for good once it ended. A session that
// does not run yet (or that idled out without an end) is opened here,
// with agent as its owner, before the call starts. Two processes of one
// agent share a session by using the same token.
func (c *Client) claimSession(ctx context.Context, session, agent string) error {
	id := workflows.SessionWorkflowID(session)
	for range 2 { // a second look after losing the race to open it
		desc, err := c.tc.DescribeWorkflowExecution(ctx, id, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
		case err != nil:
			return fmt.Errorf("read session %s: %w", session, err)
		default:
			info := desc.GetWorkflowExecutionInfo()
			news, owner, err := activities.SessionMemo(info)
			if err != nil {
				return fmt.Errorf("read session %s: %w", session, err)
			}
			if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || news.End != nil {
				if owner != agent {
					return ErrNotYourSession
				}
				return nil
			}
		}
		_, err = c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID:                                       id,
			TaskQueue:                                c.taskQueue,
			WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
			WorkflowExecutionErrorWhenAlreadyStarted: true,
			Memo:                                     map[string]any{activities.MemoOwner: agent},
		}, workflows.SessionWorkflowType, workflows.SessionInput{Session: session, Owner: agent})
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open session %s: %w", session, err)
		}
		return nil
	}
	return fmt.Errorf("open session %s: it was opened and closed while this call tried to join it; try again", session)
}
