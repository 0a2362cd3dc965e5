package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
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

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// fakeCall is one waiting call in fakeVisibility.
type fakeCall struct {
	id, session, tool string
	at                time.Time
	// groups is the ToolgateGroups attribute; nil: the call waited from
	// before it existed. memo is the memo's groups.
	groups, memo []string
}

// fakeVisibility answers toolgate's visibility queries for waiting calls
// the way Temporal's SQLite store does: newest first, no ORDER BY, and
// requested-at times compared as a column rounded to the millisecond. It
// understands exactly the conditions toolgate writes, and fails the test
// on any other. It counts what it was asked.
type fakeVisibility struct {
	client.Client // nil: methods not written here panic
	t             *testing.T

	mu            sync.Mutex
	calls         map[string]fakeCall
	counts, lists int
	rowsListed    int
	queries       []string
}

func newFakeVisibility(t *testing.T, calls ...fakeCall) *fakeVisibility {
	f := &fakeVisibility{t: t, calls: map[string]fakeCall{}}
	f.add(calls...)
	return f
}

func (f *fakeVisibility) add(calls ...fakeCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range calls {
		f.calls[c.id] = c
	}
}

// decide removes calls: they no longer wait.
func (f *fakeVisibility) decide(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		delete(f.calls, id)
	}
}

func (f *fakeVisibility) resetCounters() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts, f.lists, f.rowsListed, f.queries = 0, 0, 0, nil
}

// column is the requested-at time as SQLite's generated column holds it:
// rounded to the nearest millisecond.
func column(t time.Time) time.Time { return t.Add(time.Millisecond / 2).Truncate(time.Millisecond) }

// match returns the calls a query matches, newest first.
func (f *fakeVisibility) match(q string) []fakeCall {
	f.t.Helper()
	var conds []func(fakeCall) bool
	for _, cond := range strings.Split(q, " AND ") {
		name, rest, _ := strings.Cut(cond, " ")
		switch {
		case cond == "WorkflowType = 'ToolCallWorkflow'", cond == "ExecutionStatus = 'Running'", cond == "ToolgateStatus = 'pending'":
		case name == "ToolgateSession" || name == "ToolgateTool":
			v := strings.Trim(strings.TrimPrefix(rest, "= "), "'")
			conds = append(conds, func(c fakeCall) bool {
				return (name == "ToolgateSession" && c.session == v) || (name == "ToolgateTool" && c.tool == v)
			})
		case name == "ToolgateRequestedAt":
			op, v, _ := strings.Cut(rest, " ")
			at, err := time.Parse(time.RFC3339Nano, strings.Trim(v, "'"))
			require.NoError(f.t, err, cond)
			switch op {
			case ">=":
				conds = append(conds, func(c fakeCall) bool { return !column(c.at).Before(at) })
			case "<":
				conds = append(conds, func(c fakeCall) bool { return column(c.at).Before(at) })
			default:
				f.t.Fatalf("toolgate compared requested-at times with %q, which is not exact on SQLite: %s", op, q)
			}
		case cond == "ToolgateGroups IS NULL":
			conds = append(conds, func(c fakeCall) bool { return c.groups == nil })
		case strings.HasPrefix(cond, "ToolgateGroups IN ("):
			var want []string
			for _, v := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(cond, "ToolgateGroups IN ("), ")"), ", ") {
				want = append(want, strings.Trim(v, "'"))
			}
			conds = append(conds, func(c fakeCall) bool {
				return slices.ContainsFunc(c.groups, func(g string) bool { return slices.Contains(want, g) })
			})
		default:
			f.t.Fatalf("unexpected condition %q in %s", cond, q)
		}
	}
	var out []fakeCall
	for _, c := range f.calls {
		if !slices.ContainsFunc(conds, func(ok func(fakeCall) bool) bool { return !ok(c) }) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b fakeCall) int { return b.at.Compare(a.at) })
	return out
}

func (f *fakeVisibility) CountWorkflow(_ context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts++
	f.queries = append(f.queries, req.GetQuery())
	return &workflowservice.CountWorkflowExecutionsResponse{Count: int64(len(f.match(req.GetQuery())))}, nil
}

