// Package workflows holds toolgate's two workflows: ToolCallWorkflow, one
// per tool call, and ToolgateSession, one per agent session, which keeps the
// sticky decisions. Names shared with clients (task queue, signals, updates,
// queries, search attributes) are exported here.
package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// TaskQueue is the default task queue of toolgate's workers.
const TaskQueue = "toolgate"

// Workflow type names, as registered with the worker.
const (
	ToolCallWorkflowType = "ToolCallWorkflow"
	SessionWorkflowType  = "ToolgateSession"
	NoticesWorkflowType  = "NoticesWorkflow"
	// LegacySessionWorkflowType is the type of sessions started by the
	// first releases (LegacySessionWorkflow).
	LegacySessionWorkflowType = "SessionWorkflow"
)

// Message names. Clients use them to talk to the workflows.
const (
	// UpdateDecide is the validated way to decide a waiting call; its
	// argument is a DecideRequest and it returns the applied Decision.
	UpdateDecide = "decide"
	// SignalDecide carries the same DecideRequest for integrations that
	// can only signal (e.g. `temporal workflow signal`). An invalid one is
	// logged and ignored.
	SignalDecide = "decide"
	// QueryCall returns the call's CallState.
	QueryCall = "call"

	// SignalRegister (call → session) asks whether a sticky decision covers
	// the call, and otherwise parks it as waiting.
	SignalRegister = "register"
	// SignalSticky (call → session) records a sticky decision.
	SignalSticky = "sticky"
	// SignalDone (call → session) says a call no longer waits.
	SignalDone = "done"
	// SignalQuota (call → session) asks to count one run against a quota.
	SignalQuota = "quota"
	// SignalQuotaAnswer (session → call) answers SignalQuota.
	SignalQuotaAnswer = "quota-answer"
	// SignalSessionDecision (session → call) answers a registration or
	// hands down a sticky decision taken on another call.
	SignalSessionDecision = "session-decision"
	// UpdateCancel cancels a call that waits for a person; argument: a
	// CancelRequest. The call ends denied, "cancelled by <who>".
	UpdateCancel = "cancel"
	// UpdateRevoke removes a sticky decision; argument: a RevokeRequest.
	UpdateRevoke = "revoke"
	// UpdateEnd ends the session; argument: an EndRequest.
	UpdateEnd = "end"
	// QuerySession returns the SessionView.
	QuerySession = "session"
	// QuerySticky returns the sticky decision for a key, or null: what a
	// call registering now would be told.
	QuerySticky = "sticky"
	// SignalNotices (call → its NoticesWorkflow) carries a NoticesMessage.
	SignalNotices = "notices"
	// SignalReregister (session → call) asks a waiting call to register
	// again: a fresh run of its session does not know it.
	SignalReregister = "reregister"
)

// Error types carried by refused updates (temporal.ApplicationError.Type()).
const (
	ErrTypeAlreadyDecided  = "AlreadyDecided"
	ErrTypeNotWaiting      = "NotWaiting"
	ErrTypeInvalidDecision = "InvalidDecision"
	ErrTypeSelfApproval    = "SelfApproval"
	ErrTypeNoSticky        = "NoStickyDecision"
	ErrTypeSessionEnded    = "SessionEnded"
	// ErrTypeNotAuthorized: the decider's groups do not cover the call
	// (or, for a session, every call the request touches).
	ErrTypeNotAuthorized = "NotAuthorized"
	// ErrTypeInvalidEdit: edited arguments that the tool's schema or the
	// policy refuses; the call keeps waiting.
	ErrTypeInvalidEdit = "InvalidEdit"
	// ErrTypeUnavailable: the workflow could not do what it needed for the
	// request (e.g. list the calls waiting in a session); try again.
	ErrTypeUnavailable = "Unavailable"
)

// Metrics the workflows emit through the worker's metrics handler (not
// during replay); Prometheus adds _total or _bucket.
const (
	// MetricCallsFinished counts finished calls, tagged tool and status.
	MetricCallsFinished = "toolgate_calls_finished"
	// MetricDecisions counts decisions, tagged decision and channel.
	MetricDecisions = "toolgate_decisions"
	// MetricApprovalWait times the wait for a person, tagged tool.
	MetricApprovalWait = "toolgate_approval_wait"
)

