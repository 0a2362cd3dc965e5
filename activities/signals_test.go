package activities

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
)

// signalServer counts the signals it takes, fails the one numbered failAt
// once, and knows some workflows as gone.
type signalServer struct {
	client.Client // nil: methods not written here panic
	mu            sync.Mutex
	got           map[string]int
	n, failAt     int
	gone          map[string]bool
}

func (s *signalServer) SignalWorkflow(_ context.Context, id, _, _ string, _ any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n == s.failAt {
		return serviceerror.NewUnavailable("frontend is restarting")
	}
	if s.gone[id] {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	s.got[id]++
	return nil
}

func TestAFailedReleaseGoesOnWhereItStopped(t *testing.T) {
	var in SignalsInput
	for i := range 200 {
		in.Signals = append(in.Signals, Signal{WorkflowID: fmt.Sprintf("call-%d", i), Name: "session-decision"})
	}
	srv := &signalServer{got: map[string]int{}, failAt: 100, gone: map[string]bool{"call-7": true}}
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Client: srv})
	var mu sync.Mutex
	var progress signalsProgress
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, details.Get(&progress))
	})

	_, err := env.ExecuteActivity((&Activities{}).SendSignals, in)
	require.Error(t, err, "the first attempt fails at signal 100")
	mu.Lock()
	require.Positive(t, progress.Sent, "it recorded its progress")
	env.SetHeartbeatDetails(progress)
	mu.Unlock()
	val, err := env.ExecuteActivity((&Activities{}).SendSignals, in)
	require.NoError(t, err, "the retry")

	var gone []string
	require.NoError(t, val.Get(&gone))
	assert.Equal(t, []string{"call-7"}, gone, "a call that no longer runs is reported, across attempts")
	twice := 0
	for i := range 200 {
		id := fmt.Sprintf("call-%d", i)
		if id == "call-7" {
			continue
		}
		require.GreaterOrEqual(t, srv.got[id], 1, "%s was told", id)
		if srv.got[id] > 1 {
			twice++
		}
	}
	assert.LessOrEqual(t, twice, signalParallelism, "the retry started at the chunk that failed, not at the first")
	assert.Less(t, srv.n, 200+2*signalParallelism+1)
}
