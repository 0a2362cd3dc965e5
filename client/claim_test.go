package client

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/policy"
)

// slowUpdates is a Temporal whose update-with-start is never answered
// before the caller's deadline; started says whether the start went
// through meanwhile.
type slowUpdates struct {
	*fakeTemporal
	started bool
}

type startOp struct {
	client.WithStartWorkflowOperation // nil: only Get is called
	started                           bool
}

type startedRun struct{ client.WorkflowRun }

func (s startOp) Get(ctx context.Context) (client.WorkflowRun, error) {
	if s.started {
		return startedRun{}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *slowUpdates) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return startOp{started: f.started}
}

func (f *slowUpdates) UpdateWithStartWorkflow(ctx context.Context, _ client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A call whose worker has not settled it by the caller's deadline was
// still submitted: the caller is told to wait for it as for any call, not
// that the submission failed; a start that did not go through is an error.
func TestSubmitAndClaimOfACallNotSettledInTimeSaysItWasSubmitted(t *testing.T) {
	req := CallRequest{CallID: "c1", Session: "s1", Tool: "Bash", Args: json.RawMessage(`{"command":"ls"}`), Requester: "agent-1", Execution: policy.ExecutionAgent}
	for _, started := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		c := New(&slowUpdates{fakeTemporal: &fakeTemporal{}, started: started}, "toolgate").WithDoor(testDoor)
		first, err := c.SubmitAndClaim(ctx, req, Claim{Run: "toolu_1"})
		cancel()
		assert.Nil(t, first)
		if started {
			require.NoError(t, err, "started: wait for it")
		} else {
			require.Error(t, err, "not known to have started")
			assert.Contains(t, err.Error(), "start call c1")
		}
	}
}
