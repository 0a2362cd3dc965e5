package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// testPolicy asks a person for the tools in ask, refuses those in deny and
// approves the rest; the hooks are optional.
type testPolicy struct {
	policy.Base
	ask    map[string]policy.ApprovalRequest
	deny   map[string]string
	refuse func(call policy.Call) string // extra refusal on arguments
	// askFor, when set, decides by arguments which request a call gets.
	askFor func(call policy.Call) (policy.ApprovalRequest, bool)
	before func(call policy.Call) error
	after  func(call policy.Call, out json.RawMessage) error
	quotas map[string]policy.Quota
	// grants are the sandbox grants of each tool's calls.
	grants map[string]*policy.SandboxGrant
	// shadows are what shadow rules would do with each tool's calls.
	shadows map[string]*policy.Shadow
}

func (p *testPolicy) SandboxFor(call policy.Call) *policy.SandboxGrant { return p.grants[call.Tool] }

func (p *testPolicy) ShadowFor(call policy.Call) *policy.Shadow { return p.shadows[call.Tool] }

func (p *testPolicy) SessionQuota(tool string) (policy.Quota, bool) {
	q, ok := p.quotas[tool]
	return q, ok
}

func (p *testPolicy) EvaluateApproval(_ context.Context, call policy.Call) (*policy.ApprovalRequest, error) {
	if reason, ok := p.deny[call.Tool]; ok {
		return nil, &policy.DenyError{Reason: reason, Rule: "deny-" + call.Tool}
	}
	if p.refuse != nil {
		if reason := p.refuse(call); reason != "" {
			return nil, policy.Deny(reason)
		}
	}
	if p.askFor != nil {
		if req, ok := p.askFor(call); ok {
			return &req, nil
		}
	}
	if req, ok := p.ask[call.Tool]; ok {
		return &req, nil
	}
	return nil, nil
}

func (p *testPolicy) BeforeCall(_ context.Context, call policy.Call) error {
	if p.before != nil {
		return p.before(call)
	}
	return nil
}

func (p *testPolicy) AfterCall(_ context.Context, call policy.Call, out json.RawMessage) error {
	if p.after != nil {
		return p.after(call, out)
	}
	return nil
}

func (p *testPolicy) Version() string { return "test/1" }

// runLog counts tool executions per call ID.
type runLog struct {
	mu   sync.Mutex
	runs map[string]int
}

func (r *runLog) add(callID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[callID]++
}

func (r *runLog) count(callID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[callID]
}

func (r *runLog) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.runs {
		n += c
	}
	return n
}

// hookLog records lifecycle hook calls.
type hookLog struct {
	mu     sync.Mutex
	starts []string
	ends   []string
	// onStart, when set, runs as a tool starts.
	onStart func(policy.Call)
}

func (h *hookLog) OnToolStart(_ context.Context, call policy.Call) {
	if h.onStart != nil {
		h.onStart(call)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starts = append(h.starts, call.ID)
}

func (h *hookLog) OnToolEnd(_ context.Context, call policy.Call, _ policy.ToolEnd) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ends = append(h.ends, call.ID)
}

func (h *hookLog) calls() (starts, ends []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.starts...), append([]string(nil), h.ends...)
}

// redactor replaces the fake secret "sk-live-123" in outputs.
type redactor struct{}

func (redactor) TransformOutput(_ context.Context, _ policy.Call, out json.RawMessage) (json.RawMessage, int, error) {
	n := strings.Count(string(out), "sk-live-123")
	return json.RawMessage(strings.ReplaceAll(string(out), "sk-live-123", "[REDACTED]")), n, nil
}

const writeSchema = `{"type":"object","required":["path","content"],"additionalProperties":false,
 "properties":{"path":{"type":"string"},"content":{"type":"string"}}}`

