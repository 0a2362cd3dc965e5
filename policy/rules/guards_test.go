package rules

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

func TestMatchPathGlob(t *testing.T) {
	tests := []struct {
		glob, name string
		want       bool
	}{
		{".git/**", ".git", true},
		{".git/**", ".git/config", true},
		{".git/**", ".git/objects/ab/cdef", true},
		{".git/**", "sub/.git/config", false},
		{".git/**", ".github/workflows/ci.yml", false},
		{".env", ".env", true},
		{".env", "app/.env", false},
		{"**/.env", "app/.env", true},
		{"**/.env", ".env", true},
		{"**/*.pem", "a/b/c/key.pem", true},
		{"**/*.pem", "key.pem", true},
		{"**/*.pem", "key.pem.txt", false},
		{"secrets/**/*.json", "secrets/a/b/x.json", true},
		{"secrets/**/*.json", "secrets/x.json", true},
		{"secrets/**/*.json", "other/x.json", false},
		{"**", "anything/at/all", true},
		{"*.key", "dir/x.key", false},
		{"*.key", "x.key", true},
		{"src/*.go", "src/a/b.go", false},
		// A trailing "/**" covers the directory itself also when its last
		// segment is a wildcard (doublestar alone says no to this).
		{"secret*/**", "secret", true},
		{"secret*/**", "secrets/db.json", true},
		{"secret*/**", "public/secret", false},
		{"**/build/**", "a/build", true},
		{"a/**/**", "a", true},
		// doublestar's syntax: alternatives and negated classes.
		{"{.env,.envrc}", ".envrc", true},
		{"{.env,.envrc}", ".envx", false},
		{"**/*.{pem,key}", "certs/prod.key", true},
		{"[!.]*", ".hidden", false},
		{"[!.]*", "visible", true},
		{"\\*", "*", true},
		{"\\*", "x", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, matchPathGlob(tt.glob, tt.name), "%s ~ %s", tt.glob, tt.name)
	}
}

func TestGuards(t *testing.T) {
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "src"), 0o755))
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "out")))
	require.NoError(t, os.Symlink(filepath.Join(ws, ".git"), filepath.Join(ws, "gitlink")))

	p := parse(t, `
guards:
  path_args: [path, dest]
  protected_paths: [".git/**", ".env", "**/*.pem"]
rules:
  - name: everything
    tool: "*"
    action: allow
`, Options{Workspace: ws})
	tests := []struct {
		name   string
		args   string
		refuse string // "" when allowed
	}{
		{"plain relative path", `{"path":"src/main.go"}`, ""},
		{"absolute path inside", `{"path":"` + ws + `/src/main.go"}`, ""},
		{"the root itself", `{"path":"."}`, ""},
		{"no path argument", `{"text":"../../etc/passwd"}`, ""},
		{"non-string path is not checked", `{"path":42}`, ""},
		{"dot-dot escape", `{"path":"../secrets"}`, "is outside the workspace"},
		{"sneaky dot-dot", `{"path":"src/../../x"}`, "is outside the workspace"},
		{"absolute outside", `{"path":"/etc/passwd"}`, "is outside the workspace"},
		{"second path arg", `{"path":"ok.txt","dest":"/tmp/x"}`, `argument dest: path "/tmp/x" is outside`},
		{"list of paths", `{"path":["a.txt","../b"]}`, "is outside the workspace"},
		{"symlink out", `{"path":"out/file"}`, "through a symbolic link"},
		{"git dir", `{"path":".git"}`, "is protected (.git/**)"},
		{"git file", `{"path":".git/config"}`, "is protected (.git/**)"},
		{"git via cleaning", `{"path":"src/../.git/HEAD"}`, "is protected (.git/**)"},
		{"git via absolute path", `{"path":"` + ws + `/.git/HEAD"}`, "is protected"},
		{"git via a symlink", `{"path":"gitlink/config"}`, "is protected (.git/**)"},
		{"env at the root", `{"path":".env"}`, "is protected (.env)"},
		{"env deeper is allowed by an anchored glob", `{"path":"app/.env"}`, ""},
		{"pem at any depth", `{"path":"certs/prod/server.pem"}`, "is protected (**/*.pem)"},
		{"NUL byte", `{"path":"a\u0000b"}`, "NUL byte"},
		{"args not JSON", `{"path":`, "the path guards cannot check them"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Evaluate(call("fs", tt.args))
			if tt.refuse == "" {
				assert.Equal(t, ActionAllow, v.Action, "%+v", v)
				return
			}
			assert.Equal(t, ActionDeny, v.Action)
			assert.Equal(t, RuleGuards, v.Rule)
			assert.Contains(t, v.Reason, tt.refuse)
			_, err := p.EvaluateApproval(context.Background(), call("fs", tt.args))
			d, ok := policy.AsDeny(err)
			require.True(t, ok)
			assert.Equal(t, RuleGuards, d.Rule)
		})
	}
}

