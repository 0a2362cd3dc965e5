// Package workflows holds toolgate's workflows: ToolCallWorkflow, one per
// tool call; ToolgateSession, one per agent session, which takes the
// session's sticky decisions, its end and its quotas; WaitingRoom, a few per
// session, where the calls that wait for a person hear the session's
// decisions; NoticesWorkflow, which sends a waiting call's notices. Names
// shared with clients (task queue, signals, updates, queries, search
// attributes) are exported here.
package workflows

import (
	"encoding/json"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// TaskQueue is the default task queue of toolgate's workers.
const TaskQueue = "toolgate"

// Workflow type names, as registered with the worker.
const (
	ToolCallWorkflowType = "ToolCallWorkflow"
	SessionWorkflowType  = "ToolgateSession"
	NoticesWorkflowType  = "NoticesWorkflow"
	RoomWorkflowType     = "ToolgateWaitingRoom"
)

// Message names. Clients use them to talk to the workflows.
const (
	// UpdateDecide is the validated way to decide a waiting call; its
	// argument is a DecideRequest and it returns the applied Decision.
	UpdateDecide = "decide"
	// SignalDecide carries the same DecideRequest, with its statement, for
	// integrations that can only signal. An invalid one is logged, counted
	// and ignored.
	SignalDecide = "decide"
	// QueryCall returns the call's CallState.
	QueryCall = "call"
	// QueryCheckDecision checks a DecideRequest as the decide update's
	// validator would, changing nothing; it returns a DecisionCheck. A bulk
	// decision checks every call with it before it applies any.
	QueryCheckDecision = "check-decision"

	// SignalRegister (call → waiting room) says the call waits for a
	// person; the room hands it the session's later decisions with
	// SignalSessionDecision.
	SignalRegister = "register"
	// SignalRegisterAll (worker → waiting room) carries the
	// registrations of several calls, a []Registration: how calls
	// register since a worker gathers them (activities.JoinWaitingRoom).
	SignalRegisterAll = "register-all"
	// SignalSticky (call → session) records a sticky decision.
	SignalSticky = "sticky"
	// SignalDone (call → waiting room) says a call no longer waits.
	SignalDone = "done"
	// SignalQuota (call → session) asks to count one run against a quota.
	SignalQuota = "quota"
	// SignalQuotaAnswer (session → call) answers SignalQuota.
	SignalQuotaAnswer = "quota-answer"
	// SignalSessionDecision (waiting room → call) hands a waiting call a
	// sticky decision taken on another call, or the session's end.
	SignalSessionDecision = "session-decision"
	// SignalNews (session → waiting room) carries the session's
	// activities.SessionNews.
	SignalNews = "news"
	// QueryCensus (of a waiting room) returns its activities.Census at the
	// time given as the argument.
	QueryCensus = "census"
	// UpdateClaim takes the approval of an agent-executed call for one run
	// of its tool; argument: a ClaimRequest. It is accepted once per call
	// (and again for the same run), so an agent's own memory of what it
	// asked (a hook's state file, say) can never make one approval run the
	// tool twice.
	UpdateClaim = "claim"
	// UpdateFirstAnswer answers the agent that submits an agent-executed
	// call with update-with-start: once the call's first workflow task has
	// settled it (decided, or asking a person), with its state, and with
	// the approval taken for a run when the request names one; argument: a
	// ClaimRequest (Run may be empty), result: a FirstAnswer. An
	// auto-approved call is then started, decided and claimed in one round
	// trip.
	UpdateFirstAnswer = "first-answer"
	// UpdateCancel cancels a call that waits for a person; argument: a
	// CancelRequest. The call ends denied, "cancelled by <who>".
	UpdateCancel = "cancel"
	// UpdateRevoke removes a sticky decision; argument: a RevokeRequest.
	UpdateRevoke = "revoke"
	// UpdateEnd ends the session; argument: an EndRequest.
	UpdateEnd = "end"
	// QuerySession returns the SessionView.
	QuerySession = "session"
	// SignalNotices (call → its NoticesWorkflow) carries a NoticesMessage.
	SignalNotices = "notices"
	// SignalReport carries the door's statement (a *statement.Signed) of
	// an agent's report, sent just before the report completes the call's
	// ReportActivityID: a report without a valid one is not recorded.
	SignalReport = "report"
)

// Error types carried by refused updates (temporal.ApplicationError.Type()).
const (
	ErrTypeAlreadyDecided = "AlreadyDecided"
	ErrTypeNotWaiting     = "NotWaiting"
	// ErrTypeAlreadyClaimed: the approval was taken by another run.
	ErrTypeAlreadyClaimed = "AlreadyClaimed"
	// ErrTypeApprovalVoided: the approval was voided before it was taken
	// (the session ended, or its sticky decision was revoked); the call
	// ended denied.
	ErrTypeApprovalVoided  = "ApprovalVoided"
	ErrTypeInvalidDecision = "InvalidDecision"
	// ErrTypePasskeyRequired: the call's rule needs the deciding person's
	// passkey, and the approval carries no assertion;
	// ErrTypePasskeyRefused: the assertion it carries does not hold.
	ErrTypePasskeyRequired = "PasskeyRequired"
	ErrTypePasskeyRefused  = activities.ErrTypePasskeyRefused
	ErrTypeSelfApproval    = "SelfApproval"
	ErrTypeNoSticky        = "NoStickyDecision"
	ErrTypeSessionEnded    = "SessionEnded"
	// ErrTypeNotYourSession: a call into a session that belongs to
	// another agent.
	ErrTypeNotYourSession = "NotYourSession"
	// ErrTypeNotAuthorized: the decider's groups do not cover the call
	// (or, for a session, every call the request touches).
	ErrTypeNotAuthorized = "NotAuthorized"
	// ErrTypeInvalidEdit: edited arguments that the tool's schema or the
	// policy refuses; the call keeps waiting.
	ErrTypeInvalidEdit = "InvalidEdit"
	// ErrTypeUnavailable: the workflow could not do what it needed for the
	// request (e.g. ask the waiting rooms of a session); try again.
	ErrTypeUnavailable = "Unavailable"
	// ErrTypeInvalidPin: a pin check or pin whose definition does not
	// match its hash, or that names another server.
	ErrTypeInvalidPin = "InvalidPin"
	// ErrTypeNotAnotherApproval: a four-eyes call refused an approval that
	// would not count (the same person again, or a group already counted).
	ErrTypeNotAnotherApproval = "NotAnotherApproval"
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
	// MetricVerdicts counts the policy's verdicts, tagged verdict (allow,
	// ask, deny), rule and tool: auto-approvals, asks and denials.
	MetricVerdicts = "toolgate_verdicts"
	// MetricTimeToDecision times an asked call from its submission to its
	// decision or its timeout, tagged rule, channel and outcome
	// (approved, denied, timed_out).
	MetricTimeToDecision = "toolgate_time_to_decision"
	// MetricStickyCovered counts the asked calls a sticky decision of
	// their session decided, tagged rule, tool and decision.
	MetricStickyCovered = "toolgate_sticky_covered"
	// MetricDecisionsRefused counts the decisions a call refused, tagged
	// reason (the refusal's error type, e.g. NotAllowed, NoStatement).
	MetricDecisionsRefused = "toolgate_decisions_refused"
)

// Search attributes on every call, so waiting calls are one visibility
// query away. The server must have them registered (toolgate dev does).
// Temporal never encrypts them: they hold names, statuses, groups and
// times, never arguments, outputs, previews or reasons (docs/production.md,
// "Payload keys", lists them).
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
// approver groups they act for. The call's requester may cancel it as
// itself (AsRequester); anyone else needs groups that cover the call.
type CancelRequest struct {
	CallID string   `json:"call_id"`
	By     string   `json:"by"`
	Groups []string `json:"groups,omitempty"`
	// AsRequester: By withdraws a call it requested (an agent's own
	// call), not through groups. Set only by the client for an agent
	// acting as itself (the HTTP API for an agent token); an approver or
	// admin cancels through its groups, whatever its name. Absent in
	// requests from before it existed: they cancel through groups.
	AsRequester bool `json:"as_requester,omitempty"`
	// Identity is By as their identity provider names them.
	Identity *policy.Identity `json:"identity,omitempty"`
	// Statement is the door's (policy.CancelStatement).
	Statement *statement.Signed `json:"statement,omitempty"`
}

// ClaimRequest is the argument of UpdateClaim: the agent that requested
// the call takes its approval for one run of the tool.
type ClaimRequest struct {
	CallID string `json:"call_id"`
	// By must be the call's requester.
	By string `json:"by"`
	// Run names the run (a hook's tool_use_id); claiming again with the
	// same Run is answered like the first claim.
	Run string `json:"run"`
	// NoReport: the agent will not report how the run went; the call ends
	// at the claim (status ok).
	NoReport bool `json:"no_report,omitempty"`
	// Statement is the door's (policy.ClaimStatement).
	Statement *statement.Signed `json:"statement,omitempty"`
}

// FirstAnswer is the result of UpdateFirstAnswer.
type FirstAnswer struct {
	// State is the call once settled: State.Result is set when it ended,
	// State.Status is StatusPending while it asks a person and
	// StatusApproved while it waits for its run.
	State CallState `json:"state"`
	// Claimed: the approval was taken for the request's run.
	Claimed bool `json:"claimed,omitempty"`
	// ClaimRefused says why the approval could not be taken (an
	// ErrType* and its message), when the request named a run.
	ClaimRefused *Refusal `json:"claim_refused,omitempty"`
}

// Refusal is a refused request as data: an ErrType* and what it says.
type Refusal struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// MaxRunBytes caps ClaimRequest.Run.
const MaxRunBytes = 256

// Claim records which run took a call's approval, and when.
type Claim struct {
	Run string    `json:"run"`
	At  time.Time `json:"at"`
}

// ChannelCancel is the channel of the denial a cancellation records.
const ChannelCancel = "cancel"

// EndRequest is the argument of UpdateEnd: who ends the session, and the
// approver groups they act for ("*" for an admin).
type EndRequest struct {
	By     string   `json:"by"`
	Groups []string `json:"groups,omitempty"`
	// Identity is By as their identity provider names them, when they
	// signed in through it.
	Identity *policy.Identity `json:"identity,omitempty"`
	// Statement is the door's (policy.EndStatement).
	Statement *statement.Signed `json:"statement,omitempty"`
}

func (r EndRequest) approver() policy.Approver {
	return policy.Approver{Name: r.By, Groups: r.Groups, Identity: r.Identity}
}

// RevokeRequest is the argument of UpdateRevoke: the sticky key (usually
// the tool name), who revokes it, and their approver groups.
type RevokeRequest struct {
	Key      string           `json:"key"`
	By       string           `json:"by"`
	Groups   []string         `json:"groups,omitempty"`
	Identity *policy.Identity `json:"identity,omitempty"`
	// Statement is the door's (policy.RevokeStatement).
	Statement *statement.Signed `json:"statement,omitempty"`
}

func (r RevokeRequest) approver() policy.Approver {
	return policy.Approver{Name: r.By, Groups: r.Groups, Identity: r.Identity}
}

// CallInput starts a ToolCallWorkflow.
type CallInput struct {
	Call policy.Call `json:"call"`
	// NoReport, for an agent-executed call: the call ends when it is
	// decided (status ok when approved), and the agent does not report.
	NoReport bool `json:"no_report,omitempty"`
	// Preview, for an agent-executed call: what it will change, as the
	// agent sees it (client.CallRequest.Preview).
	Preview *policy.Preview `json:"preview,omitempty"`
	// Submission is the door's statement that the requester asks for the
	// call (policy.SubmissionStatement); a call without a valid one ends
	// refused before the policy sees it. Calls the pins workflow starts
	// need none.
	Submission *statement.Signed `json:"submission,omitempty"`
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
	// Output is the tool's output after middleware: status ok, or unknown
	// when the agent ran the tool but could not tell how it went.
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
	// Identity is DecidedBy as their identity provider names them, when
	// they signed in through it.
	Identity *policy.Identity `json:"identity,omitempty"`
	// Claim says which run of an agent-executed call took its approval.
	Claim *Claim `json:"claim,omitempty"`
	// Approvals are those of a four-eyes call.
	Approvals *Approvals `json:"approvals,omitempty"`
	// Args are the arguments the tool ran with; OriginalArgs are the
	// agent's when an approver edited them.
	Args         json.RawMessage `json:"args,omitempty"`
	OriginalArgs json.RawMessage `json:"original_args,omitempty"`
	// Preview is what the call changed, as toolgate (or the agent) saw it
	// before it ran: of the arguments it ran with. PreviewShown is the one
	// the approver was shown, when an edit changed it.
	Preview      *policy.Preview `json:"preview,omitempty"`
	PreviewShown *policy.Preview `json:"preview_shown,omitempty"`
	// Rule and PolicyVersion say which policy judged the call.
	Rule          string `json:"rule,omitempty"`
	PolicyVersion string `json:"policy_version,omitempty"`
	Redactions    int    `json:"redactions,omitempty"`
	// Notices are the notices sent while the call waited for a person.
	Notices     []NoticeRecord `json:"notices,omitempty"`
	RequestedAt time.Time      `json:"requested_at,omitzero"`
	FinishedAt  time.Time      `json:"finished_at,omitzero"`
	// RanAfterEnd, on a call that ended denied or timed out, records that
	// its tool ran anyway: its acting user approved it at the agent's own
	// prompt after the call ended (RanAfterEndWorkflow). client.Status
	// fills it in from that record; ToolCallWorkflow never sets it.
	RanAfterEnd *RanAfterEnd `json:"ran_after_end,omitempty"`
}

// Call returns the identity of the call the Result answers.
func (r Result) Call() policy.Call {
	return policy.Call{ID: r.CallID, Session: r.Session, Tool: r.Tool, Args: r.Args, Requester: r.Requester, Execution: r.Execution}
}

// Approvals are the approvals a four-eyes call needs and has been given.
type Approvals struct {
	Needed int             `json:"needed"`
	Given  []ApprovalGiven `json:"given"`
}

// ApprovalGiven is one person's approval of a four-eyes call. Group is
// the group it counts for, when the rule needs distinct groups.
type ApprovalGiven struct {
	By       string           `json:"by"`
	Channel  string           `json:"channel"`
	At       time.Time        `json:"at"`
	Group    string           `json:"group,omitempty"`
	Identity *policy.Identity `json:"identity,omitempty"`
	// Passkey is the approver's passkey assertion, for a rule that needs one.
	Passkey *passkey.Assertion `json:"passkey,omitempty"`
}

// CallState is a call's live state, returned by QueryCall.
type CallState struct {
	Call policy.Call `json:"call"`
	// Run is the call's workflow run: a passkey's challenge names it.
	Run     string                  `json:"run,omitempty"`
	Status  Status                  `json:"status"`
	Request *policy.ApprovalRequest `json:"request,omitempty"`
	// WaitingSince and Deadline are set while a person is asked.
	WaitingSince time.Time        `json:"waiting_since,omitzero"`
	Deadline     time.Time        `json:"deadline,omitzero"`
	Decision     *policy.Decision `json:"decision,omitempty"`
	// Claim is set once the agent took the approval (UpdateClaim).
	Claim *Claim `json:"claim,omitempty"`
	// Approvals counts the approvals of a call that needs more than one.
	Approvals *Approvals `json:"approvals,omitempty"`
	// Notices are the notices (waiting, reminders, escalation) sent.
	Notices []NoticeRecord `json:"notices,omitempty"`
	// Result is set once the call is final.
	Result *Result `json:"result,omitempty"`
	// LedgerWait says why the call waits for the ledger (it is down),
	// while it does: no approved call runs, and no call ends, unlogged.
	LedgerWait string `json:"ledger_wait,omitempty"`
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

// Registration is a call's SignalRegister to its waiting room. Requester,
// Groups and the escalation let the room hand a sticky decision only to
// calls its author could have decided directly.
type Registration struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	StickyKey string `json:"sticky_key"`
	Requester string `json:"requester,omitempty"`
	// User is the acting user when the call's rule lets them decide.
	User string `json:"user,omitempty"`
	// Groups may decide the call; EscalateTo may too, EscalateAfter after
	// RequestedAt. Timeout is the call's deadline after RequestedAt.
	Groups        []string      `json:"groups,omitempty"`
	EscalateTo    []string      `json:"escalate_to,omitempty"`
	RequestedAt   time.Time     `json:"requested_at"`
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	Timeout       time.Duration `json:"timeout,omitempty"`
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
	// Since is the session's revision that recorded it.
	Since int64 `json:"since,omitempty"`
}

// DecisionCheck answers QueryCheckDecision: the refusal the decide update
// would give now (its error type and message), or nothing.
type DecisionCheck struct {
	RefusalType string `json:"refusal_type,omitempty"`
	Refusal     string `json:"refusal,omitempty"`
}

// SessionDecision is what a waiting room hands a call: a sticky decision
// of its key, or the session's end.
type SessionDecision struct {
	Decision *policy.Decision `json:"decision"`
	// Key is the sticky decision's key: a call of another key ignores it.
	Key string `json:"key,omitempty"`
	// Ended: the decision is the session's end, which denies every call
	// waiting in it that its ender may act on.
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
	// Owner is the agent the session belongs to: the requester of the call
	// that opened it.
	Owner string `json:"owner,omitempty"`
	// State is carried across continue-as-new.
	State SessionState `json:"state"`
	// IdleTimeout ends a session with no messages for that long; zero
	// means DefaultSessionIdleTimeout.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// ContinueAsNewAfter forces continue-as-new after that many handled
	// messages (tests); zero leaves it to the server's suggestion.
	ContinueAsNewAfter int `json:"continue_as_new_after,omitempty"`
}

// DefaultSessionIdleTimeout is how long an idle session keeps its sticky
// decisions (and an ended one answers "ended" from a running workflow).
const DefaultSessionIdleTimeout = 7 * 24 * time.Hour

// SessionState is everything a session remembers, carried across
// continue-as-new. Every list keeps insertion order, so workflow code never
// depends on map order.
type SessionState struct {
	Sticky []StickyDecision `json:"sticky,omitempty"`
	Quotas []QuotaUse       `json:"quotas,omitempty"`
	// End is the denial of the session's end, once it ended.
	End *policy.Decision `json:"end,omitempty"`
	// StickyFrom are the calls whose sticky decisions were recorded, so a
	// copy of one, sent again after a revoke, records nothing.
	StickyFrom []string `json:"sticky_from,omitempty"`
	// Revision counts the changes of the session's news: it grows with
	// every sticky decision, revoke and the end, and across runs.
	Revision int64 `json:"revision"`
}

// SessionView is the QuerySession answer. Waiting lists at most
// MaxWaitingShown calls; WaitingCount counts them all.
type SessionView struct {
	Session string           `json:"session"`
	Owner   string           `json:"owner,omitempty"`
	Sticky  []StickyDecision `json:"sticky,omitempty"`
	// End is the denial of the session's end, once it ended.
	End          *policy.Decision `json:"end,omitempty"`
	Waiting      []Registration   `json:"waiting,omitempty"`
	WaitingCount int              `json:"waiting_count"`
	Quotas       []QuotaUse       `json:"quotas,omitempty"`
	Ended        bool             `json:"ended,omitempty"`
	// LedgerWait says why the session waits for the decision ledger (it
	// is down), while it does.
	LedgerWait string `json:"ledger_wait,omitempty"`
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
	}
}
