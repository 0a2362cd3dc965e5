package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/workflows"
)

// post reports a tool's outcome (PostToolUse, PostToolUseFailure, PermissionDenied) as the
// output of the call that allowed its tool_use_id. It never blocks
// anything: the tool already ran. What goes wrong is logged on stderr; a
// call that gets no report ends unknown after its report timeout.
func (c Config) post(ctx context.Context, ev Event) {
	log := c.Logger.With(zap.String("event", ev.HookEventName), zap.String("session", ev.SessionID), zap.String("tool", ev.ToolName), zap.String("toolUseID", ev.ToolUseID))
	gemini := c.Dialect == GeminiCLI && ev.ToolUseID == ""
	if (ev.ToolUseID == "" && !gemini) || client.ValidateID("session_id", ev.SessionID) != nil {
		log.Warn("hook event without a tool_use_id or a valid session_id; nothing to report")
		return
	}
	store := stateStore{dir: c.StateDir}
	var u use
	if err := store.update(ev.SessionID, func(st *sessionState) error {
		if gemini {
			ev.ToolUseID = geminiRunOf(st, inputDigest(ev.ToolName, ev.ToolInput))
		}
		u = st.Uses[ev.ToolUseID]
		if u.User && ev.HookEventName != EventPermissionDenied {
			// Kept even if toolgate cannot be told now: the turn's end
			// records the approval then, not a refusal.
			u.Ran = true
			st.Uses[ev.ToolUseID] = u
		}
		return nil
	}); err != nil {
		log.Warn("cannot read the hook state; the call will end unknown", zap.Error(err))
		return
	}
	callID := u.CallID
	if callID == "" {
		log.Info("no toolgate call allowed this tool use; nothing to report")
		return
	}
	log = log.With(zap.String("callID", callID))
	rep := reportOf(c.Dialect, ev)
	// Only the run that took the approval reports it: a tool_use_id the
	// state file maps to another call is refused by toolgate.
	rep.Run = runName(ev)
	rctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	agent, closeFn, err := c.Connect(rctx)
	if err != nil {
		log.Warn("toolgate was not told the tool's outcome; the call will end unknown after its report timeout", zap.Error(connectFailure(err)))
		return
	}
	defer closeFn()
	if u.User {
		if ev.HookEventName == EventPermissionDenied {
			// Refused without asking anyone (auto mode, a headless run):
			// the tool did not run, so the call is withdrawn.
			if _, err := agent.CancelOwn(rctx, callID, c.Requester); err != nil {
				log.Info("the prompt's call could not be withdrawn", zap.Error(err))
			}
			c.forgetUse(log, store, ev)
			return
		}
		if !c.userApproved(rctx, agent, log, callID, rep.Run, ev.ToolInput, rep) {
			c.forgetUse(log, store, ev)
			return
		}
	}
	if why, ok := c.ranOtherInput(rctx, agent, log, callID, ev); !ok {
		return // the approved arguments could not be read: the call ends unknown at its report timeout
	} else if why != "" {
		log.Warn("the tool ran with other input than the call's approved arguments; the call ends unknown", zap.String("why", why))
		rep = client.Report{Unknown: why, Run: rep.Run}
	}
	if err := agent.Report(rctx, callID, c.Requester, rep); err != nil {
		log.Warn("report refused or failed; the call will end unknown after its report timeout", zap.Error(err))
		return
	}
	c.forgetUse(log, store, ev)
	log.Info("reported the tool's outcome", zap.Bool("failed", rep.Error != ""))
}

// ranOtherInput compares what the event says ran (tool_name and
// tool_input, as JSON values) with the tool and the arguments the call
// approved: an approver's edit made those the edited ones. why, when not
// empty, says how they differ: the event's outcome is then not the
// approved call's. ok is false when the call cannot be read.
// PermissionDenied says the tool did not run: nothing to compare.
func (c Config) ranOtherInput(ctx context.Context, agent client.Agent, log *zap.Logger, callID string, ev Event) (why string, ok bool) {
	if ev.HookEventName == EventPermissionDenied {
		return "", true
	}
	st, err := agent.Status(ctx, callID)
	if err != nil {
		log.Warn("cannot read the call's approved arguments; not reported, the call will end unknown after its report timeout", zap.Error(err))
		return "", false
	}
	if st.Result != nil || st.State == nil || st.State.Status != workflows.StatusApproved {
		return "", true // not waiting for a report: toolgate refuses it and says why
	}
	approved := st.State.Call
	ran, err := canonicalArgs(ev.ToolInput)
	switch {
	case err != nil:
		return fmt.Sprintf("%s's tool_input %v, so it cannot be the run of the approved arguments %s; what the tool returned is not recorded as this call's outcome",
			ev.HookEventName, err, abridge(string(approved.Args), 2000)), true
	case ev.ToolName != approved.Tool:
		return fmt.Sprintf("%s says tool %q ran, but call %s approved tool %q; what it returned is not recorded as this call's outcome",
			ev.HookEventName, abridge(ev.ToolName, 200), callID, approved.Tool), true
	case !sameArgs(ran, approved.Args):
		return fmt.Sprintf("%s says the tool ran with %s, not with the approved arguments %s; what it returned is not recorded as this call's outcome",
			ev.HookEventName, abridge(string(ran), 2000), abridge(string(approved.Args), 2000)), true
	}
	return "", true
}

