package client

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// Agent is what a program acting for an agent needs of toolgate. *Client
// (over Temporal) and *apiclient.Client (over the HTTP API, with an agent
// token) both implement it, so hooks and gateways take either.
type Agent interface {
	// Submit starts a call and returns its ID (idempotent by call ID).
	Submit(ctx context.Context, req CallRequest) (string, error)
	// Wait blocks until the call has a Result or ctx ends
	// (context.DeadlineExceeded).
	Wait(ctx context.Context, callID string) (workflows.Result, error)
	// WaitDecided blocks until the call has a Result, or, for an
	// agent-executed call, until it is approved and waits for the agent's
	// report (Status.State.Status is then workflows.StatusApproved and
	// Status.State.Call.Args are the arguments to run); or ctx ends
	// (context.DeadlineExceeded).
	WaitDecided(ctx context.Context, callID string) (Status, error)
	// Status returns where the call stands now.
	Status(ctx context.Context, callID string) (Status, error)
	// CancelOwn withdraws a call that waits for a person (denied,
	// "cancelled by" requester, who must be its requester; the API takes
	// the name from the token). A decided call is refused.
	CancelOwn(ctx context.Context, callID, requester string) (policy.Decision, error)
	// DecideAsUser applies the decision of the person running the agent,
	// taken in the agent's client (see Client.DecideAsUser); user is the
	// call's acting user (the API takes it from the token's owner).
	DecideAsUser(ctx context.Context, callID, user string, d policy.Decision) (policy.Decision, error)
	// Claim takes an approved agent-executed call's approval for one run
	// of its tool, once per call (see Client.Claim); requester must be the
	// call's requester (the API takes it from the token).
	Claim(ctx context.Context, callID, requester string, cl Claim) error
	// Report completes an approved agent-executed call with what the tool
	// did; requester must be the call's requester (the API takes it from
	// the token).
	Report(ctx context.Context, callID, requester string, r Report) error
	// Tools lists the tools toolgate runs that the policy does not deny
	// outright.
	Tools(ctx context.Context) ([]tool.Descriptor, error)
}

// Report is an agent's account of an agent-executed call: the tool's
// output, or the error it failed with. Exactly one is set, unless Unknown
// is: then Output may come with it.
type Report struct {
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Unknown says the tool ran but the agent cannot tell whether it
	// succeeded, and why (Codex reports a shell command's output without
	// its exit status); the call ends unknown, its output kept.
	Unknown string `json:"unknown,omitempty"`
	// Run, when set, names the run that claimed the call: the report is
	// refused unless that run took the approval.
	Run string `json:"run,omitempty"`
}

var _ Agent = (*Client)(nil)

// WaitingForPerson waits while the policy checks a new call, looking every
// poll, and returns the call as it waits for a person. ok is false when it
// does not (the policy or a sticky decision decided it at once), when it
// cannot be looked at, or when ctx ends.
func WaitingForPerson(ctx context.Context, agent Agent, callID string, poll time.Duration) (w Waiting, ok bool) {
	for {
		st, err := agent.Status(ctx, callID)
		if err != nil || st.State == nil {
			return Waiting{}, false
		}
		switch st.State.Status {
		case workflows.StatusPending:
			return WaitingView(st), true
		case workflows.StatusEvaluating:
		default:
			return Waiting{}, false
		}
		select {
		case <-ctx.Done():
			return Waiting{}, false
		case <-time.After(poll):
		}
	}
}
