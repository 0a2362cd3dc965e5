package client

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// fakeTemporal stands in for Temporal with at most one existing call: a
// start fails with "already started" when there is one, and the call's
// history is its start event. It counts what was asked of it; any other
// method panics (the embedded interface is nil).
type fakeTemporal struct {
	client.Client
	existing     *policy.Call
	historyReads int
	lists        int
	// owners are the sessions that run, by workflow ID, with their owners;
	// calls counts the calls started.
	owners map[string]string
	calls  int
	// ended are sessions whose memo shows an end.
	ended map[string]bool
	// inputs are the calls started.
	inputs []workflows.CallInput
	// waitedRuns are the runs GetWorkflow was asked for, by workflow ID.
	waitedRuns map[string]string
}

func (f *fakeTemporal) GetWorkflow(_ context.Context, id, run string) client.WorkflowRun {
	if f.waitedRuns == nil {
		f.waitedRuns = map[string]string{}
	}
	f.waitedRuns[id] = run
	return resultRun{}
}

// resultRun is a call's run that has ended ok.
type resultRun struct{ client.WorkflowRun }

func (resultRun) Get(_ context.Context, v any) error {
	*v.(*workflows.Result) = workflows.Result{Status: workflows.StatusOK}
	return nil
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	for _, a := range args {
		if in, ok := a.(workflows.CallInput); ok {
			f.inputs = append(f.inputs, in)
		}
	}
	if strings.HasPrefix(o.ID, workflows.SessionWorkflowID("")) {
		if f.owners == nil {
			f.owners = map[string]string{}
		}
		f.owners[o.ID] = o.Memo[activities.MemoOwner].(string)
		return nil, nil
	}
	f.calls++
	if f.existing != nil {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "", "")
	}
	return namedRun{id: "run-" + strings.TrimPrefix(o.ID, workflows.CallWorkflowID(""))}, nil
}

// namedRun is the run a start returns: its ID alone.
type namedRun struct {
	client.WorkflowRun // nil: methods not written here panic
	id                 string
}

func (r namedRun) GetRunID() string { return r.id }

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	owner, ok := f.owners[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	memo, err := converter.GetDefaultDataConverter().ToPayload(owner)
	if err != nil {
		return nil, err
	}
	fields := map[string]*commonpb.Payload{activities.MemoOwner: memo}
	if f.ended[id] {
		news, err := converter.GetDefaultDataConverter().ToPayload(activities.SessionNews{Revision: 1, End: &policy.Decision{Kind: policy.DeniedWithReason, DecidedBy: "root"}})
		if err != nil {
			return nil, err
		}
		fields[activities.MemoNews] = news
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Memo:   &commonpb.Memo{Fields: fields},
	}}, nil
}

func (f *fakeTemporal) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.historyReads++
	input, err := converter.GetDefaultDataConverter().ToPayloads(workflows.CallInput{Call: *f.existing})
	if err != nil {
		panic(err)
	}
	start := &historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
		WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: input},
	}}
	return &events{list: []*historypb.HistoryEvent{start}}
}

func (f *fakeTemporal) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.lists++
	return &workflowservice.ListWorkflowExecutionsResponse{}, nil
}

// events is a history that fits in one page.
type events struct{ list []*historypb.HistoryEvent }

func (e *events) HasNext() bool { return len(e.list) > 0 }

func (e *events) Next() (*historypb.HistoryEvent, error) {
	ev := e.list[0]
	e.list = e.list[1:]
	return ev, nil
}

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"s1", "call-0123abcd", "agent@example.com", "ci:bot", "mcp__fs__read_file", "v1.2", strings.Repeat("a", 128)} {
		assert.NoError(t, ValidateID("session", ok), "%q", ok)
	}
	for _, bad := range []string{"", "a\x00b", "\xff", "a b", "-a", ".a", "a/b", "a#b", "a\\b", "a'b", "é", strings.Repeat("a", 129), strings.Repeat("t", 10000)} {
		err := ValidateID("tool", bad)
		var input *InputError
		require.ErrorAs(t, err, &input, "%q", bad)
		assert.Equal(t, "tool", input.Field)
		assert.Less(t, len(err.Error()), 150, "the value is not echoed back")
	}
}

