package mcpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// Separator joins a server's name and its tool's name: github__create_issue.
const Separator = "__"

// UpstreamHeartbeatTimeout is the heartbeat timeout of upstream tools: the
// worker heartbeats while an upstream call runs, so a call whose worker
// died is known lost within this, not at the end of the call's timeout.
const UpstreamHeartbeatTimeout = 30 * time.Second

// Defaults of UpstreamOptions.
const (
	DefaultUpstreamConnectTimeout = time.Minute
	maxRestartBackoff             = 30 * time.Second
	maxErrorText                  = 4 << 10
)

// UpstreamOptions tune StartUpstreams.
type UpstreamOptions struct {
	// Logger receives the upstreams' events and their stderr lines.
	// Optional.
	Logger *zap.Logger
	// ConnectTimeout bounds starting and initialising one server (npx may
	// download it first); default DefaultUpstreamConnectTimeout.
	ConnectTimeout time.Duration
	// TrustNewTools names the servers whose new tools are offered without
	// asking a person (their changed tools are still asked).
	TrustNewTools []string
	// PinRecheck is how often the pins of a server with held tools are
	// read; default DefaultPinRecheck.
	PinRecheck time.Duration
	// Unsandboxed runs stdio servers unconfined (the worker's
	// --unsandboxed-tools). Default false: each runs in a Landlock sandbox
	// (sandbox.go), and without Landlock none starts; the program must
	// call sandbox.Enter first in main, as toolgate's does.
	Unsandboxed bool
	// Own are toolgate's own files and directories: a stdio server whose
	// sandbox would reach one is refused. Optional.
	Own []string
}

// Upstreams are the connected MCP servers of a worker.
type Upstreams struct {
	servers []*upstream
	pinning *pinning
}

// pinning is what every upstream of a worker shares to offer its tools
// as their pins allow. It is set before the worker starts.
type pinning struct {
	registry *tool.Registry
	pins     Pins
	trustNew map[string]bool
	recheck  time.Duration
}

// StartUpstreams connects to every server of cfg and lists their tools. A
// server that cannot be reached, or whose tools cannot be listed, fails it
// (naming the server), so that every worker of a task queue offers the
// same tools. Register then puts the tools in the worker's registry, held,
// and Pin offers those whose definitions are pinned.
func StartUpstreams(ctx context.Context, cfg *UpstreamConfig, o UpstreamOptions) (*Upstreams, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultUpstreamConnectTimeout
	}
	if o.PinRecheck <= 0 {
		o.PinRecheck = DefaultPinRecheck
	}
	p := &pinning{trustNew: map[string]bool{}, recheck: o.PinRecheck}
	for _, name := range o.TrustNewTools {
		if !slices.ContainsFunc(cfg.Servers, func(s UpstreamServer) bool { return s.Name == name }) {
			return nil, fmt.Errorf("trust new tools: no MCP server %q in the MCP servers file", name)
		}
		p.trustNew[name] = true
	}
	u := &Upstreams{pinning: p}
	for _, s := range cfg.Servers {
		up := newUpstream(s, o, p)
		u.servers = append(u.servers, up)
		if err := up.start(ctx); err != nil {
			u.Close()
			return nil, fmt.Errorf("MCP server %q: %w", s.Name, err)
		}
	}
	return u, nil
}

// Register puts the servers' tools, named <server>__<tool>, in reg, each
// held until Pin finds its definition pinned, and toolgate's
// definition_change tool. pins keeps the pins (a *client.Client).
func (u *Upstreams) Register(reg *tool.Registry, pins Pins) error {
	u.pinning.registry, u.pinning.pins = reg, pins
	if err := reg.Register(u.definitionChangeTool()); err != nil {
		return err
	}
	for _, s := range u.servers {
		for _, name := range sortedKeys(s.offers) {
			o := s.offers[name]
			reg.Hold(o.tool.Name, o.held)
			if err := reg.Register(o.tool); err != nil {
				// A schema the registry cannot compile keeps that tool
				// away, not the others.
				s.logger.Warn("MCP tool left out", zap.String("mcpTool", name), zap.Error(err))
				reg.Release(o.tool.Name)
				delete(s.offers, name)
			}
		}
	}
	return nil
}

// Pin checks every server's tools against the pins: a tool whose
// definition is pinned is offered; a changed or new one stays held while a
// definition_change call asks a person. Call it once the worker runs (the
// pins are a workflow on its task queue). It returns once every server is
// checked, and follows their changes (notifications/tools/list_changed, a
// restart) until Close.
func (u *Upstreams) Pin(ctx context.Context) { u.pinAll(ctx) }