func TestGuardsRoot(t *testing.T) {
	// guards.workspace_root wins over the workspace; relative to the file.
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(file, []byte("guards:\n  workspace_root: ws\n"), 0o600))
	p, err := Load(file, Options{Workspace: "/elsewhere"})
	require.NoError(t, err)
	assert.Equal(t, ActionAsk, p.Evaluate(call("x", `{"path":"`+dir+`/ws/a"}`)).Action)
	assert.Equal(t, ActionDeny, p.Evaluate(call("x", `{"path":"/elsewhere/a"}`)).Action)

	// Without any root only the protected globs apply.
	p = parse(t, "guards:\n  protected_paths: [.env]\n")
	assert.Equal(t, ActionAsk, p.Evaluate(call("x", `{"path":"../a"}`)).Action)
	assert.Equal(t, ActionDeny, p.Evaluate(call("x", `{"path":"/.env"}`)).Action)

	// The root need not exist: the lexical checks still work.
	p = parse(t, "guards: {}\n", Options{Workspace: "/no/such/dir"})
	assert.Equal(t, ActionAsk, p.Evaluate(call("x", `{"path":"a/b"}`)).Action)
	assert.Equal(t, ActionDeny, p.Evaluate(call("x", `{"path":"../b"}`)).Action)

	// No guards section, no guards.
	p = parse(t, "default: allow\n", Options{Workspace: "/no/such/dir"})
	assert.Equal(t, ActionAllow, p.Evaluate(call("x", `{"path":"../b"}`)).Action)
}

func TestAfterCall(t *testing.T) {
	p := parse(t, `
after:
  - name: size
    tools: [read_file, "mcp__*"]
    max_output_bytes: 50
    reason: the output is too large
  - name: no-keys
    reject_pattern: 'BEGIN [A-Z]+ PRIVATE KEY'
  - name: both
    tools: [both]
    max_output_bytes: 1000
    reject_pattern: '(?i)internal use only'
    reason: confidential
`)
	ctx := context.Background()
	small := json.RawMessage(`{"content":"hello"}`)
	big := json.RawMessage(`{"content":"` + strings.Repeat("x", 100) + `"}`)

	assert.NoError(t, p.AfterCall(ctx, call("read_file", `{}`), small))
	err := p.AfterCall(ctx, call("read_file", `{}`), big)
	var rej *RejectedOutputError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, "size", rej.Rule)
	assert.Equal(t, `the output is too large (output is 114 bytes, over the 50-byte limit of after-call rule "size")`, err.Error())
	assert.Error(t, p.AfterCall(ctx, call("mcp__fs__read", `{}`), big))
	assert.NoError(t, p.AfterCall(ctx, call("echo", `{}`), big), "size rule is for other tools")

	key := json.RawMessage(`{"content":"-----BEGIN RSA PRIVATE KEY-----\nabc"}`)
	err = p.AfterCall(ctx, call("echo", `{}`), key)
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, "no-keys", rej.Rule)
	assert.Equal(t, `the tool's output was rejected by policy (output matches the reject pattern of after-call rule "no-keys")`, err.Error())

	err = p.AfterCall(ctx, call("both", `{}`), json.RawMessage(`"For Internal\u0020Use Only"`))
	assert.EqualError(t, err, `confidential (output matches the reject pattern of after-call rule "both")`, "decoded strings are checked too")
	assert.NoError(t, p.AfterCall(ctx, call("both", `{}`), small))
}

