// Package policy holds toolgate's vocabulary: the calls an agent asks for,
// the policies that judge them, the decisions people (or code) take, and the
// hooks around a tool's execution. It is plain Go with no Temporal imports,
// so policies can be written and table-tested without a server.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/statement"
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
	// DeciderGroups are the approver groups DecidedBy acts for ("*" is
	// every group), from their token or the approvers file. The workflow
	// checks them against the call's groups on every path, sticky
	// decisions included, and keeps them with the decision for the audit.
	DeciderGroups []string `json:"decider_groups,omitempty"`
	// Channel is where the decision came from: cli, api, inbox, slack,
	// email, signal, handler, session, timeout, policy.
	Channel string `json:"channel"`
	// DecidedAt is set by toolgate when the decision is applied; a value
	// in a request is ignored.
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Comment is a free note for the audit trail; the model never sees it.
	Comment string `json:"comment,omitempty"`
	// User says the acting user took the decision in the agent's own
	// client (ChannelClient). It stays set when a sticky decision is
	// handed on through the session, so every later call holds it to the
	// same rule: its own rule must let that user decide.
	User bool `json:"user,omitempty"`
	// Identity is who the company's identity provider says DecidedBy is,
	// for a person signed in through OpenID Connect; nil for a token, a
	// handler or toolgate itself.
	Identity *Identity `json:"identity,omitempty"`
	// Statement is the door's signed statement of a person's decision:
	// what makes it theirs (package statement). The workflow refuses a
	// person's decision without one that matches it; the policy's,
	// a timeout's and a handler's need none. It travels with a sticky
	// decision and a session's end to every call they decide.
	Statement *statement.Signed `json:"statement,omitempty"`
	// Passkey is the person's WebAuthn assertion over this decision
	// (passkey.Challenge), which a rule with `passkey: true` needs of
	// every approval; its statement carries its digest.
	Passkey *passkey.Assertion `json:"passkey,omitempty"`
}

// Identity is a person as their OpenID provider names them: the issuer
// and the subject, which together never change or pass to someone else,
// unlike an email address.
type Identity struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
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

// ReservedChannels are the channels toolgate sets itself; a decision that
// arrives from outside may not claim one.
var ReservedChannels = []string{"session", "policy", "timeout", "handler", "cancel"}

// MaxArgsBytes caps a call's arguments, submitted or edited by an approver:
// Temporal warns from 512 KiB and refuses payloads over 2 MiB.
const MaxArgsBytes = 512 << 10

// ValidateIncoming checks a decision that arrives from outside toolgate (a
// person through the API, inbox, Slack, email, CLI or a raw update): it must
// be valid, name its approver without surrounding spaces, and not claim a
// channel toolgate reserves.
func (d Decision) ValidateIncoming() error {
	if err := d.Validate(); err != nil {
		return err
	}
	if err := CheckIdentity("decided_by", d.DecidedBy); err != nil {
		return err
	}
	if slices.Contains(ReservedChannels, d.Channel) {
		return fmt.Errorf("channel %q is reserved for decisions toolgate takes itself", d.Channel)
	}
	if d.Passkey != nil && !d.Kind.Approves() {
		return errors.New("a passkey assertion signs an approval; a denial needs none")
	}
	if d.User != (d.Channel == ChannelClient) {
		return fmt.Errorf("a decision of the person running the agent (user) comes through channel %q, and only such a decision does", ChannelClient)
	}
	for _, g := range d.DeciderGroups {
		if err := CheckIdentity("decider group", g); err != nil {
			return err
		}
	}
	return nil
}

// CheckIdentity refuses an empty name or one with leading or trailing
// spaces: " alice" must never pass for "alice" or slip past a check.
func CheckIdentity(field, name string) error {
	if name == "" {
		return fmt.Errorf("%s is empty", field)
	}
	if strings.TrimSpace(name) != name {
		return fmt.Errorf("%s %q has leading or trailing spaces", field, name)
	}
	return nil
}

// Approver is who decides: a name and the approver groups they act for.
type Approver struct {
	Name string
	// Groups are the approver groups; "*" is every group.
	Groups []string
	// Identity is the person behind Name when they signed in through
	// their identity provider.
	Identity *Identity
}

// Approver returns who took the decision.
func (d Decision) Approver() Approver {
	return Approver{Name: d.DecidedBy, Groups: d.DeciderGroups, Identity: d.Identity}
}

// ErrSelfApproval is MayDecide's refusal of an approver who requested the
// call.
var ErrSelfApproval = errors.New("they requested the call")

// NotInGroupsError is MayDecide's refusal of an approver whose groups do
// not meet the call's.
type NotInGroupsError struct {
	Asked, Theirs []string
}

func (e *NotInGroupsError) Error() string {
	theirs := "none"
	if len(e.Theirs) > 0 {
		theirs = strings.Join(e.Theirs, ", ")
	}
	return fmt.Sprintf("it is asked of %s; their groups: %s", strings.Join(e.Asked, ", "), theirs)
}

// MayDecide says why a may not decide a call that requester submitted and
// that is asked of groups (empty: any approver), or nil when it may. It is
// the one rule for every path: a direct decision, a sticky decision handed
// to another call, a bulk decision.
func (a Approver) MayDecide(requester string, groups []string) error {
	if requester != "" && a.Name == requester {
		return ErrSelfApproval
	}
	return a.MayAct(groups)
}

// MayAct is MayDecide without the requester rule: the rule for ending a
// session or revoking a sticky decision, which only take permissions away.
func (a Approver) MayAct(groups []string) error {
	if len(groups) == 0 || slices.ContainsFunc(a.Groups, func(g string) bool { return g == "*" || slices.Contains(groups, g) }) {
		return nil
	}
	return &NotInGroupsError{Asked: groups, Theirs: a.Groups}
}

// ChannelClient is the channel of a decision the acting user took in the
// agent's own client (Decision.User): an MCP client's elicitation form, or
// a coding agent's permission prompt. toolgate sets it on the agent's
// paths only (the HTTP API takes the person from the agent token's
// owner); the workflow accepts it only from the call's acting user, and
// only when the call's rule lets the user decide.
const ChannelClient = "client"

// Deciders is who may decide one call at a moment.
type Deciders struct {
	// Requester submitted the call; it never decides it.
	Requester string
	// Groups are the remote approver groups asked (escalation included);
	// empty: any approver.
	Groups []string
	// User is the acting user when the call's rule lets them decide, else
	// empty.
	User string
}

// DecidersOf is who may decide call, asked by req of groups (the request's
// groups at this moment).
func DecidersOf(call Call, req ApprovalRequest, groups []string) Deciders {
	who := Deciders{Requester: call.Requester, Groups: groups}
	if req.User {
		who.User = call.ActingUser
	}
	return who
}

// ErrUserNotAsked refuses a decision from the agent's client for a call
// whose rule does not let the person running the agent decide.
var ErrUserNotAsked = errors.New("its rule does not let the person running the agent decide it (user: true)")

// MayDecide says why d's author may not decide a call of who, or nil when
// they may: the one rule for every path (a direct decision, a sticky
// decision handed to another call, a bulk decision). A decision from the
// agent's client must be the acting user's; any other is a remote
// approver's, held to the groups and never the requester.
func (d Decision) MayDecide(who Deciders) error {
	if !d.User {
		return d.Approver().MayDecide(who.Requester, who.Groups)
	}
	switch {
	case who.User == "":
		return ErrUserNotAsked
	case d.DecidedBy != who.User:
		return fmt.Errorf("the person running its agent is %s, not %s", who.User, d.DecidedBy)
	}
	return nil
}
