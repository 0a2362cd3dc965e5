package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
)

const preToolUse = `{"hook_event_name":"PreToolUse","session_id":"s1","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"tu1","cwd":"/tmp"}`

// postHook posts a Claude Code hook event as its HTTP hook does.
func postHook(h http.Handler, token, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", ClaudeCodeHookPath, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return serve(h, req)
}

// permissionOf reads a PreToolUse answer.
func permissionOf(t *testing.T, rec *httptest.ResponseRecorder) (decision, reason string) {
	t.Helper()
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out struct {
		HookSpecificOutput struct {
			HookEventName, PermissionDecision, PermissionDecisionReason string
		}
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	assert.Equal(t, "PreToolUse", out.HookSpecificOutput.HookEventName)
	return out.HookSpecificOutput.PermissionDecision, out.HookSpecificOutput.PermissionDecisionReason
}

func TestHTTPHookDeniesWhatItCannotServe(t *testing.T) {
	h := New(Config{Calls: tgclient.New(unavailableTemporal{}, "").WithDoor(testDoor), Tokens: mustTokens(t), HookStateDir: t.TempDir()})

	t.Run("no token", func(t *testing.T) {
		decision, reason := permissionOf(t, postHook(h, "", preToolUse))
		assert.Equal(t, "deny", decision)
		assert.Contains(t, reason, "TOOLGATE_TOKEN", "says where the token goes")
	})
	t.Run("an approver's token", func(t *testing.T) {
		decision, reason := permissionOf(t, postHook(h, "approver-token", preToolUse))
		assert.Equal(t, "deny", decision)
		assert.Contains(t, reason, "alice holds a token with role approver")
	})
	t.Run("a malformed event", func(t *testing.T) {
		decision, reason := permissionOf(t, postHook(h, "agent-token", `{"hook_event_name":"PreToolUse","session_id":"../x"`))
		assert.Equal(t, "deny", decision)
		assert.NotEmpty(t, reason)
	})
	t.Run("Temporal unavailable", func(t *testing.T) {
		decision, reason := permissionOf(t, postHook(h, "agent-token", preToolUse))
		assert.Equal(t, "deny", decision, "a failure never lets the tool run")
		assert.Contains(t, reason, "could not check this tool call")
		assert.Contains(t, reason, "connection refused", "names the cause")
	})
	t.Run("a report without a token", func(t *testing.T) {
		rec := postHook(h, "", `{"hook_event_name":"PostToolUse","session_id":"s1","tool_name":"Bash","tool_use_id":"tu1","tool_response":{}}`)
		assert.Equal(t, http.StatusUnauthorized, rec.Code, "nothing to block: the status says why")
		assert.Contains(t, rec.Body.String(), "hook_refused")
	})
	t.Run("a report of a tool use toolgate did not allow", func(t *testing.T) {
		rec := postHook(h, "agent-token", `{"hook_event_name":"PostToolUse","session_id":"s1","tool_name":"Bash","tool_use_id":"unknown","tool_response":{}}`)
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.JSONEq(t, `{}`, rec.Body.String(), "Claude Code reads {} as a hook with nothing to say")
	})
}
