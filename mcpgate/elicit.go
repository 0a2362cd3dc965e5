package mcpgate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/visible"
)

// Asking the person at the client: a call whose rule lets the person
// running the agent decide (`user: true`) is asked in the client, by
// elicitation, when the client declared it. The call waits in toolgate's
// other channels all the while; the first decision wins. A client that
// goes away loses its question, not the call, and the next request that
// waits on the call (the same tools/call again, or toolgate_wait) asks
// again.
//
// Before protocol 2026-07-28 the gateway sends elicitation/create while
// the tools/call waits, and withdraws it when the call is decided
// elsewhere. From 2026-07-28 on a server may not send requests of its own
// (SEP-2322): the tools/call answers input_required with the form, its
// requestState naming the call, and the client's retry brings the answer.

// inputKey names the question in a multi-round-trip input request.
const inputKey = "toolgate_decision"

// The answers of the elicitation form.
const (
	answerApprove           = "approve"
	answerApproveForSession = "approve_for_session"
	answerDeny              = "deny"
)

// decisionSchema is the form: one choice, and a reason for a denial. The
// titles are the legacy enumNames, which every revision of the protocol
// renders.
var decisionSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"decision": map[string]any{
			"type": "string", "title": "Decision",
			"enum":      []string{answerApprove, answerApproveForSession, answerDeny},
			"enumNames": []string{"Approve this call", "Approve this tool for the rest of the session", "Deny"},
		},
		"reason": map[string]any{
			"type": "string", "title": "Reason",
			"description": "Why you deny it; the agent is told.",
		},
	},
	"required": []string{"decision"},
}

// evaluatingPoll is how often askUser looks whether a new call is still
// being checked by the policy.
const evaluatingPoll = 100 * time.Millisecond

// askUser asks the client's person about callID while the request waits,
// when the call's rule lets them decide and the client can be asked. The
// answer becomes the acting user's decision (channel client); a dismissed
// form, a client gone, or a call decided elsewhere leave the call to the
// other channels. stop withdraws the question and waits for it to end.
func (h *handler) askUser(ctx context.Context, req *mcp.CallToolRequest, callID string) (stop func()) {
	if !clientElicits(req) {
		return func() {}
	}
	ss := req.Session
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		log := h.g.opts.Logger.With(zap.String("callID", callID))
		w, ok := tgclient.WaitingForPerson(ctx, h.g.agent, callID, evaluatingPoll)
		if !ok || w.User == "" {
			return
		}
		res, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: question(w), RequestedSchema: decisionSchema})
		if err != nil {
			if ctx.Err() == nil {
				log.Info("The client could not ask its user; the call waits for the other channels", zap.Error(err))
			}
			return
		}
		h.answered(ctx, callID, res)
	}()
	return func() {
		cancel()
		<-done
	}
}

// askInRound is askUser for a client of 2026-07-28 or later: a retry that
// brings the answer decides the call (and then waits as usual); a first
// request gets the form back as its input_required result (asked). A retry
// whose form was dismissed is not asked again: the next wait is.
func (h *handler) askInRound(ctx context.Context, req *mcp.CallToolRequest, callID string) (res *mcp.CallToolResult, asked bool) {
	if answer, ok := req.Params.InputResponses[inputKey].(*mcp.ElicitResult); ok {
		h.answered(ctx, callID, answer)
		return nil, false
	}
	if req.Params.RequestState != "" || !clientElicits(req) {
		return nil, false
	}
	w, ok := tgclient.WaitingForPerson(ctx, h.g.agent, callID, evaluatingPoll)
	if !ok || w.User == "" {
		return nil, false
	}
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{inputKey: &mcp.ElicitParams{Mode: "form", Message: question(w), RequestedSchema: decisionSchema}},
		RequestState:  callID,
	}, true
}

// answered applies the user's answer from the client, if they gave one.
func (h *handler) answered(ctx context.Context, callID string, res *mcp.ElicitResult) {
	log := h.g.opts.Logger.With(zap.String("callID", callID))
	d, ok := answerOf(res)
	if !ok {
		log.Info("The client's user dismissed the question; the call waits for the other channels", zap.String("action", res.Action))
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	applied, err := h.g.agent.DecideAsUser(dctx, callID, h.conn.ActingUser, d)
	if err != nil {
		log.Info("The user's answer in the client was refused", zap.Error(err))
		return
	}
	log.Info("The user decided the call in the client", zap.String("user", applied.DecidedBy), zap.Stringer("decision", applied.Kind))
}

// clientElicits reports whether the client of req declared form
// elicitation (per request from 2026-07-28 on, else at initialize).
func clientElicits(req *mcp.CallToolRequest) bool {
	c := req.ClientCapabilities()
	if c == nil || c.Elicitation == nil {
		return false
	}
	e := c.Elicitation
	return e.Form != nil || e.URL == nil // {} is form, for clients before 2025-11-25
}

// maxQuestionArgs bounds the arguments quoted in the question, in
// characters.
const maxQuestionArgs = 1000

// compactJSON is raw on one line, or raw as it is when it is not JSON.
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// maxQuestionPreview bounds the preview quoted in the question, in
// characters.
const maxQuestionPreview = 4 << 10

// question is what the client shows its user: who asks, what, why, and
// what it will change, with what a screen would obey or hide (control,
// bidi and zero-width characters) escaped.
func question(w tgclient.Waiting) string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolgate: %s asks to run %s (call %s).", w.Requester, w.Tool, w.CallID)
	if w.Message != "" {
		fmt.Fprintf(&b, "\n\n%s", visible.Text(w.Message))
	}
	if p := w.Preview; p != nil && p.Text != "" {
		text, cut := visible.Text(p.Text), p.Truncated
		if utf8.RuneCountInString(text) > maxQuestionPreview {
			text, cut = visible.Cut(text, maxQuestionPreview), true
		}
		fmt.Fprintf(&b, "\n\n%s:\n%s", p.Heading(), text)
		if cut {
			b.WriteString("\n[cut; the inbox shows all of it]")
		}
	}
	if len(w.Args) > 0 {
		fmt.Fprintf(&b, "\n\nArguments: %s", visible.Cut(visible.JSON(compactJSON(w.Args)), maxQuestionArgs))
	}
	if len(w.Groups) > 0 {
		fmt.Fprintf(&b, "\n\nApprovers of %s are asked too; the first decision counts.", strings.Join(w.Groups, ", "))
	}
	return b.String()
}

// answerOf turns the form's answer into the user's decision; answered is
// false for a dismissed form. Declining the form denies the call.
func answerOf(res *mcp.ElicitResult) (d policy.Decision, answered bool) {
	switch res.Action {
	case "decline":
		return policy.Decision{Kind: policy.DeniedWithReason, Reason: "the user declined it in the client"}, true
	case "accept":
	default:
		return d, false
	}
	reason, _ := res.Content["reason"].(string)
	reason = strings.TrimSpace(reason)
	switch choice, _ := res.Content["decision"].(string); choice {
	case answerApprove:
		return policy.Decision{Kind: policy.Approved, Comment: reason}, true
	case answerApproveForSession:
		return policy.Decision{Kind: policy.ApprovedForSession, Comment: reason}, true
	case answerDeny:
		if reason == "" {
			return policy.Decision{Kind: policy.Denied}, true
		}
		return policy.Decision{Kind: policy.DeniedWithReason, Reason: reason}, true
	}
	return d, false
}
