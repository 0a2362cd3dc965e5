package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromiumPath is Debian's Chromium; .ci/run installs it.
const chromiumPath = "/usr/bin/chromium"

// screenshotsEnv names a directory to copy the README's inbox screenshots
// into. Unset, the test runs the same but writes nothing there.
const screenshotsEnv = "TOOLGATE_SCREENSHOTS_DIR"

// TestInbox drives the web inbox of the real `toolgate dev` with headless
// Chromium, while calls are submitted and decided through the API.
func TestInbox(t *testing.T) {
	begin := time.Now()
	b := newBrowser(t)
	d, as := newAPIDev(t)
	agent, root := as("agent-1"), as("root")
	b.base = "http://" + d.httpAddr
	t.Cleanup(func() { t.Logf("inbox browser test took %s", time.Since(begin).Round(time.Millisecond)) })

	t.Run("pages need a sign-in and agents cannot sign in", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Navigate(b.base + "/calls/anything"))
		assert.Equal(t, b.base+"/login?next=%2Fcalls%2Fanything", b.location())
		b.do(chromedp.SendKeys(chromedp.CSS("#token"), "token-agent-1"), chromedp.Click(chromedp.CSS("#login button")))
		b.waitJS(`document.querySelector("#error")?.textContent.includes("only approver, admin and auditor tokens may sign in")`, "the agent's refusal")
	})

	t.Run("sign in", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Navigate(b.base+"/login"), chromedp.SendKeys(chromedp.CSS("#token"), "token-bob"), chromedp.Click(chromedp.CSS("#login button")))
		b.do(chromedp.WaitVisible(chromedp.CSS("#pending-empty")))
		c := b.sessionCookie()
		assert.True(t, c.HTTPOnly)
		assert.Equal(t, network.CookieSameSiteStrict, c.SameSite)
		assert.NotContains(t, c.Value, "token-bob")
		assert.Equal(t, "", evalJS[string](b, `document.cookie`), "the page script cannot read the session cookie")
	})

	t.Run("a waiting call shows up without a reload", func(t *testing.T) {
		b := b.in(t)
		b.mark()
		submitWaiting(t, agent, "inbox", "ib-approve")
		b.waitJS(`!!document.querySelector('#pending a[href="/calls/ib-approve"]')`, "ib-approve in the list")
		require.NoError(t, os.MkdirAll(filepath.Join(d.workspace, "notes"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d.workspace, "notes", "todo.txt"), []byte("ship it tomorrow\nreview first\n"), 0o644))
		submitWrite(t, agent, "demo", "ib-write")
		b.waitJS(`!!document.querySelector('#pending a[href="/calls/ib-write"]')`, "ib-write in the list")
		b.assertNotReloaded()
		assert.Equal(t, "2", b.text("#pending-count"))
		b.keepScreenshot("inbox-list.png")
	})

	t.Run("approve", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Click(chromedp.CSS(`#pending a[href="/calls/ib-approve"]`)), chromedp.WaitVisible(chromedp.CSS("#decide")))
		assert.Contains(t, b.text("#args"), `"command": "echo ib-approve"`, "pretty-printed arguments")
		b.do(chromedp.Click(chromedp.CSS(`#decide button[value="approve"]`)))
		b.waitJS(`document.querySelector("#decided")?.textContent.includes("decided: approved by bob via inbox")`, "the decision on the call page")
		r := agent.do("GET", "/v1/calls/ib-approve?wait=30s", nil)
		assert.Equal(t, "ok", r.body["status"], r.raw)
		assert.Equal(t, "bob", r.body["decided_by"])
		assert.Equal(t, "inbox", r.body["channel"])
	})

	t.Run("deny with a reason", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Navigate(b.base+"/calls/ib-write"), chromedp.WaitVisible(chromedp.CSS("#decide")))
		// What the write changes, as a highlighted diff above the arguments.
		assert.Equal(t, "-ship it tomorrow", b.text("#preview .del"))
		assert.Equal(t, "+ship it", b.text("#preview .add"))
		assert.Equal(t, 2, evalJS[int](b, `document.querySelectorAll("#preview .del").length`))
		assert.Equal(t, "rgb(230, 244, 234)", evalJS[string](b, `getComputedStyle(document.querySelector("#preview .add")).backgroundColor`), "added lines are highlighted")
		b.keepScreenshot("inbox-call.png")
		b.do(chromedp.SendKeys(chromedp.CSS("#reason"), "not on a Friday, please"), chromedp.Click(chromedp.CSS(`#decide button[value="deny"]`)))
		b.waitJS(`document.querySelector("#decided")?.textContent.includes("by bob via inbox")`, "the denial on the call page")
		r := agent.do("GET", "/v1/calls/ib-write?wait=30s", nil)
		assert.Equal(t, "denied", r.body["status"], r.raw)
		assert.Equal(t, "not on a Friday, please", r.body["reason"])
		assert.Equal(t, "inbox", r.body["channel"])
	})

	t.Run("approve edited arguments", func(t *testing.T) {
		b := b.in(t)
		submitWaiting(t, agent, "inbox", "ib-edit")
		b.do(chromedp.Navigate(b.base+"/calls/ib-edit"), chromedp.Click(chromedp.CSS("details.edit summary")),
			chromedp.SetValue(chromedp.CSS("#edited-args"), `{"command": "echo edited in the inbox"}`),
			chromedp.Click(chromedp.CSS(`#decide button[value="approve_edited"]`)))
		b.waitJS(`document.querySelector("#decided")?.textContent.includes("by bob via inbox")`, "the decision on the call page")
		r := agent.do("GET", "/v1/calls/ib-edit?wait=30s", nil)
		assert.Equal(t, "ok", r.body["status"], r.raw)
		assert.Equal(t, map[string]any{"command": "echo edited in the inbox"}, r.body["args"])
		assert.Equal(t, map[string]any{"command": "echo ib-edit"}, r.body["original_args"])
	})

	t.Run("invalid edited arguments are refused in the page", func(t *testing.T) {
		b := b.in(t)
		submitWaiting(t, agent, "inbox", "ib-bad")
		b.do(chromedp.Navigate(b.base+"/calls/ib-bad"), chromedp.Click(chromedp.CSS("details.edit summary")))
		b.mark()
		for text, want := range map[string]string{`{"command": "echo`: "not valid JSON", `["echo"]`: "must be a JSON object"} {
			b.do(chromedp.SetValue(chromedp.CSS("#edited-args"), text), chromedp.Click(chromedp.CSS(`#decide button[value="approve_edited"]`)),
				chromedp.WaitVisible(chromedp.CSS("#args-error")))
			assert.Contains(t, b.text("#args-error"), want)
		}
		b.assertNotReloaded()
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/ib-bad", nil).body["status"], "nothing was sent")
	})

	t.Run("a decision made elsewhere shows up, and a stale button gets the 409", func(t *testing.T) {
		b := b.in(t)
		submitWaiting(t, agent, "inbox", "ib-race")
		b.do(chromedp.Navigate(b.base+"/calls/ib-race"), chromedp.WaitVisible(chromedp.CSS("#decide")))
		b.mark()
		r := root.do("POST", "/v1/calls/ib-race/decision", map[string]any{"decision": "approve"})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		b.waitJS(`document.querySelector("#decided").textContent === "decided: approved by root via api"`, "the API's decision on the open page")
		b.waitJS(`[...document.querySelectorAll("#decide button")].every(b => b.disabled)`, "disabled buttons")
		b.assertNotReloaded()

		// A tab whose poll has not caught up yet still has live buttons.
		evalJS[bool](b, `document.querySelectorAll("#decide button").forEach(b => b.disabled = false), true`)
		resp := b.response(chromedp.Click(chromedp.CSS(`#decide button[value="deny"]`)))
		assert.Equal(t, int64(http.StatusConflict), resp.Status)
		assert.Contains(t, b.text("#error"), "call ib-race was already decided: approved by root via api at")
		assert.Contains(t, b.text("#decided"), "decided: approved by root via api", "the page, not an error page")
	})

	t.Run("forged posts are refused", func(t *testing.T) {
		b := b.in(t)
		submitWaiting(t, agent, "inbox", "ib-forged")
		b.do(chromedp.Navigate(b.base+"/calls/ib-forged"), chromedp.WaitVisible(chromedp.CSS("#decide")))

		status := evalJS[int](b, `fetch("/calls/ib-forged/decision", {method: "POST", body: new URLSearchParams({decision: "approve"})}).then(r => r.status)`, chromedp.EvalAwaitPromise)
		assert.Equal(t, http.StatusForbidden, status, "the page's own origin, without the csrf field")

		cookie := b.sessionCookie()
		post := func(form url.Values) (int, string) {
			req, err := http.NewRequest("POST", b.base+"/calls/ib-forged/decision", strings.NewReader(form.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		code, body := post(url.Values{"decision": {"approve"}})
		assert.Equal(t, http.StatusForbidden, code)
		assert.Contains(t, body, "CSRF token is missing or wrong); nothing was done")
		code, _ = post(url.Values{"decision": {"approve"}, "csrf": {"guessed"}})
		assert.Equal(t, http.StatusForbidden, code)

		// With the page's token, the server still checks edited arguments.
		csrf := evalJS[string](b, `document.querySelector('#decide input[name="csrf"]').value`)
		code, body = post(url.Values{"decision": {"approve_edited"}, "args": {`["rm", "-rf"]`}, "csrf": {csrf}})
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Contains(t, body, "edited arguments must be a JSON object")
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/ib-forged", nil).body["status"], "nothing was decided")
	})

	t.Run("session page: sticky decision and revoke", func(t *testing.T) {
		b := b.in(t)
		submitWaiting(t, agent, "inbox-sticky", "ib-sticky")
		b.do(chromedp.Navigate(b.base+"/calls/ib-sticky"), chromedp.Click(chromedp.CSS(`#decide button[value="approve_for_session"]`)))
		b.waitJS(`document.querySelector("#decided")?.textContent.includes("approved_for_session by bob via inbox")`, "the sticky approval")
		b.do(chromedp.Navigate(b.base + "/sessions/inbox-sticky"))
		b.waitJS(`document.querySelector("#sticky")?.textContent.includes("approved_for_session by bob via inbox")`, "the sticky decision")
		b.do(chromedp.Click(chromedp.CSS(`#sticky button`)))
		b.waitJS(`document.body.textContent.includes("Revoked the sticky decision for shell") && !document.querySelector("#sticky")`, "the revocation")
		r := as("bob").do("GET", "/v1/sessions/inbox-sticky", nil)
		assert.Empty(t, r.body["sticky"], r.raw)
	})

	t.Run("audit", func(t *testing.T) {
		b := b.in(t)
		row := `[...document.querySelectorAll("#audit tr")].find(tr => tr.textContent.includes("ib-approve"))`
		deadline := time.Now().Add(20 * time.Second)
		for { // the audit page does not refresh itself; visibility may lag a moment
			b.do(chromedp.Navigate(b.base + "/audit"))
			if evalJS[bool](b, "!!"+row) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		text := evalJS[string](b, row+`?.textContent ?? ""`)
		assert.Contains(t, text, "bob")
		assert.Contains(t, text, "inbox")
		assert.Contains(t, text, "ok")
	})

	t.Run("sign out", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Navigate(b.base+"/"), chromedp.Click(chromedp.CSS(".signout button")), chromedp.WaitVisible(chromedp.CSS("#token")))
		assert.Contains(t, b.text(".notice"), "You are signed out.")
		b.do(chromedp.Navigate(b.base + "/audit"))
		assert.True(t, strings.HasPrefix(b.location(), b.base+"/login"), b.location())
	})
}

// submitWrite submits a write_file call (it asks a person) and returns once
// it is pending.
func submitWrite(t *testing.T, agent apiClient, session, callID string) {
	t.Helper()
	r := agent.do("POST", "/v1/calls", map[string]any{
		"session": session, "tool": "write_file", "call_id": callID, "args": map[string]any{"path": "notes/todo.txt", "content": "ship it"},
	})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool {
		return agent.do("GET", "/v1/calls/"+callID, nil).body["status"] == "pending"
	}, 20*time.Second, 20*time.Millisecond)
}

