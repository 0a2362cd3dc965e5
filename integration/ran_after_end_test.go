package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/workflows"
)

// ranAfterEndPolicy lets dana, who runs the agent, decide edits at Claude
// Code's own prompt, beside the ops approvers.
const ranAfterEndPolicy = `
default: allow
rules:
  - {name: edits, tool: Edit, action: ask, groups: [ops], user: true}
`

// TestARunApprovedAtThePromptAfterADenialIsShownAgainstTheDenial: the
// hook hands a user: true call to Claude Code's prompt; alice denies it in
// toolgate; dana then approves it at the prompt and the tool runs. The
// call stays denied by alice, and every view of it says the tool ran
// anyway, who approved it where, with what and what it returned.
func TestARunApprovedAtThePromptAfterADenialIsShownAgainstTheDenial(t *testing.T) {
	d := startDevWithPolicy(t, ranAfterEndPolicy)
	c := d.client()
	base := "http://" + d.httpAddr
	alice := apiClient{t: t, base: base, token: "token-alice"}
	agent1 := apiClient{t: t, base: base, token: "token-agent-1"}
	agent2 := apiClient{t: t, base: base, token: "token-agent-2"}
	root := apiClient{t: t, base: base, token: "token-root"}

	for _, mode := range []struct {
		name, requester string
		args            []string
		owner           apiClient // reads the call over the API
	}{
		{"over the API", "agent-1", []string{"--api", base, "--token", "token-agent-1"}, agent1},
		{"over Temporal", "claude-code", []string{"--temporal-address", d.address(), "--keys", d.keysFile(), "--door-key", d.doorKeyFile(), "--user", "dana"}, root},
	} {
		t.Run(mode.name, func(t *testing.T) {
			d := d.in(t)
			session := "ra-" + strings.ReplaceAll(mode.name, " ", "-")
			h := hookRunner{t: t, args: append(append([]string{}, mode.args...), "--state-dir", t.TempDir())}
			a := h.decide(hookEvent(t, "pre-edit-retry.json", session))
			require.Equal(t, "ask", a.PermissionDecision, a.PermissionDecisionReason)
			callID := hookCallID.FindString(a.PermissionDecisionReason)
			require.NotEmpty(t, callID, a.PermissionDecisionReason)

			r := alice.do("POST", "/v1/calls/"+callID+"/decision", map[string]any{"decision": "deny", "reason": "not in this release"})
			require.Equal(t, http.StatusOK, r.status, r.raw)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := c.Wait(ctx, callID)
			require.NoError(t, err)
			require.Equal(t, workflows.StatusDenied, res.Status)

			// dana approves at the prompt; the tool runs; its PostToolUse.
			post := h.run(hookEvent(t, "post-edit-retry.json", session))
			require.Equal(t, 0, post.code, post.stderr)
			assert.Contains(t, post.stderr, "the tool ran although its call had ended")

			out := d.cli("status", callID)
			assert.Equal(t, 3, out.code, "the call's outcome stays denied: %s", out.stderr)
			assert.Contains(t, out.stdout, "decision: denied_with_reason by alice via api")
			assert.Contains(t, out.stdout, "the tool ran anyway: dana approved it at Claude Code's permission prompt after it was denied by alice (recorded ")
			assert.Contains(t, out.stdout, `it ran with: {"file_path":"/home/dev/shop/src/main.go"`)
			assert.Contains(t, out.stdout, "output: {\"filePath\":\"/home/dev/shop/src/main.go\"")
			assert.Contains(t, out.stdout, "structuredPatch")

			js := d.cli("status", callID, "--json")
			var printed workflows.Result
			require.NoError(t, json.Unmarshal([]byte(js.stdout), &printed), js.stdout)
			require.NotNil(t, printed.RanAfterEnd, js.stdout)
			assert.Equal(t, "dana", printed.RanAfterEnd.User)
			assert.Equal(t, mode.requester, printed.RanAfterEnd.Requester)

			got := mode.owner.do("GET", "/v1/calls/"+callID, nil)
			require.Equal(t, http.StatusOK, got.status, got.raw)
			assert.Equal(t, "denied", got.body["status"])
			assert.Equal(t, "alice", got.body["decided_by"])
			ran, _ := got.body["ran_after_end"].(map[string]any)
			require.NotNil(t, ran, "GET /v1/calls/{id} shows the run: %s", got.raw)
			assert.Equal(t, "dana", ran["user"])
			assert.Equal(t, "Claude Code's permission prompt", ran["via"])
			assert.Equal(t, "denied", ran["call_status"])
			assert.Equal(t, "alice", ran["decided_by"])
			assert.Contains(t, got.raw, "structuredPatch", "with the output")

			page := inboxPage(t, base, "token-root", "/calls/"+callID)
			assert.Contains(t, page, "The tool ran anyway")
			assert.Contains(t, page, "dana approved it at Claude Code&#39;s permission prompt after it was denied by alice")
			assert.Contains(t, page, "structuredPatch")

			// One record per call; another agent's call is unknown to it.
			rec := map[string]any{"via": "Claude Code's permission prompt", "args": map[string]any{"file_path": "x"}, "output": "forged"}
			if mode.name == "over the API" {
				again := agent1.do("POST", "/v1/calls/"+callID+"/ran-after-end", rec)
				assert.Equal(t, http.StatusConflict, again.status, again.raw)
				assert.Equal(t, "already_recorded", again.errorCode())
				other := agent2.do("POST", "/v1/calls/"+callID+"/ran-after-end", rec)
				assert.Equal(t, http.StatusForbidden, other.status, "agent-2's token names no owner, whose call ever: %s", other.raw)
				assert.Contains(t, other.errorMessage(), "names no owner")
			} else {
				other := agent1.do("POST", "/v1/calls/"+callID+"/ran-after-end", rec)
				assert.Equal(t, http.StatusNotFound, other.status, "claude-code's call, to agent-1: %s", other.raw)
			}
		})
	}

	t.Run("only a call that ended denied or timed out, of a user: true rule", func(t *testing.T) {
		r := agent1.do("POST", "/v1/calls?wait=1s", map[string]any{"session": "ra-ok", "call_id": "ra-ok", "tool": "Bash", "execution": "agent", "args": map[string]any{"command": "ls"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		rec := map[string]any{"args": map[string]any{"command": "ls"}, "output": "main.go"}
		r = agent1.do("POST", "/v1/calls/ra-ok/ran-after-end", rec)
		assert.Equal(t, http.StatusConflict, r.status, "approved by the policy, not ended denied: %s", r.raw)
		assert.Equal(t, "not_waiting", r.errorCode())
		assert.Contains(t, r.errorMessage(), "has not ended denied or timed out")
		r = agent1.do("POST", "/v1/calls/ra-nothing/ran-after-end", rec)
		assert.Equal(t, http.StatusNotFound, r.status, r.raw)
		assert.Equal(t, "unknown_call", r.errorCode())
	})
}

// inboxPage signs in to the inbox with token and returns the page at path.
func inboxPage(t *testing.T, base, token, path string) string {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := hc.Get(base + "/login")
	require.NoError(t, err)
	resp.Body.Close()
	u, err := url.Parse(base)
	require.NoError(t, err)
	var csrf string
	for _, ck := range jar.Cookies(u) {
		if strings.Contains(ck.Name, "login") {
			csrf = ck.Value
		}
	}
	require.NotEmpty(t, csrf, "the sign-in page sets its CSRF cookie")
	resp, err = hc.PostForm(base+"/login", url.Values{"token": {token}, "csrf": {csrf}, "next": {path}})
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}
