package mcpgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aymanbagabas/go-udiff"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// Pins is what the upstream side needs of toolgate to pin the servers'
// tool definitions; *client.Client has it.
type Pins interface {
	CheckPins(ctx context.Context, req workflows.CheckPinsRequest) ([]workflows.PinVerdict, error)
	Pins(ctx context.Context, server string) ([]workflows.Pin, error)
	Pin(ctx context.Context, req workflows.PinRequest) error
	AskChange(ctx context.Context, req workflows.AskChangeRequest) (res workflows.AskChangeResult, own bool, err error)
	Status(ctx context.Context, callID string) (tgclient.Status, error)
	CancelOwn(ctx context.Context, callID, requester string) (policy.Decision, error)
}

// DefaultPinRecheck is how often a worker reads the pins of a server
// whose tools it holds, to offer a change a person approved on another
// worker.
const DefaultPinRecheck = 5 * time.Second

// maxDiffLines caps the diff a definition_change call shows.
const maxDiffLines = 400

// Why a tool is held, in the words a model reads when it calls one.
const (
	heldUnchecked = "toolgate has not yet checked its definition against the definitions people approved"
	heldGone      = "its MCP server no longer offers it"
)

// definitionJSON is what a pin covers of a tool: what a model reads
// (name, title, description, annotations) and what the tool takes and
// gives (input and output schema).
type definitionJSON struct {
	Name         string `json:"name"`
	Title        string `json:"title,omitempty"`
	Description  string `json:"description,omitempty"`
	InputSchema  any    `json:"inputSchema,omitempty"`
	OutputSchema any    `json:"outputSchema,omitempty"`
	Annotations  any    `json:"annotations,omitempty"`
}

// definitionOf is a tool's definition in canonical JSON, and its hash.
func definitionOf(t *mcp.Tool) (workflows.ToolDefinition, error) {
	d := definitionJSON{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema}
	if t.Annotations != nil {
		d.Annotations = t.Annotations // a nil *ToolAnnotations would be "null"
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return workflows.ToolDefinition{}, fmt.Errorf("definition: %w", err)
	}
	canonical, err := tgclient.CanonicalJSON(raw)
	if err != nil {
		return workflows.ToolDefinition{}, fmt.Errorf("definition: %w", err)
	}
	return workflows.ToolDefinition{Tool: t.Name, Hash: workflows.DefinitionHash(string(canonical)), Definition: string(canonical)}, nil
}

// definitionDiff is the unified diff of two canonical definitions, laid
// out one key a line, a line an element.
func definitionDiff(server, toolName, old, new string) []string {
	label := server + Separator + toolName + ".json"
	text := udiff.Unified("a/"+label, "b/"+label, indented(old), indented(new))
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > maxDiffLines {
		lines = append(lines[:maxDiffLines], fmt.Sprintf("… %d more lines", len(lines)-maxDiffLines))
	}
	return lines
}

func indented(canonical string) string {
	if canonical == "" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(canonical), "", "  "); err != nil {
		return canonical
	}
	return b.String() + "\n"
}

// offer is one tool a server offers now.
type offer struct {
	tool tool.Tool
	def  workflows.ToolDefinition
	// held says why the tool is not offered; "" when it is.
	held string
	// asking is the definition_change call that waits for a person about
	// this definition, if any.
	asking string
}

// pinAll checks every server's tools against their pins, then follows
// each server's changes.
func (u *Upstreams) pinAll(ctx context.Context) {
	for _, s := range u.servers {
		ctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
		err := s.check(ctx)
		cancel()
		if err != nil {
			s.logger.Warn("Could not check the MCP server's tools against their pins; they stay held and are checked again", zap.Error(err))
		}
	}
	for _, s := range u.servers {
		go s.follow()
	}
}

// follow keeps what the registry offers in step with the server: it lists
// again when the server says its tools changed or it was restarted, and
// reads the pins while it holds a tool.
func (u *upstream) follow() {
	t := time.NewTicker(u.pinning.recheck)
	defer t.Stop()
	for {
		select {
		case <-u.done:
			return
		case <-u.relist:
			ctx, cancel := context.WithTimeout(context.Background(), u.opts.ConnectTimeout)
			err := u.listAgain(ctx)
			cancel()
			if err != nil {
				u.logger.Warn("Could not list the MCP server's tools again; trying at the next change", zap.Error(err))
			}
		case <-u.recheck:
			u.recheckHeld()
		case <-t.C:
			u.recheckHeld()
		}
	}
}

// listChanged asks follow to list the server's tools again.
func (u *upstream) listChanged() {
	select {
	case u.relist <- struct{}{}:
	default: // one is queued already
	}
}

// recheckSoon asks follow to read the pins now.
func (u *upstream) recheckSoon() {
	select {
	case u.recheck <- struct{}{}:
	default:
	}
}

// listAgain lists the server's tools and offers what changed as the pins
// allow.
func (u *upstream) listAgain(ctx context.Context) error {
	offers, err := u.list(ctx)
	if err != nil {
		return err
	}
	u.update(ctx, offers)
	return u.check(ctx)
}