func TestCallRequestValidate(t *testing.T) {
	base := CallRequest{Session: "s1", Tool: "shell", CallID: "c1"}
	cases := []struct {
		name       string
		edit       func(*CallRequest)
		field, msg string
	}{
		{"NUL in the session", func(r *CallRequest) { r.Session = "a\x00b" }, "session", "session must be"},
		{"invalid UTF-8 call ID", func(r *CallRequest) { r.CallID = "\xff" }, "call_id", "call_id must be"},
		{"10,000-character tool", func(r *CallRequest) { r.Tool = strings.Repeat("t", 10000) }, "tool", "tool must be"},
		{"no tool", func(r *CallRequest) { r.Tool = "" }, "tool", "tool is required"},
		{"args array", func(r *CallRequest) { r.Args = json.RawMessage(`[1, 2]`) }, "args", "args must be a JSON object, not an array"},
		{"args string", func(r *CallRequest) { r.Args = json.RawMessage(` "rm -rf /"`) }, "args", "args must be a JSON object, not a string"},
		{"args number", func(r *CallRequest) { r.Args = json.RawMessage(`-5`) }, "args", "args must be a JSON object, not a number"},
		{"args boolean", func(r *CallRequest) { r.Args = json.RawMessage(`true`) }, "args", "args must be a JSON object, not a boolean"},
		{"args null", func(r *CallRequest) { r.Args = json.RawMessage(`null`) }, "args", "args must be a JSON object, not null"},
		{"args not JSON", func(r *CallRequest) { r.Args = json.RawMessage(`{"a":`) }, "args", "args must be a JSON object; this is not valid JSON"},
		{"a preview of a tool toolgate runs", func(r *CallRequest) { r.Preview = &policy.Preview{Kind: policy.PreviewDiff, Text: "+x"} }, "preview", "preview is the agent's only"},
		{"a preview of no known kind", func(r *CallRequest) {
			r.Execution, r.Preview = policy.ExecutionAgent, &policy.Preview{Kind: "html", Text: "<b>"}
		}, "preview.kind", "preview.kind must be"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.edit(&r)
			err := r.Validate()
			var input *InputError
			require.ErrorAs(t, err, &input)
			assert.Equal(t, c.field, input.Field)
			assert.True(t, strings.HasPrefix(err.Error(), c.msg), "%q does not start with %q", err, c.msg)
			for _, internal := range []string{"json:", "map[", "Go value", "unmarshal"} {
				assert.NotContains(t, err.Error(), internal, "no Go internals in the message")
			}
		})
	}
	ok := base
	require.NoError(t, ok.Validate())
	assert.JSONEq(t, `{}`, string(ok.Args), "no args means {}")

	agents := base
	agents.Execution = policy.ExecutionAgent
	agents.Preview = &policy.Preview{Kind: policy.PreviewDiff, Text: strings.Repeat("+line\n", policy.MaxPreviewBytes), ComputedBy: policy.ComputedByToolgate}
	require.NoError(t, agents.Validate())
	assert.Equal(t, policy.ComputedByAgent, agents.Preview.ComputedBy, "an agent's preview is the agent's, whatever it says")
	assert.True(t, agents.Preview.Truncated)
	assert.LessOrEqual(t, len(agents.Preview.Text), policy.MaxPreviewBytes)
}

func TestSubmitNewCallReadsNoHistory(t *testing.T) {
	fake := &fakeTemporal{}
	id, err := New(fake, "").WithDoor(testDoor).Submit(context.Background(), CallRequest{CallID: "c1", Session: "s1", Tool: "shell", Args: json.RawMessage(`{}`), Requester: "agent-1"})
	require.NoError(t, err)
	assert.Equal(t, "c1", id)
	assert.Zero(t, fake.historyReads, "a new call costs the start only")
}