// forgetUse drops the tool use from the session state.
func (c Config) forgetUse(log *zap.Logger, store stateStore, ev Event) {
	if err := store.update(ev.SessionID, func(st *sessionState) error {
		delete(st.Uses, ev.ToolUseID)
		return nil
	}); err != nil {
		log.Warn("the hook state was not updated", zap.Error(err))
	}
}

// reportOf is the Report of a tool's outcome: its error when the event
// says it failed, unknown when it cannot tell, else its response as the
// output.
func reportOf(d Dialect, ev Event) client.Report {
	if d == GeminiCLI {
		return geminiReport(ev.ToolResponse)
	}
	if ev.HookEventName == EventPermissionDenied {
		msg := "it did not run: Claude Code's auto mode refused it after toolgate allowed it"
		if ev.Reason != "" {
			msg += " (" + abridge(ev.Reason, 2000) + ")"
		}
		return client.Report{Error: msg}
	}
	if ev.HookEventName == EventPostToolUseFailure {
		msg := jsonText(ev.Error)
		if msg == "" {
			msg = "the tool failed"
		}
		return client.Report{Error: msg}
	}
	if msg, failed := responseFailure(ev.ToolResponse); failed {
		return client.Report{Error: msg}
	}
	rep := client.Report{Output: boundedOutput(ev.ToolResponse)}
	if d == Codex {
		return codexOutcome(ev.ToolName, ev.ToolResponse, rep)
	}
	return rep
}

// codexUnsure is why a Codex shell command ends unknown.
const codexUnsure = "Codex reports a shell command's output without its exit status"

// codexOutcome reads what Codex's PostToolUse says of a run. It sends
// none for a tool that failed (a failed patch, an MCP error): those calls
// end unknown at their report timeout. Bash's response is the command's
// output alone, so whether it succeeded is unknown; apply_patch's is a
// text that starts with its exit code.
func codexOutcome(tool string, response json.RawMessage, rep client.Report) client.Report {
	var text string
	if json.Unmarshal(response, &text) != nil {
		return rep // an object: an MCP result (an error would say isError)
	}
	switch tool {
	case "Bash":
		rep.Unknown = codexUnsure
	case "apply_patch":
		if m := codexExitCode.FindStringSubmatch(text); m != nil && m[1] != "0" {
			return client.Report{Error: abridge(fmt.Sprintf("apply_patch failed with exit code %s: %s", m[1], text), 4000)}
		}
	}
	return rep
}

// codexExitCode is the first line of a Codex exec or apply_patch output.
var codexExitCode = regexp.MustCompile(`^Exit code: (-?\d+)\n`)

// boundedOutput is a tool response as a report's output: null when empty,
// a summary when over maxReportBytes.
func boundedOutput(out json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(out)) == 0 {
		out = json.RawMessage("null")
	}
	if len(out) > maxReportBytes {
		cut, _ := json.Marshal(map[string]any{
			"truncated": true,
			"bytes":     len(out),
			"head":      strings.ToValidUTF8(string(out[:maxReportBytes/2]), ""),
		})
		out = cut
	}
	return out
}

// responseFailure reads the failure a tool response states of itself:
// {"success": false}, {"is_error": true} or {"interrupted": true} (Claude
// Code's tools, MCP results).
func responseFailure(resp json.RawMessage) (string, bool) {
	var r struct {
		Success     *bool           `json:"success"`
		IsError     bool            `json:"is_error"`
		IsErrorMCP  bool            `json:"isError"`
		Interrupted bool            `json:"interrupted"`
		Error       json.RawMessage `json:"error"`
	}
	if json.Unmarshal(resp, &r) != nil {
		return "", false
	}
	failed := (r.Success != nil && !*r.Success) || r.IsError || r.IsErrorMCP || r.Interrupted
	if !failed {
		return "", false
	}
	if msg := jsonText(r.Error); msg != "" {
		return msg, true
	}
	if r.Interrupted {
		return "the tool was interrupted", true
	}
	return "the tool reported a failure: " + abridge(string(resp), 2000), true
}

// jsonText is a JSON string's text, or the JSON itself for other values.
func jsonText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func abridge(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:n], ""), len(s))
}