func (f *fakeVisibility) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	f.queries = append(f.queries, req.GetQuery())
	all := f.match(req.GetQuery())
	offset := 0
	if len(req.GetNextPageToken()) > 0 {
		offset, _ = strconv.Atoi(string(req.GetNextPageToken()))
	}
	end := min(offset+int(req.GetPageSize()), len(all))
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	dc := converter.GetDefaultDataConverter()
	payload := func(v any) *commonpb.Payload {
		p, err := dc.ToPayload(v)
		require.NoError(f.t, err)
		return p
	}
	for _, c := range all[offset:end] {
		sa := map[string]*commonpb.Payload{
			workflows.AttrStatus.GetName():      payload("pending"),
			workflows.AttrSession.GetName():     payload(c.session),
			workflows.AttrTool.GetName():        payload(c.tool),
			workflows.AttrRequestedAt.GetName(): payload(c.at),
		}
		resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{
			Execution:        &commonpb.WorkflowExecution{WorkflowId: workflows.CallWorkflowID(c.id)},
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: sa},
			Memo:             &commonpb.Memo{Fields: map[string]*commonpb.Payload{workflows.MemoGroups: payload(c.memo)}},
		})
	}
	f.rowsListed += end - offset
	if end < len(all) {
		resp.NextPageToken = []byte(strconv.Itoa(end))
	}
	return resp, nil
}

// pageAll follows Pending's pages to the end, calling between(pageNumber)
// after each page, and returns the calls in the order listed and the
// totals of each page.
func pageAll(t *testing.T, c *Client, f ListFilter, size int, between func(int)) ([]CallSummary, []int64) {
	t.Helper()
	var all []CallSummary
	var totals []int64
	req := PageRequest{Size: size}
	for n := 1; ; n++ {
		page, err := c.Pending(context.Background(), f, req)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Calls), size)
		all, totals = append(all, page.Calls...), append(totals, page.Total)
		if page.NextPageToken == "" {
			return all, totals
		}
		require.Len(t, page.Calls, size, "page %d: a page before the last is full", n)
		require.Less(t, n, 100000, "paging does not end")
		if between != nil {
			between(n)
		}
		req.Token = page.NextPageToken
	}
}

func ids(calls []CallSummary) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.CallID
	}
	return out
}

// oldestFirst is the order Pending promises.
func oldestFirst(calls []fakeCall) []string {
	s := slices.Clone(calls)
	slices.SortFunc(s, func(a, b fakeCall) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]string, len(s))
	for i, c := range s {
		out[i] = c.id
	}
	return out
}

// spread makes n calls requested at(i).
func spread(n int, at func(i int) time.Time) []fakeCall {
	out := make([]fakeCall, n)
	for i := range out {
		out[i] = fakeCall{id: fmt.Sprintf("c%05d", i), session: fmt.Sprintf("s%d", i%7), tool: "shell", at: at(i), groups: []string{"*"}}
	}
	return out
}

func TestPendingPagesEveryCallOnceOldestFirst(t *testing.T) {
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	for name, calls := range map[string][]fakeCall{
		"none":  nil,
		"a few": spread(7, func(i int) time.Time { return now.Add(-time.Duration(i) * time.Minute) }),
		"3,000 over six hours, at random": spread(3000, func(int) time.Time {
			return now.Add(-time.Duration(rng.Int64N(int64(6 * time.Hour))))
		}),
		"2,000 in a burst of 50 ms": spread(2000, func(int) time.Time {
			return now.Add(-time.Minute + time.Duration(rng.Int64N(int64(50*time.Millisecond))))
		}),
		"400 in one millisecond, some at the same nanosecond": spread(400, func(i int) time.Time {
			return now.Add(-time.Hour).Truncate(time.Millisecond).Add(time.Duration(i%37) * time.Microsecond)
		}),
		"60 in one millisecond": spread(60, func(i int) time.Time {
			return now.Add(-time.Minute).Truncate(time.Millisecond).Add(time.Duration(i%9) * 100 * time.Microsecond)
		}),
		"weeks old and fresh": spread(1500, func(i int) time.Time {
			if i%2 == 0 {
				return now.Add(-20*24*time.Hour + time.Duration(i)*time.Second)
			}
			return now.Add(-time.Duration(i) * 10 * time.Millisecond)
		}),
		"a few seconds in the future (a skewed clock)": spread(300, func(i int) time.Time {
			return now.Add(time.Duration(i) * 100 * time.Millisecond)
		}),
	} {
		for _, size := range []int{1, 50, 100} {
			if size == 1 && len(calls) > 200 {
				continue
			}
			t.Run(fmt.Sprintf("%s, pages of %d", name, size), func(t *testing.T) {
				fake := newFakeVisibility(t, calls...)
				got, totals := pageAll(t, New(fake, "").WithDoor(testDoor), ListFilter{}, size, nil)
				assert.Equal(t, oldestFirst(calls), ids(got), "every call once, oldest first")
				for _, total := range totals {
					assert.Equal(t, int64(len(calls)), total)
				}
			})
		}
	}
}