func testTools(runs *runLog) *tool.Registry {
	r := tool.NewRegistry()
	record := func(run tool.Func) tool.Func {
		return func(ctx context.Context, in tool.Input) (json.RawMessage, error) {
			runs.add(in.CallID)
			return run(ctx, in)
		}
	}
	r.MustRegister(
		tool.Tool{Name: "echo", Run: record(func(_ context.Context, in tool.Input) (json.RawMessage, error) { return in.Args, nil })},
		tool.Tool{Name: "write", Schema: json.RawMessage(writeSchema), Run: record(func(_ context.Context, in tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`{"written":true,"args":` + string(in.Args) + `}`), nil
		}), Preview: func(_ context.Context, args json.RawMessage) (policy.Preview, error) {
			var a struct{ Path, Content string }
			err := json.Unmarshal(args, &a)
			return policy.Preview{Kind: policy.PreviewDiff, Text: "+++ b/" + a.Path + "\n+" + a.Content}, err
		}},
		tool.Tool{Name: "leak", Run: record(func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`{"env":"TOKEN=sk-live-123"}`), nil
		})},
		tool.Tool{Name: "broken", Options: tool.Options{Retry: tool.RetryPolicy{MaxAttempts: 2}, Idempotent: true},
			Run: record(func(context.Context, tool.Input) (json.RawMessage, error) {
				return nil, errors.New("disk full")
			})},
		// large answers with 1,000 KiB.
		tool.Tool{Name: "large", Run: record(func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("z", 1000<<10) + `"`), nil
		})},
		// slow and slowRead outlast their timeout: the attempt is lost.
		tool.Tool{Name: "slow", Options: tool.Options{Timeout: 50 * time.Millisecond},
			Run: record(blockUntilDone)},
		tool.Tool{Name: "slowRead", Options: tool.Options{Timeout: 50 * time.Millisecond, Idempotent: true,
			Retry: tool.RetryPolicy{InitialInterval: time.Millisecond}}, Run: record(blockUntilDone)},
	)
	return r
}

func blockUntilDone(ctx context.Context, _ tool.Input) (json.RawMessage, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// harnessInput runs a session, its waiting rooms and several calls side
// by side, as children of one workflow, so the real ToolgateSession,
// WaitingRooms and ToolCallWorkflows talk to each other inside the test
// environment.
type harnessInput struct {
	Session    string
	Calls      []CallInput
	Sequential bool
	// Gap delays each call after the first (virtual time).
	Gap time.Duration
}

func harnessWorkflow(ctx workflow.Context, in harnessInput) ([]Result, error) {
	sctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: SessionWorkflowID(in.Session)})
	session := workflow.ExecuteChildWorkflow(sctx, SessionWorkflowType, SessionInput{Session: in.Session, Owner: "agent-1"})
	if err := session.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		return nil, err
	}
	for room := range Rooms {
		// Started up front: the environment has no client to start one
		// on a call's signal. They never idle out during a test.
		rctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: RoomWorkflowID(in.Session, room)})
		f := workflow.ExecuteChildWorkflow(rctx, RoomWorkflowType, RoomInput{Session: in.Session, Room: room, IdleTimeout: 1000 * time.Hour})
		if err := f.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
			return nil, err
		}
	}
	futures := make([]workflow.ChildWorkflowFuture, len(in.Calls))
	results := make([]Result, len(in.Calls))
	for i, c := range in.Calls {
		if i > 0 && in.Gap > 0 {
			_ = workflow.Sleep(ctx, in.Gap)
		}
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: CallWorkflowID(c.Call.ID)})
		futures[i] = workflow.ExecuteChildWorkflow(cctx, ToolCallWorkflow, c)
		if in.Sequential {
			if err := futures[i].Get(ctx, &results[i]); err != nil {
				return nil, err
			}
		}
	}
	for i, f := range futures {
		if err := f.Get(ctx, &results[i]); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// decision is a person's answer, as the CLI would send it.
func decision(kind policy.DecisionKind, by string) policy.Decision {
	return policy.Decision{Kind: kind, DecidedBy: by, Channel: "cli"}
}

// updateOutcome is what the approver's update call saw.
type updateOutcome struct {
	sent     bool
	rejected error // by the validator
	failed   error // by the handler, after the validator accepted
	applied  bool
	result   any // what the handler returned
}

// updateSeq gives every test update its own ID: the environment
// deduplicates updates by ID, as the server does.
var updateSeq int

// decideAt sends the decide update to a call at a virtual time.
func decideAt(env *testsuite.TestWorkflowEnvironment, after time.Duration, callID string, d policy.Decision) *updateOutcome {
	return updateAt(env, after, callID, UpdateDecide, DecideRequest{CallID: callID, Decision: d})
}

// updateAt sends the call an update at a virtual time.
func updateAt(env *testsuite.TestWorkflowEnvironment, after time.Duration, callID, update string, arg any) *updateOutcome {
	return updateMadeAt(env, after, callID, update, func() any { return arg })
}

// updateMadeAt sends the call an update at a virtual time, made then.
func updateMadeAt(env *testsuite.TestWorkflowEnvironment, after time.Duration, callID, update string, makeArg func() any) *updateOutcome {
	o := &updateOutcome{}
	updateSeq++
	updateID := fmt.Sprintf("%s-%d", update, updateSeq)
	env.RegisterDelayedCallback(func() {
		o.sent = true
		err := env.UpdateWorkflowByID(CallWorkflowID(callID), update, updateID, &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { o.rejected = err },
			OnComplete: func(v any, err error) { o.applied, o.failed, o.result = err == nil, err, v },
		}, makeArg())
		if err != nil {
			o.rejected = err
		}
	}, after)
	return o
}

