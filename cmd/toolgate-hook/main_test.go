package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	pre  = `{"hook_event_name":"PreToolUse","session_id":"s1","tool_name":"Bash","tool_input":{"command":"ls"}}`
	post = `{"hook_event_name":"PostToolUse","session_id":"s1","tool_name":"Bash","tool_use_id":"t1","tool_response":{}}`
)

func runHook(t *testing.T, event string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(event), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestForwardsTheEventAndPrintsTheAnswer(t *testing.T) {
	var got struct{ path, auth, body string }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.path, got.auth, got.body = r.URL.Path, r.Header.Get("Authorization"), string(b)
		io.WriteString(w, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}`)
	}))
	defer srv.Close()
	t.Setenv("TOOLGATE_TOKEN", "agent-token")

	code, stdout, _ := runHook(t, pre, "codex", "--api", srv.URL+"/")
	assert.Equal(t, 0, code)
	assert.Equal(t, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}`, stdout)
	assert.Equal(t, "/hooks/codex", got.path)
	assert.Equal(t, "Bearer agent-token", got.auth)
	assert.Equal(t, pre, got.body, "the event goes as it came")
}

func TestEveryFailureBlocksAToolUse(t *testing.T) {
	t.Setenv("TOOLGATE_TOKEN", "agent-token")
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	defer bad.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + l.Addr().String()
	l.Close()

	for name, tc := range map[string]struct {
		event string
		args  []string
		token string
		why   string
	}{
		"a 5xx":           {pre, []string{"claude-code", "--api", bad.URL}, "agent-token", "502 Bad Gateway: upstream down"},
		"unreachable":     {pre, []string{"claude-code", "--api", down}, "agent-token", "toolgate is unreachable"},
		"no URL":          {pre, []string{"claude-code", "--api", ""}, "agent-token", "pass --api URL or set TOOLGATE_API"},
		"no token":        {pre, []string{"claude-code", "--api", bad.URL}, "", "set TOOLGATE_TOKEN"},
		"no agent":        {pre, nil, "agent-token", "no agent named"},
		"an unknown one":  {pre, []string{"claude"}, "agent-token", `unknown agent "claude"`},
		"a broken event":  {`{"hook_event_name":`, []string{"claude-code", "--api", down}, "agent-token", "unreachable"},
		"a flag it lacks": {pre, []string{"claude-code", "--nope"}, "agent-token", "flag provided but not defined"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("TOOLGATE_TOKEN", tc.token)
			code, stdout, stderr := runHook(t, tc.event, tc.args...)
			assert.Equal(t, 2, code, "exit 2 blocks the tool in Claude Code and Codex")
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.why)
		})
	}

	t.Run("a report is not blocked", func(t *testing.T) {
		code, _, stderr := runHook(t, post, "claude-code", "--api", down)
		assert.Equal(t, 0, code, "the tool already ran")
		assert.Contains(t, stderr, "the report of this event is lost")
	})
}

// The binary exists to start fast: it must not link the Temporal SDK or
// toolgate's packages, whose initialisation is what it avoids.
func TestLinksNothingHeavy(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		assert.False(t, strings.HasPrefix(dep, "go.temporal.io/") || strings.HasPrefix(dep, "github.com/toolgate/toolgate/") && dep != "github.com/toolgate/toolgate/cmd/toolgate-hook",
			"toolgate-hook links %s", dep)
	}
}
