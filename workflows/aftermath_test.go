package workflows

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// A `user: true` call that an approver denied, whose acting user then
// approved it at the agent's own prompt: its tool ran against the denial,
// and the record of that run is written only as the call bears it out.

// endedCall runs an agent-executed call of a rule that may say user: true
// to its end and returns its final state, as the call's query answers it.
func (s *CallSuite) endedCall(userRule bool, d *policy.Decision) CallState {
	s.policy.ask["Edit"] = policy.ApprovalRequest{Message: "edit?", Rule: "edits", User: userRule}
	in := agentCall("c1", "Edit", `{"file_path":"a.go"}`)
	in.Call.ActingUser = "dana"
	if d != nil {
		decideAt(s.env, time.Minute, "c1", *d)
	}
	s.runOne(in)
	v, err := s.env.QueryWorkflow(QueryCall)
	s.Require().NoError(err)
	var st CallState
	s.Require().NoError(v.Get(&st))
	return st
}

// recordAgainst runs the record workflow with the call's state as its
// read of the call, and returns its result or its error.
func (s *CallSuite) recordAgainst(st *CallState, rec RanAfterEnd, workflowID string) (RanAfterEnd, error) {
	env := s.NewTestWorkflowEnvironment()
	useDoors(env, true)
	env.RegisterWorkflowWithOptions(RanAfterEndWorkflow, workflow.RegisterOptions{Name: RanAfterEndWorkflowType})
	env.RegisterActivity(&activities.Activities{Policy: &testPolicy{}, Middleware: []policy.OutputMiddleware{redactor{}}, Doors: testDoors})
	reads := 0
	env.OnActivity(a.QueryWorkflow, mock.Anything, activities.QueryInput{WorkflowID: CallWorkflowID(rec.CallID), Query: QueryCall}).Return(
		func(_ context.Context, _ activities.QueryInput) (json.RawMessage, error) {
			reads++
			if st == nil {
				return nil, temporal.NewNonRetryableApplicationError("no workflow", activities.ErrTypeNoSuchWorkflow, nil)
			}
			return json.Marshal(st)
		})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflowID})
	env.ExecuteWorkflow(RanAfterEndWorkflow, rec)
	s.Require().True(env.IsWorkflowCompleted())
	if err := env.GetWorkflowError(); err != nil {
		return RanAfterEnd{}, err
	}
	s.Equal(1, reads, "the record reads the call")
	var out RanAfterEnd
	s.Require().NoError(env.GetWorkflowResult(&out))
	return out, nil
}

func ranByDana() RanAfterEnd {
	return RanAfterEnd{CallID: "c1", Requester: "agent-1", User: "dana", Via: "Claude Code's permission prompt",
		Args: json.RawMessage(`{"file_path":"a.go"}`), Output: json.RawMessage(`{"filePath":"a.go"}`)}
}

func (s *CallSuite) TestARunAfterADenialIsRecordedWithTheCallsEnd() {
	denied := decision(policy.Denied, "alice")
	st := s.endedCall(true, &denied)
	s.Require().Equal(StatusDenied, st.Status)

	rec, err := s.recordAgainst(&st, ranByDana(), RanAfterEndWorkflowID("c1"))

	s.Require().NoError(err)
	s.Equal("dana", rec.User)
	s.Equal(StatusDenied, rec.CallStatus, "the call's outcome stays, and the record says which it ran against")
	s.Equal("alice", rec.DecidedBy)
	s.JSONEq(`{"filePath":"a.go"}`, string(rec.Output))
	s.False(rec.At.IsZero(), "stamped with the time it was recorded")
}

func (s *CallSuite) TestARunAfterATimeoutIsRecorded() {
	st := s.endedCall(true, nil)
	s.Require().Equal(StatusTimedOut, st.Status)

	rec, err := s.recordAgainst(&st, ranByDana(), RanAfterEndWorkflowID("c1"))

	s.Require().NoError(err)
	s.Equal(StatusTimedOut, rec.CallStatus)
}

