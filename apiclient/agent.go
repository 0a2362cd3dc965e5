package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The agent half of the API: the token names the requester.

var _ tgclient.FastAgent = (*Client)(nil)

// Submit starts a call (POST /v1/calls) and returns its ID.
func (c *Client) Submit(ctx context.Context, req tgclient.CallRequest) (string, error) {
	var out struct {
		CallID string `json:"call_id"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/calls", submitBody(req), &out)
	return out.CallID, err
}

// SubmitAndClaim submits an agent-executed call with a claim for cl.Run
// (POST /v1/calls with "claim") and returns where the call stands once
// toolgate settled it, as the Go client's SubmitAndClaim does: a call the
// policy decides is submitted, decided and claimed in one request. A call
// that asks a person comes back pending and unclaimed: wait for it with
// WaitDecided, then Claim. So does a nil answer: a toolgate from before
// this request took the call without the claim.
func (c *Client) SubmitAndClaim(ctx context.Context, req tgclient.CallRequest, cl tgclient.Claim) (*tgclient.FirstAnswer, error) {
	if err := cl.Validate(); err != nil {
		return nil, err
	}
	body := submitBody(req)
	body["claim"] = cl
	code, data, err := c.send(ctx, http.MethodPost, "/v1/calls", body)
	var input *tgclient.InputError
	if errors.As(err, &input) && input.Field == "claim" && input.Problem == "is not a known field" {
		// A toolgate from before claims in the submission refused the
		// request whole: submit it as it knows, and claim later.
		_, err := c.Submit(ctx, req)
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	st, w, err := decodeCall(code, data)
	if err != nil {
		return nil, err
	}
	first := &tgclient.FirstAnswer{Status: st, Claimed: w.Claimed}
	if rf := w.ClaimRefused; rf != nil {
		first.ClaimErr = errorOf(rf.Code, rf.Message)
	}
	return first, nil
}

func submitBody(req tgclient.CallRequest) map[string]any {
	body := map[string]any{"session": req.Session, "tool": req.Tool, "args": req.Args}
	if req.CallID != "" {
		body["call_id"] = req.CallID
	}
	if req.Execution != policy.ExecutionToolgate {
		body["execution"] = req.Execution
	}
	if req.NoReport {
		body["report"] = false
	}
	if req.Preview != nil {
		body["preview"] = req.Preview
	}
	return body
}

// longPoll bounds one ?wait= request; longer waits poll again.
const longPoll = 60 * time.Second

// Wait blocks until the call has a Result, or ctx ends.
func (c *Client) Wait(ctx context.Context, callID string) (workflows.Result, error) {
	for {
		st, err := c.poll(ctx, callID)
		if err != nil {
			return workflows.Result{}, err
		}
		if st.Result != nil {
			return *st.Result, nil
		}
	}
}

// WaitDecided blocks until the call has a Result or is an approved
// agent-executed call waiting for its report, or ctx ends.
func (c *Client) WaitDecided(ctx context.Context, callID string) (tgclient.Status, error) {
	for {
		st, err := c.poll(ctx, callID)
		if err != nil || st.Result != nil || st.State.Status == workflows.StatusApproved {
			return st, err
		}
	}
}

// poll makes one long poll of GET /v1/calls/{id}?wait=, bounded by ctx's
// deadline; it returns context.DeadlineExceeded when ctx ended first.
func (c *Client) poll(ctx context.Context, callID string) (tgclient.Status, error) {
	wait := longPoll
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-100*time.Millisecond)
	}
	if wait <= 0 {
		return tgclient.Status{}, context.DeadlineExceeded
	}
	st, err := c.status(ctx, callID, wait)
	if err != nil && ctx.Err() != nil {
		return st, context.DeadlineExceeded
	}
	return st, err
}

// Status returns where the call stands now (GET /v1/calls/{id}).
func (c *Client) Status(ctx context.Context, callID string) (tgclient.Status, error) {
	return c.status(ctx, callID, 0)
}

func (c *Client) status(ctx context.Context, callID string, wait time.Duration) (tgclient.Status, error) {
	path := "/v1/calls/" + url.PathEscape(callID)
	if wait > 0 {
		path += "?wait=" + wait.Round(time.Millisecond).String()
	}
	code, data, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return tgclient.Status{}, err
	}
	st, _, err := decodeCall(code, data)
	return st, err
}

// decodeCall reads an answer about one call: its Result (200), or the
// call as it stands (202), whose Waiting view is returned too.
func decodeCall(code int, data []byte) (tgclient.Status, tgclient.Waiting, error) {
	var w tgclient.Waiting
	if code == http.StatusOK {
		var r workflows.Result
		if err := json.Unmarshal(data, &r); err != nil {
			return tgclient.Status{}, w, fmt.Errorf("toolgate API: decode result: %w", err)
		}
		return tgclient.Status{Result: &r}, w, nil
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return tgclient.Status{}, w, fmt.Errorf("toolgate API: decode call: %w", err)
	}
	return tgclient.Status{State: stateOf(w), Progress: w.Progress}, w, nil
}

// stateOf rebuilds the live state a Waiting view shows.
func stateOf(w tgclient.Waiting) *workflows.CallState {
	st := &workflows.CallState{
		Call: policy.Call{ID: w.CallID, Session: w.Session, Tool: w.Tool, Requester: w.Requester, ActingUser: w.User,
			Args: w.Args, Execution: w.Execution},
		Status: w.Status, WaitingSince: w.WaitingSince, Deadline: w.Deadline, Notices: w.Notices, Approvals: w.Approvals,
	}
	if w.Message != "" || w.Rule != "" || len(w.Groups) > 0 || w.User != "" {
		st.Request = &policy.ApprovalRequest{Message: w.Message, Rule: w.Rule, Groups: w.Groups, Preview: w.Preview, User: w.User != ""}
	}
	if w.Decision != "" {
		kind, err := policy.ParseDecisionKind(w.Decision)
		if err == nil {
			st.Decision = &policy.Decision{Kind: kind, DecidedBy: w.DecidedBy, Comment: w.Comment}
		}
	}
	return st
}

// Report completes an approved agent-executed call
// (POST /v1/calls/{id}/report); requester is ignored: the token names it.
func (c *Client) Report(ctx context.Context, callID, _ string, r tgclient.Report) error {
	if err := r.Validate(); err != nil {
		return err
	}
	body := map[string]any{}
	if r.Run != "" {
		body["run"] = r.Run
	}
	if r.Unknown != "" {
		body["unknown"] = r.Unknown
	}
	switch {
	case r.Error != "":
		body["error"] = r.Error
	case len(r.Output) > 0:
		body["output"] = r.Output
	}
	return c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(callID)+"/report", body, nil)
}

// Claim takes an approved agent-executed call's approval for one run
// (POST /v1/calls/{id}/claim); requester is ignored: the token names it.
func (c *Client) Claim(ctx context.Context, callID, _ string, cl tgclient.Claim) error {
	if err := cl.Validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(callID)+"/claim", cl, nil)
}

var _ tgclient.RanAfterEndRecorder = (*Client)(nil)

// RecordRanAfterEnd records that the call's tool ran after the call ended
// denied or timed out, approved at the agent's prompt by the token's
// owner (POST /v1/calls/{id}/ran-after-end); requester and rec.User are
// ignored: the token names them. It returns the record as stored.
func (c *Client) RecordRanAfterEnd(ctx context.Context, callID, _ string, rec workflows.RanAfterEnd) (workflows.RanAfterEnd, error) {
	body := map[string]any{"via": rec.Via, "args": rec.Args}
	switch {
	case rec.Error != "":
		body["error"] = rec.Error
	case len(rec.Output) > 0:
		body["output"] = rec.Output
	}
	var out workflows.Result
	if err := c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(callID)+"/ran-after-end", body, &out); err != nil {
		return workflows.RanAfterEnd{}, err
	}
	if out.RanAfterEnd == nil {
		return workflows.RanAfterEnd{}, fmt.Errorf("toolgate API: the answer to the record of call %s does not show it", callID)
	}
	return *out.RanAfterEnd, nil
}

// DecideAsUser applies the decision of the person running the agent: the
// token's owner (user is ignored), through POST /v1/calls/{id}/user-decision.
func (c *Client) DecideAsUser(ctx context.Context, callID, _ string, d policy.Decision) (policy.Decision, error) {
	if d.Kind == policy.ApprovedWithEdits {
		return policy.Decision{}, fmt.Errorf("the person running the agent approves or denies; edits are a remote approver's")
	}
	return c.decide(ctx, callID, "user-decision", d)
}
