package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// refusingTemporal stands in for a Temporal frontend that refuses every
// request, as the real one refuses a workflow ID that is not valid UTF-8:
// a request that reaches it becomes a 500. It counts the requests. With
// existing set, a start fails with "already started" and the history of
// that call is its start event.
type refusingTemporal struct {
	client.Client // nil: methods not written here panic
	existing      *policy.Call
	requests      int
}

func (f *refusingTemporal) refuse() error {
	f.requests++
	return serviceerror.NewInvalidArgument("refused by the test's Temporal")
}

func (f *refusingTemporal) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	if f.existing != nil {
		f.requests++
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "", "")
	}
	return nil, f.refuse()
}

func (f *refusingTemporal) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.requests++
	input, err := converter.GetDefaultDataConverter().ToPayloads(workflows.CallInput{Call: *f.existing})
	if err != nil {
		panic(err)
	}
	return &oneEvent{&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
		WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: input},
	}}}
}

func (f *refusingTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if f.existing != nil && strings.HasPrefix(id, workflows.SessionWorkflowID("")) {
		f.requests++
		return ownedSession(f.existing.Requester), nil
	}
	return nil, f.refuse()
}

// ownedSession is the description of a running session of owner.
func ownedSession(owner string) *workflowservice.DescribeWorkflowExecutionResponse {
	memo, err := converter.GetDefaultDataConverter().ToPayload(owner)
	if err != nil {
		panic(err)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Memo:   &commonpb.Memo{Fields: map[string]*commonpb.Payload{activities.MemoOwner: memo}},
	}}
}

func (f *refusingTemporal) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return nil, f.refuse()
}

func (f *refusingTemporal) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return nil, f.refuse()
}

func (f *refusingTemporal) UpdateWorkflow(context.Context, client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return nil, f.refuse()
}

// oneEvent is a history of one event.
type oneEvent struct{ ev *historypb.HistoryEvent }

func (o *oneEvent) HasNext() bool { return o.ev != nil }

func (o *oneEvent) Next() (*historypb.HistoryEvent, error) {
	ev := o.ev
	o.ev = nil
	return ev, nil
}

// apiCall sends one API request with a bearer token.
func apiCall(h http.Handler, token, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	return serve(h, req)
}

// apiErrorOf decodes an API error body.
func apiErrorOf(t *testing.T, rec *httptest.ResponseRecorder) (code, message string) {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return body.Error.Code, body.Error.Message
}

func TestIdentifiersAreCheckedAtTheEdge(t *testing.T) {
	long := strings.Repeat("t", 10000)
	cases := []struct {
		token, method, path, body string
		field                     string
	}{
		{"agent-token", "GET", "/v1/calls/a%00b", "", "call_id"},
		{"agent-token", "GET", "/v1/calls/%ff", "", "call_id"},
		{"agent-token", "GET", "/v1/calls/%ff?wait=1s", "", "call_id"},
		{"approver-token", "POST", "/v1/calls/a%00b/decision", `{"decision":"approve"}`, "call_id"},
		{"approver-token", "GET", "/v1/sessions/a%00b", "", "session"},
		{"approver-token", "POST", "/v1/sessions/%ff/end", "", "session"},
		{"approver-token", "DELETE", "/v1/sessions/%ff/sticky/shell", "", "session"},
		{"agent-token", "POST", "/v1/calls", `{"session":"s1","tool":"` + long + `"}`, "tool"},
		{"agent-token", "POST", "/v1/calls", `{"session":"a\u0000b","tool":"shell"}`, "session"},
		{"agent-token", "POST", "/v1/calls", `{"session":"s1","tool":"shell","call_id":"a\u0000b"}`, "call_id"},
		{"agent-token", "GET", "/v1/calls?session=%ff", "", "session"},
		{"approver-token", "GET", "/v1/calls?requester=a%00b", "", "requester"},
		{"approver-token", "GET", "/v1/calls?status=ok'+OR+ToolgateTool+!%3D+'x", "", "status"},
		{"approver-token", "GET", "/v1/pending?tool=" + long, "", "tool"},
		{"approver-token", "GET", `/v1/pending?session=x%5C'+OR+ToolgateStatus+%3D+'ok`, "", "session"},
		{"approver-token", "GET", "/v1/pending?status=approved", "", "status"},
		{"approver-token", "GET", "/v1/pending?session=s1&requester=agent-1", "", "requester"},
		{"agent-token", "GET", "/v1/calls?sesion=s1", "", "sesion"},
	}
	for _, c := range cases {
		temporal := &refusingTemporal{}
		h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
		rec := apiCall(h, c.token, c.method, c.path, c.body)
		what := c.method + " " + c.path[:min(len(c.path), 60)]
		if !assert.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", what, rec.Body.String()) {
			continue
		}
		code, msg := apiErrorOf(t, rec)
		assert.Equal(t, "invalid_request", code, what)
		assert.True(t, strings.HasPrefix(msg, c.field+" "), "%s: %q names %s", what, msg, c.field)
		assert.Less(t, len(msg), 200, "%s: the value is not echoed", what)
		assert.Zero(t, temporal.requests, "%s reached Temporal", what)
	}

	// A bulk decision refuses the malformed ID by name and applies nothing.
	temporal := &refusingTemporal{}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	rec := apiCall(h, "approver-token", "POST", "/v1/decisions", `{"decisions":[{"call_id":"a\u0000b","decision":"approve"}]}`)
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	var bulk struct {
		Error struct{ Refused []bulkRefusal }
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &bulk))
	require.Len(t, bulk.Error.Refused, 1)
	assert.Equal(t, "invalid_request", bulk.Error.Refused[0].Code)
	assert.True(t, strings.HasPrefix(bulk.Error.Refused[0].Message, "call_id "), bulk.Error.Refused[0].Message)
	assert.Zero(t, temporal.requests)
}

