// Package policy holds toolgate's vocabulary: the calls an agent asks for,
// the policies that judge them, the decisions people (or code) take, and the
// hooks around a tool's execution. It is plain Go with no Temporal imports,
// so policies can be written and table-tested without a server.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DecisionKind is what an approver decided about a call.
type DecisionKind int

// The decisions of the reference design, plus ApprovedWithEdits.
const (
	// Approved lets this one call run.
	Approved DecisionKind = iota + 1
	// ApprovedForSession lets this call and every later call of the same
	// tool in the session run without asking anyone again.
	ApprovedForSession
	// Denied refuses this one call.
	Denied
	// DeniedWithReason refuses this call; the reason goes back to the model.
	DeniedWithReason
	// DeniedAlways refuses this call and every later call of the same tool
	// in the session.
	DeniedAlways
	// ApprovedWithEdits lets the call run with arguments the approver fixed.
	// The edited arguments are checked by the policy again.
	ApprovedWithEdits
)

var kindNames = map[DecisionKind]string{
	Approved:           "approved",
	ApprovedForSession: "approved_for_session",
	Denied:             "denied",
	DeniedWithReason:   "denied_with_reason",
	DeniedAlways:       "denied_always",
	ApprovedWithEdits:  "approved_with_edits",
}

// String returns the kind's wire name, e.g. "approved_for_session".
func (k DecisionKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("DecisionKind(%d)", int(k))
}

// ParseDecisionKind is the inverse of String.
func ParseDecisionKind(s string) (DecisionKind, error) {
	for k, name := range kindNames {
		if name == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown decision %q (want approved, approved_for_session, denied, denied_with_reason, denied_always or approved_with_edits)", s)
}

// MarshalText encodes the kind by name, so histories and JSON stay readable.
func (k DecisionKind) MarshalText() ([]byte, error) {
	if _, ok := kindNames[k]; !ok {
		return nil, fmt.Errorf("invalid decision kind %d", int(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText decodes a kind written by MarshalText.
func (k *DecisionKind) UnmarshalText(b []byte) error {
	parsed, err := ParseDecisionKind(string(b))
	if err != nil {
		return err
	}
	*k = parsed
	return nil
}

// Approves reports whether the decision lets the call run.
func (k DecisionKind) Approves() bool {
	return k == Approved || k == ApprovedForSession || k == ApprovedWithEdits
}

// Sticky reports whether the decision also holds for later calls of the
// same tool in the session.
func (k DecisionKind) Sticky() bool {
	return k == ApprovedForSession || k == DeniedAlways
}

// Decision is one answer to one call: what was decided, by whom, through
// which channel and when.
type Decision struct {
	Kind DecisionKind `json:"kind"`
	// Reason is required for DeniedWithReason and optional for the other
	// denials; it is what the model reads.
	Reason string `json:"reason,omitempty"`
	// EditedArgs replaces the call's arguments; only with ApprovedWithEdits.
	EditedArgs json.RawMessage `json:"edited_args,omitempty"`
	// DecidedBy names the approver (a person, "policy", a handler's name).
	DecidedBy string `json:"decided_by"`
	// Channel is where the decision came from: cli, api, inbox, slack,
	// email, signal, handler, session, timeout, policy.
	Channel string `json:"channel"`
	// DecidedAt is set by toolgate when the decision is applied.
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Comment is a free note for the audit trail; the model never sees it.
	Comment string `json:"comment,omitempty"`
}

// Validate checks that a decision coming from outside is complete and
// consistent. It does not know about the call it decides.
func (d Decision) Validate() error {
	if _, ok := kindNames[d.Kind]; !ok {
		return errors.New("decision kind is missing or unknown")
	}
	if d.DecidedBy == "" {
		return errors.New("decision has no approver identity (decided_by)")
	}
	if d.Kind == DeniedWithReason && d.Reason == "" {
		return errors.New("denied_with_reason needs a reason")
	}
	if d.Kind == ApprovedWithEdits {
		if len(d.EditedArgs) == 0 {
			return errors.New("approved_with_edits needs edited arguments")
		}
		if !json.Valid(d.EditedArgs) {
			return errors.New("edited arguments are not valid JSON")
		}
	} else if len(d.EditedArgs) > 0 {
		return fmt.Errorf("edited arguments are only allowed with approved_with_edits, not %s", d.Kind)
	}
	return nil
}
