package mcpgate

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// protocol20260728 is the first MCP revision whose results carry
// resultType ("complete", or "input_required" for a multi-round-trip
// call).
const protocol20260728 = "2026-07-28"

// httpProtocolVersions are the versions /mcp offers. Over HTTP the gateway
// keeps MCP sessions (each names a toolgate session and is bound to the
// token that opened it), and the SDK speaks 2026-07-28 and later only
// without sessions: so HTTP offers the versions before it, and a client
// that asks for 2026-07-28 is told exactly those.
func httpProtocolVersions() []string {
	var vs []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < protocol20260728 {
			vs = append(vs, v)
		}
	}
	return vs
}

// speaksResultType reports whether the client of req negotiated 2026-07-28
// or later, per request (the revision's _meta) or at initialize, as the
// SDK decides for the tools it serves itself.
func speaksResultType(req *mcp.CallToolRequest) bool {
	if req.Params != nil {
		if v, ok := req.Params.GetMeta()[mcp.MetaKeyProtocolVersion].(string); ok {
			return v >= protocol20260728
		}
	}
	if req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil {
			return p.ProtocolVersion >= protocol20260728
		}
	}
	return true
}

// withResultType marks res as a complete result ("resultType":
// "complete"), or "input_required" when it asks the client for input. The
// SDK sets it only on the results of tools registered with it; the
// gateway answers tools/call itself, and the SDK keeps the field
// unexported, so it is set the one public way: decoding it.
func withResultType(res *mcp.CallToolResult) *mcp.CallToolResult {
	kind := `"complete"`
	if res.InputRequests != nil {
		kind = `"input_required"`
	}
	b, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return res
	}
	fields["resultType"] = json.RawMessage(kind)
	if b, err = json.Marshal(fields); err != nil {
		return res
	}
	out := &mcp.CallToolResult{}
	if json.Unmarshal(b, out) != nil {
		return res
	}
	return out
}