// Close disconnects every server and stops the stdio ones. Calls still
// running fail.
func (u *Upstreams) Close() {
	var wg sync.WaitGroup
	for _, s := range u.servers {
		wg.Go(s.close)
	}
	wg.Wait()
}

// upstream is one MCP server and its current session, restarted when it
// ends on its own.
type upstream struct {
	srv    UpstreamServer
	opts   UpstreamOptions
	logger *zap.Logger
	client *mcp.Client
	box    *box // a stdio server's sandbox; nil: unconfined or not stdio

	// connectMu serialises connecting; mu guards the fields below.
	connectMu sync.Mutex
	mu        sync.Mutex
	cs        *mcp.ClientSession // nil while down
	connects  int
	closed    bool
	done      chan struct{} // closed by close

	// What the server offers, by its names for its tools, and whether the
	// pins answered since the worker started: owned by start, then Pin,
	// then follow (pins.go).
	pinning *pinning
	offers  map[string]*offer
	checked bool
	// relist and recheck wake follow.
	relist, recheck chan struct{}

	// progress maps the progress tokens of the calls in flight to their
	// tools' progress reporters.
	progress sync.Map
	tokens   atomic.Int64
}

func newUpstream(s UpstreamServer, o UpstreamOptions, p *pinning) *upstream {
	u := &upstream{
		srv:     s,
		opts:    o,
		logger:  o.Logger.With(zap.String("mcpServer", s.Name)),
		done:    make(chan struct{}),
		pinning: p,
		relist:  make(chan struct{}, 1),
		recheck: make(chan struct{}, 1),
	}
	u.client = newUpstreamClient(s.Roots, u.listChanged, u.progressed)
	return u
}

// newUpstreamClient is the MCP client toolgate talks to a server with. It
// offers roots only when it has some: a server that relies on roots (the
// filesystem server started without directories) would otherwise take an
// empty list and refuse every call. listChanged is called when the server
// says its tools changed, progressed with its progress notifications.
func newUpstreamClient(roots []string, listChanged func(), progressed func(*mcp.ProgressNotificationParams)) *mcp.Client {
	opts := &mcp.ClientOptions{
		Capabilities:                &mcp.ClientCapabilities{},
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { listChanged() },
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { progressed(req.Params) },
	}
	if len(roots) > 0 {
		opts.Capabilities.RootsV2 = &mcp.RootCapabilities{}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "toolgate", Version: "1"}, opts)
	for _, dir := range roots {
		c.AddRoots(&mcp.Root{URI: (&url.URL{Scheme: "file", Path: dir}).String(), Name: filepath.Base(dir)})
	}
	return c
}

// start confines a stdio server, connects and lists the server's tools,
// each held until checked.
func (u *upstream) start(ctx context.Context) error {
	if err := u.confine(); err != nil {
		return err
	}
	offers, err := u.list(ctx)
	if err != nil {
		return err
	}
	u.offers = map[string]*offer{}
	for _, o := range offers {
		o.held = heldUnchecked
		u.offers[o.def.Tool] = o
	}
	u.logger.Info("MCP server connected", zap.String("type", u.srv.Type), zap.Int("tools", len(offers)))
	return nil
}

// list lists the server's tools as toolgate tools with their definitions.
func (u *upstream) list(ctx context.Context) ([]*offer, error) {
	cs, err := u.session(ctx)
	if err != nil {
		return nil, err
	}
	var out []*offer
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		tt, err := u.toolOf(t)
		var def workflows.ToolDefinition
		if err == nil {
			def, err = definitionOf(t)
		}
		if err != nil {
			// One odd tool does not keep the others away.
			u.logger.Warn("MCP tool left out", zap.String("mcpTool", t.Name), zap.Error(err))
			continue
		}
		out = append(out, &offer{tool: tt, def: def})
	}
	return out, nil
}

