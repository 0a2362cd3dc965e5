package integration

import (
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every legitimate path decides as before, and leaves in the ledger the
// statement of the door that authenticated whoever acted: an auditor's
// `toolgate audit verify --doors` checks each one offline, and finds no
// person's act without one.
func TestEveryDoorsActIsInTheLedgerWithItsStatement(t *testing.T) {
	d, as := newAPIDev(t)
	agent, bob := as("agent-1"), as("bob")

	// Auto-approved, through the API.
	r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "s-auto", "tool": "echo", "args": map[string]any{"x": 1}, "call_id": "auto1"})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	// Approved through the API, and through the operator's CLI over
	// Temporal (the door key of dev's data dir).
	submitWaiting(t, agent, "s-api", "viaapi")
	r = bob.do("POST", "/v1/calls/viaapi/decision", map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	submitWaiting(t, agent, "s-cli", "viacli")
	cli := d.cli("approve", "viacli", "--by", "carol")
	require.Equal(t, 0, cli.code, cli.stderr)

	// Approved for the session, which then covers the next call; revoked;
	// the session ended; a call cancelled by its own agent.
	submitWaiting(t, agent, "s-sticky", "first")
	r = bob.do("POST", "/v1/calls/first/decision", map[string]any{"decision": "approve_for_session"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "s-sticky", "tool": "shell", "call_id": "covered", "args": map[string]any{"command": "echo covered"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "session", r.body["channel"], "the sticky decision covered it")
	r = bob.do("DELETE", "/v1/sessions/s-sticky/sticky/shell", nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	submitWaiting(t, agent, "s-end", "ended")
	end := d.cli("session", "end", "s-end", "--by", "root")
	require.Equal(t, 0, end.code, end.stderr)
	submitWaiting(t, agent, "s-cancel", "withdrawn")
	r = agent.do("POST", "/v1/calls/withdrawn/cancel", nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)

	for _, id := range []string{"viaapi", "viacli", "first", "covered", "ended", "withdrawn"} {
		require.Eventually(t, func() bool {
			s, _ := agent.do("GET", "/v1/calls/"+id, nil).body["status"].(string)
			return s == "ok" || s == "denied"
		}, 30*time.Second, 50*time.Millisecond, id)
	}

	doors := filepath.Join(d.dataDir, "doors.json")
	ledgerFlags := []string{"--ledger", filepath.Join(d.dataDir, "ledger.db"), "--ledger-key", filepath.Join(d.dataDir, "ledger.key")}
	audit := func(args ...string) result {
		return d.cli(append(append([]string{"audit"}, args...), ledgerFlags...)...)
	}
	verify := audit("verify", "--doors", doors)
	require.Equal(t, 0, verify.code, verify.stdout+verify.stderr)
	m := regexp.MustCompile(`statements: (\d+) verified: .*by door dev \(key [0-9a-f]{16}\); (\d+) entries unsigned`).FindStringSubmatch(verify.stdout)
	require.Len(t, m, 3, verify.stdout)
	verified, _ := strconv.Atoi(m[1])
	// Seven submissions, four decisions by people (API, CLI, for the
	// session, the session's end), the sticky one handed on, its record
	// in the session, the revoke, the end, the cancel.
	assert.GreaterOrEqual(t, verified, 14, verify.stdout)
	assert.NotContains(t, verify.stdout, "no statement: ", "no person's act without its door's statement")

	show := audit("show", "viacli", "--doors", doors)
	require.Equal(t, 0, show.code, show.stderr)
	assert.Regexp(t, `approved by carol via cli .*at door dev \(key [0-9a-f]{16}\)`, show.stdout)

	// A doors file that does not trust dev's door: every statement fails.
	other := filepath.Join(t.TempDir(), "doors.json")
	made := d.cli("doors", "new", "elsewhere", "--key", filepath.Join(t.TempDir(), "k.json"), "--doors", other)
	require.Equal(t, 0, made.code, made.stderr)
	refused := audit("verify", "--doors", other)
	assert.Equal(t, 1, refused.code)
	assert.Contains(t, refused.stderr, "that the verifier was not given")
}
