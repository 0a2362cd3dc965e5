// Package notifytest runs local peers for toolgate's notification
// channels, for tests without the internet: a fake Slack Web API that
// records what it is asked and answers like Slack, an in-process SMTP
// server that keeps the mail it receives, and a webhook receiver that
// checks signatures.
package notifytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// SlackCall is one request the fake Slack received.
type SlackCall struct {
	// Method is the Web API method (chat.postMessage, chat.update,
	// chat.postEphemeral, views.open), or "response_url" for a post to a
	// response URL (see FakeSlack.ResponseURL).
	Method string
	// Form holds a form-encoded request's fields.
	Form url.Values
	// JSON holds a JSON request's body.
	JSON map[string]any
	// Token is the bot token the request carried ("" for response URLs).
	Token string
	// Path is the request path (for response URLs, the name given to
	// ResponseURL).
	Path string
	// TS is the message timestamp the fake answered a chat.postMessage or
	// chat.postEphemeral with.
	TS string
}

// Blocks decodes the message blocks of a chat request.
func (c SlackCall) Blocks() []map[string]any {
	var raw any
	switch {
	case c.Form.Get("blocks") != "":
		_ = json.Unmarshal([]byte(c.Form.Get("blocks")), &raw)
	case c.JSON != nil:
		raw = c.JSON["blocks"]
	}
	list, _ := raw.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, b := range list {
		if m, ok := b.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// Text is the call's text field (form or JSON).
func (c SlackCall) Text() string {
	if t := c.Form.Get("text"); t != "" {
		return t
	}
	t, _ := c.JSON["text"].(string)
	return t
}

// AllText returns the message's text and every text in its blocks (JSON
// unescaped), one per line, for Contains checks.
func (c SlackCall) AllText() string {
	out := []string{c.Text()}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "text" {
					out = append(out, s)
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	for _, b := range c.Blocks() {
		walk(b)
	}
	return strings.Join(out, "\n")
}

// FakeSlack is a local Slack Web API.
type FakeSlack struct {
	// URL is the API base URL, with the trailing slash (SLACK_API_URL).
	URL string
	// Token is the bot token it accepts; others get invalid_auth.
	Token string
	// ChannelID is the channel ID it reports for posts to a channel name.
	ChannelID string

	srv   *httptest.Server
	mu    sync.Mutex
	calls []SlackCall
	seq   int
	fail  map[string]string
}

// NewFakeSlack starts a fake Slack that accepts token; it stops with the
// test.
func NewFakeSlack(t testing.TB, token string) *FakeSlack {
	f := &FakeSlack{Token: token, ChannelID: "C0APPROVALS", fail: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	f.URL = f.srv.URL + "/api/"
	return f
}

// ResponseURL returns a response_url served by the fake: posts to it are
// recorded with Method "response_url".
func (f *FakeSlack) ResponseURL(name string) string {
	return f.srv.URL + "/response/" + url.PathEscape(name)
}

// FailNext makes the next call of method answer {"ok":false,"error":code}.
func (f *FakeSlack) FailNext(method, code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = code
}

// Calls returns the calls of method received so far ("" for all).
func (f *FakeSlack) Calls(method string) []SlackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []SlackCall
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Responses returns the posts to ResponseURL(name).
func (f *FakeSlack) Responses(name string) []SlackCall {
	var out []SlackCall
	for _, c := range f.Calls("response_url") {
		if c.Path == name {
			out = append(out, c)
		}
	}
	return out
}

// WaitCalls waits until at least n calls of method arrived, and returns
// them; it fails the test after timeout.
func (f *FakeSlack) WaitCalls(t testing.TB, method string, n int, timeout time.Duration) []SlackCall {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		calls := f.Calls(method)
		if len(calls) >= n {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake Slack: want %d %s calls within %s, got %d; all calls: %v", n, method, timeout, len(calls), f.methods())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *FakeSlack) methods() []string {
	var out []string
	for _, c := range f.Calls("") {
		out = append(out, c.Method)
	}
	return out
}

func (f *FakeSlack) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	call := SlackCall{Path: r.URL.Path}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(body, &call.JSON)
	} else {
		call.Form, _ = url.ParseQuery(string(body))
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/response/"); ok {
		call.Method = "response_url"
		call.Path = name
		f.record(call)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
		return
	}
	call.Method = strings.TrimPrefix(r.URL.Path, "/api/")
	call.Token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if call.Token == "" && call.Form != nil {
		call.Token = call.Form.Get("token")
	}
	w.Header().Set("Content-Type", "application/json")
	if call.Token != f.Token {
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	f.mu.Lock()
	code, failing := f.fail[call.Method]
	delete(f.fail, call.Method)
	f.seq++
	ts := fmt.Sprintf("1700000000.%06d", f.seq)
	f.mu.Unlock()
	if failing {
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": code})
		return
	}
	if call.Method == "chat.postMessage" || call.Method == "chat.postEphemeral" {
		call.TS = ts
	}
	f.record(call)
	channel := call.Form.Get("channel")
	if strings.HasPrefix(channel, "#") || channel == "" {
		channel = f.ChannelID
	}
	var resp map[string]any
	switch call.Method {
	case "chat.postMessage":
		resp = map[string]any{"ok": true, "channel": channel, "ts": ts, "message": map[string]any{"type": "message", "text": call.Form.Get("text"), "ts": ts}}
	case "chat.update":
		resp = map[string]any{"ok": true, "channel": channel, "ts": call.Form.Get("ts"), "text": call.Form.Get("text")}
	case "chat.postEphemeral":
		resp = map[string]any{"ok": true, "message_ts": ts}
	case "views.open":
		resp = map[string]any{"ok": true, "view": map[string]any{"id": "V" + strings.ReplaceAll(ts, ".", "")}}
	default:
		resp = map[string]any{"ok": false, "error": "unknown_method"}
	}
	_ = json.NewEncoder(w).Encode(resp)
}

func (f *FakeSlack) record(c SlackCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}
