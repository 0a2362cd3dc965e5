package mcpgate

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A 2026-07-28 client refuses a tools/call result without resultType.
func TestCompletedResultsSayComplete(t *testing.T) {
	res := &mcp.CallToolResult{
		Meta:              mcp.Meta{MetaCallID: "call-1", MetaStatus: "ok"},
		Content:           []mcp.Content{&mcp.TextContent{Text: "hi"}},
		StructuredContent: map[string]any{"text": "hi"},
	}
	b, err := json.Marshal(withResultType(res))
	require.NoError(t, err)
	assert.JSONEq(t, `{"_meta":{"toolgate/callId":"call-1","toolgate/status":"ok"},"content":[{"type":"text","text":"hi"}],"structuredContent":{"text":"hi"},"resultType":"complete"}`, string(b))

	b, err = json.Marshal(res)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "resultType", "older clients get the result as before")
}

// A question for the client's user goes back as input_required.
func TestInputRequestsSayInputRequired(t *testing.T) {
	res := &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{Mode: "form", Message: "approve?", RequestedSchema: map[string]any{"type": "object"}}},
		RequestState:  "call-1",
	}
	b, err := json.Marshal(withResultType(res))
	require.NoError(t, err)
	assert.JSONEq(t, `{"content":[],"inputRequests":{"q":{"method":"elicitation/create","params":{"mode":"form","message":"approve?","requestedSchema":{"type":"object"}}}},"requestState":"call-1","resultType":"input_required"}`, string(b))
}
