package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Call is one request of an agent to run a tool.
type Call struct {
	// ID is the call's ID, unique in the namespace; also the idempotency key
	// handed to the tool.
	ID      string          `json:"id"`
	Session string          `json:"session"`
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"`
	// Requester names the agent (or token) that asked. It may never approve
	// its own call.
	Requester string `json:"requester,omitempty"`
	// ActingUser names the person running the agent: the owner of the
	// agent token the call came with, set by toolgate, never by the agent.
	// A rule with `user: true` lets them decide the call in the agent's
	// own client. Empty: no person is known to be at the agent.
	ActingUser string `json:"acting_user,omitempty"`
	// Execution says who runs the tool: "" (toolgate's worker) or
	// ExecutionAgent (the agent runs it after the decision, then reports).
	Execution Execution `json:"execution,omitempty"`
	// Annotations are the tool's hints (tool.Tool.Annotations), filled in
	// for the policy at evaluation; never taken from the agent.
	Annotations map[string]any `json:"annotations,omitempty"`
}

// Execution says who runs a call's tool.
type Execution string

const (
	// ExecutionToolgate (the zero value): a tool registered in toolgate's
	// worker runs as an activity.
	ExecutionToolgate Execution = ""
	// ExecutionAgent: the agent runs the tool itself once the call is
	// approved, and reports the outcome.
	ExecutionAgent Execution = "agent"
)

// DefinitionChangeTool is the tool of the calls toolgate makes itself when
// an upstream MCP server changes a tool's definition, or offers a new tool
// on a server toolgate knows: a person decides whether toolgate offers it
// (package mcpgate). Such a call always waits for a person: a policy rule
// for it may name the groups that decide (default
// DefinitionChangeGroups), the timeout and reminders, or deny it; it
// cannot approve it.
const DefinitionChangeTool = "definition_change"

// DefinitionChange is the arguments of a DefinitionChangeTool call.
type DefinitionChange struct {
	// Server names the MCP server (its key in the MCP servers file), Tool
	// the tool by the server's own name for it.
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Change is "changed" (Previous was pinned) or "new".
	Change string `json:"change"`
	// Diff is the unified diff of the pinned definition and the new one,
	// a line an element so every channel shows it line by line.
	Diff []string `json:"diff"`
	// Definition is the new definition (name, title, description, input
	// and output schema, annotations) and Hash its hash.
	Definition json.RawMessage `json:"definition"`
	Hash       string          `json:"hash"`
	// PreviousHash is the hash of the pinned definition, for a change.
	PreviousHash string `json:"previous_hash,omitempty"`
}

// DefinitionChangeGroups decide a definition change that no policy rule
// gives to other groups.
var DefinitionChangeGroups = []string{"admin"}

// ToolgateRequester is the requester of the calls toolgate makes itself;
// no agent token may carry the name.
const ToolgateRequester = "toolgate"

// OutrightDenier is implemented by policies that can tell that every call
// of a tool is denied whatever its arguments; tool listings leave such
// tools out.
type OutrightDenier interface {
	DeniesOutright(call Call) bool
}

// DefaultReportTimeout is how long an approved agent-executed call waits
// for the agent's report when the policy names no report_timeout.
const DefaultReportTimeout = time.Hour

// AgentToolPolicy is implemented by policies that know about tools the
// agent runs itself (which are not in toolgate's tool registry).
type AgentToolPolicy interface {
	// CheckAgentArgs checks an agent-executed call's arguments against the
	// schema the policy declares for its tool; nil when they pass or no
	// schema is declared. The error names the offending field.
	CheckAgentArgs(tool string, args json.RawMessage) error
	// ReportTimeout is how long an approved agent-executed call waits for
	// the agent's report: the matching rule's report_timeout, else the
	// tool's, else 0 (the caller applies DefaultReportTimeout).
	ReportTimeout(call Call) time.Duration
}

// DefaultApprovalTimeout is how long a call waits for a person when its
// ApprovalRequest names no timeout.
const DefaultApprovalTimeout = 24 * time.Hour

// TimeoutAction is what happens to a call nobody decided in time.
type TimeoutAction int

const (
	// TimeoutDeny refuses the call (the default).
	TimeoutDeny TimeoutAction = iota
	// TimeoutApprove lets the call run; meant for low-risk tools.
	TimeoutApprove
)

