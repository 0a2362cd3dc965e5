package rules

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// TestExamplePolicy loads examples/policy.yaml (which checks its examples)
// and decides calls as its comments say.
func TestExamplePolicy(t *testing.T) {
	ws := t.TempDir()
	p, err := Load("../../examples/policy.yaml", Options{Workspace: ws})
	require.NoError(t, err)

	_, err = Load("../../examples/policy.yaml", Options{})
	assert.ErrorContains(t, err, "the condition uses workspace, but no workspace is set")

	tests := []struct {
		name   string
		call   policy.Call
		action Action
		rule   string
	}{
		{"rm -rf is denied", call("shell", `{"command":"rm -rf /"}`), ActionDeny, "no-rm-rf"},
		{"other shell commands ask", call("shell", `{"command":"go test ./..."}`), ActionAsk, "shell"},
		{"writes ask ops", call("write_file", `{"path":"a.txt","content":"hello"}`), ActionAsk, "write-file"},
		{"reads run", call("read_file", `{"path":"README.md"}`), ActionAllow, "read-only"},
		{"echo runs", call("echo", `{"text":"hi"}`), ActionAllow, "read-only"},
		{"paths outside the workspace are refused", call("read_file", `{"path":"/etc/passwd"}`), ActionDeny, RuleGuards},
		{"dot-dot escapes are refused", call("list_dir", `{"path":"../.."}`), ActionDeny, RuleGuards},
		{".git is protected", call("write_file", `{"path":".git/hooks/pre-commit","content":"x"}`), ActionDeny, RuleGuards},
		{".env is protected", call("read_file", `{"path":"svc/.env"}`), ActionDeny, RuleGuards},
		{"http_get asks per host", call("http_get", `{"url":"https://api.github.com/x","host":"api.github.com"}`), ActionAsk, "http-get"},
		{"plain http falls to the default", call("http_get", `{"url":"http://x","host":"x"}`), ActionAsk, RuleDefault},
		{"unknown tools ask", call("deploy", `{}`), ActionAsk, RuleDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Evaluate(tt.call)
			assert.Equal(t, tt.action, v.Action, "%+v", v)
			assert.Equal(t, tt.rule, v.Rule)
		})
	}

	w := p.Evaluate(call("write_file", `{"path":"a.txt","content":"hello"}`)).Request
	assert.Equal(t, `Write 5 bytes to "a.txt"?`, w.Message)
	assert.Equal(t, []string{"ops"}, w.Groups)
	assert.Equal(t, 2*time.Hour, w.Timeout)
	assert.Equal(t, policy.TimeoutDeny, w.OnTimeout)
	s, ok := p.Schedule("write-file")
	require.True(t, ok)
	assert.Equal(t, Schedule{RemindAfter: 30 * time.Minute, EscalateAfter: time.Hour, EscalateTo: []string{"ops-leads"}}, s)

	sh := p.Evaluate(call("shell", `{"command":"ls -la"}`)).Request
	assert.Equal(t, `Run shell command "ls -la"?`, sh.Message)
	h := p.Evaluate(call("http_get", `{"url":"https://api.github.com/x","host":"api.github.com"}`)).Request
	assert.Equal(t, "http_get|host=api.github.com", h.StickyKey)

	q, ok := p.QuotaFor("shell")
	require.True(t, ok)
	assert.Equal(t, Quota{Name: "shell-per-hour", Tools: []string{"shell"}, Max: 20, Per: time.Hour}, q)

	out, n, err := p.TransformOutput(context.Background(), call("read_file", `{}`),
		json.RawMessage(`{"content":"key=acme_live_0123456789abcdef AKIAIOSFODNN7EXAMPLE"}`))
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, `{"content":"key=[REDACTED:acme_api_key] [REDACTED:aws_access_key_id]"}`, string(out))

	big, _ := json.Marshal(map[string]string{"content": strings.Repeat("x", 300_000)})
	assert.ErrorContains(t, p.AfterCall(context.Background(), call("read_file", `{}`), big), "over the 262144-byte limit")
}

// TestExamplePolicyChecksAsShipped loads examples/policy.yaml the way
// `toolgate policy check` and `eval` do without --workspace: the file sets
// no workspace (the worker gives its own), so the current directory stands
// in, and the file loads with its examples passing.
func TestExamplePolicyChecksAsShipped(t *testing.T) {
	p, err := Load("../../examples/policy.yaml", CheckOptions(""))
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	assert.Equal(t, wd, p.Workspace())
	assert.Equal(t, ActionDeny, p.Evaluate(call("read_file", `{"path":"/etc/passwd"}`)).Action)
	assert.Equal(t, ActionAllow, p.Evaluate(call("read_file", `{"path":"rules.go"}`)).Action)

	dir := t.TempDir()
	p, err = Load("../../examples/policy.yaml", CheckOptions(dir))
	require.NoError(t, err)
	assert.Equal(t, dir, p.Workspace(), "--workspace wins over the current directory")
}
