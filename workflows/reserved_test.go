package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// aChange is a definition_change of server docs' tool search.
func aChange(description string) policy.DefinitionChange {
	d := definition("search", description)
	return policy.DefinitionChange{Server: "docs", Tool: "search", Change: "changed", Diff: []string{"-old", "+new"},
		Definition: json.RawMessage(d.Definition), Hash: d.Hash, PreviousHash: definition("search", "old").Hash}
}

func (s *CallSuite) TestACallIntoWhatToolgateKeepsForItselfIsDeniedUnlessToolgateStartedIt() {
	changeArgs, _ := json.Marshal(aChange("Search, and mail the results out."))
	for name, in := range map[string]CallInput{
		"an agent in the pins' session": {Call: policy.Call{ID: "c1", Session: "toolgate.pins.docs", Tool: "echo",
			Args: json.RawMessage(`{}`), Requester: "agent-1"}},
		"an agent under a question's ID": {Call: policy.Call{ID: "definition-change.docs.0123456789", Session: "s1", Tool: "echo",
			Args: json.RawMessage(`{}`), Requester: "agent-1"}},
		"a definition_change by a requester named toolgate, started around the pins": {Call: policy.Call{
			ID: policy.DefinitionChangeCallID("docs", aChange("x").Hash, 1), Session: "toolgate.pins.docs",
			Tool: policy.DefinitionChangeTool, Args: changeArgs, Requester: policy.ToolgateRequester}},
		"a requester with a reserved name": {Call: policy.Call{ID: "c2", Session: "s1", Tool: "echo",
			Args: json.RawMessage(`{}`), Requester: "policy"}},
	} {
		s.Run(name, func() {
			s.SetupTest()
			r := s.runOne(in)
			s.Equal(StatusDenied, r.Status)
			s.Contains(r.Reason, "reserved")
			s.Contains(r.Reason, "toolgate refuses such a call it did not start itself")
			s.Equal(policy.ToolgateRequester, r.DecidedBy)
			s.Zero(s.runs.total(), "nothing ran")
			s.Empty(s.channel.notices, "nobody was asked")
			kinds, e := s.ledger.kinds(s.T(), in.Call.ID)
			s.Equal(callKinds, kinds[:3])
			s.NotContains(e[0], "verdict", "the policy never judged it: its submission says no verdict")
		})
	}
}

// pinsSuite prepares the environment for ToolPins starting calls: the
// definition_change tool is registered.
func (s *CallSuite) pinsInstalled() {
	s.env = s.NewTestWorkflowEnvironment()
	useDoors(s.env, true)
	acts := newActivities(s.policy, s.runs, s.hooks, s.channel)
	acts.Tools.MustRegister(tool.Tool{Name: policy.DefinitionChangeTool, Run: func(_ context.Context, in tool.Input) (json.RawMessage, error) {
		s.runs.add(in.CallID)
		return json.RawMessage(`{"pinned":true}`), nil
	}})
	s.env.RegisterActivity(acts)
	s.env.RegisterWorkflow(ToolCallWorkflow)
	s.env.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	s.env.RegisterWorkflow(NoticesWorkflow)
	s.env.RegisterWorkflowWithOptions(WaitingRoom, workflow.RegisterOptions{Name: RoomWorkflowType})
	s.env.RegisterWorkflowWithOptions(ToolPins, workflow.RegisterOptions{Name: PinsWorkflowType})
	s.temporal = newFakeTemporal(s.env)
	s.fakeTemporalInstalled()
}

func (s *CallSuite) TestThePinsAskThroughACallTheyStartAndOnlyAnAdminOrToolgateMayEndIt() {
	s.pinsInstalled()
	type asked struct {
		res AskChangeResult
		err error
	}
	ask := func(at time.Duration, req AskChangeRequest) *asked {
		o := &asked{}
		s.env.RegisterDelayedCallback(func() {
			updateSeq++
			s.env.UpdateWorkflow(UpdateAskChange, fmt.Sprint("ask-", updateSeq), &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { o.err = err },
				OnComplete: func(v any, err error) {
					o.err = err
					if r, ok := v.(AskChangeResult); ok {
						o.res = r
					}
				},
			}, req)
		}, at)
		return o
	}
	cancelAt := func(at time.Duration, callID string, req CancelRequest) *updateOutcome {
		return updateAt(s.env, at, callID, UpdateCancel, req)
	}
	change := aChange("Search, and mail the results out.")
	id := policy.DefinitionChangeCallID("docs", change.Hash, 1)
	first := ask(time.Second, AskChangeRequest{Server: "docs", N: 1, Change: change})
	again := ask(2*time.Second, AskChangeRequest{Server: "docs", N: 1, Change: change})
	wrong := ask(3*time.Second, AskChangeRequest{Server: "other", N: 1, Change: change})
	// An approver named toolgate (names are reserved at the tokens file;
	// here the workflow holds on its own) cannot cancel through a group
	// that does not cover the call, and a name alone is no requester.
	byName := cancelAt(time.Hour, id, CancelRequest{CallID: id, By: policy.ToolgateRequester, Groups: []string{"nobody"}})
	notRequester := cancelAt(time.Hour, id, CancelRequest{CallID: id, By: "agent-1", AsRequester: true})
	withdrawn := cancelAt(2*time.Hour, id, CancelRequest{CallID: id, By: policy.ToolgateRequester, AsRequester: true})
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 3*time.Hour)
	s.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: PinsWorkflowID("docs")})
	s.env.ExecuteWorkflow(ToolPins, PinsInput{Server: "docs", Known: true})

	s.Require().NoError(first.err)
	s.Equal(AskChangeResult{CallID: id, Started: true}, first.res)
	s.Require().NoError(again.err)
	s.Equal(AskChangeResult{CallID: id}, again.res, "the question exists: it is joined, not asked twice")
	s.Require().Error(wrong.err)
	s.Contains(wrong.err.Error(), `these are the pins of "docs", not "other"`)

	s.Require().NotEmpty(s.channel.notices, "the pins' own call asks a person")
	n := s.channel.notices[0]
	s.Equal(id, n.Call.ID)
	s.Equal(policy.DefinitionChangeSession("docs"), n.Call.Session)
	s.Equal(policy.DefinitionChangeGroups, n.Groups)
	s.Require().Error(byName.rejected)
	s.Contains(byName.rejected.Error(), "toolgate may not cancel call "+id)
	s.Require().Error(notRequester.rejected)
	s.Contains(notRequester.rejected.Error(), "agent-1 did not request call "+id)
	s.True(withdrawn.applied, "toolgate withdraws its own question as its requester")
}
