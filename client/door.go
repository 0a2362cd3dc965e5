package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/workflows"
)

// ErrNoDoorKey is the refusal of a message the client cannot sign: the
// workflows take a submission, decision, cancel, claim, revoke or end
// only with a statement signed by a toolgate door (package statement).
var ErrNoDoorKey = errors.New("this client holds no door key, and toolgate's workflows take a submission, decision, cancel, claim, revoke or session end only with a statement signed by a toolgate door: " +
	"use toolgate's HTTP API (it signs for whom it authenticated), or give this client the door key of its deployment")

// WithDoor returns a client that signs what it sends as door: it must be
// a toolgate front door, which authenticated whoever it sends for (the
// HTTP API, the inbox, Slack, email, an operator's CLI). The workers trust
// door's public key.
func (c *Client) WithDoor(door *statement.Signer) *Client {
	n := *c
	n.door = door
	return &n
}

// sign signs what a message says.
// Sign signs st as this client's door: a statement about no call (a
// passkey's registration), which the ledger keeps with what it vouches for.
func (c *Client) Sign(st statement.Statement) (*statement.Signed, error) { return c.sign(st) }

func (c *Client) sign(st statement.Statement) (*statement.Signed, error) {
	if c.door == nil {
		return nil, ErrNoDoorKey
	}
	return c.door.Sign(st)
}

// callFacts is what a statement about a waiting call names: the call as
// its agent submitted it, and its run (the first of its chain, which a
// reset keeps), from the first event of its history.
func (c *Client) callFacts(ctx context.Context, callID string) (policy.Call, string, error) {
	if f, ok := c.facts.get(callID); ok {
		return f.call, f.run, nil
	}
	it := c.tc.GetWorkflowHistory(ctx, workflows.CallWorkflowID(callID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return policy.Call{}, "", fmt.Errorf("%w %q", ErrUnknownCall, callID)
	}
	ev, err := it.Next()
	if err != nil {
		return policy.Call{}, "", c.mapNotFound(ctx, callID, fmt.Errorf("read history of call %s: %w", callID, err))
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return policy.Call{}, "", fmt.Errorf("call %s: history does not start with its request", callID)
	}
	var in workflows.CallInput
	if err := c.dc.FromPayloads(attrs.GetInput(), &in); err != nil {
		return policy.Call{}, "", fmt.Errorf("decode request of call %s: %w", callID, err)
	}
	c.facts.put(callID, in.Call, attrs.GetFirstExecutionRunId())
	return in.Call, attrs.GetFirstExecutionRunId(), nil
}

// knownCalls remembers what a statement names of the calls this client
// submitted or read (a call's request and first run never change), so that
// a door deciding a call it showed or submitted signs without reading its
// history again. Bounded: the oldest are forgotten first.
type knownCalls struct {
	mu    sync.Mutex
	m     map[string]knownCall
	order []string
}

type knownCall struct {
	call policy.Call
	run  string
}

// maxKnownCalls bounds knownCalls (a few MiB at most).
const maxKnownCalls = 4096

func (k *knownCalls) get(callID string) (knownCall, bool) {
	if k == nil {
		return knownCall{}, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.m[callID]
	return f, ok
}

func (k *knownCalls) put(callID string, call policy.Call, run string) {
	if k == nil || run == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]knownCall{}
	}
	if _, ok := k.m[callID]; !ok {
		k.order = append(k.order, callID)
	}
	k.m[callID] = knownCall{call: call, run: run}
	for len(k.order) > maxKnownCalls {
		delete(k.m, k.order[0])
		k.order = k.order[1:]
	}
}

// signCall signs what a message about a call says, naming its run.
func (c *Client) signCall(ctx context.Context, callID string, say func(policy.Call) (statement.Statement, error)) (*statement.Signed, error) {
	if c.door == nil {
		return nil, ErrNoDoorKey
	}
	call, run, err := c.callFacts(ctx, callID)
	if err != nil {
		return nil, err
	}
	st, err := say(call)
	if err != nil {
		return nil, err
	}
	st.Run = run
	return c.sign(st)
}

// stickyKey is the key a sticky decision of the waiting call is kept
// under, which its statement names.
func (c *Client) stickyKey(ctx context.Context, call policy.Call) (string, error) {
	state, err := c.callState(ctx, call.ID)
	if err != nil {
		return "", err
	}
	if state.Request == nil {
		return "", &RefusedError{Type: workflows.ErrTypeNotWaiting, Message: fmt.Sprintf("call %s is not waiting for a decision (status %s)", call.ID, state.Status)}
	}
	return state.Request.StickyKeyFor(state.Call), nil
}