// toolOf describes an upstream tool as a toolgate tool.
func (u *upstream) toolOf(t *mcp.Tool) (tool.Tool, error) {
	name := u.srv.Name + Separator + t.Name
	if err := tgclient.ValidateID("tool", name); err != nil {
		return tool.Tool{}, fmt.Errorf("%s: %w", name, err)
	}
	var schema json.RawMessage
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return tool.Tool{}, fmt.Errorf("input schema: %w", err)
		}
		schema = b
	}
	var annotations map[string]any
	idempotent := false
	if t.Annotations != nil {
		b, err := json.Marshal(t.Annotations)
		if err != nil {
			return tool.Tool{}, fmt.Errorf("annotations: %w", err)
		}
		if err := json.Unmarshal(b, &annotations); err != nil {
			return tool.Tool{}, fmt.Errorf("annotations: %w", err)
		}
		idempotent = t.Annotations.IdempotentHint
	}
	var output json.RawMessage
	if t.OutputSchema != nil {
		b, err := json.Marshal(t.OutputSchema)
		if err != nil {
			return tool.Tool{}, fmt.Errorf("output schema: %w", err)
		}
		output = b
	}
	description := t.Description
	if description == "" {
		description = t.Title
	}
	upstreamName := t.Name
	return tool.Tool{
		Name:         name,
		Title:        t.Title,
		Description:  description,
		Schema:       schema,
		OutputSchema: output,
		Annotations:  annotations,
		Options: tool.Options{
			Timeout:          u.srv.Timeout,
			HeartbeatTimeout: UpstreamHeartbeatTimeout,
			Idempotent:       idempotent,
		},
		Run: func(ctx context.Context, in tool.Input) (json.RawMessage, error) {
			return u.call(ctx, upstreamName, in.Args, idempotent)
		},
	}, nil
}

// call runs one tool call on the upstream. The output is the MCP
// CallToolResult (content, structuredContent) as JSON. A result with
// isError fails the call with the result's text. A call that may have
// reached a server that then went away is unknown (tool.OutcomeUnknown),
// or, for an idempotent tool, retried; a call that cannot have reached it
// is a plain error.
func (u *upstream) call(ctx context.Context, name string, args json.RawMessage, idempotent bool) (json.RawMessage, error) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	// The server's progress notifications for this call become the
	// tool's progress.
	token := fmt.Sprintf("toolgate-%d", u.tokens.Add(1))
	u.progress.Store(token, func(p tool.Progress) { tool.ReportProgress(ctx, p) })
	defer u.progress.Delete(token)
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	params.SetProgressToken(token)
	var res *mcp.CallToolResult
	for attempt := 1; ; attempt++ {
		cs, err := u.session(ctx)
		if err != nil {
			return nil, fmt.Errorf("MCP server %q is not available: %w", u.srv.Name, err)
		}
		res, err = cs.CallTool(ctx, params)
		if err == nil {
			break
		}
		if errors.Is(err, mcp.ErrSessionMissing) && attempt == 1 {
			// An HTTP server that forgot our session (it restarted) refused
			// the call unrun: connect afresh and send it once more.
			u.drop(cs)
			continue
		}
		return nil, u.callError(ctx, cs, err, idempotent)
	}
	if res.IsError {
		return nil, tool.Permanent(errors.New(errorText(res)))
	}
	out, err := json.Marshal(res)
	if err != nil {
		return nil, tool.Permanent(fmt.Errorf("MCP server %q returned a result that is not JSON: %w", u.srv.Name, err))
	}
	return out, nil
}

// progressed hands a progress notification to the call it is for.
func (u *upstream) progressed(p *mcp.ProgressNotificationParams) {
	if report, ok := u.progress.Load(p.ProgressToken); ok {
		report.(func(tool.Progress))(tool.Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
	}
}

// callError classifies a failed call.
func (u *upstream) callError(ctx context.Context, cs *mcp.ClientSession, err error, idempotent bool) error {
	if ctx.Err() != nil {
		// The attempt's timeout or a cancellation: the workflow knows.
		return err
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) && wire.Code != codeClientClosing && wire.Code != codeServerClosing {
		// The server answered, refusing the request (unknown tool,
		// invalid arguments): it did not run.
		return tool.Permanent(fmt.Errorf("MCP server %q refused the call: %s", u.srv.Name, wire.Message))
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, mcp.ErrSessionMissing) {
		u.drop(cs)
		return fmt.Errorf("MCP server %q did not take the call: %w", u.srv.Name, err)
	}
	// The connection broke while the call was out: the server may have
	// run it. Start afresh for the next call.
	u.drop(cs)
	lost := fmt.Errorf("MCP server %q went away while the call ran (%v)", u.srv.Name, err)
	if idempotent {
		return lost // retried: the tool says a repeat is harmless
	}
	return tool.OutcomeUnknown(lost)
}

// JSON-RPC codes of the Go SDK for a connection that closes.
const (
	codeClientClosing = -32003
	codeServerClosing = -32004
)

// errorText is the text an isError result carries, for the call's reason.
func errorText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok && strings.TrimSpace(t.Text) != "" {
			parts = append(parts, strings.TrimSpace(t.Text))
		}
	}
	text := strings.Join(parts, "\n")
	if text == "" {
		return "the MCP tool reported an error without a message"
	}
	if len(text) > maxErrorText {
		text = text[:maxErrorText] + "…"
	}
	return text
}

