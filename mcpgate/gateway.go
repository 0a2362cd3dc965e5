package mcpgate

// The gateway side, here: an MCP server (stdio for `toolgate mcp`, streamable
// HTTP for /mcp) whose tools are toolgate's, each tools/call a toolgate
// call submitted through a client.Agent like any agent's.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// The gateway's own tools, listed beside the tools toolgate runs.
const (
	// WaitTool waits for a call the gateway answered "still waiting" for,
	// and returns its result. Arguments: {"call_id": "..."}.
	WaitTool = "toolgate_wait"
	// StatusTool returns a call's result, or where it stands, without
	// waiting. Arguments: {"call_id": "..."}.
	StatusTool = "toolgate_status"
)

// Defaults of Options.
const (
	// DefaultWait is how long a tools/call waits for a decision before it
	// answers "still waiting": most MCP clients give up at 60 seconds.
	DefaultWait = 50 * time.Second
	// DefaultProgressInterval is how often a waiting call sends a progress
	// notification, when the client asked for them.
	DefaultProgressInterval = 5 * time.Second
	// DefaultRequester names the agent of a connection that has no token
	// (stdio over Temporal).
	DefaultRequester = "mcp-agent"
)

// Options configure a Gateway. Every field is optional.
type Options struct {
	// Wait bounds how long a tools/call (and a toolgate_wait) waits for
	// the call's result before answering that it still waits. Default
	// DefaultWait.
	Wait time.Duration
	// ProgressInterval is the time between progress notifications while a
	// call waits, sent only when the request carries a progress token.
	// Default DefaultProgressInterval.
	ProgressInterval time.Duration
	// Requester names the agent on connections that do not authenticate
	// one (stdio). Over HTTP the agent token's name is used instead.
	// Default DefaultRequester.
	Requester string
	// AgentNamesRequester says the Agent names the requester itself: the
	// HTTP API takes it from the token, whatever the request says, and
	// answers only the token's own calls. The gateway then leaves the
	// ownership check of toolgate_wait and toolgate_status to it.
	AgentNamesRequester bool
	// ActingUser names the person running the agent on connections that do
	// not authenticate one (stdio over Temporal); over the HTTP API and
	// /mcp the agent token's owner is. Empty: nobody is asked in the client.
	ActingUser string
	// Session pins every connection to this toolgate session, so sticky
	// decisions outlive reconnects. Default: each connection gets its own
	// ("mcp-" and a random suffix).
	Session string
	// Version is reported to clients as the server's version. Default
	// "dev".
	Version string
	// Logger; nil means no logs.
	Logger *zap.Logger
}

// Gateway serves toolgate's tools over MCP: tools/list lists the tools
// toolgate runs that the policy does not deny outright, and every
// tools/call becomes a toolgate call, decided by policy or a person, run by
// a worker, its Result turned back into an MCP tool result.
type Gateway struct {
	agent   tgclient.Agent
	opts    Options
	catalog *catalog
	waiting waitingCalls
	// stdio is the context ServeStdio serves in: once it is done, the
	// gateway is stopping, and the requests it ends were not cancelled
	// by their client.
	stdio atomic.Pointer[context.Context]
}

// stopping reports whether ServeStdio is shutting down.
func (g *Gateway) stopping() bool {
	ctx := g.stdio.Load()
	return ctx != nil && (*ctx).Err() != nil
}

