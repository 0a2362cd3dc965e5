package workflows

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// silentRoom takes every call's registration (its session has nothing to
// say) and its done, and returns what reads the names of the signals the
// room got so far. The join names the room of c1's ID.
func (s *CallSuite) silentRoom() func() []string {
	return s.silentRoomNumber(RoomOf("c1"))
}

// silentRoomNumber is silentRoom with the room the join names.
func (s *CallSuite) silentRoomNumber(room int) func() []string {
	var mu sync.Mutex // the environment calls mocks from its own goroutines
	var got []string
	add := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, name)
	}
	s.env.OnActivity("JoinWaitingRoom", mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JoinInput) (activities.Joined, error) {
		add(in.SignalName)
		return activities.Joined{Room: &room}, nil
	})
	s.env.OnSignalExternalWorkflow(mock.Anything, RoomWorkflowID("s1", room), "", mock.Anything, mock.Anything).Return(
		func(_, _, _, name string, _ any) error {
			add(name)
			return nil
		})
	// An approved call's tool activity carries its leave (RoomLeave).
	s.temporal.alsoOnStart = func(info *activity.Info, args converter.EncodedValues) {
		var in activities.RunToolInput
		if activities.IsToolStep(info.ActivityType.Name) && args.Get(&in) == nil && in.LeaveRoom != nil &&
			in.LeaveRoom.WorkflowID == RoomWorkflowID("s1", room) && in.LeaveRoom.CallID == "c1" {
			add(in.LeaveRoom.Signal)
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

func (s *CallSuite) TestAPersonIsAskedAsSoonAsTheCallJoinedItsRoom() {
	told := s.silentRoom()
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Timeout: time.Hour}
	decideAt(s.env, 10*time.Minute, "c1", decision(policy.Approved, "alice"))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Require().Len(r.Notices, 1)
	s.Zero(r.Notices[0].At.Sub(r.RequestedAt), "the room has nothing to answer: a person is notified at once")
	s.Equal([]string{SignalRegisterAll, SignalDone}, told(), "the call joined its room, and left it when decided")
}

// A worker picks the room that takes a call (several calls share one
// signal); the call leaves the room its join named, not the room of its ID.
func (s *CallSuite) TestACallLeavesTheRoomItsJoinNamed() {
	other := (RoomOf("c1") + 3) % Rooms
	told := s.silentRoomNumber(other)
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Timeout: time.Hour}
	decideAt(s.env, 10*time.Minute, "c1", decision(policy.Approved, "alice"))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Equal([]string{SignalRegisterAll, SignalDone}, told(), "the leave went to room %d, which took the call", other)
}

func (s *CallSuite) TestACancelledWaitingCallEndsDeniedAndLeavesItsRoom() {
	told := s.silentRoom()
	s.env.RegisterDelayedCallback(func() { s.env.CancelWorkflow() }, 2*time.Hour)
	s.env.SetStartWorkflowOptions(startOptions("c1"))
	s.env.ExecuteWorkflow(ToolCallWorkflow, call("c1", "write", `{"path":"a","content":"x"}`))

	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError(), "a cancelled call still returns its Result")
	var r Result
	s.Require().NoError(s.env.GetWorkflowResult(&r))
	s.Equal(StatusDenied, r.Status)
	s.Equal("cancelled by an operator (a Temporal cancel request)", r.Reason)
	s.Equal(ChannelCancel, r.Channel)
	s.Zero(s.runs.total())
	// Its done goes out beside the completion, which the test environment
	// may finish first; the integration tests see rooms forget such calls.
	s.Equal(SignalRegisterAll, told()[0], "it waited in its room")
}

func (s *CallSuite) TestTheRequesterOrAnApproverOfItsGroupsMayCancelAWaitingCall() {
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Groups: []string{"ops"}}
	cancelAt := func(at time.Duration, callID string, req CancelRequest) *updateOutcome {
		return updateAt(s.env, at, callID, UpdateCancel, req)
	}
	stranger := cancelAt(time.Hour, "c1", CancelRequest{CallID: "c1", By: "fin1", Groups: []string{"finance"}})
	// A name alone is no requester: an approver named like the agent
	// acts through its groups only.
	namesake := cancelAt(time.Hour, "c1", CancelRequest{CallID: "c1", By: "agent-1", Groups: []string{"finance"}})
	own := cancelAt(2*time.Hour, "c1", CancelRequest{CallID: "c1", By: "agent-1", AsRequester: true})
	approver := cancelAt(2*time.Hour, "c2", CancelRequest{CallID: "c2", By: "ops1", Groups: []string{"ops"}})
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
	}})

	s.Require().Error(stranger.rejected)
	s.Contains(stranger.rejected.Error(), "fin1 may not cancel call c1")
	s.Require().Error(namesake.rejected)
	s.Contains(namesake.rejected.Error(), "agent-1 may not cancel call c1")
	s.True(own.applied)
	s.True(approver.applied)
	s.Equal("cancelled by agent-1", rs[0].Reason)
	s.Equal("cancelled by ops1", rs[1].Reason)
	s.Equal(StatusDenied, rs[1].Status)
	s.Equal(2*time.Hour, rs[0].FinishedAt.Sub(s.start), "it ends at once")
}

func (s *CallSuite) TestAResultStaysUnderThePayloadLimit() {
	big := strings.Repeat("x", 500<<10)
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"fill":"` + big + `"}`)
	decideAt(s.env, time.Hour, "c1", d)
	s.policy.ask["large"] = policy.ApprovalRequest{Message: "large?"}
	rs := s.runSession(harnessInput{Calls: []CallInput{call("c1", "large", `{"fill":"y`+big+`"}`)}})

	r := rs[0]
	s.Equal(StatusOK, r.Status)
	s.Zero(len(r.OriginalArgs), "the agent's arguments are left out")
	s.True(strings.HasSuffix(r.Note, "(the original arguments are left out of this result for size; the call's history has them)"))
	s.Less(len(r.Args)+len(r.Output), 2<<20)
}

func (s *CallSuite) TestEditedArgumentsOverTheLimitAreRefused() {
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"path":"b","content":"` + strings.Repeat("x", policy.MaxArgsBytes) + `"}`)
	o := decideAt(s.env, time.Hour, "c1", d)
	decideAt(s.env, 2*time.Hour, "c1", decision(policy.Denied, "alice"))
	s.runSession(harnessInput{Calls: []CallInput{call("c1", "write", `{"path":"a","content":"x"}`)}})

	s.Require().Error(o.rejected)
	s.Contains(o.rejected.Error(), "over the 524288-byte limit")
}
