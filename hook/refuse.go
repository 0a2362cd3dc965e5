package hook

import (
	"encoding/json"
	"io"
	"time"
)

// refuseReadLimit bounds how long Refuse reads stdin: an agent closes it
// after the event, but a person may have typed the command in a terminal.
const refuseReadLimit = 2 * time.Second

// Refuse answers a hook event for a hook command that cannot run (no or an
// unknown agent name): for a PreToolUse event on stdin it prints the deny
// both Claude Code and Codex read (for Gemini CLI's BeforeTool, its own),
// with reason. The caller then exits 2
// with the reason on stderr, which blocks the tool in both agents even
// where stdout is not read.
func Refuse(stdin io.Reader, stdout io.Writer, reason string) {
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(stdin, MaxEventBytes+1))
		read <- b
	}()
	var raw []byte
	select {
	case raw = <-read:
	case <-time.After(refuseReadLimit):
		return
	}
	if answer := Denial(raw, reason); answer != nil {
		_, _ = stdout.Write(answer)
	}
}

// Denial is the answer that blocks the tool of the PreToolUse event raw,
// with reason; nil when raw is no PreToolUse event (nothing to block).
func Denial(raw []byte, reason string) []byte {
	ev, err := ParseEvent(raw)
	if err != nil {
		return nil
	}
	var answer any
	switch ev.HookEventName {
	case EventPreToolUse:
		answer = preToolUseOutput{HookSpecificOutput: preToolUseDecision{
			HookEventName: EventPreToolUse, PermissionDecision: "deny", PermissionDecisionReason: reason,
		}}
	case EventBeforeTool:
		answer = geminiAnswer(permission{decision: "deny", reason: reason})
	default:
		return nil
	}
	b, err := json.Marshal(answer)
	if err != nil {
		return nil
	}
	return append(b, '\n')
}