// NewGateway returns a gateway that submits calls through agent: a
// *client.Client over Temporal or an *apiclient.Client over the HTTP API.
func NewGateway(agent tgclient.Agent, opts Options) *Gateway {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	if opts.Requester == "" && !opts.AgentNamesRequester {
		opts.Requester = DefaultRequester
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Gateway{agent: agent, opts: opts, catalog: &catalog{list: agent.Tools}}
}

// Conn is who one MCP connection acts for.
type Conn struct {
	// Requester names the agent; it can never decide its own calls. Empty:
	// the Agent names it (Options.AgentNamesRequester).
	Requester string
	// Session is the toolgate session of the connection's calls. Empty:
	// derived from the MCP session ID when the transport has one (HTTP),
	// else "mcp-" + Requester.
	Session string
	// ActingUser is the person running the agent: asked in the client
	// (elicitation) about calls whose rule says `user: true`. Over HTTP the
	// agent token's owner; empty: nobody is asked in the client.
	ActingUser string
}

// NewSessionID returns a fresh session name for one MCP connection.
func NewSessionID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// StdioConn is the Conn of a stdio connection: the configured requester,
// and the pinned session or a fresh one.
func (g *Gateway) StdioConn() Conn {
	c := Conn{Session: g.opts.Session, ActingUser: g.opts.ActingUser}
	if !g.opts.AgentNamesRequester {
		c.Requester = g.opts.Requester
	}
	if c.Session == "" {
		c.Session = NewSessionID()
	}
	return c
}

// ServeStdio serves one MCP connection on stdin/stdout until the client
// closes it or ctx ends. Nothing else may write to stdout.
func (g *Gateway) ServeStdio(ctx context.Context) error {
	c := g.StdioConn()
	g.stdio.Store(&ctx)
	requester := c.Requester
	if requester == "" {
		requester = "the agent of the API token"
	}
	g.opts.Logger.Info("MCP gateway serving on stdio", zap.String("session", c.Session), zap.String("requester", requester))
	err := g.Server(c).Run(ctx, &mcp.StdioTransport{})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Server returns an MCP server for one connection (or, over HTTP, for
// every MCP session of one token).
func (g *Gateway) Server(c Conn) *mcp.Server { return g.server(c, nil) }

// server is Server offering the protocol versions given (nil: every one
// the SDK speaks).
func (g *Gateway) server(c Conn, versions []string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "toolgate approval gateway", Version: g.opts.Version}, &mcp.ServerOptions{
		SupportedProtocolVersions: versions,
		Instructions: "Every tool call goes through toolgate: a policy allows it, denies it, or asks a person, who may take a while. " +
			"A call still waiting for a person answers with its call ID; get its result later with " + WaitTool + ` {"call_id": "..."}, ` +
			"or check it without waiting with " + StatusTool + ". A denial comes back as an error result with the reason.",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	h := &handler{g: g, conn: c}
	s.AddTool(&mcp.Tool{
		Name:        WaitTool,
		Description: fmt.Sprintf("Wait (up to %s) for a toolgate call that is still waiting, e.g. for a person's approval, and return its result: the tool's output, or why it did not run. Use the call_id a tool result gave you.", g.opts.Wait),
		InputSchema: callIDSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, h.wait)
	s.AddTool(&mcp.Tool{
		Name:        StatusTool,
		Description: "Return a toolgate call's result if it has one, else where it stands (who was asked, until when), without waiting.",
		InputSchema: callIDSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, h.status)
	s.AddReceivingMiddleware(h.middleware)
	return s
}

var callIDSchema = json.RawMessage(`{"type":"object","properties":{"call_id":{"type":"string","description":"the call ID a toolgate result named"}},"required":["call_id"],"additionalProperties":false}`)

func ptr[T any](v T) *T { return &v }

// HTTPHandler serves MCP over streamable HTTP (mount it at /mcp). Every
// request needs a bearer token that authenticate accepts; the token's name
// is the requester of the calls, and an MCP session is bound to the token
// that opened it. The query parameter ?session=NAME pins the toolgate
// session; without it each MCP session gets its own.
func (g *Gateway) HTTPHandler(authenticate AgentAuth) http.Handler {
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		name, owner, known, agent := authenticate(token)
		if !known || !agent {
			return nil, fmt.Errorf("%w: not an agent token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: name, Extra: map[string]any{tokenOwner: owner}}, nil
	}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		ti := auth.TokenInfoFromContext(r.Context())
		if ti == nil {
			return nil
		}
		session := r.URL.Query().Get("session")
		if session != "" && tgclient.ValidateID("session", session) != nil {
			return nil
		}
		owner, _ := ti.Extra[tokenOwner].(string)
		return g.server(Conn{Requester: ti.UserID, ActingUser: owner, Session: session}, httpProtocolVersions())
	}, nil)
	return guard(authenticate, auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(mcpHandler))
}

// tokenOwner keys the agent token's owner in auth.TokenInfo.Extra.
const tokenOwner = "owner"

// handler answers one connection's requests.
type handler struct {
	g    *Gateway
	conn Conn
}

// session is the toolgate session of a request's call.
func (h *handler) session(ss *mcp.ServerSession) string {
	switch {
	case h.conn.Session != "":
		return h.conn.Session
	case ss != nil && ss.ID() != "":
		return "mcp-" + shortHash(h.conn.Requester+"\x00"+ss.ID())
	}
	return "mcp-" + h.conn.Requester
}

// middleware answers tools/list with toolgate's tools and the gateway's,
// and tools/call of every tool but the gateway's own with a toolgate call.
// The list is asked of toolgate each time, so tools that appear later
// (an upstream that came up) are listed without a reconnect.
func (h *handler) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			res, err := next(ctx, method, req)
			lr, ok := res.(*mcp.ListToolsResult)
			if err != nil || !ok {
				return res, err
			}
			if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && p != nil && p.Cursor != "" {
				return res, nil // the first page lists toolgate's tools
			}
			ds, err := h.g.catalog.listed(ctx)
			if err != nil {
				h.g.opts.Logger.Warn("List tools", zap.Error(err))
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "toolgate could not list its tools: " + err.Error()}
			}
			tools := make([]*mcp.Tool, 0, len(ds)+len(lr.Tools))
			for _, d := range ds {
				if d.Name == WaitTool || d.Name == StatusTool {
					continue
				}
				tools = append(tools, mcpTool(d))
			}
			lr.Tools = append(tools, lr.Tools...)
			return lr, nil
		case "tools/call":
			cr, ok := req.(*mcp.CallToolRequest)
			if ok && cr.Params != nil && cr.Params.Name != WaitTool && cr.Params.Name != StatusTool {
				res, err := h.call(ctx, cr)
				if err == nil && speaksResultType(cr) {
					res = withResultType(res)
				}
				return res, err
			}
		}
		return next(ctx, method, req)
	}
}

