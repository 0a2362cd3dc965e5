// Command toolgate-hook is the fast command hook for Claude Code, Codex
// and Gemini CLI: it forwards the hook event on stdin to toolgate serve or
// dev (POST /hooks/claude-code, /hooks/codex or /hooks/gemini-cli, the
// endpoints Claude Code's HTTP hooks use) and prints toolgate's answer. toolgate itself decides,
// claims and keeps the hook's state, with the semantics of
// 'toolgate hook'; this binary only carries the event, so it starts in
// milliseconds where the whole toolgate, embedded Temporal server
// included, takes a hundred. It imports no more than net/http on purpose.
//
// Any failure to get an answer blocks a PreToolUse or BeforeTool (exit 2,
// the reason on stderr, which the agents read as a blocked tool); for the other
// events, which report what already happened, it is logged and the
// agent goes on.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// maxEventBytes is hook.MaxEventBytes (not imported: the hook package
// brings the Temporal SDK, whose start-up this binary exists to avoid).
const maxEventBytes = 16 << 20

// defaultTimeout is below the 600 s the printed settings give the hook,
// and above the server's longest answer (hook.DefaultWait plus slack).
const defaultTimeout = 590 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate-hook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := fs.String("api", os.Getenv("TOOLGATE_API"), "toolgate's URL (env TOOLGATE_API), e.g. http://127.0.0.1:7700")
	timeout := fs.Duration("timeout", defaultTimeout, "how long to wait for toolgate's answer; keep it below the hook's timeout")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: toolgate-hook claude-code|codex|gemini-cli [--api URL] [--timeout D] < event\n"+
			"Forwards a hook event to toolgate with the agent token in TOOLGATE_TOKEN and prints the answer.\n")
		fs.PrintDefaults()
	}
	if len(args) == 0 || !knownAgents[args[0]] {
		problem := "no agent named"
		if len(args) > 0 {
			problem = fmt.Sprintf("unknown agent %q", args[0])
		}
		fmt.Fprintf(stderr, "toolgate-hook: %s: the hook command is 'toolgate-hook claude-code', 'toolgate-hook codex' or 'toolgate-hook gemini-cli', so this tool use is blocked\n", problem)
		return 2
	}
	agent := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	raw, err := io.ReadAll(io.LimitReader(stdin, maxEventBytes+1))
	if err != nil {
		return fail(stderr, true, "read the hook event: "+err.Error())
	}
	guards := guardsTool(raw)
	switch {
	case *api == "":
		return fail(stderr, guards, "toolgate's URL is missing: pass --api URL or set TOOLGATE_API")
	case os.Getenv("TOOLGATE_TOKEN") == "":
		return fail(stderr, guards, "the agent token is missing: set TOOLGATE_TOKEN where the agent runs")
	}
	answer, err := forward(strings.TrimSuffix(*api, "/")+"/hooks/"+agent, os.Getenv("TOOLGATE_TOKEN"), raw, *timeout)
	if err != nil {
		return fail(stderr, guards, err.Error())
	}
	if _, err := stdout.Write(answer); err != nil {
		return fail(stderr, guards, "write the answer: "+err.Error())
	}
	return 0
}

// forward posts the event and returns toolgate's answer, which must come
// with status 200: anything else (a proxy's error page, a 5xx) is a
// failure, not an answer.
func forward(url, token string, event []byte, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(event))
	if err != nil {
		return nil, fmt.Errorf("toolgate's URL %q: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	// The agent's trace, passed on as is: toolgate checks it.
	if tp := os.Getenv("TRACEPARENT"); tp != "" {
		req.Header.Set("traceparent", tp)
		if ts := os.Getenv("TRACESTATE"); ts != "" {
			req.Header.Set("tracestate", ts)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("toolgate is unreachable: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxEventBytes))
	if err != nil {
		return nil, fmt.Errorf("read toolgate's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("toolgate answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// knownAgents are the agents toolgate answers at /hooks/NAME.
var knownAgents = map[string]bool{"claude-code": true, "codex": true, "gemini-cli": true}

// guardsTool reports whether a failure on this event must block: a
// PreToolUse (Gemini CLI's BeforeTool), or an event too broken to tell.
func guardsTool(raw []byte) bool {
	var ev struct {
		HookEventName string `json:"hook_event_name"`
	}
	if json.Unmarshal(raw, &ev) != nil {
		return true
	}
	return ev.HookEventName == "PreToolUse" || ev.HookEventName == "BeforeTool" || ev.HookEventName == ""
}

// fail reports why toolgate gave no answer: for an event that guards a
// tool, exit 2 blocks it (the agents show the reason); for a
// report, the agent goes on.
func fail(stderr io.Writer, guards bool, why string) int {
	if guards {
		fmt.Fprintf(stderr, "toolgate-hook: %s, so this tool use is blocked\n", why)
		return 2
	}
	fmt.Fprintf(stderr, "toolgate-hook: %s; the report of this event is lost\n", why)
	return 0
}
