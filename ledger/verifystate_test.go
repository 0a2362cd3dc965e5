package ledger

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/fsmode"
)

func TestAVerifiersStateIsItsLatestCheckpointOwnerOnly(t *testing.T) {
	l, _ := openTest(t)
	cps := signedLog(t, l, "c", 6, 3)
	dir := t.TempDir()
	state := filepath.Join(dir, "sub", "prod.state")

	_, ok, err := ReadVerifierState(state, l.Verifier())
	require.NoError(t, err)
	assert.False(t, ok, "no file: trust on first use")

	require.NoError(t, WriteVerifierState(state, cps[0]))
	require.NoError(t, WriteVerifierState(state, cps[1]))
	c, ok, err := ReadVerifierState(state, l.Verifier())
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, cps[1].Size, c.Size)
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Equal(t, cps[1].Note, b, "the signed note as published")
	if runtime.GOOS != "windows" {
		info, err := os.Stat(state)
		require.NoError(t, err)
		assert.Equal(t, fsmode.File, info.Mode().Perm())
	}
	left, err := os.ReadDir(filepath.Dir(state))
	require.NoError(t, err)
	assert.Len(t, left, 1, "no temporary file left beside it")

	// Another log's state names both logs.
	other, err := Open(t.Context(), Options{DSN: filepath.Join(dir, "other.db"), Keys: mustKeys(t, "other")})
	require.NoError(t, err)
	defer other.Close()
	oc := signedLog(t, other, "c", 2)[0]
	require.NoError(t, WriteVerifierState(state, oc))
	_, _, err = ReadVerifierState(state, l.Verifier())
	assert.ErrorContains(t, err, `the verifier's state is of log "toolgate/other", not "toolgate/test": a state file remembers one log`)

	// The log's origin, another key's signature or no note at all.
	forger, _ := openTest(t)
	require.NoError(t, WriteVerifierState(state, signedLog(t, forger, "c", 2)[0]))
	_, _, err = ReadVerifierState(state, l.Verifier())
	assert.ErrorContains(t, err, "the verifier's state does not hold a checkpoint of the log: checkpoint: not signed by the log's key")
	require.NoError(t, os.WriteFile(state, []byte("toolgate/test\n"+strings.Repeat("x", 10)), 0o600))
	_, _, err = ReadVerifierState(state, l.Verifier())
	assert.ErrorContains(t, err, "the verifier's state does not hold a checkpoint of the log")
}

func mustKeys(t *testing.T, deployment string) Keys {
	t.Helper()
	k, _, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "ledger.key"), deployment)
	require.NoError(t, err)
	return k
}