// mcpTool describes a toolgate tool to MCP clients: its name, description,
// input schema and annotations as toolgate knows them.
func mcpTool(d tool.Descriptor) *mcp.Tool {
	t := &mcp.Tool{Name: d.Name, Title: d.Title, Description: d.Description, InputSchema: json.RawMessage(`{"type":"object"}`)}
	if objectSchema(d.Schema) {
		t.InputSchema = d.Schema
	}
	if objectSchema(d.OutputSchema) {
		t.OutputSchema = d.OutputSchema
	}
	if len(d.Annotations) > 0 {
		var a mcp.ToolAnnotations
		if b, err := json.Marshal(d.Annotations); err == nil && json.Unmarshal(b, &a) == nil {
			t.Annotations = &a
			if t.Title == "" {
				t.Title = a.Title
			}
		}
	}
	return t
}

// objectSchema reports whether schema is a JSON Schema of an object, the
// only kind MCP takes for a tool's input and output.
func objectSchema(schema json.RawMessage) bool {
	var s map[string]any
	return json.Unmarshal(schema, &s) == nil && s["type"] == "object"
}

// callIDArgs are the arguments of the gateway's own tools.
type callIDArgs struct {
	CallID string `json:"call_id"`
}

func (h *handler) wait(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return h.lookup(ctx, req, true)
}

func (h *handler) status(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return h.lookup(ctx, req, false)
}

// lookup answers toolgate_wait (block) and toolgate_status for a call of
// this connection's requester; another requester's call is refused exactly
// like an unknown one.
func (h *handler) lookup(ctx context.Context, req *mcp.CallToolRequest, block bool) (*mcp.CallToolResult, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(req.Params.Arguments, &raw); err != nil {
		return refusedResult(`the arguments must be an object: {"call_id": "call-..."}`), nil
	}
	var a callIDArgs
	switch v, ok := raw["call_id"]; {
	case !ok:
		return refusedResult(`call_id is required: {"call_id": "call-..."}`), nil
	case json.Unmarshal(v, &a.CallID) != nil:
		return refusedResult(fmt.Sprintf(`call_id must be a string, not %s: {"call_id": "call-..."}`, v)), nil
	}
	for k := range raw {
		if k != "call_id" {
			return refusedResult(fmt.Sprintf("unknown argument %q: %s takes only call_id", k, req.Params.Name)), nil
		}
	}
	res, _ := h.lookupCall(ctx, req, a.CallID, block)
	return res, nil
}

// lookupCall answers with a call of this connection's requester: its
// result, or, when block, its result once it has one within the wait;
// ended says the answer is final.
func (h *handler) lookupCall(ctx context.Context, req *mcp.CallToolRequest, callID string, block bool) (res *mcp.CallToolResult, ended bool) {
	if err := tgclient.ValidateID("call_id", callID); err != nil {
		return refusedResult(err.Error()), true
	}
	st, err := h.g.agent.Status(ctx, callID)
	if err != nil {
		return h.lookupError(callID, err), gone(err)
	}
	if h.conn.Requester != "" && requester(st) != h.conn.Requester {
		return unknownCall(callID), true
	}
	if r := final(st); r != nil || !block {
		if r != nil {
			h.g.waiting.ended(callID)
			return resultFor(*r), true
		}
		return h.waitingResult(callID, st), false
	}
	res, ended = h.await(ctx, req, callID)
	if ended {
		h.g.waiting.ended(callID)
	}
	return res, ended
}

func (h *handler) lookupError(callID string, err error) *mcp.CallToolResult {
	if errors.Is(err, tgclient.ErrUnknownCall) {
		return unknownCall(callID)
	}
	if errors.Is(err, tgclient.ErrNoResult) {
		return errorResult(fmt.Sprintf("call %s ended without a result: an operator stopped it; it will not run", callID))
	}
	h.g.opts.Logger.Warn("Look up MCP call", zap.String("callID", callID), zap.Error(err))
	return errorResult(fmt.Sprintf("toolgate could not look up call %s: %v", callID, err))
}

// gone reports whether err says the call no longer exists for toolgate:
// unknown, or stopped without a Result.
func gone(err error) bool {
	return errors.Is(err, tgclient.ErrUnknownCall) || errors.Is(err, tgclient.ErrNoResult)
}

func unknownCall(callID string) *mcp.CallToolResult {
	return errorResult(fmt.Sprintf("toolgate knows no call %s of yours", callID))
}

// requester is who submitted the call st describes.
func requester(st tgclient.Status) string {
	if st.Result != nil {
		return st.Result.Requester
	}
	if st.State != nil {
		return st.State.Call.Requester
	}
	return ""
}

// final is the call's Result, if it has one.
func final(st tgclient.Status) *workflows.Result {
	if st.Result != nil {
		return st.Result
	}
	if st.State != nil && st.State.Result != nil {
		return st.State.Result
	}
	return nil
}
