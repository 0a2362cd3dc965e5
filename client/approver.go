package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/workflows"
)

// CallSummary is one call as visibility lists it: no workflow is queried.
// Message, Args, Rule, Groups and Deadline are set for calls that waited
// for a person.
type CallSummary struct {
	CallID      string    `json:"call_id"`
	Session     string    `json:"session"`
	Tool        string    `json:"tool"`
	Status      string    `json:"status"`
	Requester   string    `json:"requester,omitempty"`
	DecidedBy   string    `json:"decided_by,omitempty"`
	Channel     string    `json:"channel,omitempty"`
	Args        string    `json:"args,omitempty"` // abridged
	Message     string    `json:"message,omitempty"`
	Rule        string    `json:"rule,omitempty"`
	Groups      []string  `json:"groups,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline,omitzero"`
	ClosedAt    time.Time `json:"closed_at,omitzero"`
	// Approvals says how far a four-eyes call is: "1 of 2 approvals".
	Approvals string `json:"approvals,omitempty"`
}

// PendingCall is a call waiting for a person.
type PendingCall = CallSummary

// ListFilter narrows List, ListPage and Pending; empty fields match
// everything.
type ListFilter struct {
	Session   string
	Tool      string
	Requester string
	// Status is a workflows.Status; "decided" means every final status.
	// Pending ignores it.
	Status string
	// Since keeps calls requested at or after it; zero keeps all.
	Since time.Time
	// Before keeps calls requested before it; zero keeps all.
	Before time.Time
	// DecidableBy keeps the calls this approver's groups may decide (the
	// call is asked of one of them, or of no group; "*" is every group).
	// Pending only; nil keeps all.
	DecidableBy *policy.Approver
	// Limit caps the number of calls List returns; zero means 500. The
	// paged listings ignore it.
	Limit int
}

// List lists calls, newest first, up to f.Limit, with one visibility
// query per thousand calls. ListPage and Pending list a page at a time.
func (c *Client) List(ctx context.Context, f ListFilter) ([]CallSummary, error) {
	q, err := listQuery(f)
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 500
	}
	return c.summaries(ctx, q, int32(min(limit, 1000)), limit)
}

