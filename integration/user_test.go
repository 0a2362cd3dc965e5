package integration

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/policy"
)

// The person running the agent decides in the agent's own client: agent-1's
// token names dana as its owner, and the rule for write_file lets her
// decide (user: true) beside the ops approvers.
const userPolicy = `
default: allow
rules:
  - {name: edits, tool: write_file, action: ask, groups: [ops], user: true}
  - {name: commands, tool: shell, action: ask, groups: [ops]}
`

func TestTheActingUserDecidesInRealMCPClients(t *testing.T) {
	d := startDevWithPolicy(t, userPolicy)

	t.Run("the Go SDK client's elicitation handler over /mcp", func(t *testing.T) {
		var asked []string
		tr := &mcp.StreamableClientTransport{Endpoint: "http://" + d.httpAddr + "/mcp", MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearerTransport("token-agent-1")}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration-agent", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked = append(asked, req.Params.Message)
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
			},
		}).Connect(context.Background(), tr, nil)
		require.NoError(t, err)
		defer cs.Close()

		res := mcpCall(t, cs, "write_file", map[string]any{"path": "go-client.txt", "content": "from dana"})

		require.False(t, res.IsError, mcpText(res))
		require.Len(t, asked, 1)
		assert.Contains(t, asked[0], "agent-1 asks to run write_file")
		assert.Contains(t, asked[0], "+from dana", "the question shows toolgate's diff")
		id, _ := res.Meta[mcpgate.MetaCallID].(string)
		r, err := d.in(t).client().Wait(context.Background(), id)
		require.NoError(t, err)
		assert.Equal(t, "dana", r.DecidedBy, "recorded as the token's owner")
		assert.Equal(t, policy.ChannelClient, r.Channel)
		data, err := os.ReadFile(filepath.Join(d.workspace, "go-client.txt"))
		require.NoError(t, err)
		assert.Equal(t, "from dana", string(data))
	})

	// The TypeScript client over stdio through the HTTP API, in both ways
	// of asking: elicitation/create (2025-06-18), and the tools/call's
	// input request answered by the client's retry (2026-07-28).
	for _, tc := range []struct {
		name     string
		versions []string
		auto     bool
		protocol string // what the client ends up speaking
		answer   map[string]any
	}{
		{"typescript 2025-06-18 approves", []string{"2025-06-18"}, false, "2025-06-18", map[string]any{"decision": "approve"}},
		{"typescript 2026-07-28 denies with a reason", nil, true, "2026-07-28", map[string]any{"decision": "deny", "reason": "not that file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := strings.ReplaceAll(tc.name, " ", "-") + ".txt"
			plan := map[string]any{
				"transport": "stdio", "command": binary,
				"args":   []string{"mcp", "--api", "http://" + d.httpAddr, "--token", "token-agent-1", "--wait", "20s"},
				"elicit": map[string]any{"action": "accept", "content": tc.answer},
				"steps":  []map[string]any{{"op": "call", "name": "write_file", "args": map[string]any{"path": path, "content": "ts"}}},
			}
			if tc.versions != nil {
				plan["versions"] = tc.versions
			}
			if tc.auto {
				plan["negotiation"] = "auto"
			}
			steps := runClient(t, "client.cjs", plan)

			var elicited, called *clientStep
			for i := range steps {
				switch steps[i].Op {
				case "connect":
					assert.Equal(t, tc.protocol, steps[i].Protocol)
				case "elicited":
					elicited = &steps[i]
				case "call":
					called = &steps[i]
				}
			}
			require.NotNil(t, elicited, "the client was asked: %+v", steps)
			assert.Contains(t, elicited.Message, "agent-1 asks to run write_file")
			require.NotNil(t, called)
			require.NotNil(t, called.Result, "%+v", called.Error)
			id, _ := called.Result.Meta[mcpgate.MetaCallID].(string)
			require.NotEmpty(t, id)
			r, err := d.in(t).client().Wait(context.Background(), id)
			require.NoError(t, err)
			assert.Equal(t, "dana", r.DecidedBy)
			assert.Equal(t, policy.ChannelClient, r.Channel)
			_, statErr := os.Stat(filepath.Join(d.workspace, path))
			if tc.answer["decision"] == "approve" {
				assert.False(t, called.Result.IsError)
				assert.NoError(t, statErr)
			} else {
				assert.True(t, called.Result.IsError)
				assert.Contains(t, called.Result.Content[0].Text, "not that file")
				assert.True(t, os.IsNotExist(statErr), "denied: nothing written")
			}
		})
	}

	t.Run("only the owner, only by rule", func(t *testing.T) {
		agent1 := apiClient{t: t, base: "http://" + d.httpAddr, token: "token-agent-1"}
		agent2 := apiClient{t: t, base: "http://" + d.httpAddr, token: "token-agent-2"}
		r := agent1.do("POST", "/v1/calls?wait=1s", map[string]any{"session": "u1", "call_id": "u-sh", "tool": "shell", "args": map[string]any{"command": "ls"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		r = agent1.do("POST", "/v1/calls/u-sh/user-decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, "a remote-only rule: %s", r.raw)
		assert.Contains(t, r.raw, "user: true")

		r = agent1.do("POST", "/v1/calls?wait=1s", map[string]any{"session": "u1", "call_id": "u-w1", "tool": "write_file", "args": map[string]any{"path": "z", "content": "z"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, "dana", r.body["user"], "the waiting call says who may decide it at the agent")
		assert.Contains(t, d.in(t).cli("status", "u-w1").stdout, "also asked of: dana, who runs the agent")

		r = agent2.do("POST", "/v1/calls?wait=1s", map[string]any{"session": "u2", "call_id": "u-w2", "tool": "write_file", "args": map[string]any{"path": "y", "content": "y"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		r = agent2.do("POST", "/v1/calls/u-w2/user-decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, r.raw)
		assert.Contains(t, r.raw, "names no owner")
		r = agent1.do("POST", "/v1/calls/u-w2/user-decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusNotFound, r.status, "another agent's call is unknown: %s", r.raw)
		r = agent1.do("POST", "/v1/calls/u-sh/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, "an agent token never decides as an approver")
	})
}
