package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// startReservedDev starts toolgate dev with the API tests' tokens.
func startReservedDev(t *testing.T, flags ...string) (*devEnv, func(name string) apiClient) {
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	args := append([]string{"dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", writeTokensFile(t, t.TempDir())}, flags...)
	d.dev = start(t, devReady, args...)
	return d, func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}
}

// Toolgate's own sessions, call IDs and names are not an agent's: over the
// API a submission into them is refused, and a call started around the API
// is denied by its own workflow.
func TestAgentsCannotTakeToolgatesOwnSessionsOrCallIDs(t *testing.T) {
	d, as := startReservedDev(t)
	agent := as("agent-1")
	change := map[string]any{"server": "docs", "tool": "search", "change": "changed", "diff": []string{"+x"},
		"definition": map[string]any{"name": "search"}, "hash": strings.Repeat("a", 64)}
	for name, body := range map[string]map[string]any{
		"the pins' session":    {"session": "toolgate.pins.docs", "tool": "echo", "args": map[string]any{"text": "hi"}},
		"a question's call ID": {"session": "s1", "call_id": "definition-change.docs." + strings.Repeat("a", 40), "tool": "echo", "args": map[string]any{"text": "hi"}},
		"definition_change":    {"session": "s1", "tool": "definition_change", "args": change},
	} {
		t.Run(name, func(t *testing.T) {
			r := agent.do("POST", "/v1/calls?wait=2s", body)
			assert.Equal(t, http.StatusForbidden, r.status, r.raw)
			errBody, _ := r.body["error"].(map[string]any)
			assert.Equal(t, "reserved", errBody["code"], r.raw)
			assert.Contains(t, r.raw, "reserved")
		})
	}

	t.Run("a definition_change started around the API, named as toolgate's, is denied by its workflow", func(t *testing.T) {
		args, err := json.Marshal(change)
		require.NoError(t, err)
		id := policy.DefinitionChangeCallID("docs", strings.Repeat("a", 64), 1)
		tc := d.client().Temporal()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Signed by the door, as an operator's CLI would: only the
		// workflow's own check of who started it stands.
		in := workflows.CallInput{Call: policy.Call{ID: id, Session: policy.DefinitionChangeSession("docs"),
			Tool: policy.DefinitionChangeTool, Args: args, Requester: policy.ToolgateRequester}}
		in.Submission, err = d.door().Sign(policy.SubmissionStatement(in.Call))
		require.NoError(t, err)
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.CallWorkflowID(id), TaskQueue: workflows.TaskQueue},
			workflows.ToolCallWorkflowType, in)
		require.NoError(t, err)
		var res workflows.Result
		require.NoError(t, run.Get(ctx, &res))
		assert.Equal(t, workflows.StatusDenied, res.Status)
		assert.Contains(t, res.Reason, "toolgate refuses such a call it did not start itself")
		pending := as("root").do("GET", "/v1/pending?session=toolgate.pins.docs", nil)
		require.Equal(t, http.StatusOK, pending.status, pending.raw)
		assert.NotContains(t, pending.raw, id, "no question waits on it")
	})
}

// Cancel goes by role, not by a name: over Temporal the CLI withdraws an
// agent's call only as its requester (--own), and a name without the
// call's groups cancels nothing.
func TestCancelByTheRequestersNameAloneIsRefused(t *testing.T) {
	d, as := startReservedDev(t)
	agent := as("agent-1")
	r := agent.do("POST", "/v1/calls?wait=100ms", map[string]any{"session": "cz", "tool": "shell", "call_id": "cz1", "args": map[string]any{"command": "true"}})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/cz1", nil).body["status"] == "pending" }, 30*time.Second, 20*time.Millisecond)

	res := d.cli("cancel", "cz1", "--by", "agent-1")
	assert.Equal(t, 1, res.code, res.stdout)
	assert.Contains(t, res.stderr, "agent-1 may not cancel call cz1")
	res = d.cli("cancel", "cz1", "--by", "alice", "--own")
	assert.Equal(t, 1, res.code, res.stdout)
	assert.Contains(t, res.stderr, "alice did not request call cz1")
	assert.Equal(t, "pending", agent.do("GET", "/v1/calls/cz1", nil).body["status"], "nothing was cancelled")

	r = agent.do("POST", "/v1/calls/cz1/cancel", nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "cancelled by agent-1", r.body["decision"].(map[string]any)["reason"])
}

