package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// holesPolicy has a one-approval and a two-approval rule for payments
// (a write under pay/, the content the amount), a finance-only rule, a
// shell that asks, and an agent-run deploy that asks.
const holesPolicy = `
default: allow
rules:
  - {name: big-pay, tool: write_file, action: ask, groups: [ops], approvals: 2, when: 'args.path.startsWith("pay/") && size(args.content) >= 3'}
  - {name: pay, tool: write_file, action: ask, groups: [ops], when: 'args.path.startsWith("pay/")'}
  - {name: fin, tool: write_file, action: ask, groups: [finance], when: 'args.path.startsWith("fin/")'}
  - {name: shell, tool: shell, action: ask}
  - {name: deploy, tool: deploy, action: ask}
`

// The ways around the gate a review found in 1.0 (issue 34), replayed
// against the real binary as the attacker ran them.
func TestTheGateHoldsAgainstTheReviewsPaths(t *testing.T) {
	d := startDevWithPolicy(t, holesPolicy)
	as := func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}
	agent, alice, bob, root := as("agent-1"), as("alice"), as("bob"), as("root")
	submit := func(t *testing.T, session, callID, tool string, args map[string]any, extra ...string) {
		t.Helper()
		body := map[string]any{"session": session, "call_id": callID, "tool": tool, "args": args}
		if len(extra) > 0 {
			body["execution"] = extra[0]
		}
		r := agent.do("POST", "/v1/calls?wait=100ms", body)
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool { return alice.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending" },
			30*time.Second, 20*time.Millisecond, "call %s never waited", callID)
	}

	t.Run("an edit into a four-eyes rule is refused, by the API and the CLI", func(t *testing.T) {
		submit(t, "edit", "pay-1", "write_file", map[string]any{"path": "pay/bill.txt", "content": "50"})
		r := alice.do("POST", "/v1/calls/pay-1/decision", map[string]any{"decision": "approve", "args": map[string]any{"path": "pay/bill.txt", "content": "5000"}})
		assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
		assert.Equal(t, "invalid_edit", r.errorCode())
		assert.Contains(t, r.errorMessage(), "rule big-pay, which needs 2 approvals")
		out := d.cli("approve", "pay-1", "--by", "alice", "--groups", "ops", "--args", `{"path":"pay/bill.txt","content":"5000"}`)
		assert.Equal(t, 1, out.code, out.stdout+out.stderr)
		assert.Contains(t, out.stderr, "rule big-pay, which needs 2 approvals")
		assert.Equal(t, "pending", alice.do("GET", "/v1/calls/pay-1", nil).body["status"], "the call still waits")

		r = alice.do("POST", "/v1/calls/pay-1/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		final := alice.do("GET", "/v1/calls/pay-1?wait=20s", nil)
		assert.Equal(t, "ok", final.body["status"], final.raw)
		b, err := os.ReadFile(filepath.Join(d.workspace, "pay", "bill.txt"))
		require.NoError(t, err)
		assert.Equal(t, "50", string(b), "what ran is what was asked and approved")
	})

	t.Run("a bulk with one refusal applies nothing", func(t *testing.T) {
		submit(t, "bulk", "big-1", "write_file", map[string]any{"path": "pay/big.txt", "content": "900"})
		submit(t, "bulk", "sh-1", "shell", map[string]any{"command": "true"})
		r := alice.do("POST", "/v1/calls/big-1/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)

		r = alice.do("POST", "/v1/decisions", map[string]any{"decisions": []any{
			map[string]any{"call_id": "big-1", "decision": "approve"},
			map[string]any{"call_id": "sh-1", "decision": "approve"},
		}})
		assert.Equal(t, http.StatusConflict, r.status, r.raw)
		assert.Equal(t, "bulk_refused", r.errorCode())
		errBody, _ := r.body["error"].(map[string]any)
		refused, _ := errBody["refused"].([]any)
		require.Len(t, refused, 1, r.raw)
		assert.Equal(t, "big-1", refused[0].(map[string]any)["call_id"])
		assert.Equal(t, "not_another_approval", refused[0].(map[string]any)["code"])
		assert.Equal(t, "pending", alice.do("GET", "/v1/calls/sh-1", nil).body["status"], "the shell call was not decided")

		r = alice.do("POST", "/v1/decisions", map[string]any{"decisions": []any{
			map[string]any{"call_id": "sh-1", "decision": "approve", "args": map[string]any{"command": "false"}},
		}})
		assert.Equal(t, http.StatusConflict, r.status, "edits are decided one call at a time: %s", r.raw)
		assert.Equal(t, "pending", alice.do("GET", "/v1/calls/sh-1", nil).body["status"])
	})

	t.Run("a call cancelled while it waited leaves its room", func(t *testing.T) {
		submit(t, "rooms", "fin-1", "write_file", map[string]any{"path": "fin/q3.txt", "content": "x"})
		r := agent.do("POST", "/v1/calls/fin-1/cancel", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		var end apiResponse
		require.Eventually(t, func() bool {
			end = alice.do("POST", "/v1/sessions/rooms/end", nil)
			return end.status == http.StatusOK
		}, 20*time.Second, 200*time.Millisecond, "an ops approver may end a session where nothing waits: %s", end.raw)
		assert.Equal(t, float64(0), end.body["denied_calls"], end.raw)
	})

	t.Run("the session's end voids an approval not yet claimed", func(t *testing.T) {
		submit(t, "kill", "dep-1", "deploy", map[string]any{"env": "prod"}, "agent")
		r := bob.do("POST", "/v1/calls/dep-1/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/dep-1", nil).body["status"] == "approved" }, 20*time.Second, 20*time.Millisecond)
		r = root.do("POST", "/v1/sessions/kill/end", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)

		r = agent.do("POST", "/v1/calls/dep-1/claim", map[string]any{"run": "toolu_new"})
		assert.Equal(t, http.StatusConflict, r.status, r.raw)
		assert.Equal(t, "approval_void", r.errorCode())
		assert.Contains(t, r.errorMessage(), "the session was ended by root before the agent took the approval")
		final := agent.do("GET", "/v1/calls/dep-1?wait=20s", nil)
		assert.Equal(t, "denied", final.body["status"], final.raw)
		assert.Equal(t, "the session was ended by root before the agent took the approval", final.body["reason"])
		assert.Contains(t, d.cli("status", "dep-1").stdout, "note: the approval (approved by bob via api at")
	})

	t.Run("a claim names its run", func(t *testing.T) {
		submit(t, "claims", "dep-2", "deploy", map[string]any{"env": "prod"}, "agent")
		r := bob.do("POST", "/v1/calls/dep-2/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		r = agent.do("POST", "/v1/calls/dep-2/claim", map[string]any{"run": "  "})
		assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
		assert.Contains(t, r.errorMessage(), "not only spaces")
		r = agent.do("POST", "/v1/calls/dep-2/claim", map[string]any{"run": "toolu_1"})
		require.Equal(t, http.StatusNoContent, r.status, r.raw)
		r = agent.do("POST", "/v1/calls/dep-2/claim", map[string]any{"run": "toolu_1", "no_report": true})
		assert.Equal(t, http.StatusBadRequest, r.status, "the run said a report follows: %s", r.raw)
		assert.Contains(t, r.errorMessage(), "report how it went")
	})

	t.Run("a call started around the client in another agent's session is denied", func(t *testing.T) {
		r := agent.do("POST", "/v1/calls?wait=20s", map[string]any{"session": "mine", "tool": "echo", "args": map[string]any{"hi": 1}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		c := d.client()
		in := workflows.CallInput{Call: policy.Call{ID: "raw-echo", Session: "mine", Tool: "echo", Args: json.RawMessage(`{"hi":2}`), Requester: "agent-2"}}
		// Signed by the door, so that only the session's owner check
		// stands between agent-2 and agent-1's session.
		var err error
		in.Submission, err = d.door().Sign(policy.SubmissionStatement(in.Call))
		require.NoError(t, err)
		run, err := c.Temporal().ExecuteWorkflow(context.Background(), sdkclient.StartWorkflowOptions{ID: workflows.CallWorkflowID("raw-echo"), TaskQueue: workflows.TaskQueue},
			workflows.ToolCallWorkflowType, in)
		require.NoError(t, err)
		var res workflows.Result
		require.NoError(t, run.Get(context.Background(), &res))
		assert.Equal(t, workflows.StatusDenied, res.Status, "auto-approved, but not its session")
		assert.Equal(t, "the session belongs to another agent", res.Reason)
		assert.Empty(t, res.Output)
	})
}

// The kill switch through the Claude Code hook: an approval the hook has
// not used yet is void once the session ends; a replayed PreToolUse with a
// new tool_use_id is denied, and so is a claim of the approval over the API.
func TestTheHookCannotUseAnApprovalAfterItsSessionEnded(t *testing.T) {
	d := startDevForHooks(t)
	session := "cc-killed"
	h := hookRunner{t: t, args: []string{"--api", "http://" + d.httpAddr, "--token", "token-agent-1", "--state-dir", t.TempDir()}}
	first := h.decide(hookEvent(t, "pre-edit.json", session), "--wait", "1s")
	require.Equal(t, "deny", first.PermissionDecision, "it waits for a person")
	callID := hookCallID.FindString(first.PermissionDecisionReason)
	require.NotEmpty(t, callID, first.PermissionDecisionReason)
	r := d.cli("approve", callID, "--by", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	root := apiClient{t: t, base: "http://" + d.httpAddr, token: "token-root"}
	end := root.do("POST", "/v1/sessions/"+session+"/end", nil)
	require.Equal(t, http.StatusOK, end.status, end.raw)

	replayed := h.decide(hookEvent(t, "pre-edit-retry.json", session), "--wait", "5s")
	assert.Equal(t, "deny", replayed.PermissionDecision, "the ended session's approval is void: %s", replayed.PermissionDecisionReason)
	agent := apiClient{t: t, base: "http://" + d.httpAddr, token: "token-agent-1"}
	claim := agent.do("POST", "/v1/calls/"+callID+"/claim", map[string]any{"run": "toolu_later"})
	assert.Equal(t, http.StatusConflict, claim.status, claim.raw)
	final := agent.do("GET", "/v1/calls/"+callID+"?wait=20s", nil)
	assert.Equal(t, "denied", final.body["status"], final.raw)
	assert.Contains(t, final.body["reason"], "before the agent took the approval")
}
