package rules

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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

// TestEveryExampleFileLoads loads each policy file in examples/ as
// `toolgate policy check` does, running the examples of its rules.
func TestEveryExampleFileLoads(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 3, "examples/policy.yaml, coding-agent.yaml, mcp-github.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := Load(f, CheckOptions(t.TempDir()))
			require.NoError(t, err)
		})
	}
}

// TestCodingAgentPolicy decides a coding agent's calls as
// examples/coding-agent.yaml says.
func TestCodingAgentPolicy(t *testing.T) {
	repo := t.TempDir()
	p, err := Load("../../examples/coding-agent.yaml", Options{Workspace: repo})
	require.NoError(t, err)
	in := func(rel string) string { return filepath.Join(repo, rel) }
	edit := func(tool, path string) policy.Call {
		args, _ := json.Marshal(map[string]string{"file_path": path, "old_string": "a", "new_string": "b", "content": "x"})
		return agentCall(tool, string(args))
	}
	tests := []struct {
		name   string
		call   policy.Call
		action Action
		rule   string
	}{
		{"Read runs", agentCall("Read", `{"file_path":"/etc/hosts"}`), ActionAllow, "reads"},
		{"Glob runs", agentCall("Glob", `{"pattern":"**/*.go"}`), ActionAllow, "reads"},
		{"Grep runs", agentCall("Grep", `{"pattern":"TODO"}`), ActionAllow, "reads"},
		{"rm -rf is denied", agentCall("Bash", `{"command":"rm -rf /"}`), ActionDeny, "no-destructive-shell"},
		{"rm -fr is denied", agentCall("Bash", `{"command":"cd x && rm -fr build"}`), ActionDeny, "no-destructive-shell"},
		{"git push --force is denied", agentCall("Bash", `{"command":"git push --force origin main"}`), ActionDeny, "no-destructive-shell"},
		{"git push -f is denied", agentCall("Bash", `{"command":"git push -f"}`), ActionDeny, "no-destructive-shell"},
		{"git push asks", agentCall("Bash", `{"command":"git push origin feature"}`), ActionAsk, "shell"},
		{"other commands ask", agentCall("Bash", `{"command":"go test ./..."}`), ActionAsk, "shell"},
		{"Edit in the repo runs", edit("Edit", in("main.go")), ActionAllow, "edits-in-repo"},
		{"Write in the repo runs", edit("Write", in("docs/new.md")), ActionAllow, "edits-in-repo"},
		{"Write outside the repo asks", edit("Write", "/etc/hosts"), ActionAsk, "edits-outside-repo"},
		{"Edit climbing out asks", edit("Edit", in("../other/main.go")), ActionAsk, "edits-outside-repo"},
		{"a sibling with the repo's name as prefix asks", edit("Edit", repo+"-evil/x"), ActionAsk, "edits-outside-repo"},
		{"a relative path asks", edit("Edit", "main.go"), ActionAsk, "edits-outside-repo"},
		{"a git hook asks", edit("Write", in(".git/hooks/pre-commit")), ActionAsk, "sensitive-edits"},
		{"an Edit without file_path asks (the condition fails)", agentCall("Edit", `{}`), ActionAsk, "edits-outside-repo"},
		{"an agent-executed MCP tool asks (no hints)", agentCall("mcp__github__get_issue", `{}`), ActionAsk, "mcp-writes"},
		{"a registered read-only MCP tool runs", hinted("mcp__github__get_issue", map[string]any{"readOnlyHint": true}), ActionAllow, "mcp-reads"},
		{"a registered MCP tool that writes asks", hinted("mcp__github__create_issue", map[string]any{"readOnlyHint": false}), ActionAsk, "mcp-writes"},
		{"an unknown tool asks", agentCall("WebFetch", `{"url":"https://x"}`), ActionAsk, RuleDefault},

		// Claude Code's other tools, in the shapes its hooks send.
		{"PowerShell's forced recursive delete is denied", agentCall("PowerShell", `{"command":"Remove-Item -Recurse -Force C:\\src\\build","description":"Clean"}`), ActionDeny, "no-destructive-shell"},
		{"PowerShell's force push is denied", agentCall("PowerShell", `{"command":"git push -f origin main"}`), ActionDeny, "no-destructive-shell"},
		{"other PowerShell commands ask", agentCall("PowerShell", `{"command":"Get-ChildItem"}`), ActionAsk, "shell"},
		{"NotebookEdit in the repo runs", agentCall("NotebookEdit", `{"notebook_path":"`+in("nb/a.ipynb")+`","new_source":"print(1)","cell_type":"code","edit_mode":"replace"}`), ActionAllow, "edits-in-repo"},
		{"NotebookEdit outside the repo asks", agentCall("NotebookEdit", `{"notebook_path":"/tmp/x.ipynb","new_source":""}`), ActionAsk, "notebook-outside-repo"},

		// Codex 0.171.0: every shell command is Bash, every edit apply_patch.
		{"Codex's rm -rf is denied", agentCall("Bash", `{"command":"rm -rf build"}`), ActionDeny, "no-destructive-shell"},
		{"Codex's patch in the repo runs", agentCall("apply_patch", `{"command":"*** Begin Patch\n*** Update File: src/main.go\n@@\n-a\n+b\n*** End Patch\n"}`), ActionAllow, "edits-in-repo"},
		{"Codex's patch climbing out asks", agentCall("apply_patch", `{"command":"*** Begin Patch\n*** Add File: b.txt\n+x\n*** Delete File: ../../etc/passwd\n*** End Patch\n"}`), ActionAsk, "patch-outside-repo"},
		{"Codex's patch of a git hook asks", agentCall("apply_patch", `{"command":"*** Begin Patch\n*** Add File: .git/hooks/pre-push\n+curl x | sh\n*** End Patch\n"}`), ActionAsk, "sensitive-patches"},
		{"Codex's MCP tools ask", agentCall("mcp__github__create_issue", `{"title":"x"}`), ActionAsk, "mcp-writes"},

		// Gemini CLI 0.61.0 names its own tools, with the same arguments.
		{"Gemini CLI's rm -rf is denied", agentCall("run_shell_command", `{"command":"rm -rf build","description":"Clean"}`), ActionDeny, "no-destructive-shell"},
		{"Gemini CLI's shell asks", agentCall("run_shell_command", `{"command":"go test ./..."}`), ActionAsk, "shell"},
		{"Gemini CLI's write in the repo runs", edit("write_file", in("docs/new.md")), ActionAllow, "edits-in-repo"},
		{"Gemini CLI's replace outside the repo asks", agentCall("replace", `{"file_path":"/etc/hosts","old_string":"a","new_string":"b"}`), ActionAsk, "edits-outside-repo"},
		{"Gemini CLI's write of a git hook asks", edit("write_file", in(".git/hooks/pre-commit")), ActionAsk, "sensitive-edits"},
		{"Gemini CLI's reads run", agentCall("read_file", `{"file_path":"`+in("main.go")+`"}`), ActionAllow, "reads"},
		{"Gemini CLI's MCP tools ask", agentCall("mcp_github_create_issue", `{"title":"x"}`), ActionAsk, "mcp-writes"},

		// VS Code's agent hooks name their own tools.
		{"VS Code's rm -rf is denied", agentCall("run_in_terminal", `{"command":"rm -rf dist"}`), ActionDeny, "no-destructive-shell"},
		{"VS Code's terminal asks", agentCall("run_in_terminal", `{"command":"npm test"}`), ActionAsk, "shell"},
		{"VS Code's edits in the repo run", agentCall("editFiles", `{"files":["`+in("src/main.ts")+`"]}`), ActionAllow, "edits-in-repo"},
		{"VS Code's edits outside ask", agentCall("editFiles", `{"files":["`+in("src/main.ts")+`","/etc/hosts"]}`), ActionAsk, "vscode-edits-outside-repo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Evaluate(tt.call)
			assert.Equal(t, tt.action, v.Action, "%+v", v)
			assert.Equal(t, tt.rule, v.Rule)
		})
	}

	deny := p.Evaluate(agentCall("Bash", `{"command":"git push --force"}`))
	assert.Contains(t, deny.Reason, "rm -rf and git push --force are not allowed")
	ask := p.Evaluate(edit("Write", "/etc/hosts")).Request
	assert.Equal(t, `Write "/etc/hosts", outside the repository `+repo+`?`, ask.Message)

	assert.ErrorContains(t, p.CheckAgentArgs("Bash", json.RawMessage(`{"command":""}`)), "at /command: minLength")
	assert.ErrorContains(t, p.CheckAgentArgs("Edit", json.RawMessage(`{"file_path":"a"}`)), "missing properties 'old_string', 'new_string'")
	assert.NoError(t, p.CheckAgentArgs("Grep", json.RawMessage(`{"pattern":"x"}`)), "no schema declared")
	assert.Equal(t, 30*time.Minute, p.ReportTimeout(agentCall("Bash", `{"command":"make"}`)))
	assert.Equal(t, 5*time.Minute, p.ReportTimeout(agentCall("Read", `{"file_path":"a"}`)))
	assert.Equal(t, time.Duration(0), p.ReportTimeout(agentCall("Grep", `{}`)), "the default applies")
	assert.False(t, p.DeniesOutright(policy.Call{Tool: "Bash"}))
}

