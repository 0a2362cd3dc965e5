package hook

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// PreToolUseTimeout is the hook timeout, in seconds, that the printed
// settings give the PreToolUse hook: above DefaultWait plus answerSlack,
// so toolgate always answers before the agent gives up on it.
const PreToolUseTimeout = 600

// ClaudeCodeSettings is the hooks block of Claude Code's settings.json for
// command, the hook command line. The PreToolUse hook has "onFailure":
// "block": a hook that could not run (not on PATH, killed, timed out,
// unreadable output) blocks the tool instead of leaving it to Claude
// Code's own permissions. The other events report what already happened,
// so their failures block nothing; those of a turn's end (which record
// that a call handed to the permission prompt was not approved there)
// cannot even exit 2.
func ClaudeCodeSettings(command string) []byte {
	type handler struct {
		Type      string `json:"type"`
		Command   string `json:"command"`
		Timeout   int    `json:"timeout"`
		OnFailure string `json:"onFailure,omitempty"`
	}
	type matcher struct {
		Matcher string    `json:"matcher"`
		Hooks   []handler `json:"hooks"`
	}
	report := []matcher{{Matcher: "*", Hooks: []handler{{Type: "command", Command: command, Timeout: 60}}}}
	// The turn's end only records: whatever becomes of the command (a
	// typo exits 2), it must never block the prompt or keep the agent
	// from stopping.
	turnEnd := []matcher{{Matcher: "*", Hooks: []handler{{Type: "command", Command: command + " || true", Timeout: 60}}}}
	settings := map[string]map[string][]matcher{"hooks": {
		EventPreToolUse:         {{Matcher: "*", Hooks: []handler{{Type: "command", Command: command, Timeout: PreToolUseTimeout, OnFailure: "block"}}}},
		EventPostToolUse:        report,
		EventPostToolUseFailure: report,
		EventPermissionDenied:   report,
		// A call handed to the permission prompt that no tool run
		// followed by the turn's end was not approved there.
		EventUserPromptSubmit: turnEnd,
		EventStop:             turnEnd,
		EventSessionEnd:       turnEnd,
	}}
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("hook settings: %v", err)) // static shape: cannot fail
	}
	return append(b, '\n')
}

// TokenVariable is the environment variable the printed HTTP hook
// settings read the agent token from, where Claude Code runs.
const TokenVariable = "TOOLGATE_TOKEN"

// ClaudeCodeHTTPSettings is the part of Claude Code's settings.json that
// posts its hook events to toolgate at url (its /hooks/claude-code): the
// hooks block, with the agent token from $TOOLGATE_TOKEN in the
// Authorization header, and allowedHttpHookUrls admitting url. The
// PreToolUse hook has "onFailure": "block", as the command hook has: a
// hook that cannot be reached, times out, or answers a non-2xx status or
// anything but a hook's JSON blocks the tool (docs/coding-agents.md
// lists what the real Claude Code does in each case).
func ClaudeCodeHTTPSettings(url string) []byte {
	type handler struct {
		Type           string            `json:"type"`
		URL            string            `json:"url"`
		Headers        map[string]string `json:"headers"`
		AllowedEnvVars []string          `json:"allowedEnvVars"`
		Timeout        int               `json:"timeout"`
		OnFailure      string            `json:"onFailure,omitempty"`
	}
	type matcher struct {
		Matcher string    `json:"matcher"`
		Hooks   []handler `json:"hooks"`
	}
	on := func(timeout int, onFailure string) []matcher {
		return []matcher{{Matcher: "*", Hooks: []handler{{Type: "http", URL: url,
			Headers: map[string]string{"Authorization": "Bearer $" + TokenVariable}, AllowedEnvVars: []string{TokenVariable},
			Timeout: timeout, OnFailure: onFailure}}}}
	}
	report := on(60, "")
	settings := map[string]any{
		"allowedHttpHookUrls": []string{url},
		"hooks": map[string][]matcher{
			EventPreToolUse:         on(PreToolUseTimeout, "block"),
			EventPostToolUse:        report,
			EventPostToolUseFailure: report,
			EventPermissionDenied:   report,
			EventUserPromptSubmit:   report,
			EventStop:               report,
			EventSessionEnd:         report,
		},
	}
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("hook settings: %v", err)) // static shape: cannot fail
	}
	return append(b, '\n')
}

// CodexConfig is the hooks part of Codex's config.toml for command. Codex
// blocks a tool on a hook's deny, or on exit 2 with a reason on stderr;
// every other failure of a hook lets the tool run. So the PreToolUse line
// turns any failure of toolgate (not found, killed, an exit other than 0)
// into exit 2 with a reason.
func CodexConfig(command string) string {
	return fmt.Sprintf(`[[hooks.PreToolUse]]
[[hooks.PreToolUse.hooks]]
type = "command"
command = '%s'
timeout = %d

[[hooks.PostToolUse]]
[[hooks.PostToolUse.hooks]]
type = "command"
command = '%s'
timeout = 60
`, failClosed(command), PreToolUseTimeout, command)
}

// GeminiCLISettings is the hooks block of Gemini CLI's settings.json
// (~/.gemini/settings.json, or .gemini/settings.json in a project) for
// command. Gemini CLI (0.61.0) blocks a tool on a "deny" answer, or on
// exit 2 with the reason on stderr; any other exit, a crash, a command
// not found and a hook that times out are warnings, and the tool runs. So
// the BeforeTool line turns every failure of toolgate into exit 2, and the
// hook answers before its timeout (timeouts are in milliseconds there).
// The AfterTool line only reports: it must never replace what the tool
// returned, which a failing AfterTool hook does, so its failures are
// swallowed.
func GeminiCLISettings(command string) []byte {
	type handler struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		Command string `json:"command"`
		Timeout int    `json:"timeout"`
	}
	type matcher struct {
		Matcher string    `json:"matcher"`
		Hooks   []handler `json:"hooks"`
	}
	settings := map[string]map[string][]matcher{"hooks": {
		EventBeforeTool: {{Matcher: "*", Hooks: []handler{{Name: "toolgate", Type: "command", Command: failClosed(command), Timeout: PreToolUseTimeout * 1000}}}},
		EventAfterTool:  {{Matcher: "*", Hooks: []handler{{Name: "toolgate-report", Type: "command", Command: command + " || true", Timeout: 60 * 1000}}}},
	}}
	// The shell's >&2 stays readable: no \u003e\u0026 in the file a person edits.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(settings); err != nil {
		panic(fmt.Sprintf("hook settings: %v", err)) // static shape: cannot fail
	}
	return b.Bytes()
}

// failClosed wraps a hook command line so that the agent blocks the tool
// whenever the command fails: Codex and Gemini CLI block on exit 2 with a
// reason on stderr, and run the tool on any other failure.
func failClosed(command string) string {
	return command + ` || { s=$?; echo "toolgate hook failed (exit status $s), so the tool is blocked" >&2; exit 2; }`
}
