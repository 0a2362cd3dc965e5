package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	if c.claims.holds(session, agent) {
		return nil
	}
	if err := c.openSession(ctx, session, agent); err != nil {
		return err
	}
	c.claims.add(session, agent)
	return nil
}

// openSession finds the session's owner, or opens the session for agent.
func (c *Client) openSession(ctx context.Context, session, agent string) error {
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
			news, owner, err := activities.SessionMemo(c.dc, info)
			if err != nil {
				return fmt.Errorf("read session %s: %w", session, err)
			}
			if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || news.End != nil {
				// A session an approver ended before any call opened it
				// has no owner: the call goes on, to be denied as ended.
				if owner != agent && (owner != "" || news.End == nil) {
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

// claimTTL is how long a session found to belong to an agent is taken as
// still belonging to it without a look. A session's owner changes only
// once its workflow closed without an end (idle for days), and a call's
// workflow checks the owner again whenever the session matters to it (it
// asks a person, or counts a quota).
const claimTTL = 30 * time.Second

// claims remembers recent claims, so an agent's calls in a busy session
// cost no extra round trip to Temporal each.
type claims struct {
	mu   sync.Mutex
	seen map[[2]string]time.Time
}

func (c *claims) holds(session, agent string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[[2]string{session, agent}]
	return ok && time.Since(at) < claimTTL
}

func (c *claims) add(session, agent string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || len(c.seen) > maxClaims {
		c.seen = map[[2]string]time.Time{} // forget them all rather than grow
	}
	c.seen[[2]string{session, agent}] = time.Now()
}

// maxClaims bounds the claims remembered.
const maxClaims = 10_000
