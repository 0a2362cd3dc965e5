package apiclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
)

// A server that speaks the entries' contract badly is refused, not
// followed forever or half-read.
func TestAuditEntriesRefusesABadPage(t *testing.T) {
	var next, body string // the stub's answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer t", r.Header.Get("Authorization"))
		assert.Equal(t, "/v1/audit/entries?start=0", r.URL.RequestURI())
		if next != "" {
			w.Header().Set("X-Next-Start", next)
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	c := New(srv.URL, "t")
	entry := `{"index":0,"entry":{"kind":"x","event":"e"}}` + "\n"

	next, body = "", entry+"not json\n"
	_, _, err := c.AuditEntries(context.Background(), 0)
	assert.ErrorContains(t, err, "not JSON lines of entries")

	next, body = "0", entry
	_, _, err = c.AuditEntries(context.Background(), 0)
	assert.ErrorContains(t, err, `X-Next-Start "0" does not move on`)

	next, body = "1", entry
	entries, n, err := c.AuditEntries(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	require.Len(t, entries, 1)
	assert.Equal(t, `{"kind":"x","event":"e"}`, string(entries[0].Entry), "the entry's bytes as sent")

	next, body = "", ""
	entries, n, err = c.AuditEntries(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), n, "no X-Next-Start: the log's end")
	assert.Empty(t, entries)
}

// The proof route's answers: the proof, the API's refusals as the
// client's errors, and a server without the route told apart.
func TestAuditProofTellsAServerWithoutTheRoute(t *testing.T) {
	var status int
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/v1/audit/proof?old=20", r.URL.RequestURI())
		if status == http.StatusNotFound && body == "" {
			http.NotFound(w, r) // the mux of a toolgate from before the route
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	c := New(srv.URL, "t")

	status, body = http.StatusOK, `{"checkpoint":"toolgate/prod\n25\n…","old":20,"proof":["AAAA"]}`
	p, err := c.AuditProof(context.Background(), 20)
	require.NoError(t, err)
	assert.Equal(t, ledger.ConsistencyProof{Checkpoint: "toolgate/prod\n25\n…", Old: 20, Proof: []string{"AAAA"}}, p)

	status, body = http.StatusBadRequest, `{"error":{"code":"old_past_checkpoint","message":"old 20 is past the latest signed checkpoint, of size 10"}}`
	_, err = c.AuditProof(context.Background(), 20)
	var refused *tgclient.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, "old_past_checkpoint", refused.Type)

	status, body = http.StatusNotFound, `{"error":{"code":"no_ledger","message":"this deployment runs without a decision ledger"}}`
	_, err = c.AuditProof(context.Background(), 20)
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, "no_ledger", refused.Type)
	assert.NotErrorIs(t, err, ErrNoProofRoute)

	status, body = http.StatusNotFound, ""
	_, err = c.AuditProof(context.Background(), 20)
	assert.ErrorIs(t, err, ErrNoProofRoute)

	status, body = http.StatusBadGateway, "bad gateway"
	_, err = c.AuditProof(context.Background(), 20)
	assert.EqualError(t, err, "toolgate API: 502 Bad Gateway: bad gateway", "other bare answers read as before")
}