func call(id, toolName, args string) CallInput {
	return CallInput{Call: policy.Call{ID: id, Session: "s1", Tool: toolName, Args: json.RawMessage(args), Requester: "agent-1"}}
}

func newActivities(p policy.ToolPolicy, runs *runLog, hooks *hookLog, channels ...activities.Channel) *activities.Activities {
	return &activities.Activities{
		Policy:     p,
		Tools:      testTools(runs),
		Hooks:      []policy.LifecycleHook{hooks},
		Middleware: []policy.OutputMiddleware{redactor{}},
		Channels:   channels,
		Doors:      testDoors,
	}
}

// fakeChannel records what a notification channel is asked to do.
type fakeChannel struct {
	mu       sync.Mutex
	notices  []activities.Notice
	outcomes []activities.Outcome
	receipts [][]activities.Receipt
}

func (f *fakeChannel) Name() string { return "fake" }

func (f *fakeChannel) Notify(_ context.Context, n activities.Notice) (activities.Receipt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notices = append(f.notices, n)
	return activities.Receipt{Ref: map[string]string{"msg": fmt.Sprint(len(f.notices))}}, nil
}

func (f *fakeChannel) Resolve(_ context.Context, o activities.Outcome, rs []activities.Receipt) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcomes = append(f.outcomes, o)
	f.receipts = append(f.receipts, rs)
	return nil
}

func startOptions(callID string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: CallWorkflowID(callID)}
}

// quietLogger drops the test environment's debug output; failures are
// reported by assertions.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// fakeTemporal answers the activities that need a Temporal client, which
// the test environment does not give them: SendSignals (a room's large
// batches, signalled to the environment's workflows) and TakeCensus (a
// query to each room). Both are worked out in the environment's main loop,
// by the activity-started listener (from an activity's goroutine, driving
// the environment would race it); the mock returns what the listener
// found.
type fakeTemporal struct {
	env *testsuite.TestWorkflowEnvironment
	// alsoOnStart is another activity-started listener of the test.
	alsoOnStart func(*activity.Info, converter.EncodedValues)
	mu          sync.Mutex
	answers     map[string]chan any
	// batches counts the SendSignals batches delivered.
	batches   int
	installed bool
}

func newFakeTemporal(env *testsuite.TestWorkflowEnvironment) *fakeTemporal {
	return &fakeTemporal{env: env, answers: map[string]chan any{}}
}

// install registers the mocks, after any the test registered itself (the
// first registered mock of an activity answers).
func (f *fakeTemporal) install() {
	if f.installed {
		return
	}
	f.installed = true
	f.env.OnActivity("SendSignals", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ activities.SignalsInput) ([]string, error) {
			return (<-f.answer(ctx)).([]string), nil
		})
	f.env.OnActivity("TakeCensus", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ activities.CensusInput) (activities.Census, error) {
			return (<-f.answer(ctx)).(activities.Census), nil
		})
	f.env.OnActivity("JoinWaitingRoom", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ activities.JoinInput) (activities.Joined, error) {
			switch v := (<-f.answer(ctx)).(type) {
			case error:
				return activities.Joined{}, v
			default:
				return v.(activities.Joined), nil
			}
		})
	f.env.OnActivity("ReadSession", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ activities.ReadSessionInput) (activities.SessionWord, error) {
			return (<-f.answer(ctx)).(activities.SessionWord), nil
		})
	f.env.SetOnActivityStartedListener(f.onStart)
	f.env.SetOnLocalActivityStartedListener(f.onLocalStart)
}

