package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
)

// PinsWorkflowType is the registered name of ToolPins.
const PinsWorkflowType = "ToolgatePins"

// Messages of ToolPins.
const (
	// UpdateCheckPins compares what an upstream MCP server offers now with
	// its pins; argument: a CheckPinsRequest; result: []PinVerdict.
	UpdateCheckPins = "check-pins"
	// UpdatePin pins a definition a person approved; argument: a
	// PinRequest.
	UpdatePin = "pin"
	// QueryPins returns the server's pins ([]Pin, sorted by tool).
	QueryPins = "pins"
	// UpdateAskChange starts the definition_change call that asks a
	// person about a definition the server offers, as a child of the
	// pins; argument: an AskChangeRequest; result: an AskChangeResult.
	UpdateAskChange = "ask-change"
)

// PinsWorkflowID derives the ID of the pins of an upstream MCP server (by
// its name in the MCP servers file): every worker and gateway of the
// namespace shares them.
func PinsWorkflowID(server string) string { return "toolgate/pins/" + server }

// pinMessagesPerRun bounds a pins run's history; the pins move to a new
// run after that many updates.
const pinMessagesPerRun = 500

// ToolDefinition is what an upstream server says one of its tools is: its
// name on that server, the definition as canonical JSON (name, title,
// description, input and output schema, annotations) and the definition's
// hash (DefinitionHash).
type ToolDefinition struct {
	Tool       string `json:"tool"`
	Hash       string `json:"hash"`
	Definition string `json:"definition"`
}

// DefinitionHash is the hash a pin keeps of a definition: hex SHA-256.
func DefinitionHash(definition string) string {
	sum := sha256.Sum256([]byte(definition))
	return hex.EncodeToString(sum[:])
}

func (d ToolDefinition) check() error {
	switch {
	case d.Tool == "":
		return errors.New("a tool definition without a tool name")
	case d.Hash != DefinitionHash(d.Definition):
		return fmt.Errorf("tool %q: the hash does not match the definition", d.Tool)
	}
	return nil
}

// Pin is a definition toolgate accepted for a tool: seen first on a server
// never seen before, a new tool on a server trusted for new tools, or
// approved by a person (CallID names that definition_change call).
type Pin struct {
	ToolDefinition
	PinnedBy string    `json:"pinned_by"`
	PinnedAt time.Time `json:"pinned_at"`
	CallID   string    `json:"call_id,omitempty"`
}

// PinsInput starts (or continues) a server's pins.
type PinsInput struct {
	Server string `json:"server"`
	// Known: the server was checked before, so a tool without a pin is
	// new and waits for a person.
	Known bool  `json:"known,omitempty"`
	Pins  []Pin `json:"pins,omitempty"`
	// ContinueAsNewAfter moves the pins to a new run after that many
	// updates instead of pinMessagesPerRun (for tests and recordings).
	ContinueAsNewAfter int `json:"continue_as_new_after,omitempty"`
}

// CheckPinsRequest is the argument of UpdateCheckPins: the definitions the
// server offers now.
type CheckPinsRequest struct {
	Server string           `json:"server"`
	Tools  []ToolDefinition `json:"tools"`
	// TrustNew pins a tool the server has not offered before without
	// asking (its changes are still asked).
	TrustNew bool `json:"trust_new,omitempty"`
	// By names who checks, for a pin taken at first sight.
	By string `json:"by"`
}

// PinVerdict says whether a tool may be offered. A tool that may not is
// new (Previous nil) or changed since Previous was pinned; a person
// decides it in a definition_change call.
type PinVerdict struct {
	Tool     string `json:"tool"`
	Pinned   bool   `json:"pinned"`
	Previous *Pin   `json:"previous,omitempty"`
}

// PinRequest is the argument of UpdatePin.
type PinRequest struct {
	Server     string         `json:"server"`
	Definition ToolDefinition `json:"definition"`
	By         string         `json:"by"`
	CallID     string         `json:"call_id"`
}