// browserTab is one Chromium tab, reporting to a (sub)test's t.
type browserTab struct {
	t    *testing.T
	ctx  context.Context
	base string
}

// stepTimeout bounds one browser step; waits poll within it.
const stepTimeout = 30 * time.Second

// newBrowser starts headless Chromium with a fresh profile. A missing
// Chromium fails the test: the inbox must be tested, not skipped.
func newBrowser(t *testing.T) *browserTab {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the inbox browser test needs Chromium at %s (%v); install it with: apt-get update && apt-get install -y chromium", chromiumPath, err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1000, 800),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	// The first run starts the browser and binds it to ctx, which has no
	// timeout; later steps derive their timeouts from it.
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return &browserTab{t: t, ctx: ctx}
}

// in returns the tab reporting to t; when t fails, a screenshot is saved
// and its path logged.
func (b *browserTab) in(t *testing.T) *browserTab {
	c := *b
	c.t = t
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir, err := os.MkdirTemp("", "toolgate-inbox-failure")
		if err != nil {
			t.Logf("no screenshot: %v", err)
			return
		}
		path := filepath.Join(dir, "screenshot.png")
		if err := c.saveScreenshot(path); err != nil {
			t.Logf("no screenshot: %v", err)
			return
		}
		t.Logf("screenshot of the failure: %s (page %s)", path, c.location())
	})
	return &c
}

