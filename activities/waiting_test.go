package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/toolgate/toolgate/policy"
)

// visibilityServer lists waiting calls, answers for one session and
// records the signals sent.
type visibilityServer struct {
	client.Client // nil: methods not written here panic
	mu            sync.Mutex
	// listedAfter: the call shows in listings after this many looks, with
	// callStatus ("pending" when empty).
	listedAfter int
	callStatus  string
	// statusBefore, when set, is the status listings show before that
	// (e.g. "evaluating": the call started, and is not listed as waiting
	// yet); empty: not listed at all.
	statusBefore string
	counts       int
	waiting      []*workflowpb.WorkflowExecutionInfo
	session      *workflowpb.WorkflowExecutionInfo
	signalled    []string
	gone         map[string]bool
}

func (v *visibilityServer) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if v.session == nil {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: v.session}, nil
}

// ListWorkflow finds the call (a query by its workflow ID), or pages the
// waiting calls two at a time.
func (v *visibilityServer) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	if strings.HasPrefix(req.Query, "WorkflowId = ") {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.counts++
		status := cmp.Or(v.callStatus, "pending")
		if v.counts <= v.listedAfter {
			if v.statusBefore == "" {
				return &workflowservice.ListWorkflowExecutionsResponse{}, nil
			}
			status = v.statusBefore
		}
		return &workflowservice.ListWorkflowExecutionsResponse{Executions: []*workflowpb.WorkflowExecutionInfo{{
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{StatusAttribute: v.payload(status)}},
		}}}, nil
	}
	from := 0
	if len(req.NextPageToken) > 0 {
		from = int(req.NextPageToken[0])
	}
	to := min(from+2, len(v.waiting))
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: v.waiting[from:to]}
	if to < len(v.waiting) {
		resp.NextPageToken = []byte{byte(to)}
	}
	return resp, nil
}

func (v *visibilityServer) SignalWorkflow(_ context.Context, workflowID, _, _ string, _ any) error {
	if v.gone[workflowID] {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.signalled = append(v.signalled, workflowID)
	return nil
}

func (v *visibilityServer) payload(x any) *commonpb.Payload {
	p, _ := converter.GetDefaultDataConverter().ToPayload(x)
	return p
}

func payload(t *testing.T, v any) *commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	require.NoError(t, err)
	return p
}

func waitingCall(t *testing.T, id string, groups ...string) *workflowpb.WorkflowExecutionInfo {
	return &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: id},
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{GroupsAttribute: payload(t, groups)}},
	}
}

func runActivity[T any](t *testing.T, a *Activities, fn any, in any) (T, error) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	var out T
	v, err := env.ExecuteActivity(fn, in)
	if err == nil {
		require.NoError(t, v.Get(&out))
	}
	return out, err
}

func TestAwaitListedReadsTheSessionOnlyOnceTheCallIsListed(t *testing.T) {
	approved := &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "session"}
	v := &visibilityServer{listedAfter: 3, session: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{
			"sticky": payload(t, map[string]*policy.Decision{"write": approved}),
			"ended":  payload(t, nil),
		}},
	}}
	a := &Activities{Client: v}
	in := ListedInput{Listed: "WorkflowId = 'c1' AND RunId = 'r1'", Session: StickyLookup{WorkflowID: "s1", Memo: "sticky", Ended: "ended"}, Key: "write"}
	word, err := runActivity[SessionWord](t, a, a.AwaitListed, in)
	require.NoError(t, err)
	require.NotNil(t, word.Sticky)
	assert.Equal(t, "bob", word.Sticky.DecidedBy)
	assert.Nil(t, word.End)
	assert.Equal(t, 4, v.counts, "it polled until the listing showed the call")

	end := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by ops1", DecidedBy: "ops1", DeciderGroups: []string{"ops"}, Channel: "session"}
	v.session.Memo.Fields["ended"] = payload(t, end)
	word, err = runActivity[SessionWord](t, a, a.AwaitListed, in)
	require.NoError(t, err)
	assert.Equal(t, end, word.End, "who ended it, with their groups")

	in.Key = "shell"
	v.session.Memo.Fields["ended"] = payload(t, nil)
	word, err = runActivity[SessionWord](t, a, a.AwaitListed, in)
	require.NoError(t, err)
	assert.Equal(t, SessionWord{}, word, "no decision of that key")

	v.session = nil
	word, err = runActivity[SessionWord](t, a, a.AwaitListed, in)
	require.NoError(t, err)
	assert.Equal(t, SessionWord{}, word, "no session: nothing to say")

	// Decided before listings showed it waiting: nothing to wait for.
	v.callStatus, v.counts, v.listedAfter = "running", 0, 0
	in.Key = "write"
	v.session = &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{"sticky": payload(t, map[string]*policy.Decision{"write": approved})}}}
	word, err = runActivity[SessionWord](t, a, a.AwaitListed, in)
	require.NoError(t, err)
	assert.Equal(t, SessionWord{}, word)
	assert.Equal(t, 1, v.counts, "one look")
}

