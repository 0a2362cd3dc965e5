package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rule that needs two approvers from two groups: one through the API,
// one through the CLI; the same approver twice and the requester are
// refused, and the tool runs once, after the second.
func TestAFourEyesRuleNeedsTwoPeopleFromTwoGroups(t *testing.T) {
	d := startDevWithPolicy(t, `
default: allow
rules:
  - {name: two-keys, tool: write_file, action: ask, groups: [ops, finance], approvals: 2, distinct_groups: true}
`)
	as := func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}
	agent, alice := as("agent-1"), as("alice")

	r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "fe1", "call_id": "fe-1", "tool": "write_file",
		"args": map[string]any{"path": "payout.txt", "content": "pay 100"}})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool { return alice.do("GET", "/v1/calls/fe-1", nil).body["status"] == "pending" }, 30*time.Second, 50*time.Millisecond)

	r = alice.do("POST", "/v1/calls/fe-1/decision", map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	approvals, _ := r.body["approvals"].(map[string]any)
	require.NotNil(t, approvals, "the answer says the approval was counted and more are needed: %s", r.raw)
	assert.Equal(t, float64(2), approvals["needed"])
	assert.Len(t, approvals["given"], 1)
	view := alice.do("GET", "/v1/calls/fe-1", nil)
	assert.Equal(t, "pending", view.body["status"], "one approval of two: it still waits")
	assert.Contains(t, d.cli("status", "fe-1").stdout, "approvals: 1 of 2 (alice)")
	require.Eventually(t, func() bool {
		return strings.Contains(d.cli("pending", "--session", "fe1").stdout, "[1 of 2 approvals]")
	}, 30*time.Second, 200*time.Millisecond, "the pending list says how far it is")

	r = alice.do("POST", "/v1/calls/fe-1/decision", map[string]any{"decision": "approve"})
	assert.Equal(t, http.StatusConflict, r.status, r.raw)
	assert.Equal(t, "not_another_approval", r.errorCode())
	r = agent.do("POST", "/v1/calls/fe-1/decision", map[string]any{"decision": "approve"})
	assert.Equal(t, http.StatusForbidden, r.status, "an agent never decides: %s", r.raw)
	out := d.cli("approve", "fe-1", "--by", "agent-1", "--groups", "finance")
	assert.Equal(t, 1, out.code, "the requester cannot be the second pair of eyes: %s %s", out.stdout, out.stderr)
	out = d.cli("approve", "fe-1", "--by", "olivia", "--groups", "ops")
	assert.Equal(t, 1, out.code, "ops is counted already: %s %s", out.stdout, out.stderr)
	assert.Contains(t, out.stderr, "different groups")
	_, err := os.Stat(filepath.Join(d.workspace, "payout.txt"))
	assert.True(t, os.IsNotExist(err), "nothing ran yet")

	out = d.cli("approve", "fe-1", "--by", "frank", "--groups", "finance")
	require.Equal(t, 0, out.code, out.stdout+out.stderr)
	final := alice.do("GET", "/v1/calls/fe-1?wait=20s", nil)
	require.Equal(t, http.StatusOK, final.status, final.raw)
	assert.Equal(t, "ok", final.body["status"])
	assert.Equal(t, "frank", final.body["decided_by"])
	given := final.body["approvals"].(map[string]any)["given"].([]any)
	require.Len(t, given, 2)
	first, second := given[0].(map[string]any), given[1].(map[string]any)
	assert.Equal(t, []any{"alice", "api", "ops"}, []any{first["by"], first["channel"], first["group"]})
	assert.Equal(t, []any{"frank", "cli", "finance"}, []any{second["by"], second["channel"], second["group"]})
	b, err := os.ReadFile(filepath.Join(d.workspace, "payout.txt"))
	require.NoError(t, err)
	assert.Equal(t, "pay 100", string(b))
}
