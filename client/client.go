// Package client is the Go API of toolgate for agents (submit a call, wait
// for its Result) and for approvers (list waiting calls, decide, manage
// sessions). It talks to Temporal directly; it does not compile the server.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/canonjson"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// MaxArgsBytes caps a call's arguments. Temporal warns from 512 KiB and
// refuses payloads over 2 MiB; a call is refused here, before anything
// starts.
const MaxArgsBytes = policy.MaxArgsBytes

// Client submits and decides tool calls.
type Client struct {
	tc         client.Client
	taskQueue  string
	namespace  string
	eagerStart bool
	// firstPages remembers where Pending found first pages (pending.go).
	firstPages *pageHints
	// claims remembers the sessions found to belong to their caller
	// (session.go).
	claims *claims
	// door signs what the client sends (door.go); nil: it sends nothing
	// that needs a statement. facts are the calls it knows (door.go).
	door  *statement.Signer
	facts *knownCalls
	// dc decodes what the client reads raw (memos, heartbeats, inputs): the
	// converter tc was dialled with.
	dc converter.DataConverter
}

// New wraps a connected Temporal client. taskQueue is where toolgate's
// workers poll; empty means workflows.TaskQueue.
func New(tc client.Client, taskQueue string) *Client {
	if taskQueue == "" {
		taskQueue = workflows.TaskQueue
	}
	return &Client{tc: tc, taskQueue: taskQueue, namespace: "default", firstPages: &pageHints{}, claims: &claims{}, facts: &knownCalls{},
		dc: converter.GetDefaultDataConverter()}
}

// WithDataConverter returns a client that decodes what it reads raw from
// Temporal (memos, heartbeats, a call's request) with dc: the data
// converter tc was dialled with (keyring.DataConverter when payloads are
// encrypted). The default is the SDK's.
func (c *Client) WithDataConverter(dc converter.DataConverter) *Client {
	n := *c
	n.dc = dc
	return &n
}

// WithNamespace returns a client that names namespace where the Temporal
// API needs it spelled out (completing an agent's report). It must be the
// namespace tc is connected to; the default is "default".
func (c *Client) WithNamespace(namespace string) *Client {
	n := *c
	n.namespace = namespace
	return &n
}

// WithEagerStart returns a client that asks the server to hand a new
// call's first workflow task straight to a worker in this process (eager
// workflow start), saving a trip through matching. It helps only when the
// program runs a toolgate worker on the same Temporal client.
func (c *Client) WithEagerStart() *Client {
	e := *c
	e.eagerStart = true
	return &e
}

// Temporal returns the underlying Temporal client.
func (c *Client) Temporal() client.Client { return c.tc }

// CallRequest is what an agent asks for.
type CallRequest struct {
	// CallID makes the call idempotent: submitting the same ID again
	// returns the same call. Optional; generated when empty. IDs are
	// unique in the namespace, across sessions.
	CallID  string
	Session string
	Tool    string
	// Args is a JSON object; empty means {}.
	Args json.RawMessage
	// Requester names the agent; it can never decide this call.
	Requester string
	// ActingUser names the person running the agent (see
	// policy.Call.ActingUser); the HTTP API takes it from the agent
	// token's owner, whatever the request says. Optional.
	ActingUser string
	// Execution policy.ExecutionAgent: the agent runs the tool itself once
	// the call is approved (the tool need not be registered), and reports
	// the outcome with Report.
	Execution policy.Execution
	// NoReport, for an agent-executed call: the call ends at the decision
	// (status ok when approved); the agent does not report.
	NoReport bool
	// Preview, for an agent-executed call: what it will change, as the
	// agent sees it (a diff of a file only it can read). Approvers are
	// told it is the agent's claim; toolgate computes its own for the
	// tools it runs.
	Preview *policy.Preview
}

// idPattern is the one rule for identifiers: call IDs, sessions, tool
// names, token names. Such a value is safe in a workflow ID, a visibility
// query, a URL path, a log line and a Slack message.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// ValidateID checks an identifier (a call ID, a session, a tool name, a
// token's name) against toolgate's one rule for them: 1-128 ASCII letters,
// digits and . _ : @ -, starting with a letter or digit. The error is an
// *InputError naming field; it never repeats the value.
func ValidateID(field, value string) error {
	switch {
	case value == "":
		return &InputError{Field: field, Problem: "is required"}
	case !idPattern.MatchString(value):
		return &InputError{Field: field, Problem: "must be 1-128 characters of letters, digits and . _ : @ -, starting with a letter or digit"}
	}
	return nil
}