// ApprovalRequest asks a person (or an ApprovalHandler) to decide a call.
type ApprovalRequest struct {
	// Message tells the approver what is being asked and why.
	Message string `json:"message"`
	// Groups are the approver groups that may decide; empty means anyone
	// allowed to approve.
	Groups []string `json:"groups,omitempty"`
	// Timeout bounds the wait; zero means DefaultApprovalTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// OnTimeout is applied when the timeout fires; default TimeoutDeny.
	OnTimeout TimeoutAction `json:"on_timeout,omitempty"`
	// StickyKey scopes sticky decisions (ApprovedForSession, DeniedAlways).
	// Empty means the tool's name: a sticky decision covers the whole tool.
	StickyKey string `json:"sticky_key,omitempty"`
	// Rule names the rule that asked, for the approver and the audit trail.
	Rule string `json:"rule,omitempty"`
	// RemindAfter reminds the approvers after this long, and again every
	// RemindAfter while the call waits; zero never reminds.
	RemindAfter time.Duration `json:"remind_after,omitempty"`
	// EscalateAfter asks the EscalateTo groups too after this long; zero
	// never escalates.
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	EscalateTo    []string      `json:"escalate_to,omitempty"`
	// Preview shows the person what the call will change, when it can be
	// known (set by toolgate, not by the policy).
	Preview *Preview `json:"preview,omitempty"`
	// Approvals is how many distinct people must approve the call (four
	// eyes); 0 or 1 is one. Any one denial denies it, and no sticky
	// decision, edit or coded handler's approval counts. DistinctGroups
	// needs the approvals from different groups of Groups.
	Approvals      int  `json:"approvals,omitempty"`
	DistinctGroups bool `json:"distinct_groups,omitempty"`
	// User lets the person running the agent (the call's ActingUser)
	// decide it too, in the agent's own client (ChannelClient). Remote
	// approvers of Groups still may; the first decision wins.
	User bool `json:"user,omitempty"`
	// Passkey needs, for every approval of the call (approve, approve with
	// edits, approve for the session, each approval of a four-eyes
	// quorum), a WebAuthn assertion over the decision by a passkey the
	// deciding person registered. Denials need none.
	Passkey bool `json:"passkey,omitempty"`
}

// MaxApprovals bounds ApprovalRequest.Approvals.
const MaxApprovals = 10

// AgentStickyPrefix starts the sticky key of a call the agent runs itself:
// a decision about the agent's own "shell" never covers toolgate's "shell",
// nor the reverse. A tool name cannot hold "~", so no key of a tool
// toolgate runs starts with it.
const AgentStickyPrefix = "agent~"

// StickyKeyFor returns the key sticky decisions for this request and call
// are stored under: StickyKey, or the tool's name, with AgentStickyPrefix
// for a call the agent runs.
func (r ApprovalRequest) StickyKeyFor(call Call) string {
	key := r.StickyKey
	if key == "" {
		key = call.Tool
	}
	if call.Execution == ExecutionAgent {
		return AgentStickyPrefix + key
	}
	return key
}

// EffectiveTimeout returns Timeout or its default.
func (r ApprovalRequest) EffectiveTimeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultApprovalTimeout
	}
	return r.Timeout
}

// ToolPolicy judges calls. Embed Base to get no-op hooks and implement only
// what the policy cares about.
type ToolPolicy interface {
	// EvaluateApproval returns nil to run the call without asking, an
	// ApprovalRequest to ask, or an error made by Deny to refuse it. Any
	// other error fails the call with that error.
	EvaluateApproval(ctx context.Context, call Call) (*ApprovalRequest, error)
	// BeforeCall runs after approval, right before the tool. An error
	// cancels the call; its text goes back to the model.
	BeforeCall(ctx context.Context, call Call) error
	// AfterCall inspects the tool's output (after output middleware). An
	// error replaces the result; its text goes back to the model.
	AfterCall(ctx context.Context, call Call, output json.RawMessage) error
}

// Base is a ToolPolicy that approves everything; embed it to implement
// only the hooks a policy needs.
type Base struct{}

var _ ToolPolicy = Base{}

