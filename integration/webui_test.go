package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// toolgateWithUI returns a toolgate binary with toolgate-ui beside it, as
// go install ./cmd/... leaves them: the other tests' toolgate has no UI
// beside it, so their devs start none.
func toolgateWithUI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"toolgate", "toolgate-sandbox"} {
		require.NoError(t, os.Link(filepath.Join(filepath.Dir(binary), name), filepath.Join(dir, name)))
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "toolgate-ui"), "github.com/toolgate/toolgate/cmd/toolgate-ui")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build toolgate-ui:\n%s", out)
	return filepath.Join(dir, "toolgate")
}

// TestWebUI: toolgate dev serves the Temporal Web UI beside itself. Headless
// Chromium lists a waiting call's workflow there; its input is ciphertext
// to a browser nobody signed in with, and decrypted once an approver signs
// in to the inbox (the UI's codec requests carry the inbox's cookie).
func TestWebUI(t *testing.T) {
	bin := toolgateWithUI(t)
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t)}
	d.httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tokens := writeTokensFile(t, t.TempDir())
	d.dev = startProgram(t, bin, "", nil, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", tokens, "--ui", "127.0.0.1:0")
	m := regexp.MustCompile(`Web UI\s+(http://127\.0\.0\.1:\d+)\s+\(read-only`).FindStringSubmatch(d.dev.out.String())
	require.NotNil(t, m, "the banner gives the UI's address:\n%s", d.dev.out.String())
	ui := m[1]

	agent := apiClient{t: t, base: "http://" + d.httpAddr, token: "token-agent-1"}
	const secret = "webui-secret-7f3a"
	r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "webui", "tool": "shell", "call_id": "webui-wait",
		"args": map[string]any{"command": "echo " + secret}})
	require.Equal(t, 202, r.status, r.raw)
	require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/webui-wait", nil).body["status"] == "pending" }, 20*time.Second, 50*time.Millisecond)

	b := newBrowser(t).in(t)
	openCall := func() {
		b.do(chromedp.Navigate(ui + "/namespaces/default/workflows"))
		b.waitJS(`document.body.innerText.includes("toolgate/call/webui-wait")`, "the waiting call's workflow in the UI's list")
		evalJS[bool](b, `(() => { const a = [...document.querySelectorAll("a")].find(a => a.textContent.includes("toolgate/call/webui-wait")); a.click(); return true })()`)
		b.waitJS(`location.pathname.includes("webui-wait") && document.body.innerText.includes("Input")`, "the call's workflow page")
	}

	t.Run("nobody signed in: the input stays ciphertext", func(t *testing.T) {
		b := b.in(t)
		openCall()
		b.waitJS(`document.body.innerText.includes("binary/encrypted") || document.body.innerText.includes("toolgate decodes payloads")`, "the undecoded input")
		time.Sleep(2 * time.Second) // give a decode the time it would take
		assert.NotContains(t, evalJS[string](b, `document.body.innerText`), secret)
		assert.True(t, evalJS[bool](b, `[...document.querySelectorAll("a")].some(a => a.href === "http://`+d.httpAddr+`/login")`), "the UI links the inbox's sign-in")
		b.keepScreenshot("webui-ciphertext.png")
	})

	t.Run("an approver signed in to the inbox reads the input decrypted", func(t *testing.T) {
		b := b.in(t)
		b.do(chromedp.Navigate("http://"+d.httpAddr+"/login"), chromedp.SendKeys(chromedp.CSS("#token"), "token-bob"), chromedp.Click(chromedp.CSS("#login button")))
		b.do(chromedp.WaitVisible(chromedp.CSS("#pending")))
		openCall()
		b.waitJS(`document.body.innerText.includes("`+secret+`")`, "the decrypted input")
		evalJS[bool](b, `(() => { [...document.querySelectorAll("h2, h3")].find(h => h.textContent.trim() === "Input")?.scrollIntoView(); return true })()`)
		b.keepScreenshot("webui-decoded.png")
	})

	t.Run("the UI is read-only", func(t *testing.T) {
		b := b.in(t)
		openCall()
		body := evalJS[string](b, `document.body.innerText`)
		assert.False(t, strings.Contains(body, "Terminate") || strings.Contains(body, "Send a Signal"), "no write action is offered")

		// Nor taken when asked for directly: the UI's own API refuses a
		// write from its page (CSRF token and all) and from anywhere else.
		terminate := "/api/v1/namespaces/default/workflows/" + url.PathEscape("toolgate/call/webui-wait") + "/terminate"
		status := evalJS[int](b, `fetch("`+terminate+`", {method: "POST", headers: {"Content-Type": "application/json",
			"X-CSRF-TOKEN": (document.cookie.match(/_csrf=([^;]+)/) || [])[1] || ""}, body: JSON.stringify({reason: "from the UI"})}).then(r => r.status)`, chromedp.EvalAwaitPromise)
		assert.Equal(t, http.StatusMethodNotAllowed, status, "the page's own request")
		resp, err := http.Post(ui+terminate, "application/json", strings.NewReader(`{"reason":"from elsewhere"}`))
		require.NoError(t, err)
		resp.Body.Close()
		assert.GreaterOrEqual(t, resp.StatusCode, 400, "a request from elsewhere")
		assert.Equal(t, "pending", agent.do("GET", "/v1/calls/webui-wait", nil).body["status"], "the call still waits")
	})
}