func (b *browserTab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

// response runs steps that load a page and returns the page's response.
func (b *browserTab) response(steps ...chromedp.Action[chromedp.Void]) *network.Response {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	require.NoError(b.t, err)
	return resp
}

func evalJS[T any](b *browserTab, expr string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	require.NoError(b.t, err, "evaluate %s", expr)
	return v
}

// waitJS waits until expr is true in the page. It polls from Go rather
// than with chromedp.Poll so that a page load in between (a form post and
// its redirect) only costs a turn.
func (b *browserTab) waitJS(expr, what string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	// Say where the page is: a wait that fails names what was shown.
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " :: " + (document.body ? document.body.innerText.slice(0, 400) : "")`))
	b.t.Fatalf("waited 20s for %s (%s); last error: %v; the page: %s", what, expr, lastErr, page)
}

// text is the visible text of the first element css matches, once one
// is there. It reads in one evaluation: the inbox re-renders its lists
// live, and a node looked up first and read after may be gone between.
func (b *browserTab) text(css string) string {
	b.t.Helper()
	sel, err := json.Marshal(css)
	require.NoError(b.t, err)
	find := "document.querySelector(" + string(sel) + ")"
	b.waitJS(find, "an element "+css)
	return evalJS[string](b, "("+find+"?.innerText ?? '')")
}

func (b *browserTab) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	return loc
}

// mark tags the current page; assertNotReloaded checks the tag is still
// there, i.e. what changed was changed by the page script.
func (b *browserTab) mark() { evalJS[bool](b, `window.toolgateTestMark = true`) }

func (b *browserTab) assertNotReloaded() {
	b.t.Helper()
	assert.True(b.t, evalJS[bool](b, `window.toolgateTestMark === true`), "the page was reloaded")
}

func (b *browserTab) sessionCookie() *network.Cookie {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base}})
	require.NoError(b.t, err)
	for _, c := range res.Cookies {
		if c.Name == "toolgate_session" {
			return c
		}
	}
	b.t.Fatalf("no toolgate_session cookie among %d cookies", len(res.Cookies))
	return nil
}

func (b *browserTab) saveScreenshot(path string) error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	return os.WriteFile(path, png, 0o644)
}

// keepScreenshot writes the page to $TOOLGATE_SCREENSHOTS_DIR/name when the
// variable is set (to refresh the README's pictures); otherwise it does
// nothing.
func (b *browserTab) keepScreenshot(name string) {
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return
	}
	require.NoError(b.t, b.saveScreenshot(filepath.Join(dir, name)))
	b.t.Logf("wrote %s", filepath.Join(dir, name))
}