// TestBuiltinToolsConfinedWithoutGuards: the built-in file tools' path
// argument is confined to the workspace whatever the file says, even
// without a guards section.
func TestBuiltinToolsConfinedWithoutGuards(t *testing.T) {
	ws := t.TempDir()
	p := parse(t, "default: allow\n", Options{Workspace: ws})
	for _, tool := range []string{"read_file", "list_dir", "write_file"} {
		for _, path := range []string{"../../etc/x", "/etc/x", "a/../../x"} {
			v := p.Evaluate(call(tool, `{"path":"`+path+`","content":"x"}`))
			assert.Equal(t, ActionDeny, v.Action, "%s %s: %+v", tool, path, v)
			assert.Equal(t, RuleGuards, v.Rule)
			assert.Equal(t, `argument path: path "`+path+`" is outside the workspace`, v.Reason)
		}
		assert.Equal(t, ActionAllow, p.Evaluate(call(tool, `{"path":"notes/a.txt","content":"x"}`)).Action, tool)
	}
	// Other tools' arguments are the file's business (guards: path_args).
	assert.Equal(t, ActionAllow, p.Evaluate(call("x", `{"path":"../../etc/x"}`)).Action)
	// Arguments that cannot be checked are refused.
	v := p.Evaluate(call("write_file", `["../../etc/x"]`))
	assert.Equal(t, ActionDeny, v.Action)
	assert.Equal(t, "arguments are a JSON array, not an object; the path guards cannot check them", v.Reason)

	// Without any workspace, a path that climbs out with .. is still refused.
	p = parse(t, "default: allow\n")
	v = p.Evaluate(call("write_file", `{"path":"../../etc/x","content":"x"}`))
	assert.Equal(t, ActionDeny, v.Action)
	assert.Contains(t, v.Reason, `"../../etc/x" is outside the workspace`)
}

// TestCheckPath judges files by where they really are, as the built-in
// tools report them right before they act.
func TestCheckPath(t *testing.T) {
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	p := parse(t, "guards:\n  protected_paths: [.git/**, \"**/*.pem\"]\n", Options{Workspace: ws})
	assert.NoError(t, p.CheckPath(filepath.Join(ws, "src", "main.go")))
	assert.NoError(t, p.CheckPath(ws))
	assert.EqualError(t, p.CheckPath(filepath.Join(ws, ".git")), `path ".git" is protected (.git/**)`)
	assert.EqualError(t, p.CheckPath(filepath.Join(ws, ".git", "config")), `path ".git/config" is protected (.git/**)`)
	assert.EqualError(t, p.CheckPath(filepath.Join(ws, "a", "k.pem")), `path "a/k.pem" is protected (**/*.pem)`)
	assert.EqualError(t, p.CheckPath("/etc/passwd"), "the file is outside the workspace")

	// A workspace named through a symlink is compared by its real path.
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(ws, link))
	p = parse(t, "guards:\n  protected_paths: [.git/**]\n", Options{Workspace: link})
	assert.Error(t, p.CheckPath(filepath.Join(ws, ".git", "HEAD")))
	assert.NoError(t, p.CheckPath(filepath.Join(ws, "a.txt")))

	// Without guards the workspace still bounds the files.
	p = parse(t, "default: ask\n", Options{Workspace: ws})
	assert.NoError(t, p.CheckPath(filepath.Join(ws, ".git", "config")))
	assert.Error(t, p.CheckPath("/etc/passwd"))

	// Without a workspace there is nothing to compare with.
	assert.NoError(t, parse(t, "default: ask\n").CheckPath("/etc/passwd"))

	// A Reloader checks with its current policy.
	file := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(file, []byte("guards:\n  protected_paths: [.env]\n"), 0o600))
	r, err := NewReloader(file, Options{Workspace: ws}, nil)
	require.NoError(t, err)
	assert.EqualError(t, r.CheckPath(filepath.Join(ws, ".env")), `path ".env" is protected (.env)`)
}