// Waiting for a call this client submitted names its run, so the SDK does
// not describe the workflow to find it first; another call is waited for
// by its workflow ID alone.
func TestWaitForACallThisClientStartedNamesItsRun(t *testing.T) {
	fake := &fakeTemporal{}
	c := New(fake, "").WithDoor(testDoor)
	r, err := c.Call(context.Background(), CallRequest{CallID: "c1", Session: "s1", Tool: "shell", Args: json.RawMessage(`{}`), Requester: "agent-1"})
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusOK, r.Status)
	_, err = c.Wait(context.Background(), "c2")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{workflows.CallWorkflowID("c1"): "run-c1", workflows.CallWorkflowID("c2"): ""}, fake.waitedRuns)
}

func TestASessionBelongsToTheAgentThatOpenedIt(t *testing.T) {
	fake := &fakeTemporal{}
	c := New(fake, "").WithDoor(testDoor)
	_, err := c.Submit(context.Background(), CallRequest{Session: "x1", Tool: "shell", Requester: "agent-a"})
	require.NoError(t, err)
	assert.Equal(t, "agent-a", fake.owners[workflows.SessionWorkflowID("x1")], "the first call opens the session for its agent")

	_, err = c.Submit(context.Background(), CallRequest{Session: "x1", Tool: "shell", Requester: "agent-a"})
	require.NoError(t, err, "the agent's next call, from any of its processes")
	_, err = c.Submit(context.Background(), CallRequest{Session: "x1", Tool: "shell", Requester: "agent-b"})
	require.ErrorIs(t, err, ErrNotYourSession)
	assert.Equal(t, "the session belongs to another agent", err.Error(), "nothing about what the session holds")
	assert.Equal(t, 2, fake.calls, "another agent's call never starts")
}

func TestACallIntoASessionEndedBeforeAnyoneOpenedItGoesOnToBeDenied(t *testing.T) {
	id := workflows.SessionWorkflowID("x2")
	fake := &fakeTemporal{owners: map[string]string{id: ""}, ended: map[string]bool{id: true}}
	_, err := New(fake, "").WithDoor(testDoor).Submit(context.Background(), CallRequest{Session: "x2", Tool: "shell", Requester: "agent-a"})
	require.NoError(t, err, "an approver ended the session before any call: its workflow denies the call, as ended")
	assert.Equal(t, 1, fake.calls)

	fake.ended[id] = false
	_, err = New(fake, "").WithDoor(testDoor).Submit(context.Background(), CallRequest{Session: "x2", Tool: "shell", Requester: "agent-a"})
	require.ErrorIs(t, err, ErrNotYourSession, "a running session without an owner is nobody's to join")
}

func TestSubmitSameCallIDAgain(t *testing.T) {
	first := policy.Call{ID: "c1", Session: "secret-session", Tool: "write_file", Requester: "agent-1",
		Args: json.RawMessage(`{"path":"notes.txt","content":"XXX","opts":{"mode":420,"append":false}}`)}
	same := CallRequest{CallID: "c1", Session: first.Session, Tool: first.Tool, Requester: first.Requester,
		Args: json.RawMessage(`{ "opts": {"append": false, "mode": 420}, "content": "XXX",
			"path": "notes.txt" }`)}

	t.Run("the same call is the same call, whatever the JSON layout", func(t *testing.T) {
		fake := &fakeTemporal{existing: &first}
		id, err := New(fake, "").WithDoor(testDoor).Submit(context.Background(), same)
		require.NoError(t, err)
		assert.Equal(t, "c1", id)
		assert.Equal(t, 1, fake.historyReads, "the first call's arguments are read once, only because it exists")
	})

	for name, edit := range map[string]func(*CallRequest){
		"other arguments": func(r *CallRequest) {
			r.Args = json.RawMessage(`{"path":"notes.txt","content":"X","opts":{"mode":420,"append":false}}`)
		},
		"another number": func(r *CallRequest) {
			r.Args = json.RawMessage(`{"path":"notes.txt","content":"XXX","opts":{"mode":421,"append":false}}`)
		},
		"fewer arguments": func(r *CallRequest) { r.Args = json.RawMessage(`{"path":"notes.txt","content":"XXX"}`) },
		"another session": func(r *CallRequest) { r.Session = "other-session" },
		"another tool":    func(r *CallRequest) { r.Tool = "shell" },
		"another agent":   func(r *CallRequest) { r.Requester = "agent-2" },
	} {
		t.Run(name+" is refused", func(t *testing.T) {
			req := same
			edit(&req)
			_, err := New(&fakeTemporal{existing: &first}, "").WithDoor(testDoor).Submit(context.Background(), req)
			require.ErrorIs(t, err, ErrCallIDTaken)
			var input *InputError
			require.ErrorAs(t, err, &input, "the CLI and the API treat it as bad input")
			assert.Equal(t, "call_id", input.Field)
			assert.Equal(t, `call_id "c1" is already taken by another call; use a new call ID`, err.Error())
			for _, secret := range []string{"secret-session", "write_file", "agent-1", "XXX"} {
				assert.NotContains(t, err.Error(), secret, "nothing about the first call leaks")
			}
		})
	}
}

