package mcpgate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// Keys of the _meta the gateway adds to its results.
const (
	MetaCallID = "toolgate/callId"
	MetaStatus = "toolgate/status"
)

// resultFor turns a call's Result into what the model reads: the tool's
// output when it ran (an upstream MCP tool's result as the upstream gave
// it), else an error result that says why not.
func resultFor(r workflows.Result) *mcp.CallToolResult {
	var res *mcp.CallToolResult
	switch r.Status {
	case workflows.StatusOK:
		res = outputResult(r.Tool, r.Output)
		// A call a person let through (perhaps with other arguments) says
		// so; an auto-approved one is the tool's result as is.
		if byPerson(r) || r.Note != "" {
			res.Content = append(res.Content, &mcp.TextContent{Text: saidByToolgate(outcomeText(r))})
		}
	default:
		if up, ok := upstreamResult(r.Tool, r.Output); ok {
			up.IsError = true
			up.Content = append(up.Content, &mcp.TextContent{Text: saidByToolgate(outcomeText(r))})
			res = up
		} else {
			res = errorResult(outcomeText(r))
		}
	}
	res.Meta = mcp.Meta{MetaCallID: r.CallID, MetaStatus: string(r.Status)}
	return res
}

// byPerson reports whether someone other than the policy decided the call.
func byPerson(r workflows.Result) bool {
	return r.DecidedBy != "" && r.DecidedBy != "policy"
}

// outcomeText is the one sentence for the model: the Result's
// ModelMessage, or one built from its status and reason.
func outcomeText(r workflows.Result) string {
	if r.ModelMessage != "" {
		return r.ModelMessage
	}
	reason := strings.TrimSuffix(r.Reason, ".")
	var s string
	switch r.Status {
	case workflows.StatusOK:
		s = fmt.Sprintf("toolgate ran %s, decided by %s", r.Tool, r.DecidedBy)
	case workflows.StatusDenied, workflows.StatusTimedOut:
		s = fmt.Sprintf("%s was not run: %s", r.Tool, reason)
	case workflows.StatusUnknown:
		s = fmt.Sprintf("%s may or may not have run: %s", r.Tool, reason)
	default:
		s = fmt.Sprintf("%s failed: %s", r.Tool, reason)
	}
	if r.Note != "" {
		s += "; " + strings.TrimSuffix(r.Note, ".")
	}
	return s + "."
}

// outputResult is a tool's output as an MCP result: an upstream MCP tool's
// result as is; any other JSON as text, and as structured content when it
// is an object.
func outputResult(toolName string, out json.RawMessage) *mcp.CallToolResult {
	if up, ok := upstreamResult(toolName, out); ok {
		return up
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}
	if len(bytes.TrimSpace(out)) == 0 {
		res.Content = []mcp.Content{}
		return res
	}
	var obj map[string]any
	if json.Unmarshal(out, &obj) == nil && obj != nil {
		res.StructuredContent = json.RawMessage(out)
	}
	return res
}

// upstreamResult decodes the output of an upstream MCP tool
// (<server>__<tool>) as the MCP CallToolResult the upstream side records
// it as: an object whose "content" is a list of typed content blocks.
func upstreamResult(toolName string, out json.RawMessage) (*mcp.CallToolResult, bool) {
	if !strings.Contains(toolName, Separator) {
		return nil, false
	}
	var probe struct {
		Content []struct {
			Type string `json:"type"`
		} `json:"content"`
	}
	if json.Unmarshal(out, &probe) != nil || probe.Content == nil {
		return nil, false
	}
	for _, c := range probe.Content {
		if c.Type == "" {
			return nil, false
		}
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, false
	}
	if res.Content == nil {
		res.Content = []mcp.Content{}
	}
	return &res, true
}

// errorResult is an error the model reads.
func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// MetaRefused is the toolgate/status of a request refused before any call
// was made (no toolgate/callId then).
const MetaRefused = "refused"

// refusedResult is an error result for a request toolgate refused before
// it made a call.
func refusedResult(text string) *mcp.CallToolResult {
	res := errorResult(text)
	res.Meta = mcp.Meta{MetaStatus: MetaRefused}
	return res
}

// saidByToolgate marks a line toolgate adds to a tool's result, once.
func saidByToolgate(text string) string {
	if strings.HasPrefix(text, "toolgate ") {
		return text
	}
	return "toolgate: " + text
}

// Waiting is the structured content of a "still waiting" result: the
// call as `toolgate status` shows it, and how to get its result.
type Waiting struct {
	tgclient.Waiting
	// Next says how to get the result.
	Next string `json:"next"`
}

// waitingResult says the call is not decided yet, who was asked, and how
// to pick the result up. It is not an error: the call goes on.
func (h *handler) waitingResult(callID string, st tgclient.Status) *mcp.CallToolResult {
	w := Waiting{Waiting: tgclient.Waiting{CallID: callID, Status: workflows.StatusEvaluating}}
	if st.State != nil {
		w.Waiting = tgclient.WaitingView(st)
	}
	w.Next = fmt.Sprintf(`call %s with {"call_id": %q}`, WaitTool, callID)
	var b strings.Builder
	switch w.Status {
	case workflows.StatusPending:
		fmt.Fprintf(&b, "Call %s (%s) is waiting for %s to approve it", callID, w.Tool, asked(w.Groups))
		if w.Message != "" {
			fmt.Fprintf(&b, " (asked: %s)", strings.TrimSuffix(w.Message, "."))
		}
		if !w.Deadline.IsZero() {
			fmt.Fprintf(&b, ", until %s at the latest", w.Deadline.UTC().Format("2006-01-02 15:04 MST"))
		}
		b.WriteString(". Nothing has run yet.")
		if p := w.Preview; p != nil {
			fmt.Fprintf(&b, " The approver sees what it will change (%s):\n%s\n", p.Kind, strings.TrimRight(p.Text, "\n"))
		}
	case workflows.StatusRunning, workflows.StatusApproved:
		fmt.Fprintf(&b, "Call %s (%s) is approved and still running%s.", callID, w.Tool, progressText(w.Progress))
	default:
		fmt.Fprintf(&b, "Call %s (%s) is not decided yet.", callID, w.Tool)
	}
	fmt.Fprintf(&b, " It goes on without you: to get its result, call %s with {\"call_id\": %q} (it waits up to %s), or %s to check without waiting.",
		WaitTool, callID, h.g.opts.Wait.Round(time.Second), StatusTool)
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: b.String()}},
		StructuredContent: w,
		Meta:              mcp.Meta{MetaCallID: callID, MetaStatus: string(w.Status)},
	}
}

// asked names who decides a call asked of groups.
func asked(groups []string) string {
	switch len(groups) {
	case 0:
		return "an approver"
	case 1:
		return "an approver of group " + groups[0]
	}
	return "an approver of group " + strings.Join(groups[:len(groups)-1], ", ") + " or " + groups[len(groups)-1]
}

// shortHash is a short, stable, opaque name for s.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// progressText is a running tool's own progress, for a sentence: ", the
// tool says "copying rows" (3 of 5)"; "" when it reports none.
func progressText(p *tool.Progress) string {
	if p == nil {
		return ""
	}
	amount := fmt.Sprintf("%g", p.Progress)
	if p.Total > 0 {
		amount = fmt.Sprintf("%g of %g", p.Progress, p.Total)
	}
	if p.Message == "" {
		return ", the tool says " + amount
	}
	return fmt.Sprintf(", the tool says %q (%s)", p.Message, amount)
}
