package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiTokens are the tokens of the API tests, written to a tokens file as
// hashes.
var apiTokens = map[string]struct{ role, groups, owner string }{
	"agent-1":  {"agent", "", "dana"}, // dana runs agent-1
	"agent-2":  {"agent", "", ""},
	"alice":    {"approver", "[ops]", ""},
	"bob":      {"approver", `["*"]`, ""},
	"root":     {"admin", "", ""},
	"finance1": {"approver", "[finance]", ""},
	"audrey":   {"auditor", "", ""},
}

func writeTokensFile(t *testing.T, dir string) string {
	var b strings.Builder
	b.WriteString("tokens:\n")
	for name, tok := range apiTokens {
		fmt.Fprintf(&b, "  - name: %s\n    role: %s\n    sha256: %s\n", name, tok.role, sha256hex("token-"+name))
		if tok.groups != "" {
			fmt.Fprintf(&b, "    groups: %s\n", tok.groups)
		}
		if tok.owner != "" {
			fmt.Fprintf(&b, "    owner: %s\n", tok.owner)
		}
	}
	path := filepath.Join(dir, "tokens.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// apiClient calls the HTTP API as one token holder.
type apiClient struct {
	t     *testing.T
	base  string
	token string
}

type apiResponse struct {
	status int
	body   map[string]any
	raw    string
}

func (c apiClient) do(method, path string, body any) apiResponse {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		require.NoError(c.t, err)
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	require.NoError(c.t, err)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	r := apiResponse{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (r apiResponse) errorCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r apiResponse) errorMessage() string {
	e, _ := r.body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

func newAPIDev(t *testing.T) (*devEnv, func(name string) apiClient) {
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t)}
	d.httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d.workspace = filepath.Join(d.dataDir, "workspace")
	tokens := writeTokensFile(t, t.TempDir())
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir,
		"--temporal-port", fmt.Sprint(d.port), "--http", d.httpAddr, "--tokens", tokens)
	return d, func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}
}

// submitWaiting submits a call that asks a person and returns once it is
// pending.
func submitWaiting(t *testing.T, agent apiClient, session, callID string) {
	t.Helper()
	r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{
		"session": session, "tool": "shell", "call_id": callID, "args": map[string]any{"command": "echo " + callID},
	})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool {
		return agent.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending"
	}, 20*time.Second, 20*time.Millisecond)
}

