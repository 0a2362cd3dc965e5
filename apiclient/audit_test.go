package apiclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
