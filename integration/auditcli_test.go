package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An auditor with a token and no database reads and checks the ledger
// with the audit verbs through the API, against the key the operator
// gave them.
func TestAnAuditorChecksTheLedgerWithTheCLIOverTheAPI(t *testing.T) {
	d, as := newAPIDev(t)
	r := as("agent-1").do("POST", "/v1/calls?wait=30s", map[string]any{"session": "s-cli", "tool": "echo", "args": map[string]any{"x": 1}, "call_id": "w1"})
	require.Equal(t, 200, r.status, r.raw)
	base := "http://" + d.httpAddr
	api := func(token string, args ...string) result {
		return d.cli(append([]string{"audit"}, append(args, "--api", base, "--token", "token-"+token)...)...)
	}

	// The key the operator hands out, from the ledger's key file.
	operator := d.cli("audit", "key", "--ledger-key", filepath.Join(d.dataDir, "ledger.key"))
	require.Equal(t, 0, operator.code, operator.stderr)
	vkey := filepath.Join(t.TempDir(), "verifier.key")
	require.NoError(t, os.WriteFile(vkey, []byte(operator.stdout), 0o644))
	key := api("audrey", "key")
	require.Equal(t, 0, key.code, key.stderr)
	assert.Equal(t, operator.stdout, key.stdout)
	assert.True(t, strings.HasPrefix(key.stdout, "toolgate/dev+"), key.stdout)

	show := api("audrey", "show", "w1")
	require.Equal(t, 0, show.code, show.stderr)
	assert.Contains(t, show.stdout, "call.submitted")
	assert.Contains(t, show.stdout, "requester: agent-1")
	assert.Contains(t, show.stdout, "status:   ok")

	receipt := filepath.Join(t.TempDir(), "w1.receipt")
	proof := api("audrey", "proof", "w1", "-o", receipt)
	require.Equal(t, 0, proof.code, proof.stderr)
	checked := d.cli("audit", "verify", "--receipt", receipt, "--key", "@"+vkey)
	require.Equal(t, 0, checked.code, checked.stderr)
	assert.Contains(t, checked.stdout, "call w1, 3 entries in checkpoint")

	verify := api("audrey", "verify", "--key", "@"+vkey)
	require.Equal(t, 0, verify.code, verify.stderr)
	assert.Contains(t, verify.stdout, "ledger at "+base+" (toolgate/dev) intact")

	other := api("agent-2", "show", "w1")
	assert.Equal(t, 1, other.code, "another agent's call")
	assert.Contains(t, other.stderr, `the ledger has no entries for call "w1"`)
	approver := api("alice", "verify", "--key", "@"+vkey)
	assert.Equal(t, 1, approver.code)
	assert.Contains(t, approver.stderr, "this needs role auditor")
}
