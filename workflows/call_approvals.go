package workflows

import (
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
)

// Four eyes: a call whose rule needs more than one approval waits until
// that many distinct people (from distinct groups, when the rule says so)
// approved it; any one denial denies it. Only a person's plain approval
// counts: approving for the session, approving edited arguments, a sticky
// decision and the coded handler's approval do not.

// needsApprovals starts the count of a call whose request needs more than
// one approval.
func (c *callRun) needsApprovals(req policy.ApprovalRequest) {
	if req.Approvals > 1 {
		c.state.Approvals = &Approvals{Needed: req.Approvals, Given: []ApprovalGiven{}}
	}
}

// approvalCounts reports whether d may decide the call alone: false for
// an approval of a four-eyes call (sticky, handler's, or a person's that
// the count takes).
func (c *callRun) approvalCounts(d policy.Decision) bool {
	return c.state.Approvals == nil || !d.Kind.Approves()
}

// validateApproval refuses an approval of a four-eyes call that cannot
// count: one for the session, with edits, or from someone (or a group)
// already counted.
func (c *callRun) validateApproval(d policy.Decision) error {
	a := c.state.Approvals
	if a == nil || !d.Kind.Approves() {
		return nil
	}
	id := c.state.Call.ID
	switch d.Kind {
	case policy.ApprovedForSession:
		return temporal.NewApplicationError(fmt.Sprintf("call %s needs %d approvals from distinct people: approve it for this call only, or deny it", id, a.Needed), ErrTypeInvalidDecision)
	case policy.ApprovedWithEdits:
		return temporal.NewApplicationError(fmt.Sprintf("call %s needs %d approvals of the same arguments: it cannot be edited; deny it with a reason instead", id, a.Needed), ErrTypeInvalidDecision)
	}
	if u := c.state.Call.ActingUser; u != "" && d.DecidedBy == u {
		return temporal.NewApplicationError(fmt.Sprintf("%s runs the agent that asked for call %s; its %d approvals must come from other people", u, id, a.Needed), ErrTypeSelfApproval)
	}
	if slices.ContainsFunc(a.Given, func(g ApprovalGiven) bool { return g.By == d.DecidedBy }) {
		return temporal.NewApplicationError(fmt.Sprintf("%s already approved call %s (%s); another person must", d.DecidedBy, id, a.progress()), ErrTypeNotAnotherApproval)
	}
	if c.state.Request.DistinctGroups && c.groupFor(d) == "" {
		return temporal.NewApplicationError(fmt.Sprintf("call %s needs its approvals from different groups of %s, and %s's are counted already (%s)",
			id, strings.Join(c.state.Request.Groups, ", "), d.DecidedBy, a.progress()), ErrTypeNotAnotherApproval)
	}
	return nil
}

// groupFor is the first group of the request the approver may act for
// that no earlier approval counts for ("" when none is left).
func (c *callRun) groupFor(d policy.Decision) string {
	for _, g := range c.state.Request.Groups {
		taken := slices.ContainsFunc(c.state.Approvals.Given, func(a ApprovalGiven) bool { return a.Group == g })
		if !taken && d.Approver().MayAct([]string{g}) == nil {
			return g
		}
	}
	return ""
}

// countApproval records a validated approval, and decides the call once
// it has all it needs: approved, by the last approver, the comment naming
// them all.
func (c *callRun) countApproval(ctx workflow.Context, d policy.Decision) {
	a := c.state.Approvals
	given := ApprovalGiven{By: d.DecidedBy, Channel: d.Channel, At: d.DecidedAt, Identity: d.Identity, Passkey: d.Passkey}
	if c.state.Request.DistinctGroups {
		given.Group = c.groupFor(d)
	}
	a.Given = append(a.Given, given)
	if len(a.Given) < a.Needed {
		// For the pending listings (people read them; nothing decides by them).
		if err := workflow.UpsertMemo(ctx, map[string]any{MemoApprovals: a.progress()}); err != nil {
			workflow.GetLogger(ctx).Warn("Could not update the memo", "callID", c.state.Call.ID, "error", err)
		}
		return
	}
	var names []string
	for _, g := range a.Given {
		names = append(names, g.By)
	}
	d.Comment = strings.TrimSpace(d.Comment + " (approved by " + strings.Join(names, ", ") + ")")
	c.apply(ctx, d)
}

func (a *Approvals) progress() string {
	return fmt.Sprintf("%d of %d approvals", len(a.Given), a.Needed)
}