// A tokens file naming toolgate's own names, or one name as two
// principals, is refused when toolgate starts, with why.
func TestATokensFileWithReservedOrAmbiguousNamesIsRefusedAtStart(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"an approver named toolgate": {
			file: fmt.Sprintf("tokens:\n  - {name: toolgate, role: approver, groups: [nobody], sha256: %s}\n", sha256hex("t1")),
			want: `token "toolgate": the name is toolgate's own`,
		},
		"an admin named policy": {
			file: fmt.Sprintf("tokens:\n  - {name: policy, role: admin, sha256: %s}\n", sha256hex("t1")),
			want: `token "policy": the name is toolgate's own`,
		},
		"an approver named like an agent": {
			file: fmt.Sprintf("tokens:\n  - {name: agentA, role: agent, sha256: %s}\n  - {name: agentA, role: approver, groups: [nobody], sha256: %s}\n",
				sha256hex("t1"), sha256hex("t2")),
			want: `token "agentA": the name is listed twice as different principals (agent and approver of groups nobody); one name is one principal`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "tokens.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, "dev", "--data-dir", dir, "--temporal-port", fmt.Sprint(freePort(t)),
				"--http", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--tokens", path).CombinedOutput()
			require.Error(t, err, "toolgate dev must not start: %s", out)
			assert.Contains(t, string(out), tc.want)
		})
	}
}

// A server flipping a tool A -> B -> A -> B: B's question is withdrawn at
// the flip back, and when B returns it is asked again, not refused.
func TestADefinitionOfferedAgainAfterItsQuestionWasWithdrawnIsAskedAgain(t *testing.T) {
	upstreams, change := changingUpstream(t, "Search the docs.")
	_, as := startReservedDev(t, "--mcp", upstreams, "--policy", allowEverything(t))
	agent, root := as("agent-1"), as("root")
	offered := func() string {
		r := agent.do("GET", "/v1/tools", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		for _, item := range r.body["tools"].([]any) {
			if m := item.(map[string]any); m["name"] == "docs__search" {
				return m["description"].(string)
			}
		}
		return ""
	}
	waitingQuestion := func() string {
		var id, last string
		ok := assert.Eventually(t, func() bool {
			r := root.do("GET", "/v1/pending?session=toolgate.pins.docs", nil)
			last = r.raw
			calls, _ := r.body["calls"].([]any)
			for _, c := range calls {
				if m := c.(map[string]any); m["tool"] == "definition_change" {
					id = m["call_id"].(string)
					return true
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond)
		require.True(t, ok, "a definition_change call waits for an admin; /v1/pending said %s", last)
		return id
	}
	require.Eventually(t, func() bool { return offered() == "Search the docs." }, 30*time.Second, 50*time.Millisecond)

	change("Search the docs, and mail them out.", false) // A -> B
	first := waitingQuestion()
	change("Search the docs.", false) // B -> A
	require.Eventually(t, func() bool { return offered() == "Search the docs." }, 30*time.Second, 50*time.Millisecond)
	withdrawn := root.do("GET", "/v1/calls/"+first+"?wait=10s", nil) // its Result, not its state on the way there
	assert.Equal(t, "denied", withdrawn.body["status"], withdrawn.raw)
	assert.Equal(t, "cancelled by toolgate", withdrawn.body["reason"], withdrawn.raw)

	change("Search the docs, and mail them out.", false) // A -> B again
	second := waitingQuestion()
	assert.Equal(t, first+".2", second, "nobody refused B: it is asked anew")
	r := root.do("POST", "/v1/calls/"+second+"/decision", map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Eventually(t, func() bool { return offered() == "Search the docs, and mail them out." }, 30*time.Second, 50*time.Millisecond,
		"the definition approved at the second question is offered")
}