func TestAPI(t *testing.T) {
	d, as := newAPIDev(t)
	agent, alice, bob, root := as("agent-1"), as("alice"), as("bob"), as("root")

	t.Run("submit and long-poll", func(t *testing.T) {
		r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "a1", "tool": "echo", "args": map[string]any{"x": 1}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"])
		assert.Equal(t, map[string]any{"x": 1.0}, r.body["output"])
		assert.Equal(t, "agent-1", r.body["requester"], "the requester comes from the token")

		submitWaiting(t, agent, "a1", "lp1")
		done := make(chan apiResponse)
		go func() { done <- agent.do("GET", "/v1/calls/lp1?wait=5m", nil) }()
		r = bob.do("POST", "/v1/calls/lp1/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		got := <-done // the long poll returns when the decision lands, not after 5 minutes
		assert.Equal(t, http.StatusOK, got.status, got.raw)
		assert.Equal(t, "ok", got.body["status"])
		assert.Equal(t, "bob", got.body["decided_by"])
		assert.Equal(t, "api", got.body["channel"])
	})

	t.Run("pending, decide, and the errors of deciding", func(t *testing.T) {
		submitWaiting(t, agent, "a2", "p1")
		r := bob.do("GET", "/v1/pending?session=a2", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		calls := r.body["calls"].([]any)
		require.Len(t, calls, 1)
		assert.Equal(t, "p1", calls[0].(map[string]any)["call_id"])
		assert.Contains(t, calls[0].(map[string]any)["message"], "echo p1")
		r = bob.do("GET", "/v1/calls/p1", nil)
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		notices := r.body["notices"].([]any)
		require.Len(t, notices, 1, "who was told, and when")
		assert.Equal(t, "waiting", notices[0].(map[string]any)["kind"])

		r = agent.do("POST", "/v1/calls/p1/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, "an agent can never decide")
		r = bob.do("POST", "/v1/calls/p1/decision", `{"decision":`)
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Equal(t, "malformed_json", r.errorCode())
		r = bob.do("POST", "/v1/calls/p1/decision", map[string]any{"decision": "approve", "decided_by": "mallory"})
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Contains(t, r.errorMessage(), "decided_by", "the identity comes from the token, never the body")
		r = bob.do("POST", "/v1/calls/p1/decision", map[string]any{"decision": "approve", "args": []int{1}})
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Contains(t, r.errorMessage(), "args")
		r = bob.do("POST", "/v1/calls/nope/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusNotFound, r.status)
		assert.Equal(t, "unknown_call", r.errorCode())
		r = bob.do("POST", "/v1/calls/p1/decision", strings.Repeat(" ", 2<<20))
		assert.Equal(t, http.StatusRequestEntityTooLarge, r.status)

		r = bob.do("POST", "/v1/calls/p1/decision", map[string]any{"decision": "deny", "reason": "not today"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		r = alice.do("POST", "/v1/calls/p1/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusConflict, r.status)
		assert.Equal(t, "already_decided", r.errorCode())
		assert.Contains(t, r.errorMessage(), "denied_with_reason by bob via api at")
		r = agent.do("GET", "/v1/calls/p1", nil)
		assert.Equal(t, "denied", r.body["status"])
		assert.Equal(t, "not today", r.body["reason"])
	})

	t.Run("an admin cannot decide its own call", func(t *testing.T) {
		submitWaiting(t, root, "a3", "own1")
		r := root.do("POST", "/v1/calls/own1/decision", map[string]any{"decision": "approve"})
		assert.Equal(t, http.StatusForbidden, r.status, r.raw)
		assert.Equal(t, "self_approval", r.errorCode())
	})

	t.Run("agents see only their own calls", func(t *testing.T) {
		r := agent.do("GET", "/v1/calls/own1", nil)
		assert.Equal(t, http.StatusNotFound, r.status, "root's call is not agent-1's")
		r = agent.do("GET", "/v1/calls?session=a2", nil)
		require.Equal(t, http.StatusOK, r.status)
		assert.Len(t, r.body["calls"], 1)
	})

	t.Run("edited arguments", func(t *testing.T) {
		submitWaiting(t, agent, "a4", "ed1")
		r := bob.do("POST", "/v1/calls/ed1/decision", map[string]any{"decision": "approve", "args": map[string]any{"command": "echo edited"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		r = agent.do("GET", "/v1/calls/ed1?wait=30s", nil)
		assert.Equal(t, "ok", r.body["status"])
		assert.Equal(t, map[string]any{"command": "echo edited"}, r.body["args"])
		assert.Contains(t, r.body["note"], "bob edited the arguments")
		assert.Contains(t, r.body["output"].(map[string]any)["stdout"], "edited")
	})

	t.Run("bulk decisions are all or nothing", func(t *testing.T) {
		submitWaiting(t, agent, "a5", "b1")
		submitWaiting(t, agent, "a5", "b2")
		r := bob.do("POST", "/v1/decisions", map[string]any{"decisions": []map[string]any{
			{"call_id": "b1", "decision": "approve"},
			{"call_id": "b2", "decision": "deny"},
			{"call_id": "p1", "decision": "approve"}, // decided earlier
			{"call_id": "ghost", "decision": "approve"},
		}})
		require.Equal(t, http.StatusConflict, r.status, r.raw)
		refused := r.body["error"].(map[string]any)["refused"].([]any)
		require.Len(t, refused, 2)
		assert.Equal(t, "p1", refused[0].(map[string]any)["call_id"])
		assert.Equal(t, "already_decided", refused[0].(map[string]any)["code"])
		assert.Equal(t, "ghost", refused[1].(map[string]any)["call_id"])
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/b1", nil).body["status"], "nothing was applied")
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/b2", nil).body["status"])

		r = bob.do("POST", "/v1/decisions", map[string]any{"decisions": []map[string]any{
			{"call_id": "b1", "decision": "approve"},
			{"call_id": "b2", "decision": "deny", "reason": "duplicate"},
		}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", agent.do("GET", "/v1/calls/b1?wait=30s", nil).body["status"])
		assert.Equal(t, "duplicate", agent.do("GET", "/v1/calls/b2?wait=30s", nil).body["reason"])
	})

	t.Run("sessions: show, revoke, end", func(t *testing.T) {
		submitWaiting(t, agent, "a6", "s1")
		r := bob.do("POST", "/v1/calls/s1/decision", map[string]any{"decision": "approve_for_session"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		// The session records it as the call tells it, just after the
		// decision.
		var sticky []any
		require.Eventually(t, func() bool {
			r = bob.do("GET", "/v1/sessions/a6", nil)
			sticky, _ = r.body["sticky"].([]any)
			return r.status == http.StatusOK && len(sticky) == 1
		}, 10*time.Second, 20*time.Millisecond, r.raw)
		assert.Equal(t, "shell", sticky[0].(map[string]any)["key"])

		r = bob.do("DELETE", "/v1/sessions/a6/sticky/shell", nil)
		assert.Equal(t, http.StatusOK, r.status, r.raw)
		r = bob.do("DELETE", "/v1/sessions/a6/sticky/shell", nil)
		assert.Equal(t, http.StatusNotFound, r.status)

		submitWaiting(t, agent, "a6", "s2")
		r = bob.do("POST", "/v1/sessions/a6/end", nil)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, 1.0, r.body["denied_calls"])
		r = agent.do("GET", "/v1/calls/s2?wait=30s", nil)
		assert.Equal(t, "denied", r.body["status"])
		assert.Equal(t, "the session was ended by bob", r.body["reason"])
	})

	t.Run("the CLI's approver verbs over the API, without Temporal", func(t *testing.T) {
		d := d.in(t)
		submitWaiting(t, agent, "a8", "cli1")
		// A dead Temporal address proves these verbs never touch Temporal.
		viaAPI := func(token string, args ...string) result {
			return d.cliWith([]string{"TEMPORAL_ADDRESS=127.0.0.1:1", "TOOLGATE_API=" + agent.base, "TOOLGATE_TOKEN=" + token}, args...)
		}
		r := viaAPI("token-bob", "pending", "--json", "--session", "a8")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, `"cli1"`)
		r = viaAPI("token-agent-1", "approve", "cli1")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "needs role approver or admin")
		r = viaAPI("token-bob", "approve", "cli1", "--for-session")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "approved_for_session by bob")
		r = viaAPI("token-alice", "deny", "cli1", "--reason", "late")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "already decided: approved_for_session by bob via api")
		r = viaAPI("token-bob", "session", "show", "a8", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, `"from_call": "cli1"`)
		r = viaAPI("token-bob", "session", "revoke", "a8", "shell")
		assert.Equal(t, 0, r.code, r.stderr)
		r = viaAPI("token-bob", "approve", "ghost")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `unknown call "ghost"`)
	})

	t.Run("bad submissions", func(t *testing.T) {
		r := agent.do("POST", "/v1/calls", map[string]any{"session": "bad session!", "tool": "echo"})
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Contains(t, r.errorMessage(), "session")
		r = agent.do("POST", "/v1/calls", map[string]any{"session": "a7", "tool": "echo", "args": "not an object"})
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Contains(t, r.errorMessage(), "args")
		r = agent.do("POST", "/v1/calls", map[string]any{"session": "a7", "tool": "echo", "arguments": map[string]any{}})
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Contains(t, r.errorMessage(), "arguments is not a known field")
		r = agent.do("POST", "/v1/calls?wait=forever", map[string]any{"session": "a7", "tool": "echo"})
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Contains(t, r.errorMessage(), "wait")
		r = agent.do("POST", "/v1/calls?wait=10s", map[string]any{"session": "a7", "tool": "read_file", "args": map[string]any{"path": 3}})
		assert.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, true, r.body["invalid_request"])
		assert.Contains(t, r.body["reason"], "/path")
		r = apiClient{t: t, base: agent.base}.do("GET", "/v1/openapi.json", nil)
		assert.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, "3.1.0", r.body["openapi"])
	})
}