// TestMCPGitHubPolicy decides the calls of a GitHub MCP server's tools as
// examples/mcp-github.yaml says.
func TestMCPGitHubPolicy(t *testing.T) {
	p, err := Load("../../examples/mcp-github.yaml", Options{})
	require.NoError(t, err)
	readOnly := map[string]any{"readOnlyHint": true, "title": "Get issue"}
	writes := map[string]any{"readOnlyHint": false, "destructiveHint": false}
	tests := []struct {
		name   string
		call   policy.Call
		action Action
		rule   string
	}{
		{"read-only runs", hinted("github__get_issue", readOnly), ActionAllow, "github-reads"},
		{"read-only and destructive asks", hinted("github__get_issue", map[string]any{"readOnlyHint": true, "destructiveHint": true}), ActionAsk, "github-writes"},
		{"no hints asks", hinted("github__list_commits", nil), ActionAsk, "github-writes"},
		{"merges ask", hinted("github__merge_pull_request", writes), ActionAsk, "github-writes"},
		{"creates ask maintainers", hinted("github__create_issue", writes), ActionAsk, "github-creates"},
		{"creates ask even if marked read-only", hinted("github__create_branch", readOnly), ActionAsk, "github-creates"},
		{"deletes are denied", hinted("github__delete_file", writes), ActionDeny, "github-deletes"},
		{"deletes are denied even if marked read-only", hinted("github__delete_file", readOnly), ActionDeny, "github-deletes"},
		{"other servers fall to the default", hinted("jira__get_issue", readOnly), ActionAsk, RuleDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Evaluate(tt.call)
			assert.Equal(t, tt.action, v.Action, "%+v", v)
			assert.Equal(t, tt.rule, v.Rule)
		})
	}
	c := hinted("github__create_issue", writes)
	c.Args = json.RawMessage(`{"owner":"acme","repo":"api","title":"Flaky"}`)
	req := p.Evaluate(c).Request
	assert.Equal(t, []string{"maintainers"}, req.Groups)
	assert.Equal(t, 4*time.Hour, req.Timeout)
	assert.Equal(t, `github__create_issue on acme/api: {"owner":"acme","repo":"api","title":"Flaky"}`, req.Message)
	assert.Contains(t, p.Evaluate(hinted("github__delete_repo", nil)).Reason, "agents may not delete anything on GitHub")

	assert.True(t, p.DeniesOutright(policy.Call{Tool: "github__delete_repo"}), "tool listings hide deletes")
	assert.False(t, p.DeniesOutright(policy.Call{Tool: "github__create_issue"}))
	assert.False(t, p.DeniesOutright(policy.Call{Tool: "github__get_issue"}))
}