// ToolPins keeps the pinned tool definitions of one upstream MCP server,
// so that a server cannot change a tool (its description, its schema)
// under the people who trusted it: a changed or new tool is offered only
// once its definition is pinned. The first check of a server pins what it
// offers (trust on first use). The state is small (one definition a tool)
// and moves to a new run every pinMessagesPerRun updates.
func ToolPins(ctx workflow.Context, in PinsInput) error {
	p := &pinsRun{server: in.Server, known: in.Known}
	for _, pin := range in.Pins {
		p.put(pin)
	}
	limit := pinMessagesPerRun
	if in.ContinueAsNewAfter > 0 {
		limit = in.ContinueAsNewAfter
	}
	if err := workflow.SetQueryHandler(ctx, QueryPins, func() ([]Pin, error) { return slices.Clone(p.pins), nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCheckPins, p.check,
		workflow.UpdateHandlerOptions{Validator: p.validateCheck}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdatePin, p.pin,
		workflow.UpdateHandlerOptions{Validator: p.validatePin}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateAskChange, p.askChange,
		workflow.UpdateHandlerOptions{Validator: p.validateAskChange}); err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool {
		return p.updates >= limit || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	}); err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, PinsWorkflowType, PinsInput{Server: p.server, Known: p.known, Pins: p.pins})
}

type pinsRun struct {
	server string
	known  bool
	// pins are sorted by tool (a slice, not a map: workflow code never
	// ranges over a map).
	pins    []Pin
	updates int
}

// find returns the index of tool's pin, or where it would go.
func (p *pinsRun) find(tool string) (int, bool) {
	return slices.BinarySearchFunc(p.pins, tool, func(pin Pin, tool string) int { return strings.Compare(pin.Tool, tool) })
}

func (p *pinsRun) put(pin Pin) {
	if i, ok := p.find(pin.Tool); ok {
		p.pins[i] = pin
	} else {
		p.pins = slices.Insert(p.pins, i, pin)
	}
}

func (p *pinsRun) validateCheck(req CheckPinsRequest) error {
	if req.Server != p.server {
		return temporal.NewApplicationError(fmt.Sprintf("these are the pins of %q, not %q", p.server, req.Server), ErrTypeInvalidPin)
	}
	for _, d := range req.Tools {
		if err := d.check(); err != nil {
			return temporal.NewApplicationError(err.Error(), ErrTypeInvalidPin)
		}
	}
	return nil
}

func (p *pinsRun) check(ctx workflow.Context, req CheckPinsRequest) ([]PinVerdict, error) {
	p.updates++
	firstSight := !p.known
	p.known = true
	out := make([]PinVerdict, 0, len(req.Tools))
	for _, d := range req.Tools {
		i, ok := p.find(d.Tool)
		var pin Pin
		if ok {
			pin = p.pins[i]
		}
		switch {
		case ok && pin.Hash == d.Hash:
			out = append(out, PinVerdict{Tool: d.Tool, Pinned: true})
		case ok:
			previous := pin
			out = append(out, PinVerdict{Tool: d.Tool, Previous: &previous})
		case firstSight || req.TrustNew:
			p.put(Pin{ToolDefinition: d, PinnedBy: req.By, PinnedAt: workflow.Now(ctx)})
			out = append(out, PinVerdict{Tool: d.Tool, Pinned: true})
		default:
			out = append(out, PinVerdict{Tool: d.Tool})
		}
	}
	return out, nil
}

func (p *pinsRun) validatePin(req PinRequest) error {
	switch {
	case req.Server != p.server:
		return temporal.NewApplicationError(fmt.Sprintf("these are the pins of %q, not %q", p.server, req.Server), ErrTypeInvalidPin)
	case req.By == "":
		return temporal.NewApplicationError("a pin names who approved it", ErrTypeInvalidPin)
	}
	if err := req.Definition.check(); err != nil {
		return temporal.NewApplicationError(err.Error(), ErrTypeInvalidPin)
	}
	return nil
}

func (p *pinsRun) pin(ctx workflow.Context, req PinRequest) error {
	p.updates++
	p.known = true
	p.put(Pin{ToolDefinition: req.Definition, PinnedBy: req.By, PinnedAt: workflow.Now(ctx), CallID: req.CallID})
	return nil
}

