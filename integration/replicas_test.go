package integration

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInboxSessionsSpanServeReplicas runs two `toolgate serve` replicas on
// one Temporal (toolgate dev's) and one sessions database, as
// docs/production.md runs them behind a load balancer: a person signs in
// through one and decides through the other, both restart and the
// sign-in holds, and a sign-out on one is a sign-out on both.
func TestInboxSessionsSpanServeReplicas(t *testing.T) {
	d, as := newAPIDev(t)
	tokens := writeTokensFile(t, t.TempDir())
	sessionsDB := filepath.Join(t.TempDir(), "sessions.db")
	addrA, addrB := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	replica := func(addr string) *proc {
		return start(t, "HTTP listener running", "serve", "--temporal-address", d.address(), "--keys", d.keysFile(), "--door-key", d.doorKeyFile(),
			"--tokens", tokens, "--http", addr, "--sessions-db", sessionsDB)
	}
	a, b := replica(addrA), replica(addrB)
	baseA, baseB := "http://"+addrA, "http://"+addrB
	assert.Contains(t, a.out.String(), "Inbox sign-ins", "serve says where it keeps sign-ins")
	assert.Contains(t, a.out.String(), sessionsDB)

	agent := as("agent-1")
	submitWaiting(t, agent, "replicas", "rep-1")

	// One browser (one cookie jar: cookies are per host, and a balancer
	// shows both replicas as one) signs in with alice's token through A.
	browser := browserless(t, false)
	page := getBody(t, browser, baseA+"/login")
	r, err := browser.PostForm(baseA+"/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {"token-alice"}})
	require.NoError(t, err)
	signedInPage, _ := io.ReadAll(r.Body)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode, "%s", signedInPage)
	require.Equal(t, "/", r.Request.URL.Path, "signed in, on to the list")
	cookie := sessionCookieOf(t, browser, baseA)

	// B decides with A's sign-in and the CSRF token of B's own page.
	callPage := getBody(t, browser, baseB+"/calls/rep-1")
	require.Contains(t, callPage, `id="decide"`, "B shows alice the call with its buttons")
	r, err = browser.PostForm(baseB+"/calls/rep-1/decision", url.Values{"csrf": {csrfOf(t, callPage)}, "decision": {"approve"}})
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Equal(t, "/calls/rep-1", r.Request.URL.Path, "decided, back on the call's page")
	res := agent.do("GET", "/v1/calls/rep-1?wait=30s", nil)
	assert.Equal(t, "ok", res.body["status"], res.raw)
	assert.Equal(t, "alice", res.body["decided_by"])
	assert.Equal(t, "inbox", res.body["channel"])

	// Both restart: the sign-in holds on each.
	a.stop()
	b.stop()
	a, b = replica(addrA), replica(addrB)
	submitWaiting(t, agent, "replicas", "rep-2")
	for _, base := range []string{baseA, baseB} {
		assert.Contains(t, pendingAs(t, base, cookie), "rep-2", "%s after the restart", base)
	}

	raw, err := os.ReadFile(sessionsDB)
	require.NoError(t, err)
	wal, _ := os.ReadFile(sessionsDB + "-wal")
	assert.False(t, bytes.Contains(append(raw, wal...), []byte(cookie)), "the database does not hold the cookie's session ID")

	// Signing out through B ends the sign-in on A.
	r, err = browser.PostForm(baseB+"/logout", url.Values{"csrf": {csrfOf(t, getBody(t, browser, baseB+"/"))}})
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, "/login", r.Request.URL.Path)
	assert.Equal(t, "1", r.Request.URL.Query().Get("signed_out"))
	for _, base := range []string{baseA, baseB} {
		assert.Equal(t, http.StatusUnauthorized, pendingStatus(t, base, cookie), "%s after the sign-out", base)
	}
	assert.Equal(t, "pending", agent.do("GET", "/v1/calls/rep-2", nil).body["status"], "nothing decided rep-2")
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf is the CSRF token of a page's form.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m, "a form with a csrf field in:\n%s", page)
	return m[1]
}

// sessionCookieOf is the inbox session cookie c holds for base.
func sessionCookieOf(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	for _, ck := range c.Jar.Cookies(mustURL(t, base)) {
		if ck.Name == "toolgate_session" {
			return ck.Value
		}
	}
	t.Fatalf("no session cookie for %s", base)
	return ""
}

// pendingAs reads the inbox's waiting list at base with the session
// cookie alone.
func pendingAs(t *testing.T, base, cookie string) string {
	t.Helper()
	status, body := pendingRequest(t, base, cookie)
	require.Equal(t, http.StatusOK, status, body)
	return body
}

func pendingStatus(t *testing.T, base, cookie string) int {
	t.Helper()
	status, _ := pendingRequest(t, base, cookie)
	return status
}

func pendingRequest(t *testing.T, base, cookie string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/inbox/pending.json", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: "toolgate_session", Value: cookie})
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(body)
}
