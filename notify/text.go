package notify

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/visible"
)

// MaxArgsShown caps the arguments a message shows; the inbox shows them
// whole.
const MaxArgsShown = 600

// Abridge renders JSON arguments on one line, cut to at most max bytes (on
// a rune boundary, ending in an ellipsis).
func Abridge(raw json.RawMessage, max int) string {
	return cut(compactArgs(raw), max)
}

// compactArgs is JSON arguments on one line; none are "{}".
func compactArgs(raw json.RawMessage) string {
	var b bytes.Buffer
	s := string(raw)
	if json.Compact(&b, raw) == nil {
		s = b.String()
	}
	if s == "" {
		s = "{}"
	}
	return s
}

// argsText is a call's arguments for a person: on one line, what a screen
// would obey or hide escaped (JSON's way, so it reads as the same JSON),
// cut at MaxArgsShown characters with a mark that says how many more
// there are.
func argsText(raw json.RawMessage) string {
	return visible.Cut(visible.JSON(compactArgs(raw)), MaxArgsShown)
}

// headline says what a notice is about, e.g. "Approval needed: shell".
func headline(n activities.Notice) string {
	switch n.Kind {
	case activities.NoticeReminder:
		return "Reminder, still waiting: " + n.Call.Tool
	case activities.NoticeEscalation:
		return "Escalated to " + strings.Join(n.Groups, ", ") + ": " + n.Call.Tool
	}
	return "Approval needed: " + n.Call.Tool
}

// kindNote explains a reminder or an escalation; empty for a first notice.
func kindNote(n activities.Notice) string {
	switch n.Kind {
	case activities.NoticeReminder:
		if len(n.Groups) > 0 {
			return "Reminder: this call still waits for a decision from " + strings.Join(n.Groups, ", ") + "."
		}
		return "Reminder: this call still waits for a decision."
	case activities.NoticeEscalation:
		return "Escalation: nobody decided in time, so " + strings.Join(n.Groups, ", ") + " may now decide this call too."
	}
	return ""
}

// outcomeText says how a call ended: "approved by alice via slack".
func outcomeText(o activities.Outcome) string {
	if o.Event == activities.EventTimedOut {
		return "timed out: nobody decided in time"
	}
	what := o.Decision
	if k, err := policy.ParseDecisionKind(o.Decision); err == nil {
		what = strings.ReplaceAll(k.String(), "_", " ")
	}
	if what == "" {
		what = "decided"
	}
	if o.DecidedBy != "" {
		what += " by " + o.DecidedBy
	}
	if o.Channel != "" && o.Channel != o.DecidedBy {
		what += " via " + o.Channel
	}
	return what
}

// utc formats an instant for messages.
func utc(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// callPageURL is the inbox page of a call, or "" without a public URL.
func callPageURL(publicURL, callID string) string {
	if publicURL == "" {
		return ""
	}
	return strings.TrimRight(publicURL, "/") + "/calls/" + url.PathEscape(callID)
}

// previewText is a preview's text for a message, what a screen would obey
// or hide escaped, saying when it was cut.
func previewText(p *policy.Preview) string {
	if p == nil {
		return ""
	}
	if p.Truncated {
		return visible.Text(p.Text) + "\n… (cut short; the inbox has the arguments whole)"
	}
	return visible.Text(p.Text)
}