// Validate refuses a request that cannot become a call, naming the field.
func (r *CallRequest) Validate() error {
	if err := ValidateID("session", r.Session); err != nil {
		return err
	}
	if r.CallID != "" {
		if err := ValidateID("call_id", r.CallID); err != nil {
			return err
		}
	}
	if err := ValidateID("tool", r.Tool); err != nil {
		return err
	}
	if err := r.checkReserved(); err != nil {
		return err
	}
	if r.ActingUser != "" {
		if err := ValidateID("acting_user", r.ActingUser); err != nil {
			return err
		}
		if r.ActingUser == r.Requester {
			return &InputError{Field: "acting_user", Problem: "names the requester: the person running an agent is not the agent"}
		}
	}
	if len(r.Args) == 0 {
		r.Args = json.RawMessage("{}")
	}
	if len(r.Args) > MaxArgsBytes {
		return &InputError{Field: "args", Problem: fmt.Sprintf("are %d bytes, over the %d-byte limit", len(r.Args), MaxArgsBytes)}
	}
	if problem := notAnObject(r.Args); problem != "" {
		return &InputError{Field: "args", Problem: problem}
	}
	switch {
	case r.Execution != policy.ExecutionToolgate && r.Execution != policy.ExecutionAgent:
		return &InputError{Field: "execution", Problem: `must be "agent" (the agent runs the tool) or empty (toolgate runs it)`}
	case r.NoReport && r.Execution != policy.ExecutionAgent:
		return &InputError{Field: "report", Problem: `can be false only for a call with execution "agent"`}
	}
	if p := r.Preview; p != nil {
		switch {
		case r.Execution != policy.ExecutionAgent:
			return &InputError{Field: "preview", Problem: `is the agent's only for a call with execution "agent"; toolgate previews the tools it runs`}
		case p.Kind != policy.PreviewDiff && p.Kind != policy.PreviewCommand && p.Kind != policy.PreviewText:
			return &InputError{Field: "preview.kind", Problem: `must be "diff", "command" or "text"`}
		case !utf8.ValidString(p.Text):
			return &InputError{Field: "preview.text", Problem: "must be UTF-8 text"}
		}
		bounded := p.Bounded()
		bounded.ComputedBy = policy.ComputedByAgent
		r.Preview = &bounded
	}
	return nil
}

// ErrReserved is the cause (errors.Is) of the *InputError that refuses a
// call into what toolgate keeps for its own calls: a session starting with
// policy.ReservedSessionPrefix, a call ID starting with
// policy.ReservedCallIDPrefix, a requester or acting user in
// policy.ReservedNames, or the definition_change tool. The HTTP API
// answers it with 403. Toolgate's own definition_change calls are started
// by the pins workflow, never submitted.
var ErrReserved = errors.New("reserved for toolgate's own calls")

// checkReserved refuses a request for what toolgate keeps for itself.
func (r *CallRequest) checkReserved() error {
	switch {
	case policy.IsReservedSession(r.Session):
		return &InputError{Field: "session", Problem: fmt.Sprintf("is reserved: sessions starting with %q are toolgate's own", policy.ReservedSessionPrefix), Err: ErrReserved}
	case policy.IsReservedCallID(r.CallID):
		return &InputError{Field: "call_id", Problem: fmt.Sprintf("is reserved: call IDs starting with %q are toolgate's own", policy.ReservedCallIDPrefix), Err: ErrReserved}
	case policy.IsReservedName(r.Requester):
		return &InputError{Field: "requester", Problem: fmt.Sprintf("%q is reserved: the name is toolgate's own", r.Requester), Err: ErrReserved}
	case policy.IsReservedName(r.ActingUser):
		return &InputError{Field: "acting_user", Problem: fmt.Sprintf("%q is reserved: the name is toolgate's own", r.ActingUser), Err: ErrReserved}
	case r.Tool == policy.DefinitionChangeTool:
		return &InputError{Field: "tool", Problem: "definition_change is reserved: definition_change calls are made by toolgate itself, when an upstream MCP server changes a tool", Err: ErrReserved}
	}
	return nil
}

// notAnObject says what is wrong with raw when it is not a JSON object, in
// JSON's words; "" when it is one.
func notAnObject(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "must be a JSON object; this is not valid JSON"
	}
	switch v.(type) {
	case map[string]any:
		return ""
	case []any:
		return "must be a JSON object, not an array"
	case string:
		return "must be a JSON object, not a string"
	case float64:
		return "must be a JSON object, not a number"
	case bool:
		return "must be a JSON object, not a boolean"
	}
	return "must be a JSON object, not null"
}

