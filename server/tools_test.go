package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/workflows"
)

// catalogTemporal answers the tool catalog workflow with tools, or fails
// its start with err. It records what was started.
type catalogTemporal struct {
	client.Client // nil: methods not written here panic
	tools         []tool.Descriptor
	err           error
	started       []client.StartWorkflowOptions
	types         []any
}

func (f *catalogTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, _ ...any) (client.WorkflowRun, error) {
	f.started, f.types = append(f.started, o), append(f.types, wf)
	if f.err != nil {
		return nil, f.err
	}
	return &catalogRun{tools: f.tools}, nil
}

type catalogRun struct {
	client.WorkflowRun
	tools []tool.Descriptor
}

func (r *catalogRun) Get(_ context.Context, out any) error {
	b, err := json.Marshal(r.tools)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

var catalog = []tool.Descriptor{
	{Name: "echo", Description: "Return the arguments.", Annotations: map[string]any{"readOnlyHint": true}},
	{Name: "github__create_issue", Description: "Create an issue.\nNeeds a repo.",
		Schema:      json.RawMessage(`{"type":"object","required":["title"],"properties":{"title":{"type":"string"}}}`),
		Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": false}},
}

func TestListToolsInEachFormat(t *testing.T) {
	title := `{"type":"object","required":["title"],"properties":{"title":{"type":"string"}}}`
	empty := `{"type":"object","properties":{}}`
	cases := []struct {
		query, want string
	}{
		{"", `{"tools":[
			{"name":"echo","description":"Return the arguments.","annotations":{"readOnlyHint":true}},
			{"name":"github__create_issue","description":"Create an issue.\nNeeds a repo.","input_schema":` + title + `,
			 "annotations":{"readOnlyHint":false,"destructiveHint":false}}]}`},
		{"?format=json", ""}, // same as the default
		{"?format=openai", `{"tools":[
			{"type":"function","function":{"name":"echo","description":"Return the arguments.","parameters":` + empty + `}},
			{"type":"function","function":{"name":"github__create_issue","description":"Create an issue.\nNeeds a repo.","parameters":` + title + `}}]}`},
		{"?format=anthropic", `{"tools":[
			{"name":"echo","description":"Return the arguments.","input_schema":` + empty + `},
			{"name":"github__create_issue","description":"Create an issue.\nNeeds a repo.","input_schema":` + title + `}]}`},
	}
	cases[1].want = cases[0].want
	for _, c := range cases {
		temporal := &catalogTemporal{tools: catalog}
		h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
		rec := apiCall(h, "agent-token", "GET", "/v1/tools"+c.query, "")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", c.query, rec.Body.String())
		assert.JSONEq(t, c.want, rec.Body.String(), c.query)
		require.Len(t, temporal.started, 1)
		assert.Equal(t, workflows.ToolCatalogWorkflowType, temporal.types[0])
		assert.Equal(t, workflows.TaskQueue, temporal.started[0].TaskQueue)
	}
}

func TestListToolsStartsACatalogRunPerRequest(t *testing.T) {
	temporal := &catalogTemporal{tools: catalog}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	for range 2 {
		require.Equal(t, http.StatusOK, apiCall(h, "agent-token", "GET", "/v1/tools", "").Code)
	}
	require.Len(t, temporal.started, 2)
	assert.NotEqual(t, temporal.started[0].ID, temporal.started[1].ID, "each listing is its own workflow: a second never joins a finished first")
}

func TestListToolsRefusesAnUnknownFormatBeforeTemporal(t *testing.T) {
	temporal := &catalogTemporal{tools: catalog}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	rec := apiCall(h, "agent-token", "GET", "/v1/tools?format=gemini", "")
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	code, msg := apiErrorOf(t, rec)
	assert.Equal(t, "invalid_request", code)
	assert.Equal(t, "format must be one of json, openai, anthropic", msg)
	assert.Empty(t, temporal.started, "nothing was asked of Temporal")
}

func TestListToolsNeedsAnAgentOrAdminToken(t *testing.T) {
	temporal := &catalogTemporal{tools: catalog}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	rec := apiCall(h, "approver-token", "GET", "/v1/tools", "")
	assert.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	assert.Empty(t, temporal.started)
}

func TestListToolsWhenTemporalIsDown(t *testing.T) {
	temporal := &catalogTemporal{err: serviceerror.NewUnavailable("connection refused")}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	rec := apiCall(h, "agent-token", "GET", "/v1/tools", "")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
}
