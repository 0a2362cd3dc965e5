package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

// roomsServer records the batches signalled to waiting rooms.
type roomsServer struct {
	mu      sync.Mutex
	signals []SignalWithStartInput
	acked   []time.Time   // when each signal was acknowledged
	delay   time.Duration // how long a signal takes
	err     error         // what a signal fails with, if set
}

func (s *roomsServer) send(_ context.Context, in SignalWithStartInput) error {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signals = append(s.signals, in)
	s.acked = append(s.acked, time.Now())
	return s.err
}

// rooms is where each registration went: call ID → room workflow ID.
func (s *roomsServer) rooms(t *testing.T) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := map[string]string{}
	for _, sig := range s.signals {
		assert.Equal(t, "register-all", sig.SignalName)
		for _, reg := range sig.Signal.([]any) {
			id := reg.(string)
			_, twice := got[id]
			assert.False(t, twice, "call %s registered twice", id)
			got[id] = sig.WorkflowID
		}
	}
	return got
}

func joinInput(session, callID string) JoinInput {
	in := JoinInput{CallID: callID, Registration: callID, WorkflowType: "WaitingRoom", TaskQueue: "q", SignalName: "register-all", Session: session}
	for i := range 8 {
		in.Rooms = append(in.Rooms, RoomStart{WorkflowID: fmt.Sprintf("%s/room/%d", session, i), StartInput: i})
	}
	return in
}

// joinAll joins n calls of session at once and returns the room each was
// told, by call ID.
func joinAll(t *testing.T, j *roomJoins, s *roomsServer, session string, n int) map[string]string {
	var mu sync.Mutex
	told := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in := joinInput(session, fmt.Sprintf("%s-call-%d", session, i))
			room, _, err := j.join(context.Background(), in, s.send)
			if assert.NoError(t, err) {
				mu.Lock()
				told[in.CallID] = in.Rooms[room].WorkflowID
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return told
}

func TestCallsJoiningAtOnceShareSignalsAndLearnTheRoomThatTookThem(t *testing.T) {
	s := &roomsServer{delay: 20 * time.Millisecond}
	var j roomJoins
	told := joinAll(t, &j, s, "s1", 60)

	assert.Equal(t, s.rooms(t), told, "every call was registered once, in the room it was told")
	assert.Len(t, told, 60)
	assert.Less(t, len(s.signals), 30, "calls that join while a batch is in flight go out together")
	for _, sig := range s.signals {
		regs := sig.Signal.([]any)
		assert.Equal(t, sig.WorkflowID, fmt.Sprintf("s1/room/%d", RoomIndex(regs[0].(string), 8)), "a batch goes to the room of its first call")
		assert.Equal(t, "WaitingRoom", sig.WorkflowType)
		assert.Equal(t, "q", sig.TaskQueue)
	}
}

func TestALoneJoinLeavesInABatchOfItsOwn(t *testing.T) {
	s := &roomsServer{}
	var j roomJoins
	room, landed, err := j.join(context.Background(), joinInput("s1", "c1"), s.send)
	require.NoError(t, err)
	require.Len(t, s.signals, 1)
	assert.False(t, landed.Before(s.acked[0]), "the join says when the server acknowledged its batch: a describe sent from then on sees what preceded it")
	assert.Equal(t, []any{"c1"}, s.signals[0].Signal)
	assert.Equal(t, RoomIndex("c1", 8), room)
	assert.Equal(t, room, s.signals[0].StartInput, "the room is started with its own input if it does not run")
}

func TestSessionsDoNotShareBatches(t *testing.T) {
	s := &roomsServer{delay: 10 * time.Millisecond}
	var j roomJoins
	var wg sync.WaitGroup
	wg.Go(func() { joinAll(t, &j, s, "s1", 20) })
	wg.Go(func() { joinAll(t, &j, s, "s2", 20) })
	wg.Wait()

	for call, room := range s.rooms(t) {
		assert.Equal(t, call[:2], room[:2], "call %s went to another session's room", call)
	}
}

func TestABatchIsBounded(t *testing.T) {
	s := &roomsServer{delay: 50 * time.Millisecond}
	var j roomJoins
	told := joinAll(t, &j, s, "s1", 3*maxJoinBatch)

	assert.Equal(t, s.rooms(t), told)
	for _, sig := range s.signals {
		assert.LessOrEqual(t, len(sig.Signal.([]any)), maxJoinBatch)
	}
}

func TestAFailedBatchFailsEveryCallInIt(t *testing.T) {
	s := &roomsServer{delay: 20 * time.Millisecond, err: errors.New("unavailable")}
	var j roomJoins
	var wg sync.WaitGroup
	failed := make(chan error, 10)
	for i := range 10 {
		wg.Go(func() {
			_, _, err := j.join(context.Background(), joinInput("s1", fmt.Sprint("c", i)), s.send)
			failed <- err
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		assert.EqualError(t, err, "unavailable")
	}

	s.err = nil // the attempts' retries go out afresh
	_, _, err := j.join(context.Background(), joinInput("s1", "c0"), s.send)
	assert.NoError(t, err)
}

func TestACallerThatStopsWaitingIsToldSo(t *testing.T) {
	s := &roomsServer{delay: 200 * time.Millisecond}
	var j roomJoins
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, _, err := j.join(ctx, joinInput("s1", "c1"), s.send)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestAJoinThatNamesNoRoomIsRefused(t *testing.T) {
	a := &Activities{}
	_, err := a.JoinWaitingRoom(context.Background(), JoinInput{CallID: "c1", Session: "s1"})
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.True(t, app.NonRetryable())
	assert.Contains(t, err.Error(), "names no waiting room")
}

// A call's join attempt that is retried after its registration landed
// (its describe of the session failed) is not registered again: another
// batch could take it to another room, where it would linger.
func TestARetriedJoinIsNotRegisteredAgain(t *testing.T) {
	s := &roomsServer{}
	var j roomJoins
	first, landed, err := j.join(context.Background(), joinInput("s1", "c1"), s.send)
	require.NoError(t, err)
	again, landedAgain, err := j.join(context.Background(), joinInput("s1", "c1"), s.send)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, landed, landedAgain, "the retry's describe need only follow the registration that landed")
	assert.Len(t, s.signals, 1, "one registration")

	_, _, err = j.join(context.Background(), joinInput("s2", "c1"), s.send)
	require.NoError(t, err)
	assert.Len(t, s.signals, 2, "the same call ID in another session is another call")
}
