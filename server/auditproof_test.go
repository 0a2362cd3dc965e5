package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/ledger"
)

// withProofRoute is New(cfg), after checking that the API's table lists
// GET /v1/audit/proof with the roles of GET /v1/audit/checkpoint.
func withProofRoute(t *testing.T, cfg Config) http.Handler {
	t.Helper()
	roles := map[string][]Role{}
	for _, r := range (&api{}).table() {
		roles[r.pattern] = r.roles
	}
	require.Contains(t, roles, "/v1/audit/proof", "the API's table lists the route")
	assert.ElementsMatch(t, roles["/v1/audit/checkpoint"], roles["/v1/audit/proof"], "GET /v1/audit/proof has the roles of GET /v1/audit/checkpoint")
	return New(cfg)
}

// treeHash is the root of the log's first n entries, from their leaves.
func treeHash(t *testing.T, l *ledger.Ledger, n int64) tlog.Hash {
	t.Helper()
	leaves, err := l.LeafHashes(context.Background(), 0, n)
	require.NoError(t, err)
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, leaf := range leaves {
		hs, err := tlog.StoredHashesForRecordHash(int64(i), leaf, reader)
		require.NoError(t, err)
		stored = append(stored, hs...)
	}
	h, err := tlog.TreeHash(n, reader)
	require.NoError(t, err)
	return h
}

func TestAuditProofProvesTheLatestCheckpointExtendsAnOldSize(t *testing.T) {
	l, keys, _ := testLedger(t)
	h := withProofRoute(t, Config{Tokens: auditTokens(t), Ledger: l})

	rec := apiCall(h, "auditor-token", "GET", "/v1/audit/proof?old=0", "")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	code, _ := apiErrorOf(t, rec)
	assert.Equal(t, "no_checkpoint", code)

	appendEntries(t, l, callEntries("c1", "agent-1")...)
	appendEntries(t, l, callEntries("c2", "agent-1")...)
	signed, err := l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	appendEntries(t, l, callEntries("c3", "agent-1")...) // not signed yet: the proof goes to size 6

	for old := int64(0); old <= 6; old++ {
		rec := apiCall(h, "agent-1-token", "GET", fmt.Sprintf("/v1/audit/proof?old=%d", old), "")
		require.Equal(t, http.StatusOK, rec.Code, "old=%d: %s", old, rec.Body.String())
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var raw map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &raw))
		assert.ElementsMatch(t, []string{"checkpoint", "old", "proof"}, slices.Collect(maps.Keys(raw)))
		var p ledger.ConsistencyProof
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		assert.Equal(t, string(signed.Note), p.Checkpoint)
		assert.Equal(t, old, p.Old)
		// What a verifier that saw size old does, with the key it holds.
		seen := ledger.Checkpoint{Size: old}
		if old > 0 {
			seen.Hash = treeHash(t, l, old)
		}
		c, err := p.Check(keys.Verifier, seen)
		require.NoError(t, err, "old=%d", old)
		assert.EqualValues(t, 6, c.Size)
	}

	rec = apiCall(h, "auditor-token", "GET", "/v1/audit/proof?old=7", "")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	code, msg := apiErrorOf(t, rec)
	assert.Equal(t, "old_past_checkpoint", code)
	assert.Contains(t, msg, "old 7 is past the latest signed checkpoint, of size 6")

	for query, want := range map[string]string{
		"":                          "old is required",
		"?old=-1":                   "old must be a tree size, a whole number from 0 up",
		"?old=1e3":                  "old must be a tree size",
		"?old=":                     "old must be a tree size, a whole number from 0 up (got an empty value)",
		"?old=99999999999999999999": "old is too large",
		"?old=1&start=0":            "start is not a query parameter",
	} {
		rec := apiCall(h, "auditor-token", "GET", "/v1/audit/proof"+query, "")
		assert.Equal(t, http.StatusBadRequest, rec.Code, query)
		code, msg := apiErrorOf(t, rec)
		assert.Equal(t, "invalid_request", code, query)
		assert.Contains(t, msg, want, query)
	}
}

// The proof route reads as GET /v1/audit/checkpoint reads: every role's
// token, and nothing without one.
func TestAuditProofTakesTheRolesOfTheCheckpoint(t *testing.T) {
	l, _, _ := testLedger(t)
	appendEntries(t, l, callEntries("c1", "agent-1")...)
	_, err := l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	h := withProofRoute(t, Config{Tokens: auditTokens(t), Ledger: l})
	for _, token := range []string{"agent-1-token", "approver-token", "admin-token", "auditor-token"} {
		rec := apiCall(h, token, "GET", "/v1/audit/proof?old=1", "")
		assert.Equal(t, http.StatusOK, rec.Code, "%s: %s", token, rec.Body.String())
		assert.Equal(t, apiCall(h, token, "GET", "/v1/audit/checkpoint", "").Code, rec.Code, token)
	}
	for _, token := range []string{"", "wrong-token"} {
		rec := apiCall(h, token, "GET", "/v1/audit/proof?old=1", "")
		assert.Equal(t, http.StatusUnauthorized, rec.Code, token)
		code, _ := apiErrorOf(t, rec)
		assert.Equal(t, "unauthorized", code)
	}

	rec := apiCall(withProofRoute(t, Config{Tokens: auditTokens(t)}), "admin-token", "GET", "/v1/audit/proof?old=0", "")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	code, _ := apiErrorOf(t, rec)
	assert.Equal(t, "no_ledger", code)
}
