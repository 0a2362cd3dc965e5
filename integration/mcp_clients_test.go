package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/workflows"
)

// Real MCP clients from npm against toolgate's gateway: the official
// TypeScript client (@modelcontextprotocol/client, each protocol version
// it speaks, stdio and HTTP) and the OpenAI Agents SDK's MCPServerStdio.
// The scripts are in testdata/mcp-clients; node finds the packages in the
// npm cache scripts/test fills (NODE_PATH).

// clientStep is one line a client script printed.
type clientStep struct {
	Op       string `json:"op"`
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Tools    []string
	// Described has, per listed tool, its title and whether it has an
	// output schema.
	Described map[string]struct {
		Title        string `json:"title"`
		OutputSchema bool   `json:"outputSchema"`
	} `json:"described"`
	Result *struct {
		Meta              map[string]any `json:"_meta"`
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
		Content           []struct {
			Type, Text string
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	// Progress are the messages of a call's progress notifications.
	Progress []string `json:"progress"`
	// Message is an elicited question's.
	Message string `json:"message"`
}

// runClient runs a client script with a plan and returns its steps.
func runClient(t *testing.T, script string, plan map[string]any) []clientStep {
	t.Helper()
	return runClientWatching(t, script, plan, nil)
}

// runClientWatching is runClient calling seen with each step as the
// script prints it.
func runClientWatching(t *testing.T, script string, plan map[string]any, seen func(clientStep)) []clientStep {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the MCP client tests need node (scripts/test installs it)")
	npmFile(t, "@modelcontextprotocol/client/package.json")
	b, err := json.Marshal(plan)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "mcp-clients", script), string(b))
	cmd.Env = append(os.Environ(), "NODE_PATH="+npmModules(), "TOOLGATE_API=", "TOOLGATE_TOKEN=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var steps []clientStep
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s clientStep
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), "%s printed %q", script, sc.Text())
		steps = append(steps, s)
		if seen != nil {
			seen(s)
		}
	}
	require.NoError(t, cmd.Wait(), "%s: %+v\n%s", script, steps, stderr.String())
	return steps
}

