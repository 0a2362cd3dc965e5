package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
)

// The approvers' views with a few hundred calls waiting: every call is
// reachable by paging, oldest first, once, with the total; a token sees
// only the calls its groups may decide.

// The policy is groupsPolicy (trust_test.go): fin… asks finance, the rest ops.

// waitingCall is a call as /v1/pending lists it.
type waitingCall struct {
	CallID      string    `json:"call_id"`
	RequestedAt time.Time `json:"requested_at"`
	Groups      []string  `json:"groups"`
}

// pendingPage is one answer of /v1/pending.
type pendingPage struct {
	Calls         []waitingCall `json:"calls"`
	NextPageToken *string       `json:"next_page_token"`
	Total         *int64        `json:"total"`
}

func TestPendingPagesWithHundredsWaiting(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(groupsPolicy), 0o644))
	d := &devEnv{t: t, dataDir: filepath.Join(dir, "data"), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", writeTokensFile(t, dir), "--policy", policyFile)
	as := func(name string) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-" + name}
	}
	calls := d.client()

	// 300 calls in 30 sessions, started straight through the client: odd
	// ones asked of finance, even ones of ops.
	const n = 300
	submit := func(i int) string {
		id, command := fmt.Sprintf("pg-%03d", i), "echo ops"
		if i%2 == 1 {
			command = "fin report"
		}
		_, err := calls.Submit(context.Background(), tgclient.CallRequest{CallID: id, Session: fmt.Sprintf("pg-s%d", i%30), Tool: "shell",
			Args: json.RawMessage(fmt.Sprintf(`{"command":%q}`, command)), Requester: "agent-1"})
		require.NoError(t, err)
		return id
	}
	var ops, finance []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 10 {
				id := submit(i)
				mu.Lock()
				if i%2 == 1 {
					finance = append(finance, id)
				} else {
					ops = append(ops, id)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(ops, finance)
	root := as("root")
	require.Eventually(t, func() bool {
		r := root.do("GET", "/v1/pending?page_size=1", nil)
		total, _ := r.body["total"].(float64)
		return r.status == http.StatusOK && total == n
	}, 3*time.Minute, 250*time.Millisecond, "all %d calls wait for a person", n)

	t.Run("a session shows an approver only the calls it may decide", func(t *testing.T) {
		for who, want := range map[string]int{"alice": 0, "finance1": n / 30, "root": n / 30, "bob": n / 30} {
			r := as(who).do("GET", "/v1/sessions/pg-s1", nil) // pg-s1: finance calls only
			require.Equal(t, http.StatusOK, r.status, r.raw)
			waiting, _ := r.body["waiting"].([]any)
			assert.Len(t, waiting, want, "%s sees the calls it may decide", who)
			assert.Equal(t, float64(want), r.body["waiting_count"], "%s's count counts what it sees", who)
		}
	})

	// pageThrough follows /v1/pending with page_size=50 to the end, calling
	// between after each page but the last; it checks every page's size
	// and total.
	pageThrough := func(t *testing.T, who apiClient, total int, between func(page int)) []waitingCall {
		t.Helper()
		var got []waitingCall
		token := ""
		for page := 1; ; page++ {
			require.LessOrEqual(t, page, total/50+2, "paging ends")
			path := "/v1/pending?page_size=50"
			if token != "" {
				path += "&page_token=" + url.QueryEscape(token)
			}
			r := who.do("GET", path, nil)
			require.Equal(t, http.StatusOK, r.status, r.raw)
			var p pendingPage
			require.NoError(t, json.Unmarshal([]byte(r.raw), &p))
			require.NotNil(t, p.Total, r.raw)
			assert.Equal(t, int64(total), *p.Total, "page %d counts every call the token may decide", page)
			got = append(got, p.Calls...)
			if p.NextPageToken == nil {
				assert.LessOrEqual(t, len(p.Calls), 50)
				return got
			}
			assert.Len(t, p.Calls, 50, "page %d is full", page)
			token = *p.NextPageToken
			if between != nil {
				between(page)
			}
		}
	}
	// checkOnceOldestFirst asserts the listed calls are want, each once,
	// oldest first.
	checkOnceOldestFirst := func(t *testing.T, got []waitingCall, want []string) {
		t.Helper()
		var ids []string
		for i, c := range got {
			ids = append(ids, c.CallID)
			if i > 0 {
				prev := got[i-1]
				assert.True(t, prev.RequestedAt.Before(c.RequestedAt) || prev.RequestedAt.Equal(c.RequestedAt) && prev.CallID < c.CallID,
					"oldest first: %s (%s) before %s (%s)", prev.CallID, prev.RequestedAt, c.CallID, c.RequestedAt)
			}
		}
		assert.Len(t, ids, len(want), "each call once")
		assert.ElementsMatch(t, want, ids)
	}

	t.Run("an approver of every group pages through all of them", func(t *testing.T) {
		checkOnceOldestFirst(t, pageThrough(t, as("bob"), n, nil), all)
	})

	t.Run("a token of group ops sees only the calls ops may decide", func(t *testing.T) {
		got := pageThrough(t, as("alice"), len(ops), nil)
		checkOnceOldestFirst(t, got, ops)
		for _, c := range got {
			assert.Equal(t, []string{"ops"}, c.Groups, "call %s", c.CallID)
		}
		checkOnceOldestFirst(t, pageThrough(t, as("finance1"), len(finance), nil), finance)
	})

	t.Run("calls decided and calls arriving while an approver pages", func(t *testing.T) {
		// After the first page: three ops calls not listed yet are
		// decided, and three new ops calls arrive (newer than any).
		decided := []string{ops[len(ops)-1], ops[len(ops)-2], ops[len(ops)-3]}
		var arrived []string
		got := pageThrough(t, as("alice"), len(ops), func(page int) {
			if page != 1 {
				return
			}
			for _, id := range decided {
				r := root.do("POST", "/v1/calls/"+id+"/decision", map[string]any{"decision": "deny", "reason": "paging test"})
				require.Equal(t, http.StatusOK, r.status, r.raw)
			}
			for i := range 3 {
				arrived = append(arrived, submit(1000+2*i))
			}
			// The total stays len(ops) once the visibility store has seen
			// both; wait for that, so the pages' totals are exact.
			require.Eventually(t, func() bool {
				for _, id := range arrived {
					if as("agent-1").do("GET", "/v1/calls/"+id, nil).body["status"] != "pending" {
						return false
					}
				}
				r := as("alice").do("GET", "/v1/pending?page_size=1", nil)
				total, _ := r.body["total"].(float64)
				return total == float64(len(ops)) && !slices.ContainsFunc(listed(t, as("alice")), func(id string) bool { return slices.Contains(decided, id) })
			}, time.Minute, 100*time.Millisecond)
		})
		want := slices.Concat(slices.DeleteFunc(slices.Clone(ops), func(id string) bool { return slices.Contains(decided, id) }), arrived)
		checkOnceOldestFirst(t, got, want)
		assert.Equal(t, arrived, []string{got[len(got)-3].CallID, got[len(got)-2].CallID, got[len(got)-1].CallID}, "the new calls come last")
	})

	t.Run("bad paging parameters are a 400 that names them", func(t *testing.T) {
		for _, q := range []string{"page_size=0", "page_size=1001", "page_size=x"} {
			r := as("alice").do("GET", "/v1/pending?"+q, nil)
			assert.Equal(t, http.StatusBadRequest, r.status, r.raw)
			assert.Contains(t, r.errorMessage(), "page_size", q)
		}
		first := as("alice").do("GET", "/v1/pending?page_size=10", nil)
		token, _ := first.body["next_page_token"].(string)
		require.NotEmpty(t, token)
		for name, path := range map[string]string{
			"forged":                        "/v1/pending?page_token=forged",
			"another token's groups":        "/v1/pending?page_token=" + url.QueryEscape(token), // finance1 reuses alice's
			"another filter of the listing": "/v1/pending?session=pg-s1&page_token=" + url.QueryEscape(token),
		} {
			who := as("alice")
			if name == "another token's groups" {
				who = as("finance1")
			}
			r := who.do("GET", path, nil)
			assert.Equal(t, http.StatusBadRequest, r.status, "%s: %s", name, r.raw)
			assert.Contains(t, r.errorMessage(), "page_token", name)
		}
		assert.Equal(t, http.StatusForbidden, as("agent-1").do("GET", "/v1/pending", nil).status, "agents never see pending")
	})

	t.Run("toolgate pending shows the total and --all follows the pages", func(t *testing.T) {
		viaAPI := func(args ...string) result {
			return d.cliWith([]string{"TEMPORAL_ADDRESS=127.0.0.1:1", "TOOLGATE_API=http://" + d.httpAddr, "TOOLGATE_TOKEN=token-finance1"}, args...)
		}
		r := viaAPI("pending", "--page-size", "50")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, fmt.Sprintf("the oldest 50 of %d waiting calls; --all lists them all", len(finance)))

		r = viaAPI("pending", "--all", "--page-size", "40", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var listed []tgclient.PendingCall
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
		var ids []string
		for _, c := range listed {
			ids = append(ids, c.CallID)
		}
		assert.ElementsMatch(t, finance, ids, "--all lists every call once")
		assert.NotContains(t, r.stderr, "--all lists them all", "nothing was left out")

		r = viaAPI("pending", "--page-size", "1001")
		assert.Equal(t, 2, r.code, "bad usage: %s", r.stderr)
		assert.Contains(t, r.stderr, "--page-size")
	})

	t.Run("GET /v1/calls pages too", func(t *testing.T) {
		var ids []string
		path := "/v1/calls?status=pending&page_size=100"
		for range 10 {
			r := root.do("GET", path, nil)
			require.Equal(t, http.StatusOK, r.status, r.raw)
			var p pendingPage
			require.NoError(t, json.Unmarshal([]byte(r.raw), &p))
			require.NotNil(t, p.Total)
			assert.Equal(t, int64(n), *p.Total)
			for _, c := range p.Calls {
				ids = append(ids, c.CallID)
			}
			if p.NextPageToken == nil {
				break
			}
			path = "/v1/calls?status=pending&page_size=100&page_token=" + url.QueryEscape(*p.NextPageToken)
		}
		assert.Len(t, ids, n, "each waiting call once")
	})
}

// listed is every call ID the token's first page of 1000 shows.
func listed(t *testing.T, who apiClient) []string {
	r := who.do("GET", "/v1/pending?page_size=1000", nil)
	var p pendingPage
	require.NoError(t, json.Unmarshal([]byte(r.raw), &p))
	var ids []string
	for _, c := range p.Calls {
		ids = append(ids, c.CallID)
	}
	return ids
}