// update takes a new listing into the registry: a tool whose definition
// changed (or that is new) is held before its new definition is in the
// registry, and stays held until check finds it pinned. A question about
// a definition the server no longer offers is withdrawn.
func (u *upstream) update(ctx context.Context, offers []*offer) {
	reg := u.pinning.registry
	now := map[string]*offer{}
	for _, o := range offers {
		now[o.def.Tool] = o
		cur, ok := u.offers[o.def.Tool]
		if ok && cur.def.Hash == o.def.Hash {
			now[o.def.Tool] = cur
			continue
		}
		if ok {
			u.withdraw(ctx, cur)
		}
		o.held = heldUnchecked
		reg.Hold(o.tool.Name, o.held)
		if err := reg.Replace(o.tool); err != nil {
			u.logger.Warn("MCP tool left out", zap.String("mcpTool", o.def.Tool), zap.Error(err))
			reg.Hold(o.tool.Name, "its MCP server offers a definition toolgate cannot use: "+err.Error())
			delete(now, o.def.Tool)
		}
	}
	for name, cur := range u.offers {
		if _, ok := now[name]; !ok {
			reg.Hold(cur.tool.Name, heldGone)
			u.withdraw(ctx, cur)
		}
	}
	u.offers = now
}

// withdraw cancels the definition_change call about a definition the
// server no longer offers: approving it would pin what nobody runs.
func (u *upstream) withdraw(ctx context.Context, o *offer) {
	if o.asking == "" {
		return
	}
	if _, err := u.pinning.pins.CancelOwn(ctx, o.asking, policy.ToolgateRequester); err != nil {
		u.logger.Debug("Could not withdraw a definition_change call", zap.String("callID", o.asking), zap.Error(err))
		return
	}
	u.logger.Info("Withdrew a definition_change call: the server offers another definition now", zap.String("mcpTool", o.def.Tool), zap.String("callID", o.asking))
}

// check asks the server's pins about every tool it offers: a pinned one is
// offered, any other stays held and a person is asked about it.
func (u *upstream) check(ctx context.Context) error {
	p := u.pinning
	req := workflows.CheckPinsRequest{Server: u.srv.Name, TrustNew: p.trustNew[u.srv.Name], By: "toolgate (first sight)"}
	for _, name := range sortedKeys(u.offers) {
		req.Tools = append(req.Tools, u.offers[name].def)
	}
	verdicts, err := p.pins.CheckPins(ctx, req)
	if err != nil {
		u.checked = false // recheckHeld checks again
		return err
	}
	u.checked = true
	for _, v := range verdicts {
		o, ok := u.offers[v.Tool]
		if !ok {
			continue
		}
		if v.Pinned {
			u.release(o)
			continue
		}
		o.held = u.askChange(ctx, o, v.Previous)
		p.registry.Hold(o.tool.Name, o.held)
	}
	return nil
}

func (u *upstream) release(o *offer) {
	if o.held != "" {
		u.logger.Info("MCP tool offered", zap.String("mcpTool", o.def.Tool), zap.String("definition", o.def.Hash[:12]))
	}
	o.held = ""
	u.pinning.registry.Release(o.tool.Name)
}

// recheckHeld offers the held tools whose definitions have been pinned
// since (a person approved them, maybe on another worker).
func (u *upstream) recheckHeld() {
	held := false
	for _, o := range u.offers {
		held = held || o.held != ""
	}
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !u.checked {
		if err := u.check(ctx); err != nil {
			u.logger.Debug("Pins still unavailable", zap.Error(err))
		}
		return
	}
	pins, err := u.pinning.pins.Pins(ctx, u.srv.Name)
	if err != nil {
		u.logger.Debug("Could not read the pins", zap.Error(err))
		return
	}
	for _, pin := range pins {
		if o, ok := u.offers[pin.Tool]; ok && o.held != "" && pin.Hash == o.def.Hash {
			u.release(o)
		}
	}
}

