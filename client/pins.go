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

func (c *Client) updatePins(ctx context.Context, server, update string, arg, result any) error {
	err := c.updateWithStart(ctx, workflows.PinsWorkflowID(server), workflows.PinsWorkflowType, workflows.PinsInput{Server: server}, update, arg, result)
	if err != nil {
		return fmt.Errorf("pins of MCP server %q: %w", server, refusal(err))
	}
	return nil
}
