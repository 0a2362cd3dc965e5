package workflows

import (
	"strings"

	"github.com/toolgate/toolgate/policy"
)

// modelMessage is the one plain sentence an agent hands its model: what
// ran or why not, who decided, and what was changed.
// noReport: an agent-executed call that ended at its approval; edited: an
// approver edited the arguments.
func modelMessage(r Result, noReport, edited bool) string {
	reason := strings.TrimSuffix(r.Reason, ".")
	var m string
	switch r.Status {
	case StatusOK:
		switch {
		case r.Execution != policy.ExecutionAgent:
			m = "toolgate ran " + r.Tool
		case noReport:
			m = r.Tool + " is approved: run it yourself with the approved arguments"
		default:
			m = "You ran " + r.Tool + " and toolgate recorded its output"
		}
		m += ", " + approvedBy(r)
	case StatusDenied:
		m = r.Tool + " was not run: " + deniedBy(r)
	case StatusTimedOut:
		m = r.Tool + " was not run: " + reason
	case StatusError:
		if r.InvalidRequest || r.Decision == "" {
			m = r.Tool + " was not run: " + reason
		} else {
			m = r.Tool + " failed (" + approvedBy(r) + "): " + reason
		}
	case StatusUnknown:
		if r.Execution == policy.ExecutionAgent && r.Output != nil {
			m = "You ran " + r.Tool + " and toolgate recorded its output, " + approvedBy(r) + "; " + reason
			break
		}
		m = r.Tool + " may or may not have run: " + reason
	default:
		return ""
	}
	if edited {
		m += "; " + r.DecidedBy + " changed the arguments to " + compact(r.Args)
	}
	return m + "."
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
