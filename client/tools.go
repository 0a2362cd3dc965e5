package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// Tools lists the tools toolgate's workers run that the policy does not
// deny outright, sorted by name. It runs a ToolCatalogWorkflow (one local
// activity on a worker) and waits for it, so it needs only a Temporal
// address. With no worker polling, it waits until ctx ends or
// workflows.CatalogTimeout passes.
func (c *Client) Tools(ctx context.Context) ([]tool.Descriptor, error) {
	run, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       "toolgate/catalog/" + strings.TrimPrefix(NewCallID(), "call-"),
		TaskQueue:                c.taskQueue,
		WorkflowExecutionTimeout: workflows.CatalogTimeout,
	}, workflows.ToolCatalogWorkflowType)
	if err != nil {
		return nil, fmt.Errorf("start tool catalog workflow: %w", err)
	}
	var tools []tool.Descriptor
	if err := run.Get(ctx, &tools); err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	if tools == nil {
		tools = []tool.Descriptor{}
	}
	return tools, nil
}

// Tool list formats: ToolsAs takes one of them.
const (
	// ToolFormatToolgate is toolgate's own shape:
	// {"name","description","input_schema","annotations"}.
	ToolFormatToolgate = "json"
	// ToolFormatOpenAI is the OpenAI Chat Completions and Responses tool
	// shape: {"type":"function","function":{"name","description","parameters"}}.
	ToolFormatOpenAI = "openai"
	// ToolFormatAnthropic is the Anthropic Messages API tool shape:
	// {"name","description","input_schema"}.
	ToolFormatAnthropic = "anthropic"
)

// ToolFormats lists the formats ToolsAs knows.
var ToolFormats = []string{ToolFormatToolgate, ToolFormatOpenAI, ToolFormatAnthropic}

// emptySchema stands in for a tool without a schema (any object): model
// APIs require one.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// OpenAITool is a tool as the OpenAI API takes it.
type OpenAITool struct {
	Type     string         `json:"type"`
	Function OpenAIFunction `json:"function"`
}

// OpenAIFunction is the function of an OpenAITool.
type OpenAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// AnthropicTool is a tool as the Anthropic Messages API takes it.
type AnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ToolsAs converts descriptors to a model API's tool list: a
// []tool.Descriptor for "json" (or ""), []OpenAITool for "openai",
// []AnthropicTool for "anthropic". Another format is an *InputError naming
// the field "format".
func ToolsAs(format string, ds []tool.Descriptor) (any, error) {
	switch format {
	case "", ToolFormatToolgate:
		if ds == nil {
			ds = []tool.Descriptor{}
		}
		return ds, nil
	case ToolFormatOpenAI:
		out := make([]OpenAITool, len(ds))
		for i, d := range ds {
			out[i] = OpenAITool{Type: "function", Function: OpenAIFunction{Name: d.Name, Description: d.Description, Parameters: schemaOrEmpty(d.Schema)}}
		}
		return out, nil
	case ToolFormatAnthropic:
		out := make([]AnthropicTool, len(ds))
		for i, d := range ds {
			out[i] = AnthropicTool{Name: d.Name, Description: d.Description, InputSchema: schemaOrEmpty(d.Schema)}
		}
		return out, nil
	}
	return nil, &InputError{Field: "format", Problem: "must be one of " + strings.Join(ToolFormats, ", ")}
}

func schemaOrEmpty(s json.RawMessage) json.RawMessage {
	if len(s) == 0 {
		return emptySchema
	}
	return s
}
