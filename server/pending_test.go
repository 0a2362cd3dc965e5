package server

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/workflows"
)

// pagedTemporal lists n waiting calls, one a minute, newest first, for
// any query but that of calls without a groups attribute (there are
// none), within the query's requested-at window; it records the queries.
// (Other filters are the client's and the visibility store's business,
// tested there and end to end.)
type pagedTemporal struct {
	client.Client // nil: methods not written here panic
	n             int
	base          time.Time

	mu      sync.Mutex
	queries []string
}

func (f *pagedTemporal) record(q string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
}

var windowBound = regexp.MustCompile(`ToolgateRequestedAt (>=|<) '([^']+)'`)

// matching returns the indexes of the calls a query matches, newest
// first.
func (f *pagedTemporal) matching(q string) []int {
	f.record(q)
	if strings.Contains(q, "IS NULL") {
		return nil
	}
	var out []int
	for i := range f.n {
		at := f.at(i).Add(time.Millisecond / 2).Truncate(time.Millisecond) // SQLite's column
		in := true
		for _, m := range windowBound.FindAllStringSubmatch(q, -1) {
			bound, err := time.Parse(time.RFC3339Nano, m[2])
			if err != nil {
				panic(err)
			}
			in = in && (m[1] == ">=") == !at.Before(bound)
		}
		if in {
			out = append(out, i)
		}
	}
	return out
}

func (f *pagedTemporal) at(i int) time.Time { return f.base.Add(-time.Duration(i) * time.Minute) }

func (f *pagedTemporal) CountWorkflow(_ context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	return &workflowservice.CountWorkflowExecutionsResponse{Count: int64(len(f.matching(req.GetQuery())))}, nil
}

func (f *pagedTemporal) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	all := f.matching(req.GetQuery())
	offset, _ := strconv.Atoi(string(req.GetNextPageToken()))
	end := min(offset+int(req.GetPageSize()), len(all))
	dc := converter.GetDefaultDataConverter()
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for _, i := range all[offset:end] {
		at, _ := dc.ToPayload(f.at(i))
		tool, _ := dc.ToPayload("shell")
		resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: workflows.CallWorkflowID(fmt.Sprintf("c%02d", i))},
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
				workflows.AttrRequestedAt.GetName(): at, workflows.AttrTool.GetName(): tool,
			}},
		})
	}
	if end < len(all) {
		resp.NextPageToken = []byte(strconv.Itoa(end))
	}
	return resp, nil
}

func (f *pagedTemporal) sent() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.queries, "\n")
}

func TestPagingParametersAreCheckedAtTheEdge(t *testing.T) {
	for _, path := range []string{"/v1/pending", "/v1/calls"} {
		for _, c := range []struct{ query, field string }{
			{"page_size=0", "page_size"},
			{"page_size=-1", "page_size"},
			{"page_size=1001", "page_size"},
			{"page_size=ten", "page_size"},
			{"page_size=1.5", "page_size"},
			{"page_token=forged", "page_token"},
			{"page_token=eyJ2IjoxLCJrIjoicGVuZGluZyJ9", "page_token"}, // {"v":1,"k":"pending"}
		} {
			temporal := &refusingTemporal{}
			h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
			rec := apiCall(h, "approver-token", "GET", path+"?"+c.query, "")
			what := path + "?" + c.query
			require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", what, rec.Body.String())
			code, msg := apiErrorOf(t, rec)
			assert.Equal(t, "invalid_request", code, what)
			assert.True(t, strings.HasPrefix(msg, c.field+" "), "%s: %q names %s", what, msg, c.field)
			assert.Zero(t, temporal.requests, "%s reached Temporal", what)
		}
	}
}

// pageBody is the JSON of a page.
type pageBody struct {
	Calls []struct {
		CallID string `json:"call_id"`
	} `json:"calls"`
	NextPageToken *string `json:"next_page_token"`
	Total         *int64  `json:"total"`
}