func TestPendingPagesReadAboutAPage(t *testing.T) {
	now := time.Now()
	calls := spread(10000, func(i int) time.Time { return now.Add(-30*time.Minute + time.Duration(i)*180*time.Millisecond) })
	fake := newFakeVisibility(t, calls...)
	c := New(fake, "").WithDoor(testDoor)

	page, err := c.Pending(context.Background(), ListFilter{}, PageRequest{})
	require.NoError(t, err)
	assert.Equal(t, oldestFirst(calls)[:DefaultPageSize], ids(page.Calls), "the oldest 100 of 10,000")
	assert.Equal(t, int64(10000), page.Total)
	t.Logf("first page without a hint: %d counts, %d listings, %d calls read", fake.counts, fake.lists, fake.rowsListed)
	assert.LessOrEqual(t, fake.rowsListed, 200, "the first page reads about a page, not all 10,000 calls")
	assert.LessOrEqual(t, fake.counts, 16, "a first page without a hint narrows its window in a few counts")
	assert.Equal(t, 1, fake.lists)

	fake.resetCounters()
	again, err := c.Pending(context.Background(), ListFilter{}, PageRequest{})
	require.NoError(t, err)
	assert.Equal(t, ids(page.Calls), ids(again.Calls))
	t.Logf("first page again: %d counts, %d listings, %d calls read", fake.counts, fake.lists, fake.rowsListed)
	assert.LessOrEqual(t, fake.counts, 3, "the next first page (a poll) starts where the last one was found: the total and one or two counts")
	assert.LessOrEqual(t, fake.rowsListed, 200)

	fake.resetCounters()
	next, err := c.Pending(context.Background(), ListFilter{}, PageRequest{Token: page.NextPageToken})
	require.NoError(t, err)
	assert.Equal(t, oldestFirst(calls)[DefaultPageSize:2*DefaultPageSize], ids(next.Calls))
	t.Logf("second page: %d counts, %d listings, %d calls read", fake.counts, fake.lists, fake.rowsListed)
	assert.LessOrEqual(t, fake.counts, 3, "a later page starts from the span of the one before")
	assert.LessOrEqual(t, fake.rowsListed, 200)
}

func TestPendingPagesHoldWhileCallsComeAndGo(t *testing.T) {
	now := time.Now()
	calls := spread(1000, func(i int) time.Time { return now.Add(-time.Hour + time.Duration(i)*time.Second) })
	fake := newFakeVisibility(t, calls...)
	rng := rand.New(rand.NewPCG(3, 4))
	decided := map[string]bool{}
	var arrived []string
	got, _ := pageAll(t, New(fake, "").WithDoor(testDoor), ListFilter{}, 50, func(page int) {
		// Between pages: 20 calls are decided (listed or not yet), 10 new
		// ones arrive.
		for range 20 {
			id := calls[rng.IntN(len(calls))].id
			fake.decide(id)
			decided[id] = true
		}
		for i := range 10 {
			id := fmt.Sprintf("new%03d-%d", page, i)
			fake.add(fakeCall{id: id, session: "s", tool: "shell", at: time.Now(), groups: []string{"*"}})
			arrived = append(arrived, id)
		}
	})
	seen := map[string]int{}
	for _, id := range ids(got) {
		seen[id]++
	}
	for id, n := range seen {
		assert.Equal(t, 1, n, "call %s listed once", id)
	}
	for i := 1; i < len(got); i++ {
		assert.Negative(t, compareCalls(got[i-1], got[i]), "oldest first: %s before %s", got[i-1].CallID, got[i].CallID)
	}
	for _, c := range calls {
		if !decided[c.id] {
			assert.Contains(t, seen, c.id, "a call that waited throughout is listed")
		}
	}
	for _, id := range arrived {
		assert.Contains(t, seen, id, "a call that arrived while paging is listed on a later page")
	}
}