// Submit starts the call's workflow and returns its call ID. Submitting a
// call ID that exists returns it again (the tool never runs twice) when the
// request is the same call; the same ID with another session, tool,
// requester or arguments is refused with an *InputError wrapping
// ErrCallIDTaken. A call into another agent's session is refused with
// ErrNotYourSession.
func (c *Client) Submit(ctx context.Context, req CallRequest) (string, error) {
	in, err := c.prepare(ctx, &req)
	if err != nil {
		return "", err
	}
	opts := c.startOptions(req)
	opts.EnableEagerStart = c.eagerStart
	run, err := c.tc.ExecuteWorkflow(ctx, opts, workflows.ToolCallWorkflow, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return req.CallID, c.checkSameCall(ctx, req)
	}
	if err != nil {
		return "", fmt.Errorf("start call %s: %w", req.CallID, err)
	}
	if run != nil {
		c.facts.put(req.CallID, in.Call, run.GetRunID())
	}
	return req.CallID, nil
}

// prepare validates a request, names its call when it has no ID, and
// makes sure its session is the requester's; it returns the call's
// workflow input.
func (c *Client) prepare(ctx context.Context, req *CallRequest) (workflows.CallInput, error) {
	if err := req.Validate(); err != nil {
		return workflows.CallInput{}, err
	}
	if c.door == nil {
		return workflows.CallInput{}, ErrNoDoorKey
	}
	if req.CallID == "" {
		req.CallID = NewCallID()
	}
	if err := c.claimSession(ctx, req.Session, req.Requester); err != nil {
		return workflows.CallInput{}, err
	}
	call := policy.Call{ID: req.CallID, Session: req.Session, Tool: req.Tool, Args: req.Args, Requester: req.Requester,
		ActingUser: req.ActingUser, Execution: req.Execution}
	submission, err := c.sign(policy.SubmissionStatement(call))
	if err != nil {
		return workflows.CallInput{}, err
	}
	return workflows.CallInput{Call: call, NoReport: req.NoReport, Preview: req.Preview, Submission: submission}, nil
}

// startOptions start a call's workflow once: a call ID that exists, or
// existed, is refused by Temporal.
func (c *Client) startOptions(req CallRequest) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       workflows.CallWorkflowID(req.CallID),
		TaskQueue:                                c.taskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.AttrStatus.ValueSet(string(workflows.StatusEvaluating)),
			workflows.AttrTool.ValueSet(req.Tool),
			workflows.AttrSession.ValueSet(req.Session),
			workflows.AttrRequestedAt.ValueSet(time.Now().UTC()),
			workflows.AttrRequester.ValueSet(req.Requester),
		),
	}
}

// checkSameCall accepts a resubmitted call ID only for the very call it
// names: the same session, tool, requester and arguments (compared as JSON
// values, so spacing and key order do not matter). The refusal says nothing
// about that call, which may be another agent's.
func (c *Client) checkSameCall(ctx context.Context, req CallRequest) error {
	first, err := c.Request(ctx, req.CallID)
	if err != nil {
		return err
	}
	if first.Session != req.Session || first.Tool != req.Tool || first.Requester != req.Requester ||
		first.ActingUser != req.ActingUser || first.Execution != req.Execution || !sameJSON(first.Args, req.Args) {
		return &InputError{Field: "call_id", Problem: fmt.Sprintf("%q is already taken by another call; use a new call ID", req.CallID), Err: ErrCallIDTaken}
	}
	return nil
}

// sameJSON reports whether a and b hold the same JSON value. Numbers are
// compared by their text, so 1 and 1.0 differ: a doubt refuses the call.
func sameJSON(a, b []byte) bool {
	va, errA := decodeJSON(a)
	vb, errB := decodeJSON(b)
	return errA == nil && errB == nil && reflect.DeepEqual(va, vb)
}