func TestBodiesAreOneJSONObject(t *testing.T) {
	cases := []struct {
		path, body, code, message string
	}{
		{"/v1/calls", `{"session":"s1","tool":"shell"} {"session":"s2","tool":"shell"}`, "malformed_json", "request body has data after its JSON value"},
		{"/v1/calls", `{"session":"s1","tool":"shell"}garbage`, "malformed_json", "request body has data after its JSON value"},
		{"/v1/calls", `[1]`, "invalid_request", "request body must be a JSON object, not an array"},
		{"/v1/calls", `{"session":5,"tool":"shell"}`, "invalid_request", "session must be a JSON string, not a number"},
		{"/v1/calls", `{"session":"s1","tool":"shell","args":[1]}`, "invalid_request", "args must be a JSON object, not an array"},
		{"/v1/calls", `{"session":"s1","tool":"shell","args":"rm -rf /"}`, "invalid_request", "args must be a JSON object, not a string"},
		{"/v1/calls", `{"session":"s1","tool":"shell","args":42}`, "invalid_request", "args must be a JSON object, not a number"},
		{"/v1/calls", `{"session":"s1","tool":"shell","args":null}`, "invalid_request", "args must be a JSON object, not null"},
		{"/v1/decisions", `{"decisions":"all"}`, "invalid_request", "decisions must be a JSON array, not a string"},
		{"/v1/decisions", `{"decisions":[{"call_id":"c1","decision":"approve"}]}{}`, "malformed_json", "request body has data after its JSON value"},
		{"/v1/calls/c1/decision", `{"decision":"approve"} x`, "malformed_json", "request body has data after its JSON value"},
		{"/v1/calls/c1/decision", `{"decision":true}`, "invalid_request", "decision must be a JSON string, not a boolean"},
		{"/v1/calls", "{\"session\":\"s1\",\"tool\":\"shell\",\"args\":{\"command\":\"ls \xff\"}}", "malformed_json", "request body is not valid UTF-8"},
		{"/v1/calls", `{"session":"s1","tool":"shell","args":{"command":"ls","command":"rm -rf /"}}`, "malformed_json", `request body has the key "command" twice in /args`},
		{"/v1/calls", `{"session":"s1","session":"s2","tool":"shell"}`, "malformed_json", `request body has the key "session" twice in the request body`},
		{"/v1/calls", `{"session":"s1","tool":"shell","args":{"a":[{"x":1},{"x":2,"x":3}]}}`, "malformed_json", `request body has the key "x" twice in /args/a/[]`},
		{"/v1/calls/c1/decision", `{"decision":"approve","args":{"p":1,"p":2}}`, "malformed_json", `request body has the key "p" twice in /args`},
	}
	for _, c := range cases {
		temporal := &refusingTemporal{}
		h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
		token := "agent-token"
		if c.path != "/v1/calls" {
			token = "approver-token"
		}
		rec := apiCall(h, token, "POST", c.path, c.body)
		if !assert.Equal(t, http.StatusBadRequest, rec.Code, "%s %s: %s", c.path, c.body, rec.Body.String()) {
			continue
		}
		code, msg := apiErrorOf(t, rec)
		assert.Equal(t, c.code, code, c.body)
		assert.Equal(t, c.message, msg, c.body)
		for _, internal := range []string{"json:", "map[", "Go ", "unmarshal", "slice", "struct"} {
			assert.NotContains(t, msg, internal, "%s: no Go internals", c.body)
		}
		assert.Zero(t, temporal.requests, "%s reached Temporal", c.body)
	}
}

func TestResubmittedCallIDForAnotherCallIsAConflict(t *testing.T) {
	first := policy.Call{ID: "c1", Session: "s-first", Tool: "write_file", Requester: "agent-1", Args: json.RawMessage(`{"path":"a.txt","content":"XXX"}`)}
	for name, body := range map[string]string{
		"other arguments": `{"call_id":"c1","session":"s-first","tool":"write_file","args":{"path":"a.txt","content":"X"}}`,
		"another session": `{"call_id":"c1","session":"s-other","tool":"write_file","args":{"path":"a.txt","content":"XXX"}}`,
		"another tool":    `{"call_id":"c1","session":"s-first","tool":"shell","args":{"path":"a.txt","content":"XXX"}}`,
	} {
		h := New(Config{Calls: tgclient.New(&refusingTemporal{existing: &first}, "").WithDoor(testDoor), Tokens: mustTokens(t)})
		rec := apiCall(h, "agent-token", "POST", "/v1/calls", body)
		if !assert.Equal(t, http.StatusConflict, rec.Code, "%s: %s", name, rec.Body.String()) {
			continue
		}
		code, msg := apiErrorOf(t, rec)
		assert.Equal(t, "conflict", code, name)
		assert.Equal(t, `call_id "c1" is already taken by another call; use a new call ID`, msg, name)
	}
}
