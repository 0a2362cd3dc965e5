package hook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/toolgate/toolgate/client"
)

// Hook event names, as the agents send them in hook_event_name.
const (
	EventPreToolUse         = "PreToolUse"
	EventPostToolUse        = "PostToolUse"
	EventPostToolUseFailure = "PostToolUseFailure"
	// EventPermissionDenied: Claude Code's auto mode refused a tool use
	// after the hooks (toolgate's allow included); the tool did not run.
	EventPermissionDenied = "PermissionDenied"
	// The events that follow a turn: a call handed to Claude Code's
	// permission prompt that saw no PostToolUse by then was not approved
	// there.
	EventUserPromptSubmit = "UserPromptSubmit"
	EventStop             = "Stop"
	EventSessionEnd       = "SessionEnd"
)

// MaxEventBytes bounds a hook event (stdin, or an HTTP hook's body).
// Arguments over client.MaxArgsBytes are refused by toolgate anyway; a
// PostToolUse event carries the tool's response too.
const MaxEventBytes = 16 << 20

// Event is the JSON a coding agent writes on a command hook's stdin. Claude
// Code and Codex write snake_case names; VS Code Copilot writes sessionId
// and hookEventName in camelCase, so both spellings are read.
type Event struct {
	SessionID      string `json:"session_id"`
	HookEventName  string `json:"hook_event_name"`
	Cwd            string `json:"cwd,omitempty"`
	TranscriptPath string `json:"transcript_path,omitempty"`
	PermissionMode string `json:"permission_mode,omitempty"`
	ToolName       string `json:"tool_name"`
	// ToolInput is the tool's arguments: a JSON object.
	ToolInput json.RawMessage `json:"tool_input"`
	// ToolUseID names this attempt; PostToolUse carries the same ID.
	ToolUseID string `json:"tool_use_id"`
	// ToolResponse is the tool's output (PostToolUse).
	ToolResponse json.RawMessage `json:"tool_response,omitempty"`
	// Error is why the tool failed (PostToolUseFailure): usually a string.
	Error json.RawMessage `json:"error,omitempty"`
	// IsInterrupt: the user interrupted the tool (PostToolUseFailure).
	IsInterrupt bool `json:"is_interrupt,omitempty"`
	// Reason is why auto mode refused the tool (PermissionDenied).
	Reason string `json:"reason,omitempty"`

	// VS Code Copilot's spellings.
	SessionIDCamel     string `json:"sessionId,omitempty"`
	HookEventNameCamel string `json:"hookEventName,omitempty"`
}

// ParseEvent decodes a hook event. It refuses what is not one JSON object.
func ParseEvent(raw []byte) (Event, error) {
	var ev Event
	if len(raw) > MaxEventBytes {
		return ev, fmt.Errorf("the hook event is over %d bytes", MaxEventBytes)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return ev, errors.New("the hook event on stdin is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&ev); err != nil {
		return ev, fmt.Errorf("the hook event on stdin is not a JSON object: %v", err)
	}
	if dec.More() {
		return ev, errors.New("the hook event on stdin has data after its JSON object")
	}
	if ev.SessionID == "" {
		ev.SessionID = ev.SessionIDCamel
	}
	if ev.HookEventName == "" {
		ev.HookEventName = ev.HookEventNameCamel
	}
	return ev, nil
}

// checkPre checks that a PreToolUse event has what a call needs, and
// returns its arguments in canonical form.
func (ev Event) checkPre() (json.RawMessage, error) {
	if ev.SessionID == "" {
		return nil, errors.New("the hook event has no session_id")
	}
	if err := client.ValidateID("session_id", ev.SessionID); err != nil {
		return nil, fmt.Errorf("the hook event's %v", err)
	}
	if ev.ToolName == "" {
		return nil, errors.New("the hook event has no tool_name")
	}
	if err := client.ValidateID("tool_name", ev.ToolName); err != nil {
		return nil, fmt.Errorf("the hook event's %v", err)
	}
	args, err := canonicalArgs(ev.ToolInput)
	if err != nil {
		return nil, fmt.Errorf("the hook event's tool_input %v", err)
	}
	return args, nil
}

// canonicalArgs returns the tool input as canonical JSON
// (client.CanonicalJSON), refusing what is not an object. Missing or null
// input is {}.
func canonicalArgs(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return json.RawMessage("{}"), nil
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		if !json.Valid(raw) {
			return nil, errors.New("is not valid JSON")
		}
		return nil, errors.New("must be a JSON object")
	}
	args, err := client.CanonicalJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("is not valid JSON: %v", err)
	}
	return args, nil
}

// sameArgs reports whether two argument objects are the same JSON value.
func sameArgs(a, b json.RawMessage) bool {
	ca, errA := canonicalArgs(a)
	cb, errB := canonicalArgs(b)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

// attemptKey identifies an attempt by what it asks: the session, the tool
// and the canonical arguments, salted with the session state's salt.
func attemptKey(salt, session, tool string, args json.RawMessage) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(salt), []byte(session), []byte(tool), args} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// callIDFor derives the call ID of an attempt key's generation.
func callIDFor(prefix, key string, gen int) string {
	return prefix + key[:20] + "-" + strconv.Itoa(gen)
}