// EvaluateApproval approves without asking.
func (Base) EvaluateApproval(context.Context, Call) (*ApprovalRequest, error) { return nil, nil }

// BeforeCall accepts every call.
func (Base) BeforeCall(context.Context, Call) error { return nil }

// AfterCall accepts every output.
func (Base) AfterCall(context.Context, Call, json.RawMessage) error { return nil }

// DenyError is a policy's refusal of a call. Its reason goes to the model.
type DenyError struct {
	Reason string
	// Rule names the rule that refused, if any.
	Rule string
}

func (e *DenyError) Error() string { return "denied by policy: " + e.Reason }

// Deny returns the error with which EvaluateApproval refuses a call.
func Deny(reason string) error { return &DenyError{Reason: reason} }

// AsDeny reports whether err is a policy refusal, and returns it.
func AsDeny(err error) (*DenyError, bool) {
	var d *DenyError
	ok := errors.As(err, &d)
	return d, ok
}

// Versioned is implemented by policies that can name their version (for
// example a hash of a policy file). The version is recorded with every
// decision.
type Versioned interface {
	Version() string
}

// Quota limits how many calls of a tool run in one session within a
// sliding window.
type Quota struct {
	// Name identifies the quota in messages.
	Name string        `json:"name"`
	Max  int           `json:"max"`
	Per  time.Duration `json:"per"`
}

// QuotaPolicy is implemented by policies that limit calls per session.
// The session workflow counts the calls, so a restart resets nothing.
type QuotaPolicy interface {
	SessionQuota(tool string) (Quota, bool)
}

// ApprovalHandler decides deferred calls by code. Returning a nil Decision
// defers to a person.
type ApprovalHandler interface {
	Approve(ctx context.Context, call Call, req ApprovalRequest) (*Decision, error)
}

// ApprovalHandlerFunc adapts a function to ApprovalHandler.
type ApprovalHandlerFunc func(ctx context.Context, call Call, req ApprovalRequest) (*Decision, error)

// Approve calls f.
func (f ApprovalHandlerFunc) Approve(ctx context.Context, call Call, req ApprovalRequest) (*Decision, error) {
	return f(ctx, call, req)
}

// ToolEnd is what a LifecycleHook learns when a tool finished.
type ToolEnd struct {
	Output   json.RawMessage
	Err      error
	Duration time.Duration
	Attempt  int32
}

// LifecycleHook observes tools that actually run. It is never called for
// denied calls, and it cannot change anything. Hooks run in the tool's
// activity, so a retried attempt is observed again.
type LifecycleHook interface {
	OnToolStart(ctx context.Context, call Call)
	OnToolEnd(ctx context.Context, call Call, end ToolEnd)
}

// OutputMiddleware transforms a tool's output before AfterCall sees it and
// before it reaches the model, e.g. to redact secrets.
type OutputMiddleware interface {
	// TransformOutput returns the new output and how many changes it made
	// (for example redactions), which are counted in the Result.
	TransformOutput(ctx context.Context, call Call, output json.RawMessage) (json.RawMessage, int, error)
}

// Chain composes policies. EvaluateApproval asks each in order: the first
// refusal wins over everything (a later policy cannot approve what an
// earlier one refused); otherwise the first non-nil ApprovalRequest wins;
// nil from all approves. BeforeCall and AfterCall run each policy's hook in
// order and stop at the first error.
func Chain(policies ...ToolPolicy) ToolPolicy { return chain(policies) }

type chain []ToolPolicy

func (c chain) EvaluateApproval(ctx context.Context, call Call) (*ApprovalRequest, error) {
	var ask *ApprovalRequest
	for _, p := range c {
		req, err := p.EvaluateApproval(ctx, call)
		if err != nil {
			return nil, err
		}
		if ask == nil && req != nil {
			ask = req
		}
	}
	return ask, nil
}

func (c chain) BeforeCall(ctx context.Context, call Call) error {
	for _, p := range c {
		if err := p.BeforeCall(ctx, call); err != nil {
			return err
		}
	}
	return nil
}

func (c chain) AfterCall(ctx context.Context, call Call, output json.RawMessage) error {
	for _, p := range c {
		if err := p.AfterCall(ctx, call, output); err != nil {
			return err
		}
	}
	return nil
}