func (s *CallSuite) TestARecordTheCallDoesNotBearOutIsRefused() {
	denied := decision(policy.Denied, "alice")
	st := s.endedCall(true, &denied)

	other := ranByDana()
	other.Requester = "agent-2"
	_, err := s.recordAgainst(&st, other, RanAfterEndWorkflowID("c1"))
	s.Equal(ErrTypeNotAuthorized, errorType(err), "not the call's requester: %v", err)
	s.Contains(err.Error(), "only the agent that requested call c1")

	mallory := ranByDana()
	mallory.User = "mallory"
	_, err = s.recordAgainst(&st, mallory, RanAfterEndWorkflowID("c1"))
	s.Equal(ErrTypeNotAuthorized, errorType(err), "not its acting user: %v", err)
	s.Contains(err.Error(), "the person running its agent is dana, not mallory")

	_, err = s.recordAgainst(&st, ranByDana(), RanAfterEndWorkflowID("c2"))
	s.Equal(ErrTypeInvalidRecord, errorType(err), "a record of c1 in another call's place: %v", err)

	noArgs := ranByDana()
	noArgs.Args = nil
	_, err = s.recordAgainst(&st, noArgs, RanAfterEndWorkflowID("c1"))
	s.Equal(ErrTypeInvalidRecord, errorType(err), "%v", err)
	s.Contains(err.Error(), "args must be the JSON arguments the tool ran with")

	_, err = s.recordAgainst(nil, ranByDana(), RanAfterEndWorkflowID("c1"))
	s.Equal(ErrTypeNotWaiting, errorType(err), "an unknown call: %v", err)
	s.Contains(err.Error(), "unknown call c1")
}

func (s *CallSuite) TestOnlyADeniedUserRuleCallTakesARecord() {
	s.Run("the rule does not say user: true", func() {
		s.SetupTest()
		denied := decision(policy.Denied, "alice")
		st := s.endedCall(false, &denied)
		_, err := s.recordAgainst(&st, ranByDana(), RanAfterEndWorkflowID("c1"))
		s.Equal(ErrTypeNotAuthorized, errorType(err), "%v", err)
		s.Contains(err.Error(), "user: true")
	})
	s.Run("the call was approved", func() {
		s.SetupTest()
		approved := decision(policy.Approved, "alice")
		s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).Return(json.RawMessage(`{"ok":true}`), nil)
		st := s.endedCall(true, &approved)
		s.Require().Equal(StatusOK, st.Status)
		_, err := s.recordAgainst(&st, ranByDana(), RanAfterEndWorkflowID("c1"))
		s.Equal(ErrTypeNotWaiting, errorType(err), "%v", err)
		s.Contains(err.Error(), "has not ended denied or timed out (status ok)")
	})
	s.Run("toolgate runs the tool", func() {
		s.SetupTest()
		denied := decision(policy.Denied, "alice")
		st := s.endedCall(true, &denied)
		st.Call.Execution = policy.ExecutionToolgate
		_, err := s.recordAgainst(&st, ranByDana(), RanAfterEndWorkflowID("c1"))
		s.Equal(ErrTypeNotWaiting, errorType(err), "%v", err)
	})
}

// What ran after the end is redacted as any reported output: the record
// keeps no secret a Result would not.
func (s *CallSuite) TestARecordedOutputIsRedacted() {
	denied := decision(policy.Denied, "alice")
	st := s.endedCall(true, &denied)
	rec := ranByDana()
	rec.Output = json.RawMessage(`{"env":"TOKEN=sk-live-123"}`)

	out, err := s.recordAgainst(&st, rec, RanAfterEndWorkflowID("c1"))

	s.Require().NoError(err)
	s.JSONEq(`{"env":"TOKEN=[REDACTED]"}`, string(out.Output))
	s.Equal(1, out.Redactions)
}