// Search attributes on every call, so waiting calls are one visibility
// query away. The server must have them registered (toolgate dev does).
var (
	AttrStatus      = temporal.NewSearchAttributeKeyKeyword("ToolgateStatus")
	AttrTool        = temporal.NewSearchAttributeKeyKeyword("ToolgateTool")
	AttrSession     = temporal.NewSearchAttributeKeyKeyword("ToolgateSession")
	AttrRequestedAt = temporal.NewSearchAttributeKeyTime("ToolgateRequestedAt")
	AttrRequester   = temporal.NewSearchAttributeKeyKeyword("ToolgateRequester")
	// AttrDecidedBy and AttrChannel are set when a call ends, for the audit
	// view.
	AttrDecidedBy = temporal.NewSearchAttributeKeyKeyword("ToolgateDecidedBy")
	AttrChannel   = temporal.NewSearchAttributeKeyKeyword("ToolgateChannel")
	// AttrGroups is set while a call waits for a person: the approver
	// groups that may decide it (escalation groups added once it
	// escalates), or "*" when any approver may.
	AttrGroups = temporal.NewSearchAttributeKeyKeywordList("ToolgateGroups")
	// AttrWaiting is on sessions whose calls register with them (runs
	// before changeFindWaiting): how many calls wait in them.
	AttrWaiting = temporal.NewSearchAttributeKeyInt64("ToolgateWaiting")
	// AttrStickyKey is set while a call waits for a person: the key of
	// the sticky decisions that may decide it, so its session finds it.
	AttrStickyKey = temporal.NewSearchAttributeKeyKeyword("ToolgateStickyKey")
)

// CallWorkflowID derives a call's workflow ID from its call ID, so a
// resubmitted call is the same workflow.
func CallWorkflowID(callID string) string { return "toolgate/call/" + callID }

// NoticesWorkflowID derives the ID of a call's NoticesWorkflow.
func NoticesWorkflowID(callID string) string { return "toolgate/notices/" + callID }

// SessionWorkflowID derives the session workflow's ID.
func SessionWorkflowID(session string) string { return "toolgate/session/" + session }

// Status is where a call stands. The first five are final.
type Status string

const (
	StatusOK       Status = "ok"
	StatusDenied   Status = "denied"
	StatusTimedOut Status = "timed_out"
	StatusError    Status = "error"
	// StatusUnknown: the tool's attempt was lost (its worker died, or it
	// ran past its timeout) and the tool is not idempotent, so it was not
	// retried: it may or may not have run.
	StatusUnknown Status = "unknown"
	// StatusEvaluating: the policy is judging the call, or the session is
	// being asked for a sticky decision.
	StatusEvaluating Status = "evaluating"
	// StatusPending: waiting for a person.
	StatusPending Status = "pending"
	// StatusRunning: approved; checks and the tool are running.
	StatusRunning Status = "running"
	// StatusApproved: an agent-executed call was approved; the agent runs
	// the tool (Call.Args, edited if an approver edited them) and reports.
	StatusApproved Status = "approved"
)

// Final reports whether the status is an outcome.
func (s Status) Final() bool {
	return s == StatusOK || s == StatusDenied || s == StatusTimedOut || s == StatusError || s == StatusUnknown
}

// DecideRequest is the argument of UpdateDecide and SignalDecide. It names
// the call it decides, so a decision sent to the wrong workflow is refused.
// The decider's groups travel in Decision.DeciderGroups and are checked by
// the workflow, whatever the path.
type DecideRequest struct {
	CallID   string          `json:"call_id"`
	Decision policy.Decision `json:"decision"`
}

// CancelRequest is the argument of UpdateCancel: who cancels, and the
// approver groups they act for. The call's requester may cancel it; anyone
// else needs groups that cover the call.
type CancelRequest struct {
	CallID string   `json:"call_id"`
	By     string   `json:"by"`
	Groups []string `json:"groups,omitempty"`
}

// ChannelCancel is the channel of the denial a cancellation records.
const ChannelCancel = "cancel"

// EndRequest is the argument of UpdateEnd: who ends the session, and the
// approver groups they act for ("*" for an admin).
type EndRequest struct {
	By     string   `json:"by"`
	Groups []string `json:"groups,omitempty"`
}

// UnmarshalJSON also reads the bare name that earlier clients sent, so
// recorded histories replay.
func (r *EndRequest) UnmarshalJSON(b []byte) error {
	type plain EndRequest
	if len(b) > 0 && b[0] == '"' {
		*r = EndRequest{}
		return json.Unmarshal(b, &r.By)
	}
	return json.Unmarshal(b, (*plain)(r))
}