// Version joins the versions of the chained policies that have one.
func (c chain) Version() string {
	v := ""
	for _, p := range c {
		if vp, ok := p.(Versioned); ok {
			if v != "" {
				v += "+"
			}
			v += vp.Version()
		}
	}
	return v
}

// SessionQuota returns the first quota a chained policy sets for the tool.
func (c chain) SessionQuota(tool string) (Quota, bool) {
	for _, p := range c {
		if qp, ok := p.(QuotaPolicy); ok {
			if q, ok := qp.SessionQuota(tool); ok {
				return q, true
			}
		}
	}
	return Quota{}, false
}

// CheckAgentArgs holds an agent-executed call's arguments to the schema of
// every chained policy that declares one.
func (c chain) CheckAgentArgs(tool string, args json.RawMessage) error {
	for _, p := range c {
		if ap, ok := p.(AgentToolPolicy); ok {
			if err := ap.CheckAgentArgs(tool, args); err != nil {
				return err
			}
		}
	}
	return nil
}

// AllowRule names the first rule a chained policy names for an allowed
// call.
func (c chain) AllowRule(call Call) string {
	for _, p := range c {
		if r := AllowRuleOf(p, call); r != "" {
			return r
		}
	}
	return ""
}

// ShadowFor returns the first shadow verdict a chained policy gives.
func (c chain) ShadowFor(call Call) *Shadow {
	for _, p := range c {
		if s := ShadowOf(p, call); s != nil {
			return s
		}
	}
	return nil
}

// ReportTimeout returns the first report timeout a chained policy sets.
func (c chain) ReportTimeout(call Call) time.Duration {
	for _, p := range c {
		if ap, ok := p.(AgentToolPolicy); ok {
			if d := ap.ReportTimeout(call); d > 0 {
				return d
			}
		}
	}
	return 0
}

// DeniesOutright: one chained policy that denies every call of the tool
// denies it for the chain (its refusal wins over everything).
func (c chain) DeniesOutright(call Call) bool {
	for _, p := range c {
		if dp, ok := p.(OutrightDenier); ok && dp.DeniesOutright(call) {
			return true
		}
	}
	return false
}

// QuotaOf returns the policy's quota for the tool, if it has one.
func QuotaOf(p ToolPolicy, tool string) (Quota, bool) {
	if qp, ok := p.(QuotaPolicy); ok {
		return qp.SessionQuota(tool)
	}
	return Quota{}, false
}

// VersionOf returns the policy's version, or "" when it has none.
func VersionOf(p ToolPolicy) string {
	if v, ok := p.(Versioned); ok {
		return v.Version()
	}
	return ""
}

// String describes the timeout action for messages and JSON.
func (a TimeoutAction) String() string {
	switch a {
	case TimeoutDeny:
		return "deny"
	case TimeoutApprove:
		return "approve"
	}
	return fmt.Sprintf("TimeoutAction(%d)", int(a))
}

// AllowRuler is a policy that names the rule that let a call through
// (EvaluateApproval says only that it did).
type AllowRuler interface {
	// AllowRule names the rule that allows call; "" when none does.
	AllowRule(call Call) string
}

// AllowRuleOf names the rule of p that allows call, "" when p names none.
func AllowRuleOf(p ToolPolicy, call Call) string {
	if r, ok := p.(AllowRuler); ok {
		return r.AllowRule(call)
	}
	return ""
}

// Shadow is what a rule in shadow mode (`mode: shadow`) would have
// decided about a call: recorded beside the call and counted, never
// enforced, so a team can watch a rule on live traffic before switching
// it on.
type Shadow struct {
	Rule   string `json:"rule"`
	Action string `json:"action"`
}

// ShadowPolicy is a policy with rules in shadow mode.
type ShadowPolicy interface {
	// ShadowFor is the verdict of the policy with its shadow rules
	// enforced, when one of them decides call; nil otherwise.
	ShadowFor(call Call) *Shadow
}

// ShadowOf is p's shadow verdict on call, nil when no shadow rule would
// decide it.
func ShadowOf(p ToolPolicy, call Call) *Shadow {
	if s, ok := p.(ShadowPolicy); ok {
		return s.ShadowFor(call)
	}
	return nil
}
