package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statsPolicy asks about writes and shell commands, allows listings, and
// watches a stricter shell rule in shadow mode.
const statsPolicy = `rules:
  - name: strict-shell
    tool: shell
    action: deny
    reason: no shell on this host
    mode: shadow
  - name: writes
    tool: write_file
    action: ask
    groups: [ops]
  - name: shell-asks
    tool: shell
    action: ask
  - name: listings
    tool: list_dir
    action: allow
`

// TestStatsPage runs calls through the real `toolgate dev`, decided
// through the API, then reads /stats in headless Chromium: as the
// auditor it shows the rules' counts and a suggestion (docs/stats.png);
// an approver is refused it and is not linked to it.
func TestStatsPage(t *testing.T) {
	d := startDevWithPolicy(t, statsPolicy)
	base := "http://" + d.httpAddr
	agent, bob := apiClient{t: t, base: base, token: "token-agent-1"}, apiClient{t: t, base: base, token: "token-bob"}
	for _, dir := range []string{"docs", "src"} {
		require.NoError(t, os.MkdirAll(filepath.Join(d.workspace, dir), 0o755))
	}

	// 24 writes (22 under docs/), all approved; 3 shell commands, one
	// approved and two denied with a reason; 4 listings the policy allows.
	type asked struct {
		id, tool string
		args     map[string]any
		decision map[string]any
	}
	var calls []asked
	for n := range 24 {
		path := fmt.Sprintf("docs/guide-%d.md", n)
		if n >= 22 {
			path = fmt.Sprintf("src/part-%d.go", n)
		}
		calls = append(calls, asked{fmt.Sprintf("st-w%d", n), "write_file", map[string]any{"path": path, "content": "text\n"}, map[string]any{"decision": "approve"}})
	}
	for n := range 3 {
		dec := map[string]any{"decision": "deny", "reason": "<b>not today</b>"}
		if n == 0 {
			dec = map[string]any{"decision": "approve"}
		}
		calls = append(calls, asked{fmt.Sprintf("st-s%d", n), "shell", map[string]any{"command": fmt.Sprintf("echo %d", n)}, dec})
	}
	for _, c := range calls {
		r := agent.do("POST", "/v1/calls", map[string]any{"session": "stats", "tool": c.tool, "call_id": c.id, "args": c.args})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
	}
	for _, c := range calls {
		require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/"+c.id, nil).body["status"] == "pending" },
			30*time.Second, 50*time.Millisecond, "%s waits", c.id)
		r := bob.do("POST", "/v1/calls/"+c.id+"/decision", c.decision)
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}
	for n := range 4 {
		r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "stats", "tool": "list_dir", "call_id": fmt.Sprintf("st-l%d", n), "args": map[string]any{"path": "."}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}
	for _, c := range calls {
		r := agent.do("GET", "/v1/calls/"+c.id+"?wait=30s", nil)
		require.Contains(t, []any{"ok", "denied"}, r.body["status"], r.raw)
	}

	b := newBrowser(t)
	b.base = base
	signInAs := func(b *browserTab, token string) {
		b.do(chromedp.Navigate(b.base+"/login"), chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#login button")))
		b.do(chromedp.WaitVisible(chromedp.CSS(".signout button")))
	}

	t.Run("the auditor reads the statistics", func(t *testing.T) {
		b := b.in(t)
		signInAs(b, "token-audrey")
		b.do(chromedp.Click(chromedp.CSS("#nav-stats")), chromedp.WaitVisible(chromedp.CSS("#stats")))
		assert.Contains(t, b.text("#stats-source"), "From the decision ledger: 31 calls submitted in the last 30 days.")
		row := func(rule, tool string) []string {
			return evalJS[[]string](b, fmt.Sprintf(`[...document.querySelectorAll('#stats tbody[data-rule=%q] tr')].filter(r => r.cells[1].textContent === %q).flatMap(r => [...r.cells].map(c => c.textContent.trim()))`, rule, tool))
		}
		// Calls, allowed, denied, asked, approved, refused, rate.
		assert.Equal(t, []string{"writes", "write_file", "24", "0", "0", "24", "24", "0", "100.0 %"}, row("writes", "write_file")[:9])
		assert.Equal(t, []string{"shell-asks", "shell", "3", "0", "0", "3", "1", "2", "33.3 %"}, row("shell-asks", "shell")[:9])
		assert.Equal(t, []string{"listings", "list_dir", "4", "4", "0", "0", "0", "0", "–"}, row("listings", "list_dir")[:9])
		assert.Contains(t, b.text("#stats-details"), "via api 24")
		assert.Equal(t, "<b>not today</b>", b.text("#stats-details q"), "the reason is shown as text")
		assert.Equal(t, 0, evalJS[int](b, `document.querySelectorAll('#stats-details b').length`), "never as markup")
		assert.Contains(t, b.text("#stats-shadow"), "strict-shell would have decided 3 calls, 3 of them differently (ask -> deny: 3)")
		assert.Contains(t, b.text("#stats-suggestions"), "rule `writes` asked 24 times in 30 days, approved 24 (100.0 %)")
		assert.Contains(t, b.text("#stats-suggestions"), "consider `allow` for paths under `docs/` (22 of the 24 approvals, no denial there)")
		b.do(chromedp.EmulateViewport(1280, 900))
		b.keepScreenshot("stats.png")

		// One rule, through the rule's link.
		b.do(chromedp.Click(chromedp.CSS(`#stats tbody[data-rule="shell-asks"] a`)), chromedp.WaitVisible(chromedp.CSS("#stats-no-suggestions")))
		assert.Contains(t, b.text("#stats-source"), "3 calls submitted in the last 30 days that rule shell-asks decided")
		assert.Equal(t, 0, evalJS[int](b, `document.querySelectorAll('#stats tbody[data-rule="writes"]').length`))
		b.do(chromedp.Click(chromedp.CSS(".signout button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	})

	t.Run("an approver is refused the page and not linked to it", func(t *testing.T) {
		b := b.in(t)
		signInAs(b, "token-alice")
		assert.Equal(t, 0, evalJS[int](b, `document.querySelectorAll('#nav-stats').length`))
		resp := b.response(chromedp.Navigate(b.base + "/stats"))
		assert.EqualValues(t, http.StatusForbidden, resp.Status)
		assert.Contains(t, b.text("#error"), "The approval statistics are for admins and auditors; alice holds a token with role approver.")
		assert.NotContains(t, b.text("main"), "write_file")
	})
}
