package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// PendingCall is a call waiting for a person, as listed from visibility.
type PendingCall struct {
	CallID      string    `json:"call_id"`
	Session     string    `json:"session"`
	Tool        string    `json:"tool"`
	Args        string    `json:"args"` // abridged
	Message     string    `json:"message"`
	Rule        string    `json:"rule,omitempty"`
	Groups      []string  `json:"groups,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline,omitzero"`
}

// PendingFilter narrows Pending; empty fields match everything.
type PendingFilter struct {
	Session string
	Tool    string
}

// Pending lists the calls waiting for a person, oldest first, with one
// visibility query (no call is queried).
func (c *Client) Pending(ctx context.Context, f PendingFilter) ([]PendingCall, error) {
	q := fmt.Sprintf("%s = '%s' AND ExecutionStatus = 'Running'", workflows.AttrStatus.GetName(), workflows.StatusPending)
	if f.Session != "" {
		q += fmt.Sprintf(" AND %s = '%s'", workflows.AttrSession.GetName(), quote(f.Session))
	}
	if f.Tool != "" {
		q += fmt.Sprintf(" AND %s = '%s'", workflows.AttrTool.GetName(), quote(f.Tool))
	}
	var out []PendingCall
	var token []byte
	for {
		resp, err := c.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list pending calls: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			p, err := pendingFrom(e.GetExecution().GetWorkflowId(), e.GetSearchAttributes(), e.GetMemo())
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	// Visibility returns newest first; approvers work oldest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

func quote(s string) string { return strings.ReplaceAll(s, "'", "\\'") }

func pendingFrom(workflowID string, raw *commonpb.SearchAttributes, memo *commonpb.Memo) (PendingCall, error) {
	sa, err := searchAttributes(raw)
	if err != nil {
		return PendingCall{}, err
	}
	p := PendingCall{
		CallID:      strings.TrimPrefix(workflowID, workflows.CallWorkflowID("")),
		Session:     sa.session,
		Tool:        sa.tool,
		RequestedAt: sa.requestedAt,
	}
	dc := converter.GetDefaultDataConverter()
	fields := memo.GetFields()
	decode := func(key string, into any) {
		if v, ok := fields[key]; ok {
			_ = dc.FromPayload(v, into)
		}
	}
	decode(workflows.MemoMessage, &p.Message)
	decode(workflows.MemoArgs, &p.Args)
	decode(workflows.MemoRule, &p.Rule)
	decode(workflows.MemoGroups, &p.Groups)
	decode(workflows.MemoDeadline, &p.Deadline)
	return p, nil
}

type callAttributes struct {
	session, tool, status string
	requestedAt           time.Time
}

func searchAttributes(raw *commonpb.SearchAttributes) (callAttributes, error) {
	var a callAttributes
	dc := converter.GetDefaultDataConverter()
	for name, into := range map[string]any{
		workflows.AttrSession.GetName():     &a.session,
		workflows.AttrTool.GetName():        &a.tool,
		workflows.AttrStatus.GetName():      &a.status,
		workflows.AttrRequestedAt.GetName(): &a.requestedAt,
	} {
		if v, ok := raw.GetIndexedFields()[name]; ok {
			if err := dc.FromPayload(v, into); err != nil {
				return a, fmt.Errorf("decode search attribute %s: %w", name, err)
			}
		}
	}
	return a, nil
}

// Decide applies a person's decision to a waiting call and returns it as
// recorded. A refused decision changes nothing and returns
// ErrUnknownCall, *AlreadyDecidedError or *RefusedError.
func (c *Client) Decide(ctx context.Context, callID string, d policy.Decision) (policy.Decision, error) {
	if err := d.Validate(); err != nil {
		return policy.Decision{}, &RefusedError{Type: workflows.ErrTypeInvalidDecision, Message: "invalid decision: " + err.Error()}
	}
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.CallWorkflowID(callID),
		UpdateName:   workflows.UpdateDecide,
		Args:         []any{workflows.DecideRequest{CallID: callID, Decision: d}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return policy.Decision{}, c.decideError(ctx, callID, err)
	}
	var applied policy.Decision
	if err := h.Get(ctx, &applied); err != nil {
		return policy.Decision{}, c.decideError(ctx, callID, err)
	}
	return applied, nil
}

func (c *Client) decideError(ctx context.Context, callID string, err error) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return c.mapNotFound(ctx, callID, err)
	}
	return refusal(err)
}

// Session returns a session's sticky decisions and waiting calls. A
// session that never asked anyone (or ended) has none.
func (c *Client) Session(ctx context.Context, session string) (workflows.SessionView, error) {
	v, err := c.tc.QueryWorkflow(ctx, workflows.SessionWorkflowID(session), "", workflows.QuerySession)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return workflows.SessionView{Session: session}, nil
	}
	if err != nil {
		return workflows.SessionView{}, fmt.Errorf("query session %s: %w", session, err)
	}
	var view workflows.SessionView
	if err := v.Get(&view); err != nil {
		return view, fmt.Errorf("decode session %s: %w", session, err)
	}
	return view, nil
}

// Revoke removes a sticky decision (key: usually the tool name); the next
// call asks again.
func (c *Client) Revoke(ctx context.Context, session, key string) error {
	return c.updateSession(ctx, session, workflows.UpdateRevoke, key, nil)
}

// EndSession ends a session: its waiting calls are denied and its sticky
// decisions forgotten. It returns how many calls were denied.
func (c *Client) EndSession(ctx context.Context, session, by string) (int, error) {
	var denied int
	err := c.updateSession(ctx, session, workflows.UpdateEnd, by, &denied)
	return denied, err
}

func (c *Client) updateSession(ctx context.Context, session, update string, arg, result any) error {
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.SessionWorkflowID(session),
		UpdateName:   update,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, result)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &RefusedError{Type: workflows.ErrTypeSessionEnded, Message: fmt.Sprintf("session %s is not active (it never asked a person, or it ended)", session)}
	}
	if err != nil {
		return refusal(err)
	}
	return nil
}