func (r EndRequest) approver() policy.Approver { return policy.Approver{Name: r.By, Groups: r.Groups} }

// RevokeRequest is the argument of UpdateRevoke: the sticky key (usually
// the tool name), who revokes it, and their approver groups.
type RevokeRequest struct {
	Key    string   `json:"key"`
	By     string   `json:"by"`
	Groups []string `json:"groups,omitempty"`
}

// UnmarshalJSON also reads the bare key that earlier clients sent.
func (r *RevokeRequest) UnmarshalJSON(b []byte) error {
	type plain RevokeRequest
	if len(b) > 0 && b[0] == '"' {
		*r = RevokeRequest{}
		return json.Unmarshal(b, &r.Key)
	}
	return json.Unmarshal(b, (*plain)(r))
}

func (r RevokeRequest) approver() policy.Approver {
	return policy.Approver{Name: r.By, Groups: r.Groups}
}

// CallInput starts a ToolCallWorkflow.
type CallInput struct {
	Call policy.Call `json:"call"`
	// NoReport, for an agent-executed call: the call ends when it is
	// decided (status ok when approved), and the agent does not report.
	NoReport bool `json:"no_report,omitempty"`
}

// ReportActivityID is the activity ID of an agent-executed call's tool
// step: the agent's report completes it by workflow ID and this ID.
const ReportActivityID = "agent-report"

