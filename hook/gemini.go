package hook

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/client"
)

// Gemini CLI's hook events (0.61.0): BeforeTool before a tool runs, which
// may deny it or rewrite its input; AfterTool with what it returned.
const (
	EventBeforeTool = "BeforeTool"
	EventAfterTool  = "AfterTool"
)

// Gemini CLI's events carry no ID of the tool use. The hook names each
// run it allows itself (a random run name, in the claim and in the
// session state, with a digest of the tool and the input that runs), and
// AfterTool finds its run by that digest: its tool_input is the input
// that ran, an approver's edit included.

// newGeminiRun names a run of a tool the hook is asked about.
func newGeminiRun() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "gm-run-" + hex.EncodeToString(b[:])
}

// inputDigest identifies what runs: the tool and its canonical arguments.
func inputDigest(tool string, args json.RawMessage) string {
	canon, err := canonicalArgs(args)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(append([]byte(tool+"\x00"), canon...))
	return hex.EncodeToString(sum[:16])
}

// geminiRunOf returns the run the hook allowed with this tool and input
// that no AfterTool has reported yet: the oldest, when the same tool use
// runs twice at once.
func geminiRunOf(st *sessionState, digest string) string {
	var run string
	var at time.Time
	for id, u := range st.Uses {
		if u.Input == digest && digest != "" && (run == "" || u.At.Before(at)) {
			run, at = id, u.At
		}
	}
	return run
}

// geminiOutput is what a BeforeTool hook prints: Gemini CLI blocks the
// tool on "deny" and tells the model the reason; on "allow" it goes on
// with its own approval settings, with hookSpecificOutput.tool_input as
// the tool's input when given; "ask" sends the tool use to its own
// confirmation prompt.
type geminiOutput struct {
	Decision           string          `json:"decision"`
	Reason             string          `json:"reason,omitempty"`
	SystemMessage      string          `json:"systemMessage,omitempty"`
	HookSpecificOutput *geminiSpecific `json:"hookSpecificOutput,omitempty"`
}

type geminiSpecific struct {
	HookEventName     string          `json:"hookEventName"`
	ToolInput         json.RawMessage `json:"tool_input,omitempty"`
	AdditionalContext string          `json:"additionalContext,omitempty"`
}

// geminiAnswer is the BeforeTool output of p.
func geminiAnswer(p permission) geminiOutput {
	out := geminiOutput{Decision: p.decision, Reason: p.reason}
	if p.decision == "allow" {
		// An allow's reason is for the person watching, not the model.
		out.Reason, out.SystemMessage = "", p.reason
	}
	if len(p.updatedInput) > 0 || p.context != "" {
		out.HookSpecificOutput = &geminiSpecific{HookEventName: EventBeforeTool, ToolInput: p.updatedInput, AdditionalContext: p.context}
	}
	return out
}

// geminiReport is the Report of an AfterTool event: Gemini CLI's
// tool_response is {llmContent, returnDisplay, error}, with error set
// when the tool failed (a shell command's non-zero exit included).
func geminiReport(response json.RawMessage) client.Report {
	var r struct {
		LLMContent    json.RawMessage `json:"llmContent"`
		ReturnDisplay json.RawMessage `json:"returnDisplay"`
		Error         *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(response, &r); err != nil {
		return client.Report{Unknown: fmt.Sprintf("Gemini CLI's AfterTool tool_response is not the object it sends (%v)", err)}
	}
	if r.Error != nil {
		msg := r.Error.Message
		if msg == "" {
			msg = "the tool failed"
		}
		if r.Error.Type != "" {
			msg += " (" + r.Error.Type + ")"
		}
		return client.Report{Error: abridge(msg, 4000)}
	}
	out, _ := json.Marshal(map[string]json.RawMessage{"llmContent": r.LLMContent, "returnDisplay": r.ReturnDisplay})
	return client.Report{Output: boundedOutput(out)}
}
