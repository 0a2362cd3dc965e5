package rules

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

func TestARulesSandboxGrantIsLoadedAndGivenToItsCalls(t *testing.T) {
	p, err := Parse("test.yaml", []byte(`
rules:
  - name: builds
    tool: shell
    when: args.command.startsWith("make")
    action: allow
    sandbox:
      read: [/opt/toolchains]
      write: [/var/cache/build/]
  - name: offline
    tool: shell
    when: args.command.startsWith("curl")
    action: ask
    sandbox: {network: false}
`), Options{})
	require.NoError(t, err)
	call := func(cmd string) policy.Call {
		return policy.Call{Tool: "shell", Args: json.RawMessage(`{"command":` + string(must(json.Marshal(cmd))) + `}`)}
	}
	assert.Equal(t, &policy.SandboxGrant{Read: []string{"/opt/toolchains"}, Write: []string{"/var/cache/build"}}, p.SandboxFor(call("make test")))
	assert.Equal(t, &policy.SandboxGrant{NoNetwork: true}, p.SandboxFor(call("curl example.com")))
	assert.Nil(t, p.SandboxFor(policy.Call{Tool: "read_file", Args: json.RawMessage(`{}`)}), "the default rule grants nothing")

	v, err := json.Marshal(p.Evaluate(call("make test")))
	require.NoError(t, err)
	assert.Contains(t, string(v), `"sandbox":{"read":["/opt/toolchains"],"write":["/var/cache/build"]}`, "policy eval shows the grant")
	g := p.SandboxFor(call("make test"))
	g.Read[0] = "/"
	assert.Equal(t, "/opt/toolchains", p.SandboxFor(call("make test")).Read[0], "a verdict's grant is a copy")
}

func TestASandboxGrantThatCouldReachToolgatesFilesIsRefused(t *testing.T) {
	data := t.TempDir()
	own := []string{filepath.Join(data, "keys.json"), filepath.Join(data, "ledger.db")}
	tests := []struct{ name, sandbox, want string }{
		{"the data dir", "{write: [" + data + "]}", `test.yaml:6: rule "r": sandbox: ` + data + ` overlaps toolgate's own files`},
		{"a directory holding it", "{read: [" + filepath.Dir(data) + "]}", "overlaps toolgate's own files"},
		{"a relative path", "{read: [cache]}", `rule "r": sandbox: read: "cache" is not an absolute path`},
		{"not a mapping", "[/tmp]", `rule "r": sandbox must be a mapping with fields read, write and network`},
		{"an unknown field", "{exec: [/bin]}", `rule "r": sandbox: unknown field "exec"`},
		{"network not a boolean", "{network: maybe}", `rule "r": sandbox: network`},
		{"too long to show a person", "{read: [" + strings.Repeat("/opt/"+strings.Repeat("d", 60)+", ", 40) + "/opt/x]}",
			`rule "r": sandbox names more than a person approving its calls can be shown`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte("rules:\n  - name: r\n    tool: shell\n    action: allow\n    sandbox:\n      "+tt.sandbox+"\n"), Options{Own: own})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := Parse("test.yaml", []byte("rules:\n  - name: r\n    tool: shell\n    action: deny\n    reason: no\n    sandbox: {network: false}\n"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `rule "r": sandbox is only for allow and ask rules`)
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