// onLocalStart runs in the environment's main loop. A join only signals
// the room (the environment cannot start a workflow from an activity, and
// the tests start the rooms they need), then reads the session's word from
// its query; with no room to signal it fails as a worker without a client
// would.
func (f *fakeTemporal) onLocalStart(info *activity.Info, _ context.Context, args []any) {
	if info.ActivityType.Name == "ReadSession" {
		var in activities.ReadSessionInput
		for _, arg := range args {
			if v, ok := arg.(activities.ReadSessionInput); ok {
				in = v
			}
		}
		f.channel(info.WorkflowExecution.ID + "/" + info.ActivityID) <- f.sessionWord(in.Session, in.Key)
		return
	}
	if info.ActivityType.Name != "JoinWaitingRoom" {
		return
	}
	var in activities.JoinInput
	for _, arg := range args {
		if v, ok := arg.(activities.JoinInput); ok {
			in = v
		}
	}
	reply := f.channel(info.WorkflowExecution.ID + "/" + info.ActivityID)
	// The room of the call's ID takes it, as a worker's batch of one would.
	room := RoomOf(in.CallID)
	target := in.Rooms[room].WorkflowID
	if err := f.env.SignalWorkflowByID(target, in.SignalName, []any{in.Registration}); err != nil {
		reply <- temporal.NewNonRetryableApplicationError("no workflow "+target+" to signal: "+err.Error(), "Misconfigured", nil)
		return
	}
	reply <- activities.Joined{SessionWord: f.sessionWord(in.Session, in.Key), Room: &room}
}

// sessionWord is what the session's query shows a call of key, as its memo
// would.
func (f *fakeTemporal) sessionWord(session, key string) activities.SessionWord {
	var word activities.SessionWord
	if val, err := f.query(session, QuerySession); err == nil {
		var view SessionView
		if val.Get(&view) == nil {
			word.End = view.End
			for _, d := range view.Sticky {
				if d.Key == key {
					word.Sticky = fromSticky(d)
				}
			}
		}
	}
	return word
}

func (f *fakeTemporal) answer(ctx context.Context) chan any {
	info := activity.GetInfo(ctx)
	return f.channel(info.WorkflowExecution.ID + "/" + info.ActivityID)
}

func (f *fakeTemporal) channel(key string) chan any {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.answers[key]
	if !ok {
		ch = make(chan any, 1)
		f.answers[key] = ch
	}
	return ch
}

// onStart runs in the environment's main loop.
func (f *fakeTemporal) onStart(info *activity.Info, _ context.Context, args converter.EncodedValues) {
	if f.alsoOnStart != nil {
		f.alsoOnStart(info, args)
	}
	reply := f.channel(info.WorkflowExecution.ID + "/" + info.ActivityID)
	switch info.ActivityType.Name {
	case "RunTool", "RunToolChecked":
		// The real activity sends the call's leave of its room.
		var in activities.RunToolInput
		if args.Get(&in) == nil && in.LeaveRoom != nil {
			_ = f.env.SignalWorkflowByID(in.LeaveRoom.WorkflowID, in.LeaveRoom.Signal, in.LeaveRoom.CallID)
		}
		return
	case "SendSignals":
		var in activities.SignalsInput
		_ = args.Get(&in)
		var gone []string
		for _, s := range in.Signals {
			if err := f.env.SignalWorkflowByID(s.WorkflowID, s.Name, s.Arg); err != nil {
				gone = append(gone, s.WorkflowID)
			}
		}
		f.mu.Lock()
		f.batches++
		f.mu.Unlock()
		reply <- gone
	case "TakeCensus":
		var in activities.CensusInput
		_ = args.Get(&in)
		var total activities.Census
		for _, id := range in.Rooms {
			val, err := f.query(id, in.Query, f.env.Now())
			var c activities.Census
			if err != nil || val.Get(&c) != nil {
				continue
			}
			total.Waiting += c.Waiting
			total.Groups = append(total.Groups, c.Groups...)
		}
		reply <- total
	}
}

// query queries a workflow of the environment; one that has not run its
// first task yet (no query handler: the environment panics) holds nothing.
func (f *fakeTemporal) query(workflowID, queryType string, args ...any) (val converter.EncodedValue, err error) {
	defer func() {
		if recover() != nil {
			val, err = nil, errors.New("not started yet")
		}
	}()
	return f.env.QueryWorkflowByID(workflowID, queryType, args...)
}

// countScheduled runs the activity fn through a mock that counts how often it
// is scheduled, and returns the count.
func countScheduled[In, Out any](s *CallSuite, fn func(context.Context, In) (Out, error)) *int {
	n := 0
	s.env.OnActivity(fn, mock.Anything, mock.Anything).Return(func(ctx context.Context, in In) (Out, error) {
		n++
		return fn(ctx, in)
	})
	return &n
}
