package activities

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/policy"
)

// leaveServer takes the signals RunTool sends and its start marks; with
// closed set, the room has closed.
type leaveServer struct {
	client.Client // nil: methods not written here panic
	mu            sync.Mutex
	signals       []string
	closed        bool
	hold          chan struct{} // non-nil: each signal lands once it is closed
}

func (s *leaveServer) SignalWorkflow(_ context.Context, id, _, name string, arg any) error {
	if s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	s.signals = append(s.signals, fmt.Sprintf("%s %s %v", id, name, arg))
	return nil
}

func (s *leaveServer) RecordActivityHeartbeat(context.Context, []byte, ...any) error { return nil }

// The tool's activity tells the call's waiting room that it no longer
// waits, whether the tool runs or is gone; a room that has closed holds
// nobody, and the tool's result stands.
func TestTheToolsActivitySendsTheCallsLeaveOfItsRoom(t *testing.T) {
	leave := &RoomLeave{WorkflowID: "toolgate/session/s1/room/3", Signal: "done", CallID: "c1"}
	for _, tc := range []struct {
		name    string
		tool    string
		closed  bool
		wantErr bool
		want    []string
	}{
		{"the tool runs", "no", false, false, []string{"toolgate/session/s1/room/3 done c1"}},
		{"the tool is gone", "vanished", false, true, []string{"toolgate/session/s1/room/3 done c1"}},
		{"the room has closed", "no", true, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &leaveServer{closed: tc.closed}
			a := &Activities{Policy: askAll{}, Tools: registry(t), Client: srv}
			err := run(t, a, a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: tc.tool}, LeaveRoom: leave}, nil)
			Drain(a)
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, srv.signals)
		})
	}

	srv := &leaveServer{}
	a := &Activities{Policy: askAll{}, Tools: registry(t), Client: srv}
	require.NoError(t, run(t, a, a.RunTool, RunToolInput{Call: policy.Call{ID: "c2", Tool: "no"}}, nil))
	Drain(a)
	assert.Empty(t, srv.signals, "a call that never waited has no room to leave")
}

// The tool's result does not wait for the leave (a slow room is not the
// tool's time), and a worker that stops waits for the leave to land.
func TestTheToolsResultDoesNotWaitForTheLeaveButAStoppingWorkerDoes(t *testing.T) {
	srv := &leaveServer{hold: make(chan struct{})}
	a := &Activities{Policy: askAll{}, Tools: registry(t), Client: srv}
	leave := &RoomLeave{WorkflowID: "toolgate/session/s1/room/3", Signal: "done", CallID: "c1"}
	require.NoError(t, run(t, a, a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: "no"}, LeaveRoom: leave}, nil))

	drained := make(chan struct{})
	go func() { Drain(a); close(drained) }()
	select {
	case <-drained:
		t.Fatal("Drain returned while the leave was still in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(srv.hold)
	<-drained
	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Equal(t, []string{"toolgate/session/s1/room/3 done c1"}, srv.signals)
}