func TestPendingFiltersGroupsBeforePaging(t *testing.T) {
	now := time.Now()
	var calls []fakeCall
	for i := range 300 {
		c := fakeCall{id: fmt.Sprintf("c%03d", i), session: "s", tool: "shell", at: now.Add(-time.Hour + time.Duration(i)*time.Second)}
		switch i % 6 {
		case 0:
			c.groups, c.memo = []string{"ops"}, []string{"ops"}
		case 1:
			c.groups, c.memo = []string{"finance"}, []string{"finance"}
		case 2:
			c.groups = []string{"*"}
		case 3:
			c.groups, c.memo = []string{"finance", "ops"}, []string{"finance", "ops"} // escalated to ops
		case 4:
			c.memo = []string{"ops"} // waiting from before ToolgateGroups
		case 5:
			c.memo = []string{"finance"}
		}
		calls = append(calls, c)
	}
	mayDecide := func(groups ...string) []fakeCall {
		var out []fakeCall
		for _, c := range calls {
			g := c.groups
			if g == nil {
				g = c.memo
			}
			if slices.Contains(g, "*") || len(g) == 0 || slices.ContainsFunc(groups, func(x string) bool { return slices.Contains(g, x) }) {
				out = append(out, c)
			}
		}
		return out
	}
	for name, tc := range map[string]struct {
		approver *policy.Approver
		want     []fakeCall
	}{
		"ops sees ops, escalated to ops, any approver, and waiting-before-the-attribute ops": {&policy.Approver{Name: "alice", Groups: []string{"ops"}}, mayDecide("ops")},
		"finance sees no ops call":                      {&policy.Approver{Name: "carol", Groups: []string{"finance"}}, mayDecide("finance")},
		"an approver of no group sees calls of none":    {&policy.Approver{Name: "dave"}, mayDecide()},
		"* sees every call":                             {&policy.Approver{Name: "bob", Groups: []string{"*"}}, calls},
		"no filter (over Temporal) lists every call":    {nil, calls},
		"ops and finance see both, each call once only": {&policy.Approver{Name: "erin", Groups: []string{"ops", "finance"}}, calls},
	} {
		t.Run(name, func(t *testing.T) {
			got, totals := pageAll(t, New(newFakeVisibility(t, calls...), ""), ListFilter{DecidableBy: tc.approver}, 20, nil)
			assert.Equal(t, oldestFirst(tc.want), ids(got))
			for _, total := range totals {
				assert.Equal(t, int64(len(tc.want)), total, "the total counts what the pages hold")
			}
		})
	}
}

func TestPendingFiltersSessionToolAndAge(t *testing.T) {
	now := time.Now()
	calls := spread(500, func(i int) time.Time { return now.Add(-time.Hour + time.Duration(i)*5*time.Second) })
	fake := newFakeVisibility(t, calls...)
	var want []fakeCall
	for _, c := range calls {
		if c.session == "s3" && c.at.Before(now.Add(-10*time.Minute)) {
			want = append(want, c)
		}
	}
	got, totals := pageAll(t, New(fake, "").WithDoor(testDoor), ListFilter{Session: "s3", Tool: "shell", Before: now.Add(-10 * time.Minute)}, 10, nil)
	assert.Equal(t, oldestFirst(want), ids(got))
	assert.Equal(t, int64(len(want)), totals[0])
}