func TestRealMCPClients(t *testing.T) {
	// The reference servers from npm as upstreams: server-everything, and
	// server-filesystem with no directory of its own, relying on the
	// roots its toolgate settings give it (the workspace).
	everything := npmFile(t, "@modelcontextprotocol/server-everything/dist/index.js")
	filesystem := npmFile(t, "@modelcontextprotocol/server-filesystem/dist/index.js")
	node, err := exec.LookPath("node")
	require.NoError(t, err)
	upstreams := filepath.Join(t.TempDir(), "mcp.json")
	workspace := t.TempDir()
	b, err := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"everything": map[string]any{"command": node, "args": []string{everything, "stdio"}},
		"files":      map[string]any{"command": node, "args": []string{filesystem}, "toolgate": map[string]any{"roots": []string{workspace}}},
	}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(upstreams, b, 0o600))
	d := startDevWithPolicy(t, `
default: ask
rules:
  - {name: echo, tool: echo, action: allow}
  - {name: no-shell, tool: shell, action: deny, reason: no shell over MCP}
  - {name: everything-reads, tool: everything__*, when: annotations.readOnlyHint == true, action: allow}
  - {name: file-reads, tool: files__*, when: annotations.readOnlyHint == true, action: allow}
`, "--mcp", upstreams, "--workspace", workspace)
	d.workspace = workspace
	require.NoError(t, os.WriteFile(filepath.Join(d.workspace, "notes.txt"), []byte("from the workspace"), 0o644))
	stdio := map[string]any{"transport": "stdio", "command": binary, "args": []string{"mcp", "--temporal-address", d.address(), "--keys", d.keysFile(), "--door-key", d.doorKeyFile(), "--wait", "2s"}}
	httpTransport := map[string]any{"transport": "http", "url": "http://" + d.httpAddr + "/mcp", "token": "token-agent-1"}
	steps := []map[string]any{
		{"op": "list"},
		{"op": "call", "name": "echo", "args": map[string]any{"text": "hi"}},
		{"op": "call", "name": "shell", "args": map[string]any{"command": "ls"}},
		{"op": "call", "name": "no_such_tool", "args": map[string]any{}},
		// The client checks structuredContent against the outputSchema.
		{"op": "call", "name": "everything__get-structured-content", "args": map[string]any{"location": "New York"}},
		// The filesystem server works in the root toolgate gave it.
		{"op": "call", "name": "files__read_text_file", "args": map[string]any{"path": filepath.Join(d.workspace, "notes.txt")}},
	}
	for _, tc := range []struct {
		transport map[string]any
		name      string
		versions  []string
		auto      bool
		want      string // the protocol version the client ends up with
	}{
		{stdio, "stdio 2025-06-18", []string{"2025-06-18"}, false, "2025-06-18"},
		{stdio, "stdio 2025-11-25", []string{"2025-11-25"}, false, "2025-11-25"},
		{stdio, "stdio auto: 2026-07-28", nil, true, "2026-07-28"},
		{httpTransport, "HTTP 2025-06-18", []string{"2025-06-18"}, false, "2025-06-18"},
		{httpTransport, "HTTP 2025-11-25", []string{"2025-11-25"}, false, "2025-11-25"},
		{httpTransport, "HTTP auto: 2025-11-25, all /mcp offers", nil, true, "2025-11-25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := map[string]any{"steps": steps}
			for k, v := range tc.transport {
				plan[k] = v
			}
			if tc.versions != nil {
				plan["versions"] = tc.versions
			}
			if tc.auto {
				plan["negotiation"] = "auto"
			}
			got := runClient(t, "client.cjs", plan)
			require.Len(t, got, 7, "%+v", got)
			assert.Equal(t, tc.want, got[0].Protocol)
			assert.Contains(t, got[1].Tools, "echo")
			assert.Contains(t, got[1].Tools, "toolgate_wait")
			assert.NotContains(t, got[1].Tools, "shell", "a tool the policy denies outright is not listed")
			assert.Equal(t, "Echo Tool", got[1].Described["everything__echo"].Title, "upstream titles pass through")
			assert.True(t, got[1].Described["everything__get-structured-content"].OutputSchema, "and output schemas")

			echo := got[2]
			require.Nil(t, echo.Error, "echo: %+v", echo.Error)
			require.NotNil(t, echo.Result)
			assert.False(t, echo.Result.IsError)
			assert.Equal(t, "ok", echo.Result.Meta["toolgate/status"])
			assert.Contains(t, echo.Result.Content[0].Text, "hi")

			structured := got[5]
			require.Nil(t, structured.Error, "an upstream tool with an output schema: %+v", structured.Error)
			assert.False(t, structured.Result.IsError)
			assert.NotEmpty(t, structured.Result.StructuredContent, "the upstream's structuredContent, as it gave it")

			read := got[6]
			require.Nil(t, read.Error, "%+v", read.Error)
			require.NotNil(t, read.Result)
			assert.False(t, read.Result.IsError, "%+v", read.Result)
			assert.Contains(t, read.Result.Content[0].Text, "from the workspace")

			for _, refused := range got[3:5] {
				require.NotNil(t, refused.Error, "%s: a tool the server does not list is a JSON-RPC error: %+v", refused.Name, refused.Result)
				assert.Equal(t, float64(-32602), refused.Error.Code)
				assert.Contains(t, refused.Error.Message, fmt.Sprintf("unknown tool %q", refused.Name))
			}
		})
	}

	// The issue that found it: a callTool with a client timeout, retried,
	// left two waiting calls, and approving both wrote twice.
	t.Run("a client timeout, then the retry: one call runs, once", func(t *testing.T) {
		d := d.in(t)
		args := map[string]any{"path": "once.txt", "content": "written once"}
		plan := map[string]any{"transport": "stdio", "command": binary, "args": []string{"mcp", "--temporal-address", d.address(), "--keys", d.keysFile(), "--door-key", d.doorKeyFile(), "--wait", "60s", "--requester", "retrier"},
			"steps": []map[string]any{{"op": "call", "name": "write_file", "args": args, "timeoutMs": 1500}, {"op": "call", "name": "write_file", "args": args}}}
		// Once the client gave up on the first request, approve what waits:
		// the retry's call, if the first one was cancelled.
		gaveUp := make(chan struct{})
		done := make(chan []clientStep, 1)
		go func() {
			done <- runClientWatching(t, "client.cjs", plan, func(s clientStep) {
				if s.Op == "call" && s.Error != nil {
					close(gaveUp)
				}
			})
		}()
		select {
		case <-gaveUp:
		case <-time.After(time.Minute):
			t.Fatal("the client never gave up on its first request")
		}
		c := d.client()
		require.Eventually(t, func() bool {
			pending, err := c.Pending(context.Background(), tgclient.ListFilter{Tool: "write_file", Requester: "retrier"}, tgclient.PageRequest{})
			if err != nil {
				return false
			}
			for _, p := range pending.Calls {
				if r := d.cli("approve", p.CallID, "--by", "alice"); r.code == 0 {
					return true
				}
			}
			return false
		}, time.Minute, 300*time.Millisecond, "the retry's call waits for a person")
		got := <-done
		require.Len(t, got, 3, "%+v", got)
		require.NotNil(t, got[1].Error, "the client gave up on the first request")
		assert.Equal(t, "REQUEST_TIMEOUT", got[1].Error.Code)
		require.Nil(t, got[2].Error, "%+v", got[2].Error)
		assert.False(t, got[2].Result.IsError, "%+v", got[2].Result)

		b, err := os.ReadFile(filepath.Join(d.workspace, "once.txt"))
		require.NoError(t, err)
		assert.Equal(t, "written once", string(b))
		// The retry either joined the first call (it came before the
		// cancel) or, the first one cancelled, made the one that ran.
		ran := 0
		require.Eventually(t, func() bool {
			calls, err := c.List(context.Background(), tgclient.ListFilter{Tool: "write_file", Requester: "retrier", Status: "decided"})
			if err != nil {
				return false
			}
			ran = 0
			for _, call := range calls {
				r, err := c.Wait(context.Background(), call.CallID)
				require.NoError(t, err)
				if r.Status == workflows.StatusOK {
					ran++
					continue
				}
				assert.Equal(t, workflows.StatusDenied, r.Status)
				assert.Equal(t, "cancelled by retrier", r.Reason, "a call that did not run was withdrawn by the client's cancel")
			}
			return ran > 0
		}, 30*time.Second, 200*time.Millisecond, "the retry's call is listed")
		assert.Equal(t, 1, ran, "write_file ran once")
	})

	// Ask, a person edits the arguments and approves, the model fetches
	// the result with toolgate_wait; and a person's denial with its reason.
	for _, decision := range []string{"approve with edited arguments", "deny"} {
		t.Run("ask, "+decision+", toolgate_wait", func(t *testing.T) {
			d := d.in(t)
			path := strings.ReplaceAll(decision, " ", "-") + ".txt"
			plan := map[string]any{"transport": "stdio", "command": binary, "args": []string{"mcp", "--temporal-address", d.address(), "--keys", d.keysFile(), "--door-key", d.doorKeyFile(), "--wait", "2s", "--requester", "asker"},
				"steps": []map[string]any{{"op": "call", "name": "write_file", "args": map[string]any{"path": path, "content": "the agent's"}}, {"op": "wait-last"}}}
			got := runClientWatching(t, "client.cjs", plan, func(s clientStep) {
				if s.Op != "call" || s.Result == nil {
					return
				}
				callID, _ := s.Result.Meta["toolgate/callId"].(string)
				require.Equal(t, "pending", s.Result.Meta["toolgate/status"], "the call waits for a person")
				args := []string{"approve", callID, "--by", "alice", "--args", fmt.Sprintf(`{"path":%q,"content":"alice's"}`, path)}
				if decision == "deny" {
					args = []string{"deny", callID, "--by", "alice", "--reason", "not today"}
				}
				r := d.cli(args...)
				require.Equal(t, 0, r.code, r.stderr)
			})
			require.Len(t, got, 3, "%+v", got)
			final := got[2].Result
			require.NotNil(t, final, "%+v", got[2].Error)
			text := final.Content[len(final.Content)-1].Text
			if decision == "deny" {
				assert.True(t, final.IsError)
				assert.Contains(t, text, "not today", "the model reads the reason")
				_, err := os.Stat(filepath.Join(d.workspace, path))
				assert.ErrorIs(t, err, os.ErrNotExist, "nothing was written")
				return
			}
			assert.False(t, final.IsError, "%+v", final)
			assert.Contains(t, text, "alice", "the model hears who approved, and that the arguments changed")
			b, err := os.ReadFile(filepath.Join(d.workspace, path))
			require.NoError(t, err)
			assert.Equal(t, "alice's", string(b), "the edited arguments ran")
		})
	}

	t.Run("the upstream's own progress reaches the client while its tool runs", func(t *testing.T) {
		d := d.in(t)
		plan := map[string]any{"transport": "stdio", "command": binary, "args": []string{"mcp", "--temporal-address", d.address(), "--keys", d.keysFile(), "--door-key", d.doorKeyFile(), "--wait", "60s"},
			"steps": []map[string]any{{"op": "call", "name": "everything__trigger-long-running-operation", "args": map[string]any{"duration": 12, "steps": 4}}}}
		got := runClient(t, "client.cjs", plan)
		require.Len(t, got, 2, "%+v", got)
		call := got[1]
		require.Nil(t, call.Error, "%+v", call.Error)
		assert.False(t, call.Result.IsError)
		assert.Contains(t, call.Result.Content[0].Text, "Long running operation completed")
		said := strings.Join(call.Progress, "\n")
		assert.Regexp(t, `is approved and running, the tool says [1-4] of 4`, said,
			"server-everything's progress notifications, forwarded by the worker and the gateway")
	})

	t.Run("a gateway whose token cannot submit calls does not start", func(t *testing.T) {
		for _, token := range []string{"token-nobody", "token-alice"} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := exec.CommandContext(ctx, binary, "mcp", "--api", "http://"+d.httpAddr, "--token", token).CombinedOutput()
			cancel()
			require.Error(t, err, "%s", out)
			assert.Contains(t, string(out), "refused this agent's token (it must be an agent token)")
		}
	})

	t.Run("OpenAI Agents SDK over stdio", func(t *testing.T) {
		got := runClient(t, "agents.cjs", map[string]any{"command": binary, "args": stdio["args"],
			"call": map[string]any{"name": "echo", "args": map[string]any{"text": "from the agents SDK"}}})
		require.Len(t, got, 2, "%+v", got)
		assert.Contains(t, got[0].Tools, "echo")
		require.Nil(t, got[1].Error, "the Agents SDK negotiates 2026-07-28 and needs resultType: %+v", got[1].Error)
		require.NotNil(t, got[1].Result)
		assert.Contains(t, got[1].Result.Content[0].Text, "from the agents SDK")
	})
}