// Result is what the agent gets back, whatever happened. Denials, refusals
// by hooks, unknown tools, tool failures and timeouts are all Results.
type Result struct {
	CallID    string `json:"call_id"`
	Session   string `json:"session"`
	Tool      string `json:"tool"`
	Requester string `json:"requester,omitempty"`
	Status    Status `json:"status"`
	// Execution is "agent" when the agent ran the tool itself.
	Execution policy.Execution `json:"execution,omitempty"`
	// ModelMessage is one plain sentence for the model: what ran or why
	// not, who decided, what was changed.
	ModelMessage string `json:"model_message,omitempty"`
	// Output is the tool's output after middleware (status ok only).
	Output json.RawMessage `json:"output,omitempty"`
	// Reason says why the call did not succeed, for the model.
	Reason string `json:"reason,omitempty"`
	// InvalidRequest marks an error Result for a call that could never run:
	// an unknown tool, or arguments its schema refuses.
	InvalidRequest bool `json:"invalid_request,omitempty"`
	// Note tells the model what else it should know, e.g. that an approver
	// edited its arguments.
	Note string `json:"note,omitempty"`
	// Decision, DecidedBy, Channel, DecidedAt: who let the call run or
	// refused it ("policy" when no person was asked).
	Decision  string    `json:"decision,omitempty"`
	DecidedBy string    `json:"decided_by,omitempty"`
	Channel   string    `json:"channel,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	Comment   string    `json:"comment,omitempty"`
	// Args are the arguments the tool ran with; OriginalArgs are the
	// agent's when an approver edited them.
	Args         json.RawMessage `json:"args,omitempty"`
	OriginalArgs json.RawMessage `json:"original_args,omitempty"`
	// Rule and PolicyVersion say which policy judged the call.
	Rule          string `json:"rule,omitempty"`
	PolicyVersion string `json:"policy_version,omitempty"`
	Redactions    int    `json:"redactions,omitempty"`
	// Notices are the notices sent while the call waited for a person.
	Notices     []NoticeRecord `json:"notices,omitempty"`
	RequestedAt time.Time      `json:"requested_at,omitzero"`
	FinishedAt  time.Time      `json:"finished_at,omitzero"`
}

// Call returns the identity of the call the Result answers.
func (r Result) Call() policy.Call {
	return policy.Call{ID: r.CallID, Session: r.Session, Tool: r.Tool, Args: r.Args, Requester: r.Requester, Execution: r.Execution}
}

// CallState is a call's live state, returned by QueryCall.
type CallState struct {
	Call    policy.Call             `json:"call"`
	Status  Status                  `json:"status"`
	Request *policy.ApprovalRequest `json:"request,omitempty"`
	// WaitingSince and Deadline are set while a person is asked.
	WaitingSince time.Time        `json:"waiting_since,omitzero"`
	Deadline     time.Time        `json:"deadline,omitzero"`
	Decision     *policy.Decision `json:"decision,omitempty"`
	// Notices are the notices (waiting, reminders, escalation) sent.
	Notices []NoticeRecord `json:"notices,omitempty"`
	// Result is set once the call is final.
	Result *Result `json:"result,omitempty"`
}

// NoticesInput starts a call's NoticesWorkflow.
type NoticesInput struct {
	// Channels are the notification channels to use, by name.
	Channels []string `json:"channels"`
	// First is the call's first notice (waiting).
	First activities.Notice `json:"first"`
}

// NoticesMessage is one message from a call to its NoticesWorkflow: a
// notice to send, an outcome to announce, or both absent with Last.
type NoticesMessage struct {
	Notice  *activities.Notice  `json:"notice,omitempty"`
	Outcome *activities.Outcome `json:"outcome,omitempty"`
	// Last says the call sends nothing more.
	Last bool `json:"last,omitempty"`
}

// Registration is a call's SignalRegister to its session. Requester,
// Groups and the escalation let the session hand a sticky decision only to
// calls its author could have decided directly.
type Registration struct {
	CallID    string    `json:"call_id"`
	Tool      string    `json:"tool"`
	StickyKey string    `json:"sticky_key"`
	At        time.Time `json:"at"`
	Requester string    `json:"requester,omitempty"`
	// Groups may decide the call; EscalateTo may too from EscalateAt on.
	Groups     []string  `json:"groups,omitempty"`
	EscalateTo []string  `json:"escalate_to,omitempty"`
	EscalateAt time.Time `json:"escalate_at,omitzero"`
	// RequestedAt, EscalateAfter and Timeout: when the call was requested,
	// and when it escalates and times out after that (ToolgateSession).
	RequestedAt   time.Time     `json:"requested_at,omitzero"`
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	Timeout       time.Duration `json:"timeout,omitempty"`
}

// groupsAt returns the groups that may decide the call at now.
func (r Registration) groupsAt(now time.Time) []string {
	if r.EscalateAt.IsZero() || now.Before(r.EscalateAt) {
		return r.Groups
	}
	return append(slices.Clone(r.Groups), r.EscalateTo...)
}

// StickyDecision is a decision that holds for a whole session.
type StickyDecision struct {
	Key      string          `json:"key"`
	Tool     string          `json:"tool"`
	Decision policy.Decision `json:"decision"`
	// FromCall is the call on which it was taken; Groups are the groups
	// that call was asked of (who may revoke the decision).
	FromCall string   `json:"from_call"`
	Groups   []string `json:"groups,omitempty"`
}

// SessionDecision is the session's answer to a call: Decision is nil when
// the call was parked and must ask a person.
type SessionDecision struct {
	Decision *policy.Decision `json:"decision,omitempty"`
	// Key is the sticky decision's key, for calls that the session found
	// waiting (changeFindWaiting): a call of another key ignores it.
	Key string `json:"key,omitempty"`
	// Ended: the decision is the session's end, which denies every call
	// waiting in it.
	Ended bool `json:"ended,omitempty"`
}

// QuotaRequest is a call's SignalQuota: may it run now under the quota?
type QuotaRequest struct {
	CallID string       `json:"call_id"`
	Tool   string       `json:"tool"`
	Quota  policy.Quota `json:"quota"`
}

// QuotaAnswer is the session's reply; Refusal is empty when the run was
// counted and may go ahead.
type QuotaAnswer struct {
	Refusal string `json:"refusal,omitempty"`
}

// QuotaUse is when the runs counted under one quota happened, oldest first.
type QuotaUse struct {
	Name  string      `json:"name"`
	Times []time.Time `json:"times"`
}

// SessionInput starts (or continues) a ToolgateSession.
type SessionInput struct {
	Session string `json:"session"`
	// State is carried across continue-as-new.
	State SessionState `json:"state"`
	// IdleTimeout ends a session with no waiting calls and no messages for
	// that long; zero means DefaultSessionIdleTimeout.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// ContinueAsNewAfter forces continue-as-new after that many handled
	// messages (tests); zero leaves it to the server's suggestion.
	ContinueAsNewAfter int `json:"continue_as_new_after,omitempty"`
}

// DefaultSessionIdleTimeout is how long an idle session keeps its sticky
// decisions.
const DefaultSessionIdleTimeout = 7 * 24 * time.Hour

// SessionState is everything a session remembers, carried across
// continue-as-new. Every list keeps insertion order, so workflow code never
// depends on map order.
type SessionState struct {
	Sticky []StickyDecision `json:"sticky,omitempty"`
	Quotas []QuotaUse       `json:"quotas,omitempty"`
	Ended  bool             `json:"ended,omitempty"`
	// Calls are the calls waiting for a person, compactly: what they share
	// (tool, key, requester, groups...) is in Profiles.
	Calls    []WaitingCall `json:"calls,omitempty"`
	Profiles []CallProfile `json:"profiles,omitempty"`
	// Outbox holds the answers not yet sent; an answer's decision is in
	// Decisions. QuotaReplies likewise.
	Outbox       []Delivery        `json:"outbox,omitempty"`
	Decisions    []policy.Decision `json:"decisions,omitempty"`
	QuotaReplies []QuotaReply      `json:"quota_replies,omitempty"`
	// Waiting is how LegacySessionWorkflow kept its waiting calls; a
	// ToolgateSession continued from one moves them into Calls.
	Waiting []Registration `json:"waiting,omitempty"`
	// Releases are the sticky decisions still to hand to the calls that
	// visibility finds waiting (changeFindWaiting).
	Releases []Release `json:"releases,omitempty"`
}

// Release is a sticky decision to hand to the waiting calls of its key.
type Release struct {
	Key      string          `json:"key"`
	Decision policy.Decision `json:"decision"`
}

// WaitingCall is one call waiting for a person: about 70 bytes of JSON.
type WaitingCall struct {
	CallID string `json:"c"`
	// Profile indexes SessionState.Profiles.
	Profile int `json:"p"`
	// RequestedAt is when the call was requested, in Unix milliseconds,
	// rounded up (so escalation is never seen early).
	RequestedAt int64 `json:"t"`
}

// CallProfile is what many waiting calls have in common.
type CallProfile struct {
	Tool          string        `json:"tool"`
	Key           string        `json:"key"`
	Requester     string        `json:"requester,omitempty"`
	Groups        []string      `json:"groups,omitempty"`
	EscalateTo    []string      `json:"escalate_to,omitempty"`
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	// Timeout is the call's deadline after RequestedAt; zero: unknown.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Delivery is one answer the session owes a call.
type Delivery struct {
	CallID string `json:"c"`
	// Decision indexes SessionState.Decisions, or is one of the Deliver*
	// answers.
	Decision int `json:"d"`
}

// Answers a Delivery carries instead of a decision.
const (
	// DeliverAskPerson: no sticky decision covers the call; ask a person.
	DeliverAskPerson = -1
	// DeliverReregister: a fresh run of the session asks a call it found
	// waiting to register again.
	DeliverReregister = -2
)

// QuotaReply is a quota answer the session owes a call.
type QuotaReply struct {
	CallID string      `json:"call_id"`
	Answer QuotaAnswer `json:"answer"`
}

// SessionView is the QuerySession answer. Waiting lists at most
// MaxWaitingShown calls; WaitingCount counts them all.
type SessionView struct {
	Session      string           `json:"session"`
	Sticky       []StickyDecision `json:"sticky,omitempty"`
	Waiting      []Registration   `json:"waiting,omitempty"`
	WaitingCount int              `json:"waiting_count"`
	Quotas       []QuotaUse       `json:"quotas,omitempty"`
	Ended        bool             `json:"ended,omitempty"`
}

// MaxWaitingShown bounds SessionView.Waiting, so a query answer stays small.
const MaxWaitingShown = 1000

// describeDecision says who decided what, for "already decided" errors.
func describeDecision(d *policy.Decision) string {
	return fmt.Sprintf("%s by %s via %s at %s", d.Kind, d.DecidedBy, d.Channel, d.DecidedAt.UTC().Format(time.RFC3339))
}

// SearchAttributeTypes lists the search attributes toolgate needs
// registered in its namespace, with their types.
func SearchAttributeTypes() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		AttrStatus.GetName():      enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		AttrTool.GetName():        enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		AttrSession.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		AttrRequestedAt.GetName(): enumspb.INDEXED_VALUE_TYPE_DATETIME,
		AttrRequester.GetName():   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		AttrDecidedBy.GetName():   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		AttrChannel.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		AttrGroups.GetName():      enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
		AttrWaiting.GetName():     enumspb.INDEXED_VALUE_TYPE_INT,
		AttrStickyKey.GetName():   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
}