func TestPendingAnswersPagesOldestFirst(t *testing.T) {
	temporal := &pagedTemporal{n: 5, base: time.Now()}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	var got []string
	path := "/v1/pending?page_size=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		rec := apiCall(h, "approver-token", "GET", path, "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var page pageBody
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
		require.NotNil(t, page.Total, rec.Body.String())
		assert.Equal(t, int64(5), *page.Total)
		for _, c := range page.Calls {
			got = append(got, c.CallID)
		}
		if page.NextPageToken == nil {
			assert.NotContains(t, rec.Body.String(), "next_page_token", "absent on the last page")
			break
		}
		assert.Len(t, page.Calls, 2)
		path = "/v1/pending?page_size=2&page_token=" + *page.NextPageToken
	}
	assert.Equal(t, []string{"c04", "c03", "c02", "c01", "c00"}, got, "oldest first, each once")
	assert.Contains(t, temporal.sent(), "ToolgateGroups IN ('*', 'ops')", "alice (ops) lists the calls ops may decide")

	t.Run("min_age keeps calls older than it", func(t *testing.T) {
		temporal := &pagedTemporal{n: 1, base: time.Now()}
		h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
		rec := apiCall(h, "approver-token", "GET", "/v1/pending?min_age=1h", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Contains(t, temporal.sent(), "ToolgateRequestedAt < '")
	})

	t.Run("an empty list is an empty array", func(t *testing.T) {
		h := New(Config{Calls: tgclient.New(&pagedTemporal{}, "").WithDoor(testDoor), Tokens: mustTokens(t)})
		for _, path := range []string{"/v1/pending", "/v1/calls"} {
			rec := apiCall(h, "approver-token", "GET", path, "")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.JSONEq(t, `{"calls":[],"total":0}`, rec.Body.String(), path)
		}
	})
}

func TestListCallsPagesNewestFirst(t *testing.T) {
	temporal := &pagedTemporal{n: 3, base: time.Now()}
	h := New(Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor), Tokens: mustTokens(t)})
	rec := apiCall(h, "agent-token", "GET", "/v1/calls?page_size=2", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var page pageBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
	require.Len(t, page.Calls, 2)
	assert.Equal(t, "c00", page.Calls[0].CallID, "newest first")
	require.NotNil(t, page.NextPageToken)
	token := *page.NextPageToken
	assert.Equal(t, int64(3), *page.Total)
	assert.Contains(t, temporal.sent(), "ToolgateRequester = 'agent-1'", "an agent lists its own calls")

	rec = apiCall(h, "agent-token", "GET", "/v1/calls?page_size=2&page_token="+token, "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	page = pageBody{}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
	require.Len(t, page.Calls, 1)
	assert.Equal(t, "c02", page.Calls[0].CallID)
	assert.Nil(t, page.NextPageToken)

	rec = apiCall(h, "agent-token", "GET", "/v1/calls?session=s2&page_token="+token, "")
	assert.Equal(t, http.StatusBadRequest, rec.Code, "a token belongs to its filter: %s", rec.Body.String())
}

func TestInboxListPagesOldestFirstWithTheTotal(t *testing.T) {
	temporal := &pagedTemporal{n: 150, base: time.Now()}
	_, h := newTestInboxWith(t, Config{Calls: tgclient.New(temporal, "").WithDoor(testDoor)})
	cookie := signIn(t, h, "approver-token")
	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.AddCookie(cookie)
		return serve(h, req)
	}

	rec := get("/")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	body := rec.Body.String()
	has := func(s string) bool { return strings.Contains(body, s) }
	assert.True(t, has(`<span class="count" id="pending-count">150</span>`), "the count is every waiting call, not the page")
	assert.True(t, has(`href="/calls/c149"`), "the oldest call is on the first page")
	assert.False(t, has(`href="/calls/c49"`), "the newest calls are on the second page")
	assert.Equal(t, 100, strings.Count(body, `<li class="call">`))
	m := regexp.MustCompile(`id="pending-next" href="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, "a link to the next page")
	next := html.UnescapeString(m[1])

	rec = get("/inbox/pending.json")
	require.Equal(t, http.StatusOK, rec.Code)
	var live struct {
		Calls   []pendingRow `json:"calls"`
		Total   int64        `json:"total"`
		NextURL string       `json:"next_url"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &live))
	assert.Equal(t, int64(150), live.Total)
	assert.Len(t, live.Calls, 100)
	assert.Equal(t, "c149", live.Calls[0].CallID)
	assert.NotEmpty(t, live.NextURL)

	rec = get(next)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	body = rec.Body.String()
	assert.Equal(t, 50, strings.Count(body, `<li class="call">`))
	assert.True(t, has(`href="/calls/c00"`), "the newest call is on the second page")
	assert.True(t, has(`id="pending-first" href="/"`), "a link back to the first page")
	assert.True(t, has(`data-live="/inbox/pending.json?page_token=`), "the page polls itself, not the first page")
	assert.False(t, has(`id="pending-next" href="/?`), "the last page has no next page")

	rec = get("/?page_token=forged")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Contains(t, rec.Body.String(), "page_token")
}