// CanonicalJSON re-encodes a JSON value in one form: object keys sorted,
// no spaces, numbers as written, no HTML escaping. Two encodings of the
// same value give the same bytes, so it can key a request by what it
// asks. It is the project's one canonical JSON (canonjson), and
// its output never changes: hook attempts and tool-definition pins
// recorded in histories were hashed with it.
func CanonicalJSON(raw []byte) (json.RawMessage, error) {
	return canonjson.Canonical(raw)
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// Wait blocks until the call has a Result, or ctx ends.
func (c *Client) Wait(ctx context.Context, callID string) (workflows.Result, error) {
	var r workflows.Result
	if err := ValidateID("call_id", callID); err != nil {
		return r, err
	}
	// The run this client started, when it did: without one the SDK
	// describes the workflow to find it, a round trip before the long
	// poll. A call's workflow ID has one run (REJECT_DUPLICATE).
	run := ""
	if f, ok := c.facts.get(callID); ok {
		run = f.run
	}
	err := c.tc.GetWorkflow(ctx, workflows.CallWorkflowID(callID), run).Get(ctx, &r)
	if err != nil {
		if waitEnded(ctx, err) {
			return r, context.DeadlineExceeded
		}
		var terminated *temporal.TerminatedError
		var failed *temporal.WorkflowExecutionError
		switch {
		case errors.As(err, &terminated):
			return r, fmt.Errorf("call %s: %w: an operator terminated it", callID, ErrNoResult)
		case errors.As(err, &failed):
			return r, fmt.Errorf("call %s: %w: its workflow failed (%v)", callID, ErrNoResult, errors.Unwrap(failed))
		}
		return r, c.mapNotFound(ctx, callID, fmt.Errorf("wait for call %s: %w", callID, err))
	}
	return r, nil
}

// waitEnded reports whether a long poll ended because the caller's
// deadline came: the SDK ends the poll a little before the deadline, with
// a cancellation rather than ctx's error.
func waitEnded(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	var canceled *serviceerror.Canceled
	var deadline *serviceerror.DeadlineExceeded
	_, hasDeadline := ctx.Deadline()
	return hasDeadline && (errors.As(err, &canceled) || errors.As(err, &deadline))
}

// Call submits and waits: the one-line API for agents.
func (c *Client) Call(ctx context.Context, req CallRequest) (workflows.Result, error) {
	id, err := c.Submit(ctx, req)
	if err != nil {
		return workflows.Result{}, err
	}
	return c.Wait(ctx, id)
}

// Status is a call's Result when it has one, otherwise its live state.
type Status struct {
	Result *workflows.Result
	State  *workflows.CallState
	// Progress is the running tool's latest progress, when it reports
	// any (an upstream MCP server's progress notifications, say).
	Progress *tool.Progress
	// KeysWait says why a call has not begun: its payloads are encrypted
	// with a key its workers lack (keyring.WaitingForKeys). State then
	// holds only the call's ID.
	KeysWait string
}

// keysWait returns the reason a call's workflow task keeps failing when it
// is waiting for keys, else "". The worker writes that failure unencrypted
// (keyring.FailureConverter), so a client holding only the new key reads it.
func (c *Client) keysWait(ctx context.Context, wid string, desc *workflowservice.DescribeWorkflowExecutionResponse) string {
	if desc.GetPendingWorkflowTask().GetAttempt() < 2 {
		return ""
	}
	last := ""
	events := c.tc.GetWorkflowHistory(ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for events.HasNext() {
		ev, err := events.Next()
		if err != nil {
			return ""
		}
		if f := ev.GetWorkflowTaskFailedEventAttributes(); f != nil {
			last = f.GetFailure().GetMessage()
		}
	}
	if msg, ok := strings.CutPrefix(last, keyring.WaitingForKeys); ok {
		return msg
	}
	return ""
}

// Status returns where the call stands now, without waiting. A call that
// ended denied or timed out carries the record of a run after its end, if
// its tool ran anyway (Result.RanAfterEnd).
func (c *Client) Status(ctx context.Context, callID string) (Status, error) {
	if err := ValidateID("call_id", callID); err != nil {
		return Status{}, err
	}
	wid := workflows.CallWorkflowID(callID)
	desc, err := c.tc.DescribeWorkflowExecution(ctx, wid, "")
	if err != nil {
		return Status{}, c.mapNotFound(ctx, callID, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		r, err := c.Wait(ctx, callID)
		if err != nil {
			return Status{}, err
		}
		if err := c.withRanAfterEnd(ctx, callID, &r); err != nil {
			return Status{}, err
		}
		return Status{Result: &r}, nil
	}
	if wait := c.keysWait(ctx, wid, desc); wait != "" {
		return Status{State: &workflows.CallState{Call: policy.Call{ID: callID}, Status: workflows.StatusEvaluating}, KeysWait: wait}, nil
	}
	v, err := c.tc.QueryWorkflow(ctx, wid, "", workflows.QueryCall)
	if err != nil {
		return Status{}, fmt.Errorf("query call %s: %w", callID, err)
	}
	var st workflows.CallState
	if err := v.Get(&st); err != nil {
		return Status{}, fmt.Errorf("decode call %s: %w", callID, err)
	}
	if err := c.withRanAfterEnd(ctx, callID, st.Result); err != nil { // final, the workflow is finishing up
		return Status{}, err
	}
	return Status{State: &st, Progress: toolProgress(c.dc, desc)}, nil
}

// toolProgress is the progress a running tool step's heartbeat carries
// (activities.ToolHeartbeat), from the describe of its call.
func toolProgress(dc converter.DataConverter, desc *workflowservice.DescribeWorkflowExecutionResponse) *tool.Progress {
	for _, pa := range desc.GetPendingActivities() {
		if !activities.IsToolStep(pa.GetActivityType().GetName()) || pa.GetHeartbeatDetails() == nil {
			continue
		}
		var hb activities.ToolHeartbeat
		if err := dc.FromPayloads(pa.GetHeartbeatDetails(), &hb); err == nil {
			return hb.Progress
		}
	}
	return nil
}

// NewCallID returns a random call ID.
func NewCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "call-" + hex.EncodeToString(b[:])
}

// Waiting is the JSON shape of a call that has no Result yet, as the CLI
// and the HTTP API print it.
type Waiting struct {
	CallID    string           `json:"call_id"`
	Session   string           `json:"session"`
	Tool      string           `json:"tool"`
	Requester string           `json:"requester,omitempty"`
	Status    workflows.Status `json:"status"`
	// Execution is "agent" when the agent runs the tool itself.
	Execution policy.Execution `json:"execution,omitempty"`
	// Args are the arguments to run: for an approved agent-executed call,
	// the approver's edit when there was one.
	Args    json.RawMessage `json:"args,omitempty"`
	Message string          `json:"message,omitempty"`
	Rule    string          `json:"rule,omitempty"`
	Groups  []string        `json:"groups,omitempty"`
	// WaitingSince and Deadline are set while a person is asked.
	WaitingSince time.Time `json:"waiting_since,omitzero"`
	Deadline     time.Time `json:"deadline,omitzero"`
	// Notices say who was told about the call, and when.
	Notices []workflows.NoticeRecord `json:"notices,omitempty"`
	// Decision, DecidedBy and Comment are set once the call is decided
	// (status approved, running or, while it finishes, denied); Reason is
	// a denial's reason, as the model will read it.
	Decision  string `json:"decision,omitempty"`
	DecidedBy string `json:"decided_by,omitempty"`
	Comment   string `json:"comment,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Progress is the running tool's latest progress, when it reports any.
	Progress *tool.Progress `json:"progress,omitempty"`
	// LedgerWait says why the call waits for the decision ledger, while
	// it is down.
	LedgerWait string `json:"ledger_wait,omitempty"`
	// Preview is what the call will change, shown to its approvers.
	Preview *policy.Preview `json:"preview,omitempty"`
	// Approvals count a four-eyes call's approvals.
	Approvals *workflows.Approvals `json:"approvals,omitempty"`
	// User names the person running the agent when the call's rule lets
	// them decide it in the agent's own client (channel "client").
	User string `json:"user,omitempty"`
	// KeysWait says why the call has not begun: its workers lack the key
	// its payloads are encrypted with. It begins once they have it.
	KeysWait string `json:"keys_wait,omitempty"`
	// Claimed answers a submission with a claim: the approval was taken
	// for the claim's run. ClaimRefused says why it could not be.
	Claimed      bool          `json:"claimed,omitempty"`
	ClaimRefused *ClaimRefusal `json:"claim_refused,omitempty"`
}

// ClaimRefusal is why a submission's claim was refused: the code and
// message that POST /v1/calls/{id}/claim answers with.
type ClaimRefusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WaitingView turns the status of a call without a Result (State set)
// into its Waiting shape.
func WaitingView(s Status) Waiting {
	st := *s.State
	w := Waiting{
		CallID: st.Call.ID, Session: st.Call.Session, Tool: st.Call.Tool, Requester: st.Call.Requester,
		Status: st.Status, Execution: st.Call.Execution, Args: st.Call.Args, WaitingSince: st.WaitingSince, Deadline: st.Deadline, Notices: st.Notices,
		Progress: s.Progress, Approvals: st.Approvals, LedgerWait: st.LedgerWait, KeysWait: s.KeysWait,
	}
	if d := st.Decision; d != nil {
		w.Decision, w.DecidedBy, w.Comment = d.Kind.String(), d.DecidedBy, d.Comment
		if !d.Kind.Approves() {
			w.Reason = d.Reason
		}
	}
	if st.Request != nil {
		w.Message, w.Rule, w.Groups, w.Preview = st.Request.Message, st.Request.Rule, st.Request.Groups, st.Request.Preview
		w.User = policy.DecidersOf(st.Call, *st.Request, nil).User
	}
	return w
}