func TestReleaseWaitingTellsEveryListedCall(t *testing.T) {
	v := &visibilityServer{gone: map[string]bool{"c3": true}}
	for _, id := range []string{"c1", "c2", "c3", "c4", "c5"} {
		v.waiting = append(v.waiting, waitingCall(t, id, "*"))
	}
	arg, _ := json.Marshal(map[string]string{"key": "write"})
	a := &Activities{Client: v}
	told, err := runActivity[int](t, a, a.ReleaseWaiting,
		ReleaseInput{Query: "q", Name: "session-decision", Arg: arg, Limit: 100})
	require.NoError(t, err)
	assert.Equal(t, 4, told, "every page; a call that ended meanwhile is not counted")
	assert.ElementsMatch(t, []string{"c1", "c2", "c4", "c5"}, v.signalled)
}

func TestCheckWaitingNamesACallTheApproverMayNotActOn(t *testing.T) {
	v := &visibilityServer{waiting: []*workflowpb.WorkflowExecutionInfo{
		waitingCall(t, "toolgate/call/c1", "*"),
		waitingCall(t, "toolgate/call/c2", "ops"),
		waitingCall(t, "toolgate/call/c3", "finance"),
	}}
	a := &Activities{Client: v}
	refusal, err := runActivity[string](t, a, a.CheckWaiting, CheckWaitingInput{Query: "q", Approver: policy.Approver{Name: "ops1", Groups: []string{"ops"}}})
	require.NoError(t, err)
	assert.Contains(t, refusal, "waiting call toolgate/call/c3")
	assert.Contains(t, refusal, "finance")

	refusal, err = runActivity[string](t, a, a.CheckWaiting, CheckWaitingInput{Query: "q", Approver: policy.Approver{Name: "root", Groups: []string{"*"}}})
	require.NoError(t, err)
	assert.Empty(t, refusal, "an admin may act on every call")
}

// A call that listings still show as evaluating has not been seen waiting
// yet: reading nothing then would miss a decision the session takes
// meanwhile (its release lists only calls shown waiting).
func TestAwaitListedWaitsPastEvaluating(t *testing.T) {
	approved := &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "session"}
	v := &visibilityServer{listedAfter: 2, statusBefore: "evaluating", session: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Memo:   &commonpb.Memo{Fields: map[string]*commonpb.Payload{"sticky": payload(t, map[string]*policy.Decision{"write": approved})}},
	}}
	a := &Activities{Client: v}
	in := ListedInput{Listed: "WorkflowId = 'c1'", Session: StickyLookup{WorkflowID: "s1", Memo: "sticky", Ended: "ended"}, Key: "write"}
	word, err := runActivity[SessionWord](t, a, a.AwaitListed, in)
	require.NoError(t, err)
	require.NotNil(t, word.Sticky, "the session's decision reaches the call")
	assert.Equal(t, 3, v.counts, "it looked until the call was listed waiting")
}

// A session that ended and closed still says so: a call that comes later
// is denied, not asked of a person. A closed session's sticky decisions
// are gone with it.
func TestAClosedSessionStillSaysItEnded(t *testing.T) {
	approved := &policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bob", Channel: "session"}
	end := &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by ops1", DecidedBy: "ops1", Channel: "session"}
	v := &visibilityServer{session: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{
			"sticky": payload(t, map[string]*policy.Decision{"write": approved}),
			"ended":  payload(t, end),
		}},
	}}
	a := &Activities{Client: v}
	lookup := StickyLookup{WorkflowID: "s1", Memo: "sticky", Ended: "ended"}
	word, err := runActivity[SessionWord](t, a, a.AwaitListed, ListedInput{Listed: "WorkflowId = 'c1'", Session: lookup, Key: "write"})
	require.NoError(t, err)
	assert.Equal(t, SessionWord{End: end}, word, "the end, and no sticky decision of a closed session")
	assert.Equal(t, SessionWord{End: end}, a.lookupSticky(context.Background(), lookup, "write"), "at evaluation too")

	v.session.Memo.Fields["ended"] = payload(t, nil) // closed without an end (idle)
	assert.Equal(t, SessionWord{}, a.lookupSticky(context.Background(), lookup, "write"))
}
