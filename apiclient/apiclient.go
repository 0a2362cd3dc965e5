// Package apiclient is a Go client for toolgate's HTTP API, for approvers
// (and their tools) that have a token but no access to Temporal. Its
// methods mirror the approver half of package client and return the same
// error types, so callers handle both alike.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/traceparent"
	"github.com/toolgate/toolgate/workflows"
)

// Client calls one toolgate API with one bearer token.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for the API at base (e.g. http://127.0.0.1:7700).
func New(base, token string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), token: token, http: http.DefaultClient}
}

// apiError is the API's error body.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// do sends a request and decodes a 2xx answer into out; other answers
// become the client package's error types.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	_, data, err := c.send(ctx, method, path, body)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// send sends a request and returns a 2xx answer's status and body; other
// answers become the client package's error types.
func (c *Client) send(ctx context.Context, method, path string, body any) (int, []byte, error) {
	status, _, data, err := c.exchange(ctx, method, path, body)
	return status, data, err
}

// exchange is send that also returns the answer's headers.
func (c *Client) exchange(ctx context.Context, method, path string, body any) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("toolgate API: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	traceparent.ToHeader(ctx, req.Header) // the caller's trace, when ctx carries one
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("toolgate API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("toolgate API: read answer: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, resp.Header, data, nil
	}
	var e apiError
	if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
		return 0, nil, nil, &bareError{status: resp.StatusCode, text: fmt.Sprintf("toolgate API: %s: %s", resp.Status, strings.TrimSpace(string(data)))}
	}
	return 0, nil, nil, errorOf(e.Error.Code, e.Error.Message)
}

// bareError is an answer that is not one of the API's errors: a proxy's,
// or a route the server does not have (a toolgate from before it).
type bareError struct {
	status int
	text   string
}

func (e *bareError) Error() string { return e.text }

// errorOf turns an API error's code and message into the error the Go
// client returns for the same refusal.
func errorOf(code, message string) error {
	switch code {
	case "unknown_call":
		return fmt.Errorf("%w: %s", tgclient.ErrUnknownCall, message)
	case "already_decided":
		return &tgclient.AlreadyDecidedError{Message: message}
	case "no_result":
		return fmt.Errorf("%w: %s", tgclient.ErrNoResult, message)
	case "conflict": // only a taken call ID answers 409 "conflict"
		return &tgclient.InputError{Field: "call_id", Problem: strings.TrimPrefix(message, "call_id "), Err: tgclient.ErrCallIDTaken}
	case "invalid_request": // the message is "<field> <problem>"
		field, problem, _ := strings.Cut(message, " ")
		return &tgclient.InputError{Field: field, Problem: problem}
	case "already_claimed":
		return &tgclient.RefusedError{Type: workflows.ErrTypeAlreadyClaimed, Message: message}
	case "not_waiting":
		return &tgclient.RefusedError{Type: workflows.ErrTypeNotWaiting, Message: message}
	case "already_recorded":
		return &tgclient.RefusedError{Type: workflows.ErrTypeAlreadyRecorded, Message: message}
	case "approval_void":
		return &tgclient.RefusedError{Type: workflows.ErrTypeApprovalVoided, Message: message}
	case "unauthorized":
		return errors.New("toolgate API: " + message)
	}
	return &tgclient.RefusedError{Type: code, Message: message}
}

// Pending lists a page of the calls waiting for a person that the token
// may decide, oldest first. f.Session and f.Tool are sent; the token
// decides the groups, and the other fields of f are not used.
func (c *Client) Pending(ctx context.Context, f tgclient.ListFilter, p tgclient.PageRequest) (tgclient.Page, error) {
	q := url.Values{}
	if f.Session != "" {
		q.Set("session", f.Session)
	}
	if f.Tool != "" {
		q.Set("tool", f.Tool)
	}
	if p.Size != 0 {
		q.Set("page_size", strconv.Itoa(p.Size))
	}
	if p.Token != "" {
		q.Set("page_token", p.Token)
	}
	var out tgclient.Page
	err := c.do(ctx, http.MethodGet, "/v1/pending?"+q.Encode(), nil, &out)
	return out, err
}

// Decide applies a decision. The API records the token's name as the
// decider; d.DecidedBy is not sent.
func (c *Client) Decide(ctx context.Context, callID string, d policy.Decision) (policy.Decision, error) {
	return c.decide(ctx, callID, "decision", d)
}

// decide sends d in the API's words to the call's route (decision, or
// user-decision) and returns the decision recorded.
func (c *Client) decide(ctx context.Context, callID, route string, d policy.Decision) (policy.Decision, error) {
	body := map[string]any{"reason": d.Reason, "comment": d.Comment}
	switch d.Kind {
	case policy.Approved:
		body["decision"] = "approve"
	case policy.ApprovedWithEdits:
		body["decision"], body["args"] = "approve", d.EditedArgs
	case policy.ApprovedForSession:
		body["decision"] = "approve_for_session"
	case policy.Denied, policy.DeniedWithReason:
		body["decision"] = "deny"
	case policy.DeniedAlways:
		body["decision"] = "deny_always"
	default:
		return d, fmt.Errorf("decision %s cannot be sent", d.Kind)
	}
	var out struct {
		Decision policy.Decision `json:"decision"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(callID)+"/"+route, body, &out)
	return out.Decision, err
}

// Cancel cancels a waiting call; by is ignored: the token names who
// cancels (an agent only its own calls).
func (c *Client) Cancel(ctx context.Context, callID string, _ policy.Approver) (policy.Decision, error) {
	var out struct {
		Decision policy.Decision `json:"decision"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(callID)+"/cancel", nil, &out)
	return out.Decision, err
}

// CancelOwn withdraws a waiting call of the agent token; requester is
// ignored: the token names who cancels.
func (c *Client) CancelOwn(ctx context.Context, callID, _ string) (policy.Decision, error) {
	return c.Cancel(ctx, callID, policy.Approver{})
}

// Session returns a session's sticky decisions and waiting calls.
func (c *Client) Session(ctx context.Context, session string) (workflows.SessionView, error) {
	var v workflows.SessionView
	err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(session), nil, &v)
	return v, err
}

// Revoke removes a sticky decision; by is ignored: the token names who
// revokes, and its groups are checked.
func (c *Client) Revoke(ctx context.Context, session, key string, _ policy.Approver) error {
	return c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(session)+"/sticky/"+url.PathEscape(key), nil, nil)
}

// EndSession ends a session; by is ignored: the token names who ends it,
// and its groups are checked.
func (c *Client) EndSession(ctx context.Context, session string, _ policy.Approver) (int, error) {
	var out struct {
		Denied int `json:"denied_calls"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(session)+"/end", nil, &out)
	return out.Denied, err
}