func TestPendingRefusesBadPagesBeforeAskingTemporal(t *testing.T) {
	now := time.Now()
	fake := newFakeVisibility(t, spread(30, func(i int) time.Time { return now.Add(-time.Duration(i) * time.Second) })...)
	c := New(fake, "").WithDoor(testDoor)
	page, err := c.Pending(context.Background(), ListFilter{Session: "s1"}, PageRequest{Size: 2})
	require.NoError(t, err)
	require.NotEmpty(t, page.NextPageToken)
	raw, err := base64.RawURLEncoding.DecodeString(page.NextPageToken)
	require.NoError(t, err)
	edit := func(change func(map[string]any)) string {
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		change(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for name, tc := range map[string]struct {
		f     ListFilter
		req   PageRequest
		field string
	}{
		"page size 0 is the default, -1 is not":  {ListFilter{}, PageRequest{Size: -1}, "page_size"},
		"page size over the maximum":             {ListFilter{}, PageRequest{Size: MaxPageSize + 1}, "page_size"},
		"a token that is not base64":             {ListFilter{Session: "s1"}, PageRequest{Token: "not a token!"}, "page_token"},
		"a token that is not JSON":               {ListFilter{Session: "s1"}, PageRequest{Token: base64.RawURLEncoding.EncodeToString([]byte("hello"))}, "page_token"},
		"a token of another session's listing":   {ListFilter{Session: "s2"}, PageRequest{Token: page.NextPageToken}, "page_token"},
		"a token of another approver's groups":   {ListFilter{Session: "s1", DecidableBy: &policy.Approver{Groups: []string{"ops"}}}, PageRequest{Token: page.NextPageToken}, "page_token"},
		"a token with its time removed":          {ListFilter{Session: "s1"}, PageRequest{Token: edit(func(m map[string]any) { delete(m, "t") })}, "page_token"},
		"a token with a call ID that is not one": {ListFilter{Session: "s1"}, PageRequest{Token: edit(func(m map[string]any) { m["c"] = "x' OR 1=1" })}, "page_token"},
		"a token with a field it never has":      {ListFilter{Session: "s1"}, PageRequest{Token: edit(func(m map[string]any) { m["x"] = 1 })}, "page_token"},
		"a token of another version":             {ListFilter{Session: "s1"}, PageRequest{Token: edit(func(m map[string]any) { m["v"] = 2 })}, "page_token"},
		"a token of the calls listing":           {ListFilter{Session: "s1"}, PageRequest{Token: edit(func(m map[string]any) { m["k"] = "calls" })}, "page_token"},
		"a group that cannot be quoted":          {ListFilter{DecidableBy: &policy.Approver{Groups: []string{`ops') OR ('x`}}}, PageRequest{}, "groups"},
	} {
		t.Run(name, func(t *testing.T) {
			fake.resetCounters()
			_, err := c.Pending(context.Background(), tc.f, tc.req)
			var input *InputError
			require.ErrorAs(t, err, &input)
			assert.Equal(t, tc.field, input.Field)
			assert.Zero(t, fake.counts+fake.lists, "nothing was asked of Temporal")
		})
	}

	t.Run("the token of a page continues that listing", func(t *testing.T) {
		next, err := c.Pending(context.Background(), ListFilter{Session: "s1"}, PageRequest{Size: 2, Token: page.NextPageToken})
		require.NoError(t, err)
		assert.NotEqual(t, ids(page.Calls), ids(next.Calls))
	})
}

func TestListPagePagesNewestFirst(t *testing.T) {
	now := time.Now()
	calls := spread(45, func(i int) time.Time { return now.Add(-time.Duration(i) * time.Minute) })
	fake := newFakeVisibility(t, calls...)
	c := New(fake, "").WithDoor(testDoor)
	var got []string
	req := PageRequest{Size: 10}
	for {
		page, err := c.ListPage(context.Background(), ListFilter{}, req)
		require.NoError(t, err)
		assert.Equal(t, int64(45), page.Total)
		got = append(got, ids(page.Calls)...)
		if page.NextPageToken == "" {
			break
		}
		req.Token = page.NextPageToken
	}
	want := oldestFirst(calls)
	slices.Reverse(want)
	assert.Equal(t, want, got, "every call once, newest first")

	page, err := c.ListPage(context.Background(), ListFilter{Tool: "shell"}, PageRequest{Size: 10})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		f     ListFilter
		token string
	}{
		"a token of another filter":   {ListFilter{Tool: "read_file"}, page.NextPageToken},
		"a token of the pending list": {ListFilter{Tool: "shell"}, pageToken{Kind: tokenPending, Filter: filterKey(tokenPending, ListFilter{Tool: "shell"}), At: 1, CallID: "c1"}.encode()},
		"a token that is not one":     {ListFilter{Tool: "shell"}, "garbage"},
		"a token whose Temporal cursor was edited": {ListFilter{Tool: "shell"}, func() string {
			raw, err := base64.RawURLEncoding.DecodeString(page.NextPageToken)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(raw, &m))
			m["n"] = base64.StdEncoding.EncodeToString([]byte(`{"CloseTime":"x"}`))
			b, err := json.Marshal(m)
			require.NoError(t, err)
			return base64.RawURLEncoding.EncodeToString(b)
		}()},
	} {
		t.Run(name, func(t *testing.T) {
			fake.resetCounters()
			_, err := c.ListPage(context.Background(), tc.f, PageRequest{Token: tc.token})
			var input *InputError
			require.ErrorAs(t, err, &input)
			assert.Equal(t, "page_token", input.Field)
			assert.Zero(t, fake.counts+fake.lists, "nothing was asked of Temporal")
		})
	}
}
