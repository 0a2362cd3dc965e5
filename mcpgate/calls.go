package mcpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/traceparent"
	"github.com/toolgate/toolgate/workflows"
)

// A tools/call of a toolgate tool: the call submitted (or joined), its
// Result awaited with progress, and what a client that gives up leaves.

// call submits a tools/call as a toolgate call and answers with its
// result, or "still waiting" after Options.Wait.
func (h *handler) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	// A tool this server does not list is the JSON-RPC error the spec
	// gives, and no toolgate call.
	desc, known, err := h.g.catalog.lookup(ctx, req.Params.Name)
	if err != nil {
		h.g.opts.Logger.Warn("List tools", zap.Error(err))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolgate could not list its tools: " + err.Error()}
	}
	if !known {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", req.Params.Name)}
	}
	if callID := req.Params.RequestState; callID != "" {
		// The retry of an input_required answer goes on with the call it
		// named, never a new one.
		res, ended := h.lookupCall(ctx, req, callID, true)
		if !ended && res.InputRequests == nil && objectSchema(desc.OutputSchema) {
			res.IsError, res.StructuredContent = true, nil
		}
		return res, nil
	}
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	call := tgclient.CallRequest{CallID: tgclient.NewCallID(), Session: h.session(req.Session), Tool: req.Params.Name, Args: args, Requester: h.conn.Requester, ActingUser: h.conn.ActingUser}
	log := h.g.opts.Logger.With(zap.String("callID", call.CallID), zap.String("session", call.Session), zap.String("tool", call.Tool), zap.String("requester", call.Requester))
	key := requestKey(call.Requester, call.Session, call.Tool, call.Args)
	if joined := h.g.waiting.join(key, call.CallID); joined != "" {
		// The client asks again what it asked before (it timed out, or
		// retries): the same call, its decision, at most one run.
		log.Info("MCP call joins the identical call still waiting", zap.String("joined", joined))
		return h.awaitAsWaiter(ctx, req, desc, key, joined), nil
	}
	_, err = h.g.agent.Submit(callerTrace(ctx, req), call)
	var input *tgclient.InputError
	switch {
	case errors.As(err, &input), errors.Is(err, tgclient.ErrNotYourSession):
		h.g.waiting.forget(key, call.CallID)
		return refusedResult(fmt.Sprintf("toolgate refused the call to %s: %v", call.Tool, err)), nil
	case err != nil:
		h.g.waiting.forget(key, call.CallID)
		log.Warn("Submit MCP call", zap.Error(err))
		return refusedResult(fmt.Sprintf("toolgate could not take the call to %s: %v", call.Tool, err)), nil
	}
	log.Info("MCP call submitted")
	return h.awaitAsWaiter(ctx, req, desc, key, call.CallID), nil
}

// callerTrace hands the request's _meta.traceparent (and tracestate), the
// MCP client's trace, to the submission, over the HTTP API or Temporal;
// a traceparent on /mcp's HTTP request is in ctx already, and _meta's
// wins over it.
func callerTrace(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	meta := req.Params.GetMeta()
	tp, _ := meta[traceparent.Field].(string)
	ts, _ := meta[traceparent.StateField].(string)
	return traceparent.Into(ctx, tp, ts)
}

// awaitAsWaiter is await for a tools/call counted among the waiters of
// its call. A request its client cancelled (notifications/cancelled, as
// clients send at their timeout) cancels the call too, unless another
// request waits on it or it was decided already.
func (h *handler) awaitAsWaiter(ctx context.Context, req *mcp.CallToolRequest, desc tool.Descriptor, key, callID string) *mcp.CallToolResult {
	res, ended := h.await(ctx, req, callID)
	if !ended && res.InputRequests == nil && objectSchema(desc.OutputSchema) {
		// A client checks a result's structuredContent against the tool's
		// output schema; a call still waiting has no output to check.
		res.IsError, res.StructuredContent = true, nil
	}
	if !ended && h.cancelledByClient(ctx) && h.g.waiting.leaveAlone(key, callID) {
		h.cancel(ctx, callID)
		return res
	}
	h.g.waiting.leave(key, callID, ended)
	return res
}

