package workflows

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/policy"
)

// modelMessage is the one plain sentence an agent hands its model: what
// ran or why not, who decided, and what was changed.
// noReport: an agent-executed call that ended at its approval; edited: an
// approver edited the arguments.
func modelMessage(r Result, noReport, edited bool) string {
	var b strings.Builder
	switch r.Status {
	case StatusOK:
		switch {
		case r.Execution != policy.ExecutionAgent:
			fmt.Fprintf(&b, "toolgate ran %s", r.Tool)
		case noReport:
			fmt.Fprintf(&b, "%s is approved: run it yourself with the approved arguments", r.Tool)
		default:
			fmt.Fprintf(&b, "You ran %s and toolgate recorded its output", r.Tool)
		}
		b.WriteString(", " + approvedBy(r))
	case StatusDenied:
		fmt.Fprintf(&b, "%s was not run: %s", r.Tool, deniedBy(r))
	case StatusTimedOut:
		fmt.Fprintf(&b, "%s was not run: %s", r.Tool, strings.TrimSuffix(r.Reason, "."))
	case StatusError:
		if r.InvalidRequest || r.Decision == "" {
			fmt.Fprintf(&b, "%s was not run: %s", r.Tool, strings.TrimSuffix(r.Reason, "."))
		} else {
			fmt.Fprintf(&b, "%s failed (%s): %s", r.Tool, approvedBy(r), strings.TrimSuffix(r.Reason, "."))
		}
	case StatusUnknown:
		fmt.Fprintf(&b, "%s may or may not have run: %s", r.Tool, strings.TrimSuffix(r.Reason, "."))
	default:
		return ""
	}
	if edited {
		fmt.Fprintf(&b, "; %s changed the arguments to %s", r.DecidedBy, compact(r.Args))
	}
	b.WriteString(".")
	return b.String()
}

// approvedBy says who let a call run.
func approvedBy(r Result) string {
	switch {
	case r.DecidedBy == "policy" || r.DecidedBy == "":
		if r.Rule != "" {
			return "allowed by the policy (rule " + r.Rule + ")"
		}
		return "allowed by the policy"
	case r.DecidedBy == "timeout":
		return "approved because nobody answered in time and the rule approves on timeout"
	case r.Decision == policy.ApprovedForSession.String():
		return "approved by " + r.DecidedBy + " for the rest of the session"
	}
	return "approved by " + r.DecidedBy
}

// deniedBy says who refused a call, and why.
func deniedBy(r Result) string {
	reason := strings.TrimSuffix(r.Reason, ".")
	switch r.DecidedBy {
	case "policy":
		return "the policy denied it: " + reason
	case "":
		return reason
	}
	if reason == "" || strings.HasPrefix(reason, "denied by ") || strings.HasPrefix(reason, "cancelled by ") {
		return reason
	}
	return "denied by " + r.DecidedBy + ": " + reason
}

// joinNotes joins two notes into one.
func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