// session returns the live session, connecting (or restarting the
// server) when there is none.
func (u *upstream) session(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	cs, closed := u.cs, u.closed
	u.mu.Unlock()
	if closed {
		return nil, errors.New("the worker is stopping")
	}
	if cs != nil {
		return cs, nil
	}
	u.connectMu.Lock()
	defer u.connectMu.Unlock()
	u.mu.Lock()
	cs, closed = u.cs, u.closed
	u.mu.Unlock()
	if closed {
		return nil, errors.New("the worker is stopping")
	}
	if cs != nil {
		return cs, nil // another caller connected meanwhile
	}
	cs, stop, err := u.connect(ctx)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		_ = cs.Close()
		stop()
		return nil, errors.New("the worker is stopping")
	}
	u.cs = cs
	u.connects++
	again := u.connects > 1
	u.mu.Unlock()
	go u.watch(cs, stop)
	if again {
		u.listChanged() // a restarted server may offer other tools
	}
	return cs, nil
}

// connect starts a session within ConnectTimeout (or ctx). Some transports
// (SSE) tie the connection to the context they connect with, so that one
// lives until stop, not just through the handshake.
func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, context.CancelFunc, error) {
	t, err := u.transport()
	if err != nil {
		return nil, nil, err
	}
	life, stop := context.WithCancel(context.Background())
	type result struct {
		cs  *mcp.ClientSession
		err error
	}
	done := make(chan result, 1)
	go func() {
		cs, err := u.client.Connect(life, t, nil)
		done <- result{cs, err}
	}()
	timer := time.NewTimer(u.opts.ConnectTimeout)
	defer timer.Stop()
	var waitErr error
	select {
	case r := <-done:
		if r.err != nil {
			stop()
			return nil, nil, fmt.Errorf("connect: %w", r.err)
		}
		return r.cs, stop, nil
	case <-timer.C:
		waitErr = fmt.Errorf("connect: no answer within %s", u.opts.ConnectTimeout)
	case <-ctx.Done():
		waitErr = fmt.Errorf("connect: %w", ctx.Err())
	}
	stop()
	if r := <-done; r.cs != nil {
		_ = r.cs.Close()
	}
	return nil, nil, waitErr
}

// watch waits for the session to end. An end the worker did not ask for
// (the process died, the server hung up) is logged and the server is
// started again, with backoff, until it runs or the worker stops.
func (u *upstream) watch(cs *mcp.ClientSession, stop context.CancelFunc) {
	err := cs.Wait()
	stop()
	if !u.drop(cs) {
		return // dropped already (a failed call) or closing
	}
	u.logger.Warn("MCP server stopped; restarting it", zap.Error(err))
	backoff := time.Second
	for {
		select {
		case <-u.done:
			return
		case <-time.After(backoff):
		}
		ctx, cancel := context.WithTimeout(context.Background(), u.opts.ConnectTimeout)
		_, err := u.session(ctx)
		cancel()
		if err == nil {
			u.logger.Info("MCP server restarted")
			return
		}
		u.logger.Warn("MCP server did not restart; trying again", zap.Duration("in", backoff), zap.Error(err))
		backoff = min(backoff*2, maxRestartBackoff)
	}
}

// drop forgets cs if it is the current session and closes it (for a stdio
// server: stops and reaps the process). It reports whether cs was current
// and the upstream is not closing: whether a restart is up to the caller.
func (u *upstream) drop(cs *mcp.ClientSession) bool {
	u.mu.Lock()
	current := u.cs == cs && !u.closed
	if u.cs == cs {
		u.cs = nil
	}
	u.mu.Unlock()
	if current {
		go func() { _ = cs.Close() }()
	}
	return current
}

// close ends the session for good.
func (u *upstream) close() {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.closed = true
	cs := u.cs
	u.cs = nil
	close(u.done)
	u.mu.Unlock()
	if cs != nil {
		if err := cs.Close(); err != nil {
			u.logger.Debug("MCP server closed with an error", zap.Error(err))
		}
	}
	u.removeTmp()
}
