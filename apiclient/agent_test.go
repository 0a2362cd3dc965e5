package apiclient

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// submissions is a stub of POST /v1/calls that answers each request with
// the next of answers and keeps the bodies it was sent.
type submissions struct {
	answers []answer
	bodies  []map[string]any
}

type answer struct {
	status int
	body   string
}

func (s *submissions) serve(t *testing.T) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "POST /v1/calls", r.Method+" "+r.URL.RequestURI())
		data, _ := io.ReadAll(r.Body)
		var body map[string]any
		assert.NoError(t, json.Unmarshal(data, &body))
		s.bodies = append(s.bodies, body)
		a := s.answers[0]
		s.answers = s.answers[1:]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL, "t")
}

var agentCall = tgclient.CallRequest{CallID: "c1", Session: "s", Tool: "deploy", Args: json.RawMessage(`{"env":"qa"}`), Execution: policy.ExecutionAgent}

func TestSubmitAndClaimReadsEachAnswer(t *testing.T) {
	ctx := context.Background()
	s := &submissions{answers: []answer{
		{http.StatusAccepted, `{"call_id":"c1","session":"s","tool":"deploy","status":"approved","execution":"agent","args":{"env":"qa"},"decision":"approved","decided_by":"policy","claimed":true}`},
		{http.StatusOK, `{"call_id":"c1","status":"denied","reason":"no"}`},
		{http.StatusAccepted, `{"call_id":"c1","status":"approved","claim_refused":{"code":"approval_void","message":"the session has ended before the agent took the approval"}}`},
		{http.StatusAccepted, `{"call_id":"c1","status":"pending","message":"deploy?"}`},
	}}
	c := s.serve(t)

	first, err := c.SubmitAndClaim(ctx, agentCall, tgclient.Claim{Run: "toolu_1", NoReport: true})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"run": "toolu_1", "no_report": true}, s.bodies[0]["claim"], "the claim goes with the submission")
	assert.Equal(t, "agent", s.bodies[0]["execution"])
	assert.True(t, first.Claimed)
	assert.NoError(t, first.ClaimErr)
	require.NotNil(t, first.Status.State)
	assert.Equal(t, workflows.StatusApproved, first.Status.State.Status)
	assert.Equal(t, policy.Approved, first.Status.State.Decision.Kind)

	first, err = c.SubmitAndClaim(ctx, agentCall, tgclient.Claim{Run: "toolu_1"})
	require.NoError(t, err)
	require.NotNil(t, first.Status.Result, "a call that ended answers with its Result")
	assert.Equal(t, workflows.StatusDenied, first.Status.Result.Status)
	assert.False(t, first.Claimed)

	first, err = c.SubmitAndClaim(ctx, agentCall, tgclient.Claim{Run: "toolu_1"})
	require.NoError(t, err)
	assert.False(t, first.Claimed)
	assert.True(t, tgclient.IsApprovalUsed(first.ClaimErr), "a refused claim is the error Claim returns: %v", first.ClaimErr)
	assert.ErrorContains(t, first.ClaimErr, "the session has ended")

	first, err = c.SubmitAndClaim(ctx, agentCall, tgclient.Claim{Run: "toolu_1"})
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusPending, first.Status.State.Status, "a call that asks comes back unclaimed")
	assert.False(t, first.Claimed)
	assert.NoError(t, first.ClaimErr)

	_, err = c.SubmitAndClaim(ctx, agentCall, tgclient.Claim{})
	var input *tgclient.InputError
	require.ErrorAs(t, err, &input, "a claim of no run is refused before any request")
	assert.Equal(t, "run", input.Field)
	assert.Len(t, s.bodies, 4)
}

// A toolgate from before claims in the submission refuses the field, and
// the call whole: it is submitted again without the claim, to be claimed
// the usual way.
func TestSubmitAndClaimFallsBackOnAnOlderServer(t *testing.T) {
	s := &submissions{answers: []answer{
		{http.StatusBadRequest, `{"error":{"code":"invalid_request","message":"claim is not a known field"}}`},
		{http.StatusAccepted, `{"call_id":"c1","status":"approved"}`},
	}}
	c := s.serve(t)
	first, err := c.SubmitAndClaim(context.Background(), agentCall, tgclient.Claim{Run: "toolu_1"})
	require.NoError(t, err)
	assert.Nil(t, first, "no first answer: wait and claim")
	require.Len(t, s.bodies, 2)
	assert.NotContains(t, s.bodies[1], "claim")
	assert.Equal(t, "c1", s.bodies[1]["call_id"])
}
