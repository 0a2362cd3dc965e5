package client

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"

	"github.com/toolgate/toolgate/workflows"
)

// CheckPins compares the tool definitions an upstream MCP server offers
// with the server's pins (workflows.ToolPins, started on first use) and
// says, tool by tool, whether it may be offered.
func (c *Client) CheckPins(ctx context.Context, req workflows.CheckPinsRequest) ([]workflows.PinVerdict, error) {
	var verdicts []workflows.PinVerdict
	if err := c.updatePins(ctx, req.Server, workflows.UpdateCheckPins, req, &verdicts); err != nil {
		return nil, err
	}
	return verdicts, nil
}

// Pin records a definition a person approved as the tool's pin.
func (c *Client) Pin(ctx context.Context, req workflows.PinRequest) error {
	return c.updatePins(ctx, req.Server, workflows.UpdatePin, req, nil)
}

// Pins returns a server's pins, sorted by tool; none for a server never
// checked.
func (c *Client) Pins(ctx context.Context, server string) ([]workflows.Pin, error) {
	v, err := c.tc.QueryWorkflow(ctx, workflows.PinsWorkflowID(server), "", workflows.QueryPins)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the pins of MCP server %q: %w", server, err)
	}
	var pins []workflows.Pin
	if err := v.Get(&pins); err != nil {
		return nil, fmt.Errorf("read the pins of MCP server %q: %w", server, err)
	}
	return pins, nil
}

// AskChange has the pins of req.Server start the definition_change call
// that asks a person about req.Change (its req.N-th question), and returns
// which call asks. own says the call under that ID is the pins' own: started now,
// or before by the pins (Temporal records them as its parent). A call
// somebody else started under the ID is not the pins' (own false): ask
// under the next number.
func (c *Client) AskChange(ctx context.Context, req workflows.AskChangeRequest) (res workflows.AskChangeResult, own bool, err error) {
	if err := c.updatePins(ctx, req.Server, workflows.UpdateAskChange, req, &res); err != nil {
		return res, false, err
	}
	if res.Started {
		return res, true, nil
	}
	desc, err := c.tc.DescribeWorkflowExecution(ctx, workflows.CallWorkflowID(res.CallID), "")
	if err != nil {
		return res, false, fmt.Errorf("read definition_change call %s: %w", res.CallID, err)
	}
	parent := desc.GetWorkflowExecutionInfo().GetParentExecution()
	return res, parent != nil && parent.GetWorkflowId() == workflows.PinsWorkflowID(req.Server), nil
}

func (c *Client) updatePins(ctx context.Context, server, update string, arg, result any) error {
	err := c.updateWithStart(ctx, workflows.PinsWorkflowID(server), workflows.PinsWorkflowType, workflows.PinsInput{Server: server}, update, arg, result)
	if err != nil {
		return fmt.Errorf("pins of MCP server %q: %w", server, refusal(err))
	}
	return nil
}