func TestListRefusesFilterValuesThatAreNotIdentifiers(t *testing.T) {
	breakouts := []ListFilter{
		{Session: `x\' OR ToolgateStatus = 'ok`},
		{Session: `x' OR WorkflowType != '`},
		{Tool: "shell\x00"},
		{Requester: `\`},
		{Status: `ok' OR ToolgateSession != 'x`},
		{Status: "bogus"},
	}
	for _, f := range breakouts {
		fake := &fakeTemporal{}
		_, err := New(fake, "").WithDoor(testDoor).List(context.Background(), f)
		var input *InputError
		require.ErrorAs(t, err, &input, "%+v", f)
		assert.Zero(t, fake.lists, "nothing is sent to Temporal for %+v", f)
	}

	fake := &fakeTemporal{}
	_, err := New(fake, "").WithDoor(testDoor).List(context.Background(), ListFilter{Session: "s1", Tool: "shell", Requester: "agent-1", Status: "decided"})
	require.NoError(t, err)
	assert.Equal(t, 1, fake.lists)
}

func TestListTakesEveryStatusACallCanHave(t *testing.T) {
	for _, status := range []workflows.Status{workflows.StatusApproved, workflows.StatusUnknown, workflows.StatusRunning} {
		fake := &fakeTemporal{}
		_, err := New(fake, "").WithDoor(testDoor).List(context.Background(), ListFilter{Status: string(status)})
		require.NoError(t, err, status)
	}
	_, err := New(&fakeTemporal{}, "").WithDoor(testDoor).List(context.Background(), ListFilter{Status: "bogus"})
	require.ErrorContains(t, err, "approved", "the refusal names the statuses there are")
}

func TestQuoteEscapesBackslashesAndQuotes(t *testing.T) {
	assert.Equal(t, `x\\\' OR ToolgateStatus = \'ok`, quote(`x\' OR ToolgateStatus = 'ok`))
	assert.Equal(t, `a\\`, quote(`a\`), "a trailing backslash cannot escape the closing quote")
}

func TestADeniedCallThatHasNotEndedShowsWhyItWasDenied(t *testing.T) {
	st := Status{State: &workflows.CallState{
		Call:   policy.Call{ID: "c1", Session: "s1", Tool: "shell"},
		Status: workflows.StatusDenied,
		Decision: &policy.Decision{
			Kind: policy.DeniedWithReason, Reason: "not today", DecidedBy: "bob", Channel: "api", Comment: "audit note",
		},
	}}
	w := WaitingView(st)
	assert.Equal(t, workflows.StatusDenied, w.Status)
	assert.Equal(t, "denied_with_reason", w.Decision)
	assert.Equal(t, "bob", w.DecidedBy)
	assert.Equal(t, "not today", w.Reason, "the agent reads why before the call's result is written")
	assert.Equal(t, "audit note", w.Comment)

	raw, err := json.Marshal(w)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"reason":"not today"`)
}

func TestAnApprovedCallShowsNoReason(t *testing.T) {
	w := WaitingView(Status{State: &workflows.CallState{
		Call:     policy.Call{ID: "c1", Session: "s1", Tool: "shell"},
		Status:   workflows.StatusRunning,
		Decision: &policy.Decision{Kind: policy.Approved, Reason: "stray", DecidedBy: "bob", Channel: "api"},
	}})
	assert.Equal(t, "approved", w.Decision)
	assert.Empty(t, w.Reason, "a reason is a denial's: the model reads it as why the call did not run")
}