// askChange starts (or joins) the definition_change call that asks a
// person about a tool's new definition, and says why the tool is held
// meanwhile. The pins start the call (their child, in the server's
// reserved session), so no agent can take its place; a question that
// ended without a person's decision is asked anew under the next number.
func (u *upstream) askChange(ctx context.Context, o *offer, previous *workflows.Pin) string {
	change := policy.DefinitionChange{Server: u.srv.Name, Tool: o.def.Tool, Change: "new",
		Definition: json.RawMessage(o.def.Definition), Hash: o.def.Hash}
	old := ""
	if previous != nil {
		change.Change, change.PreviousHash, old = "changed", previous.Hash, previous.Definition
	}
	change.Diff = definitionDiff(u.srv.Name, o.def.Tool, old, o.def.Definition)
	what := "its definition changed since it was approved"
	if previous == nil {
		what = "it is new on its MCP server"
	}
	for n := 1; n <= workflows.MaxChangeQuestions; n++ {
		res, own, err := u.pinning.pins.AskChange(ctx, workflows.AskChangeRequest{Server: u.srv.Name, N: n, Change: change})
		if err != nil {
			u.logger.Warn("Could not ask about an MCP tool's definition", zap.String("mcpTool", o.def.Tool), zap.Error(err))
			return what + ", and toolgate could not ask an approver yet: " + err.Error()
		}
		id := res.CallID
		if !own {
			u.logger.Warn("A call toolgate did not start holds the ID of a definition_change question; asking under the next one",
				zap.String("mcpTool", o.def.Tool), zap.String("callID", id))
			continue
		}
		st, err := u.pinning.pins.Status(ctx, id)
		switch {
		case err != nil:
			return fmt.Sprintf("%s; definition_change call %s asks an approver", what, id)
		case st.Result == nil:
			o.asking = id
			u.logger.Info("MCP tool held: its definition waits for an approver", zap.String("mcpTool", o.def.Tool), zap.String("callID", id), zap.String("change", change.Change))
			return fmt.Sprintf("%s; definition_change call %s asks an approver", what, id)
		case st.Result.Status == workflows.StatusOK:
			return fmt.Sprintf("%s; definition_change call %s approved it, and it is being offered", what, id)
		case !endedUndecided(*st.Result):
			return fmt.Sprintf("%s, and definition_change call %s refused the new definition (%s)", what, id, st.Result.Reason)
		case res.Started:
			// The question just asked ended at once without a person:
			// it is asked again when the server offers the definition
			// again, not in a loop.
			return fmt.Sprintf("%s, and definition_change call %s ended without a decision (%s)", what, id, st.Result.Reason)
		}
		// An earlier question ended without a person's decision: ask anew.
	}
	return fmt.Sprintf("%s, and nobody decided the last %d definition_change calls about it", what, workflows.MaxChangeQuestions)
}

// endedUndecided reports whether a definition_change call ended without
// anybody's decision about the definition: nobody decided in time, toolgate
// withdrew it (the server offered another definition meanwhile), or the
// approved pin failed (edited arguments no longer match the definition).
// Such a definition is asked about again when it is offered again; a
// denial by a person, a sticky decision, the policy or a session end is
// kept.
func endedUndecided(r workflows.Result) bool {
	switch r.Status {
	case workflows.StatusTimedOut, workflows.StatusError:
		return true
	case workflows.StatusDenied:
		return r.DecidedBy == policy.ToolgateRequester && r.Channel == workflows.ChannelCancel
	}
	return false
}

// definitionChangeTool is toolgate's definition_change tool: its approved
// call pins the definition it shows. Only toolgate itself may submit one
// (the evaluation refuses an agent's), and it is never listed.
func (u *Upstreams) definitionChangeTool() tool.Tool {
	return tool.Tool{
		Name:        policy.DefinitionChangeTool,
		Description: "Pins an upstream MCP tool's new definition once a person approves it (toolgate's own; agents cannot call it).",
		Schema: json.RawMessage(`{"type":"object","required":["server","tool","change","diff","definition","hash"],"properties":{
			"server":{"type":"string"},"tool":{"type":"string"},"change":{"enum":["changed","new"]},
			"diff":{"type":"array","items":{"type":"string"}},"definition":{"type":"object"},
			"hash":{"type":"string"},"previous_hash":{"type":"string"}}}`),
		Options: tool.Options{Idempotent: true, Timeout: 30 * time.Second},
		Run:     u.pinApproved,
	}
}

// pinApproved pins the definition of an approved definition_change call,
// and offers the tool on this worker at once (others within their recheck).
func (u *Upstreams) pinApproved(ctx context.Context, in tool.Input) (json.RawMessage, error) {
	var change policy.DefinitionChange
	if err := json.Unmarshal(in.Args, &change); err != nil {
		return nil, tool.Permanent(fmt.Errorf("arguments: %w", err))
	}
	def, err := tgclient.CanonicalJSON(change.Definition)
	if err != nil {
		return nil, tool.Permanent(fmt.Errorf("definition: %w", err))
	}
	if workflows.DefinitionHash(string(def)) != change.Hash {
		return nil, tool.Permanent(errors.New("the definition does not match its hash (were the arguments edited?); nothing was pinned"))
	}
	by := "an approver"
	if st, err := u.pinning.pins.Status(ctx, in.CallID); err == nil && st.State != nil && st.State.Decision != nil {
		by = st.State.Decision.DecidedBy
	}
	err = u.pinning.pins.Pin(ctx, workflows.PinRequest{Server: change.Server, By: by, CallID: in.CallID,
		Definition: workflows.ToolDefinition{Tool: change.Tool, Hash: change.Hash, Definition: string(def)}})
	if err != nil {
		return nil, err
	}
	for _, s := range u.servers {
		if s.srv.Name == change.Server {
			s.recheckSoon()
		}
	}
	return json.Marshal(map[string]any{"pinned": change.Server + Separator + change.Tool, "hash": change.Hash, "by": by})
}
