package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"
)

// Signal is one signal to send to a workflow.
type Signal struct {
	WorkflowID string          `json:"workflow_id"`
	Name       string          `json:"name"`
	Arg        json.RawMessage `json:"arg,omitempty"`
}

// SignalsInput is the argument of SendSignals.
type SignalsInput struct {
	Signals []Signal `json:"signals"`
}

// signalParallelism bounds the signals in flight from one activity.
const signalParallelism = 32

// SendSignals sends many signals at once, for a workflow that owes many
// answers (a session releasing its waiting calls): sent by a client, each
// touches only its target, where a signal from the workflow also writes
// to the sender's history, one after another. It returns the IDs of the
// workflows that no longer run; any other failure fails the attempt, which
// is retried (the receivers take a repeated answer as one).
func (a *Activities) SendSignals(ctx context.Context, in SignalsInput) ([]string, error) {
	if a.Client == nil {
		return nil, temporal.NewNonRetryableApplicationError("worker has no Temporal client to send signals", "Misconfigured", nil)
	}
	var (
		mu   sync.Mutex
		gone []string
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(signalParallelism)
	for _, s := range in.Signals {
		g.Go(func() error {
			var arg any
			if len(s.Arg) > 0 {
				arg = s.Arg
			}
			err := a.Client.SignalWorkflow(gctx, s.WorkflowID, "", s.Name, arg)
			var nf *serviceerror.NotFound
			switch {
			case errors.As(err, &nf):
				mu.Lock()
				gone = append(gone, s.WorkflowID)
				mu.Unlock()
				return nil
			case err != nil:
				return fmt.Errorf("signal %s to %s: %w", s.Name, s.WorkflowID, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return gone, nil
}
