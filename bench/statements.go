package bench

import (
	"context"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// StatementCost is what the doors' statements add to a call, timed on the
// same calls in the same run: for a decision, the door's read of the call
// it signs for (the first event of its history), its signature and the
// worker's check; for a submission, its signature and the check.
type StatementCost struct {
	Decide Latency `json:"decide"`
	Submit Latency `json:"submit"`
}

// decisionStatementWork does again, for call id, the work a statement adds
// to its decision, and times it.
func (b *runner) decisionStatementWork(ctx context.Context, id string) (time.Duration, error) {
	start := time.Now()
	call, err := b.calls.Request(ctx, id)
	if err != nil {
		return 0, err
	}
	d := policy.Decision{Kind: policy.Approved, DecidedBy: "bench", Channel: "bench"}
	want := policy.DecisionStatement(call, d, "")
	sd, err := benchDoor.Sign(want)
	if err != nil {
		return 0, err
	}
	if _, err := benchDoors.Check(sd, want, time.Now()); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// submissionStatementWork times a submission's signature and check.
func submissionStatementWork(n int) (Latency, error) {
	call := policy.Call{ID: "c", Session: "s", Tool: toolEcho, Args: args, Requester: "bench"}
	took := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		want := policy.SubmissionStatement(call)
		sd, err := benchDoor.Sign(want)
		if err != nil {
			return Latency{}, err
		}
		if _, err := benchDoors.Check(sd, want, time.Now()); err != nil {
			return Latency{}, err
		}
		took = append(took, time.Since(start))
	}
	return summarise(took), nil
}