// MaxChangeQuestions bounds how many definition_change calls are asked
// about one definition (AskChangeRequest.N).
const MaxChangeQuestions = 100

// AskChangeRequest is the argument of UpdateAskChange: the change to ask
// about, and the number of the question (1 for the first; a question that
// ended without a person's decision is asked again under the next).
type AskChangeRequest struct {
	Server string                  `json:"server"`
	N      int                     `json:"n"`
	Change policy.DefinitionChange `json:"change"`
}

// AskChangeResult says which call asks: CallID is
// policy.DefinitionChangeCallID of the change and number. Started is false
// when a workflow of that ID existed already (a question asked before, or
// a call somebody else started under that ID: its parent tells).
type AskChangeResult struct {
	CallID  string `json:"call_id"`
	Started bool   `json:"started"`
}

func (p *pinsRun) validateAskChange(req AskChangeRequest) error {
	ch := req.Change
	switch {
	case req.Server != p.server:
		return temporal.NewApplicationError(fmt.Sprintf("these are the pins of %q, not %q", p.server, req.Server), ErrTypeInvalidPin)
	case ch.Server != p.server:
		return temporal.NewApplicationError(fmt.Sprintf("the change is about server %q, not %q", ch.Server, p.server), ErrTypeInvalidPin)
	case req.N < 1 || req.N > MaxChangeQuestions:
		return temporal.NewApplicationError(fmt.Sprintf("question number %d is not between 1 and %d", req.N, MaxChangeQuestions), ErrTypeInvalidPin)
	case ch.Change != "new" && ch.Change != "changed":
		return temporal.NewApplicationError(fmt.Sprintf("change %q is not \"new\" or \"changed\"", ch.Change), ErrTypeInvalidPin)
	}
	d := ToolDefinition{Tool: ch.Tool, Hash: ch.Hash, Definition: string(ch.Definition)}
	if err := d.check(); err != nil {
		return temporal.NewApplicationError(err.Error(), ErrTypeInvalidPin)
	}
	return nil
}

// askChange starts the definition_change call as a child of the pins, so
// that the call can tell, from what Temporal recorded, that toolgate asks
// (startedByPins). The child outlives the pins' run.
func (p *pinsRun) askChange(ctx workflow.Context, req AskChangeRequest) (AskChangeResult, error) {
	p.updates++
	id := policy.DefinitionChangeCallID(p.server, req.Change.Hash, req.N)
	// A struct without maps encodes to the same bytes every time; the
	// encoder's type cache is what workflowcheck sees.
	args, err := json.Marshal(req.Change) //workflowcheck:ignore
	if err != nil {
		return AskChangeResult{}, temporal.NewApplicationError("encode the change: "+err.Error(), ErrTypeInvalidPin)
	}
	session := policy.DefinitionChangeSession(p.server)
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            CallWorkflowID(id),
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			AttrStatus.ValueSet(string(StatusEvaluating)),
			AttrTool.ValueSet(policy.DefinitionChangeTool),
			AttrSession.ValueSet(session),
			AttrRequestedAt.ValueSet(workflow.Now(ctx).UTC()),
			AttrRequester.ValueSet(policy.ToolgateRequester),
		),
	})
	call := policy.Call{ID: id, Session: session, Tool: policy.DefinitionChangeTool, Args: args, Requester: policy.ToolgateRequester}
	child := workflow.ExecuteChildWorkflow(cctx, ToolCallWorkflowType, CallInput{Call: call})
	err = child.GetChildWorkflowExecution().Get(ctx, nil)
	var taken *temporal.ChildWorkflowExecutionAlreadyStartedError
	var exists *serviceerror.WorkflowExecutionAlreadyStarted // how the test environment says it
	switch {
	case errors.As(err, &taken), errors.As(err, &exists):
		return AskChangeResult{CallID: id}, nil
	case err != nil:
		return AskChangeResult{}, fmt.Errorf("start definition_change call %s: %w", id, err)
	}
	return AskChangeResult{CallID: id, Started: true}, nil
}