// cancelledByClient reports whether the client cancelled the request, as
// opposed to the gateway shutting down or the connection closing.
func (h *handler) cancelledByClient(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) && !h.g.stopping()
}

// cancel withdraws a call whose client gave up on it; a call decided
// meanwhile goes on (toolgate_wait fetches its result).
func (h *handler) cancel(ctx context.Context, callID string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	log := h.g.opts.Logger.With(zap.String("callID", callID))
	if _, err := h.g.agent.CancelOwn(cctx, callID, h.conn.Requester); err != nil {
		log.Info("The client cancelled its request; the call was decided already and goes on", zap.Error(err))
		return
	}
	log.Info("The client cancelled its request; its call is cancelled")
}

// await waits up to Options.Wait for the call's Result, sending progress
// notifications if the request asked for them, and answers with the
// Result or with "still waiting"; ended says the answer is final (a
// Result, or a call that is gone).
func (h *handler) await(ctx context.Context, req *mcp.CallToolRequest, callID string) (res *mcp.CallToolResult, ended bool) {
	wctx, cancel := context.WithTimeout(ctx, h.g.opts.Wait)
	defer cancel()
	if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
		stop := h.progress(wctx, req.Session, token, callID)
		defer stop()
	}
	switch {
	case req.Session == nil:
	case speaksResultType(req):
		if res, asked := h.askInRound(ctx, req, callID); asked {
			return res, false
		}
	default:
		stop := h.askUser(wctx, req, callID)
		defer stop()
	}
	r, err := h.g.agent.Wait(wctx, callID)
	if err == nil {
		return resultFor(r), true
	}
	if ctx.Err() != nil {
		return errorResult(fmt.Sprintf("the wait for call %s ended; the call goes on: call %s with {\"call_id\": %q}", callID, WaitTool, callID)), false
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return h.lookupError(callID, err), gone(err)
	}
	st, err := h.g.agent.Status(ctx, callID)
	if err != nil {
		return h.lookupError(callID, err), gone(err)
	}
	if r := final(st); r != nil {
		return resultFor(*r), true
	}
	h.g.opts.Logger.Info("MCP call still waiting", zap.String("callID", callID))
	return h.waitingResult(callID, st), false
}

// progress sends a progress notification at once, naming the call (so a
// client that gives up can still pick it up), then every
// ProgressInterval until ctx ends or stop is called, saying what the call
// is doing.
func (h *handler) progress(ctx context.Context, ss *mcp.ServerSession, token any, callID string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		t := time.NewTicker(h.g.opts.ProgressInterval)
		defer t.Stop()
		for {
			elapsed := time.Since(start)
			err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      elapsed.Seconds(),
				Total:         h.g.opts.Wait.Seconds(),
				Message:       fmt.Sprintf("toolgate call %s %s (%s so far)", callID, h.doing(ctx, callID), elapsed.Round(time.Second)),
			})
			if err != nil && ctx.Err() == nil {
				h.g.opts.Logger.Debug("Progress notification", zap.String("callID", callID), zap.Error(err))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// doing says what a call is doing, for a progress notification.
func (h *handler) doing(ctx context.Context, callID string) string {
	st, err := h.g.agent.Status(ctx, callID)
	if err != nil || st.State == nil {
		return "is being decided"
	}
	switch st.State.Status {
	case workflows.StatusPending:
		if st.State.Request != nil && len(st.State.Request.Groups) > 0 {
			return "is waiting for an approver of " + strings.Join(st.State.Request.Groups, ", ")
		}
		return "is waiting for a person to decide it"
	case workflows.StatusRunning, workflows.StatusApproved:
		return "is approved and running" + progressText(st.Progress)
	case workflows.StatusEvaluating:
		return "is being checked by the policy"
	}
	return "is " + string(st.State.Status)
}
