package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPolicyExplainShowsEachRulesSandbox(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
default: deny
rules:
  - name: builds
    tool: shell
    when: args.command.startsWith("make")
    action: allow
    sandbox: {read: [/opt/toolchains], write: [/var/cache/build], network: false}
  - name: anything-else
    tool: shell
    action: ask
    groups: [ops]
`), 0o600))
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"policy", "explain", file}, &out, &errs)
	require.Equal(t, 0, code, errs.String())
	assert.Equal(t, `1. anything-else (line 9): ask
   tools:   shell
   groups:  ops
   process: runs sandboxed: writes only the workspace; network allowed

2. builds (line 4): allow
   tools:   shell
   when:    args.command.startsWith("make")
   process: runs sandboxed: writes the workspace and /var/cache/build; also reads /opt/toolchains; no network

3. default: deny
   reason:  no rule allows this call

process: how the process of a call the rule lets run is confined, for tools that start one (shell)
`, out.String())
}