// summaries lists the calls a visibility query matches, pageSize at a
// time, up to limit (0: all of them).
func (c *Client) summaries(ctx context.Context, q string, pageSize int32, limit int) ([]CallSummary, error) {
	var out []CallSummary
	var token []byte
	for limit == 0 || len(out) < limit {
		resp, err := c.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token, PageSize: pageSize})
		if err != nil {
			return nil, fmt.Errorf("list calls: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			s, err := summaryFrom(c.dc, e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func joinStatuses(ss []workflows.Status) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// listStatuses are the values ListFilter.Status may take.
var listStatuses = []workflows.Status{"decided", workflows.StatusOK, workflows.StatusDenied, workflows.StatusTimedOut,
	workflows.StatusError, workflows.StatusUnknown, workflows.StatusEvaluating, workflows.StatusPending, workflows.StatusRunning, workflows.StatusApproved}

// listQuery builds the visibility query of a filter. Every value is
// checked first (the identifier rule; a known status), so none can leave
// its quotes; quote escapes them all the same.
func listQuery(f ListFilter) (string, error) {
	conds := []string{"WorkflowType = '" + workflows.ToolCallWorkflowType + "'"}
	eq := func(key temporal.SearchAttributeKey, v string) {
		conds = append(conds, fmt.Sprintf("%s = '%s'", key.GetName(), quote(v)))
	}
	for _, c := range []struct {
		field, value string
		key          temporal.SearchAttributeKey
	}{
		{"session", f.Session, workflows.AttrSession},
		{"tool", f.Tool, workflows.AttrTool},
		{"requester", f.Requester, workflows.AttrRequester},
	} {
		if c.value == "" {
			continue
		}
		if err := ValidateID(c.field, c.value); err != nil {
			return "", err
		}
		eq(c.key, c.value)
	}
	switch {
	case f.Status == "":
	case !slices.Contains(listStatuses, workflows.Status(f.Status)):
		return "", &InputError{Field: "status", Problem: "must be one of " + joinStatuses(listStatuses)}
	case f.Status == "decided":
		conds = append(conds, "ExecutionStatus = 'Completed'")
	case f.Status == string(workflows.StatusPending):
		conds = append(conds, "ExecutionStatus = 'Running'")
		eq(workflows.AttrStatus, f.Status)
	default:
		eq(workflows.AttrStatus, f.Status)
	}
	if !f.Since.IsZero() {
		conds = append(conds, fmt.Sprintf("%s >= '%s'", workflows.AttrRequestedAt.GetName(), f.Since.UTC().Format(time.RFC3339)))
	}
	if !f.Before.IsZero() {
		conds = append(conds, fmt.Sprintf("%s < '%s'", workflows.AttrRequestedAt.GetName(), f.Before.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)))
	}
	return strings.Join(conds, " AND "), nil
}

// quote escapes a value for a single-quoted visibility query string:
// backslashes first, then quotes.
func quote(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

func summaryFrom(dc converter.DataConverter, e *workflowpb.WorkflowExecutionInfo) (CallSummary, error) {
	sa, err := searchAttributes(e.GetSearchAttributes())
	if err != nil {
		return CallSummary{}, err
	}
	s := CallSummary{
		CallID:      strings.TrimPrefix(e.GetExecution().GetWorkflowId(), workflows.CallWorkflowID("")),
		Session:     sa.session,
		Tool:        sa.tool,
		Status:      sa.status,
		Requester:   sa.requester,
		DecidedBy:   sa.decidedBy,
		Channel:     sa.channel,
		RequestedAt: sa.requestedAt,
	}
	if e.GetCloseTime() != nil {
		s.ClosedAt = e.GetCloseTime().AsTime()
	}
	fields := e.GetMemo().GetFields()
	var errs []error
	decode := func(key string, into any) {
		if v, ok := fields[key]; ok {
			// A memo of an older shape reads as far as it goes; one that
			// does not decrypt is said, never shown as empty.
			if err := dc.FromPayload(v, into); err != nil && keyring.Encrypted(v) {
				errs = append(errs, fmt.Errorf("call %s: memo %s: %w", s.CallID, key, err))
			}
		}
	}
	decode(workflows.MemoMessage, &s.Message)
	decode(workflows.MemoArgs, &s.Args)
	decode(workflows.MemoRule, &s.Rule)
	decode(workflows.MemoGroups, &s.Groups)
	decode(workflows.MemoDeadline, &s.Deadline)
	decode(workflows.MemoApprovals, &s.Approvals)
	return s, errors.Join(errs...)
}

type callAttributes struct {
	session, tool, status, requester, decidedBy, channel string
	requestedAt                                          time.Time
}

func searchAttributes(raw *commonpb.SearchAttributes) (callAttributes, error) {
	var a callAttributes
	dc := converter.GetDefaultDataConverter()
	for name, into := range map[string]any{
		workflows.AttrSession.GetName():     &a.session,
		workflows.AttrTool.GetName():        &a.tool,
		workflows.AttrStatus.GetName():      &a.status,
		workflows.AttrRequester.GetName():   &a.requester,
		workflows.AttrDecidedBy.GetName():   &a.decidedBy,
		workflows.AttrChannel.GetName():     &a.channel,
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
	if err := ValidateID("call_id", callID); err != nil {
		return policy.Decision{}, err
	}
	if err := d.ValidateIncoming(); err != nil {
		return policy.Decision{}, &RefusedError{Type: workflows.ErrTypeInvalidDecision, Message: "invalid decision: " + err.Error()}
	}
	return c.decide(ctx, callID, d)
}

// decide signs d, naming the call it decides (and, for a sticky decision,
// the key it is kept under), and sends it.
func (c *Client) decide(ctx context.Context, callID string, d policy.Decision) (policy.Decision, error) {
	sd, err := c.signCall(ctx, callID, func(call policy.Call) (statement.Statement, error) {
		key := ""
		if d.Kind.Sticky() {
			var err error
			if key, err = c.stickyKey(ctx, call); err != nil {
				return statement.Statement{}, err
			}
		}
		return policy.DecisionStatement(call, d, key), nil
	})
	if err != nil {
		return policy.Decision{}, err
	}
	d.Statement = sd
	return c.updateCall(ctx, callID, workflows.UpdateDecide, workflows.DecideRequest{CallID: callID, Decision: d})
}

// CheckDecision asks the call's workflow whether it would take d now,
// with the same check its decide update makes, and changes nothing: nil
// when it would, its refusal (a *RefusedError) when not. A worker from
// before this check answers nothing and so refuses nothing.
func (c *Client) CheckDecision(ctx context.Context, callID string, d policy.Decision) error {
	if err := ValidateID("call_id", callID); err != nil {
		return err
	}
	if err := d.ValidateIncoming(); err != nil {
		return &RefusedError{Type: workflows.ErrTypeInvalidDecision, Message: "invalid decision: " + err.Error()}
	}
	v, err := c.tc.QueryWorkflow(ctx, workflows.CallWorkflowID(callID), "", workflows.QueryCheckDecision, workflows.DecideRequest{CallID: callID, Decision: d})
	var failed *serviceerror.QueryFailed
	switch {
	case errors.As(err, &failed) && strings.Contains(failed.Message, "unknown queryType"):
		return nil
	case err != nil:
		return c.decideError(ctx, callID, err)
	}
	var check workflows.DecisionCheck
	if err := v.Get(&check); err != nil {
		return fmt.Errorf("decode the check of call %s: %w", callID, err)
	}
	if check.RefusalType != "" {
		return &RefusedError{Type: check.RefusalType, Message: check.Refusal}
	}
	return nil
}

// DecideAsUser applies the decision of the person running the agent,
// taken in the agent's own client (an MCP elicitation, a coding agent's
// prompt): user must be the call's acting user and its rule must let them
// decide (`user: true`), which the workflow checks. Only the kind, reason
// and comment of d are used.
func (c *Client) DecideAsUser(ctx context.Context, callID, user string, d policy.Decision) (policy.Decision, error) {
	if err := ValidateID("call_id", callID); err != nil {
		return policy.Decision{}, err
	}
	if d.Kind == policy.ApprovedWithEdits {
		return policy.Decision{}, &RefusedError{Type: workflows.ErrTypeInvalidDecision, Message: "invalid decision: the person running the agent approves or denies; edits are a remote approver's"}
	}
	d = policy.Decision{Kind: d.Kind, Reason: d.Reason, Comment: d.Comment, DecidedBy: user, Channel: policy.ChannelClient, User: true}
	if err := d.ValidateIncoming(); err != nil {
		return policy.Decision{}, &RefusedError{Type: workflows.ErrTypeInvalidDecision, Message: "invalid decision: " + err.Error()}
	}
	return c.decide(ctx, callID, d)
}

// Cancel cancels a call that waits for a person, as an approver: it ends
// denied, "cancelled by <by>", when by's groups cover it (an admin's "*"
// covers every call). A name alone cancels nothing: the requester
// withdraws its own call with CancelOwn. A refusal changes nothing.
func (c *Client) Cancel(ctx context.Context, callID string, by policy.Approver) (policy.Decision, error) {
	if err := ValidateID("call_id", callID); err != nil {
		return policy.Decision{}, err
	}
	return c.cancel(ctx, callID, workflows.CancelRequest{CallID: callID, By: by.Name, Groups: by.Groups, Identity: by.Identity})
}

// CancelOwn withdraws a call that waits for a person, as the agent that
// requested it: it ends denied, "cancelled by <requester>". Only the
// call's requester may; the HTTP API calls it only for an agent token, by
// the token's name. A refusal changes nothing.
func (c *Client) CancelOwn(ctx context.Context, callID, requester string) (policy.Decision, error) {
	if err := ValidateID("call_id", callID); err != nil {
		return policy.Decision{}, err
	}
	return c.cancel(ctx, callID, workflows.CancelRequest{CallID: callID, By: requester, AsRequester: true})
}

// cancel signs a cancel and sends it.
func (c *Client) cancel(ctx context.Context, callID string, req workflows.CancelRequest) (policy.Decision, error) {
	by := policy.Approver{Name: req.By, Groups: req.Groups, Identity: req.Identity}
	sd, err := c.signCall(ctx, callID, func(call policy.Call) (statement.Statement, error) {
		return policy.CancelStatement(call, by, req.AsRequester), nil
	})
	if err != nil {
		return policy.Decision{}, err
	}
	req.Statement = sd
	return c.updateCall(ctx, callID, workflows.UpdateCancel, req)
}

// updateCall sends a validated update that decides a call and returns the
// decision it recorded; a refusal changes nothing.
func (c *Client) updateCall(ctx context.Context, callID, update string, arg any) (policy.Decision, error) {
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.CallWorkflowID(callID),
		UpdateName:   update,
		Args:         []any{arg},
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

// Session returns a session's sticky decisions (those of its running
// workflow: none when it has none) and the calls waiting in it, as
// visibility lists them.
func (c *Client) Session(ctx context.Context, session string) (workflows.SessionView, error) {
	return c.session(ctx, session, nil)
}

// SessionFor is Session as viewer may see it: only the sticky decisions it
// may revoke and the waiting calls asked of groups it acts for (what
// Pending lists for it), counted alike, as the inbox shows an approver
// only what they may act on.
func (c *Client) SessionFor(ctx context.Context, session string, viewer policy.Approver) (workflows.SessionView, error) {
	view, err := c.session(ctx, session, &viewer)
	if err != nil {
		return view, err
	}
	view.Sticky = slices.DeleteFunc(view.Sticky, func(d workflows.StickyDecision) bool { return viewer.MayAct(d.Groups) != nil })
	return view, nil
}

func (c *Client) session(ctx context.Context, session string, viewer *policy.Approver) (workflows.SessionView, error) {
	view := workflows.SessionView{Session: session}
	// A session run that ended (idle, ended, terminated) holds nothing
	// any more, whatever its last state says.
	resp, err := c.tc.QueryWorkflowWithOptions(ctx, &client.QueryWorkflowWithOptionsRequest{
		WorkflowID: workflows.SessionWorkflowID(session), QueryType: workflows.QuerySession,
		QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
	})
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf), err == nil && resp.QueryRejected != nil: // no session run: no sticky decision, but calls may wait
	case err != nil:
		return view, fmt.Errorf("query session %s: %w", session, err)
	default:
		if err := resp.QueryResult.Get(&view); err != nil {
			return view, fmt.Errorf("decode session %s: %w", session, err)
		}
	}
	// Calls wait without registering with their session: visibility
	// lists them, oldest first.
	page, err := c.Pending(ctx, ListFilter{Session: session, DecidableBy: viewer}, PageRequest{Size: workflows.MaxWaitingShown})
	if err != nil {
		return view, fmt.Errorf("list the calls waiting in session %s: %w", session, err)
	}
	view.WaitingCount = int(page.Total)
	view.Waiting = view.Waiting[:0]
	for _, w := range page.Calls {
		view.Waiting = append(view.Waiting, workflows.Registration{CallID: w.CallID, Tool: w.Tool,
			Requester: w.Requester, Groups: w.Groups, RequestedAt: w.RequestedAt})
	}
	return view, nil
}

// Revoke removes a sticky decision (key: usually the tool name); the next
// call asks again. by must be allowed to act on the call the decision was
// taken on (its groups, or "*").
func (c *Client) Revoke(ctx context.Context, session, key string, by policy.Approver) error {
	sd, err := c.sign(policy.RevokeStatement(session, key, by))
	if err != nil {
		return err
	}
	req := workflows.RevokeRequest{Key: key, By: by.Name, Groups: by.Groups, Identity: by.Identity, Statement: sd}
	return c.updateSession(ctx, session, workflows.UpdateRevoke, req, nil)
}

// EndSession ends a session: its waiting calls are denied and its sticky
// decisions forgotten. It returns how many calls were denied. by must be
// allowed to act on every waiting call and sticky decision (or hold "*").
func (c *Client) EndSession(ctx context.Context, session string, by policy.Approver) (int, error) {
	sd, err := c.sign(policy.EndStatement(session, by))
	if err != nil {
		return 0, err
	}
	var denied int
	req := workflows.EndRequest{By: by.Name, Groups: by.Groups, Identity: by.Identity, Statement: sd}
	// Calls wait without a session workflow until one is needed: ending a
	// session that never started starts it, so its waiting calls are
	// denied all the same.
	err = c.updateWithStart(ctx, workflows.SessionWorkflowID(session), workflows.SessionWorkflowType,
		workflows.SessionInput{Session: session}, workflows.UpdateEnd, req, &denied)
	if err != nil {
		return 0, refusal(err)
	}
	return denied, nil
}

// updateWithStart sends a workflow an update and waits for its result,
// starting the workflow (with input) if it does not run.
func (c *Client) updateWithStart(ctx context.Context, id, workflowType string, input any, update string, arg, result any) error {
	start := c.tc.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                c.taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, workflowType, input)
	h, err := c.tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID:   id,
			UpdateName:   update,
			Args:         []any{arg},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return err
	}
	return h.Get(ctx, result)
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
		return &RefusedError{Type: workflows.ErrTypeSessionEnded, Message: fmt.Sprintf("session %s is not active (it holds no sticky decision, or it ended)", session)}
	}
	if err != nil {
		return refusal(err)
	}
	return nil
}

// Request returns the call as the agent submitted it, from the first event
// of its workflow history (before any edit by an approver).
func (c *Client) Request(ctx context.Context, callID string) (policy.Call, error) {
	call, _, err := c.callFacts(ctx, callID)
	return call, err
}
