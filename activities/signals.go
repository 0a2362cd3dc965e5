package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
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

// signalsProgress is SendSignals' heartbeat detail: a retry starts where
// the failed attempt stopped.
type signalsProgress struct {
	Sent int      `json:"sent"`
	Gone []string `json:"gone,omitempty"`
}

// SendSignals sends many signals, for a waiting room that owes many
// answers: sent by a client, each touches only its target, where a signal
// from the workflow also writes to the sender's history, one after another.
// It sends them in chunks of signalParallelism and records its progress in
// its heartbeat, so a retry (a failure fails the attempt; the retries have
// no cap) goes on from the last chunk sent. It returns the IDs of the
// workflows that no longer run.
func (a *Activities) SendSignals(ctx context.Context, in SignalsInput) ([]string, error) {
	if a.Client == nil {
		return nil, temporal.NewNonRetryableApplicationError("worker has no Temporal client to send signals", "Misconfigured", nil)
	}
	var progress signalsProgress
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &progress)
	}
	for progress.Sent < len(in.Signals) {
		chunk := in.Signals[progress.Sent:min(progress.Sent+signalParallelism, len(in.Signals))]
		gone, err := a.sendChunk(ctx, chunk)
		if err != nil {
			return nil, err
		}
		progress.Sent += len(chunk)
		progress.Gone = append(progress.Gone, gone...)
		activity.RecordHeartbeat(ctx, progress)
	}
	return progress.Gone, nil
}

// sendChunk sends signals in parallel and returns the IDs of the workflows
// that no longer run.
func (a *Activities) sendChunk(ctx context.Context, signals []Signal) ([]string, error) {
	var (
		mu   sync.Mutex
		gone []string
	)
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range signals {
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
