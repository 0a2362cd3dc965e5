package hook

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// A call whose rule says user: true goes to Claude Code's own permission
// prompt; what the prompt decided is recorded as dana's.

func newUserHookEnv(t *testing.T) *hookEnv {
	e := newHookEnv(t)
	e.agent.verdict = func(req client.CallRequest) string {
		if req.Tool == "Edit" {
			return "user"
		}
		return byCommand(req)
	}
	e.cfg.ActingUser = "dana"
	return e
}

const editInput = `{"file_path":"/home/u/repo/a.go","old_string":"x","new_string":"y"}`

func stop(event string) string {
	return `{"session_id":"3f2b6c1e-7d2a-4c55-9a51-0c1d2e3f4a5b","hook_event_name":"` + event + `"}`
}

func TestAUserRuleAsksAtThePromptAndRecordsTheApproval(t *testing.T) {
	e := newUserHookEnv(t)

	d := e.decision(pre("toolu_1", "Edit", editInput))

	assert.Equal(t, "ask", d.PermissionDecision, "Claude Code asks its user")
	callID := e.agent.submitted()[0].CallID
	assert.Equal(t, "dana", e.agent.submitted()[0].ActingUser)
	assert.Contains(t, d.PermissionDecisionReason, "toolgate call "+callID+": Run Edit?")
	assert.Contains(t, d.PermissionDecisionReason, `Rule "edits" lets dana, who runs this agent, decide it here`)

	r := e.run(post("toolu_1", "Edit", editInput, `{"filePath":"/home/u/repo/a.go"}`))
	require.Equal(t, 0, r.code)
	res := e.agent.result(callID)
	require.NotNil(t, res, "the tool ran: approved at the prompt, claimed and reported")
	assert.Equal(t, workflows.StatusOK, res.Status)
	assert.Equal(t, "dana", res.DecidedBy)
	assert.Equal(t, policy.ChannelClient, res.Channel)
	require.Len(t, e.agent.claimsOf(callID), 1)
	assert.Equal(t, "toolu_1", e.agent.claimsOf(callID)[0].Run)

	e.run(stop(EventStop))
	assert.Equal(t, workflows.StatusOK, e.agent.result(callID).Status, "a reported call is not refused at the turn's end")
}

func TestATurnThatEndsWithoutTheToolRecordsTheRefusal(t *testing.T) {
	for _, event := range []string{EventUserPromptSubmit, EventStop, EventSessionEnd} {
		t.Run(event, func(t *testing.T) {
			e := newUserHookEnv(t)
			require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
			callID := e.agent.submitted()[0].CallID

			require.Equal(t, 0, e.run(stop(event)).code)

			res := e.agent.result(callID)
			require.NotNil(t, res)
			assert.Equal(t, workflows.StatusDenied, res.Status)
			assert.Equal(t, "dana", res.DecidedBy)
			assert.Contains(t, res.Reason, "did not approve it at Claude Code's permission prompt")
		})
	}
}

// The model tries the refused edit again: the same call, asked again.
func TestARetriedAttemptIsAskedAgain(t *testing.T) {
	e := newUserHookEnv(t)
	require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
	require.Equal(t, "ask", e.decision(pre("toolu_2", "Edit", editInput)).PermissionDecision)
	assert.Equal(t, e.agent.submitted()[0].CallID, e.agent.submitted()[1].CallID, "one call, still waiting")
}

func TestClaudeCodeRefusingWithoutAskingWithdrawsTheCall(t *testing.T) {
	e := newUserHookEnv(t)
	require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
	callID := e.agent.submitted()[0].CallID

	e.run(`{"session_id":"3f2b6c1e-7d2a-4c55-9a51-0c1d2e3f4a5b","hook_event_name":"PermissionDenied","tool_name":"Edit","tool_input":` + editInput + `,"tool_use_id":"toolu_1","reason":"no prompt in -p mode"}`)

	res := e.agent.result(callID)
	require.NotNil(t, res)
	assert.Equal(t, workflows.StatusDenied, res.Status)
	assert.Equal(t, "cancelled by claude-code", res.Reason)
}

// Codex has no "ask": the call waits for a remote approver; a rule
// without user: true is never handed to the prompt.
func TestOnlyClaudeCodeAndOnlyAUserRuleAsksAtThePrompt(t *testing.T) {
	e := newUserHookEnv(t)
	e.cfg.Dialect = Codex
	d := e.decision(pre("toolu_1", "Edit", editInput))
	assert.Equal(t, "deny", d.PermissionDecision)
	assert.Contains(t, d.PermissionDecisionReason, "waiting for a person")

	e = newUserHookEnv(t)
	d = e.decision(pre("toolu_1", "Bash", `{"command":"git push"}`))
	assert.Equal(t, "deny", d.PermissionDecision, "remote approvers only: still waiting")
	assert.Contains(t, d.PermissionDecisionReason, "waiting for a person")
}

// toolgate down at the PostToolUse: the turn's end records the approval,
// not a refusal, since the tool ran.
func TestATurnEndRecordsAnApprovalToolgateMissedAtPostToolUse(t *testing.T) {
	e := newUserHookEnv(t)
	require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
	callID := e.agent.submitted()[0].CallID
	up := e.cfg.Connect
	e.cfg.Connect = func(context.Context) (client.Agent, func(), error) {
		return nil, nil, errors.New("dial tcp 127.0.0.1:7700: connect: connection refused")
	}
	require.Equal(t, 0, e.run(post("toolu_1", "Edit", editInput, `{"filePath":"/home/u/repo/a.go"}`)).code)
	e.cfg.Connect = up

	e.run(stop(EventStop))

	st, err := e.agent.Status(context.Background(), callID)
	require.NoError(t, err)
	require.NotNil(t, st.State)
	assert.Equal(t, workflows.StatusApproved, st.State.Status, "approved, waiting for a report that will not come (it ends unknown)")
	assert.Equal(t, "dana", st.State.Decision.DecidedBy)
	assert.Contains(t, st.State.Decision.Comment, "toolgate was not told how the tool went")
}

// An approver approved edited arguments before the user approved at the
// prompt: the tool ran the agent's arguments, so the approval of others is
// not claimed for that run.
func TestAnEditApprovedFirstIsNotClaimedForThePromptsRun(t *testing.T) {
	e := newUserHookEnv(t)
	require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
	callID := e.agent.submitted()[0].CallID
	edited := policy.Decision{Kind: policy.ApprovedWithEdits, DecidedBy: "bob", Channel: "inbox",
		EditedArgs: []byte(`{"file_path":"/home/u/repo/b.go","old_string":"x","new_string":"y"}`)}
	e.agent.decide(callID, edited)

	e.run(post("toolu_1", "Edit", editInput, `{"filePath":"/home/u/repo/a.go"}`))

	assert.Empty(t, e.agent.claimsOf(callID), "bob approved other arguments than the ones that ran")
	_, reported := e.agent.report(callID)
	assert.False(t, reported)
}

// recordingAgent is a fakeAgent that can record a run against a call's
// end, as client.Client and apiclient.Client can.
type recordingAgent struct {
	*fakeAgent
	mu   sync.Mutex
	recs []workflows.RanAfterEnd
}

func (r *recordingAgent) RecordRanAfterEnd(_ context.Context, callID, requester string, rec workflows.RanAfterEnd) (workflows.RanAfterEnd, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.CallID, rec.Requester = callID, requester
	r.recs = append(r.recs, rec)
	return rec, nil
}

func (r *recordingAgent) records() []workflows.RanAfterEnd {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]workflows.RanAfterEnd(nil), r.recs...)
}

func withRecorder(e *hookEnv) *recordingAgent {
	rec := &recordingAgent{fakeAgent: e.agent}
	e.cfg.Connect = func(context.Context) (client.Agent, func(), error) { return rec, func() {}, nil }
	return rec
}

// alice denies the call in toolgate while Claude Code's prompt asks dana;
// dana approves there and the tool runs: the call stays denied by alice,
// and the run is recorded against that end, with what the tool returned.
func TestAPromptApprovalAfterADenialIsRecordedAgainstTheEnd(t *testing.T) {
	e := newUserHookEnv(t)
	rec := withRecorder(e)
	require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
	callID := e.agent.submitted()[0].CallID
	e.agent.decide(callID, policy.Decision{Kind: policy.DeniedWithReason, Reason: "not now", DecidedBy: "alice", Channel: "inbox"})

	r := e.run(post("toolu_1", "Edit", editInput, `{"filePath":"/home/u/repo/a.go"}`))

	require.Equal(t, 0, r.code)
	recs := rec.records()
	require.Len(t, recs, 1, "the run is recorded once")
	assert.Equal(t, callID, recs[0].CallID)
	assert.Equal(t, "claude-code", recs[0].Requester)
	assert.Equal(t, "dana", recs[0].User, "the acting user approved it at the prompt")
	assert.Equal(t, "Claude Code's permission prompt", recs[0].Via)
	assert.JSONEq(t, editInput, string(recs[0].Args), "the input the tool ran with")
	assert.JSONEq(t, `{"filePath":"/home/u/repo/a.go"}`, string(recs[0].Output))
	assert.Empty(t, e.agent.claimsOf(callID), "nothing to claim: the call ended")
	_, reported := e.agent.report(callID)
	assert.False(t, reported, "the denial stays the call's outcome")
	assert.Equal(t, "alice", e.agent.result(callID).DecidedBy)

	e.run(stop(EventStop))
	assert.Len(t, rec.records(), 1, "the turn's end records nothing more")
}

// A failed run is recorded with its error; a call that did not end denied
// (another run took its approval) gets no record.
func TestOnlyACallThatEndedDeniedGetsARecord(t *testing.T) {
	e := newUserHookEnv(t)
	rec := withRecorder(e)
	require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
	callID := e.agent.submitted()[0].CallID
	e.agent.decide(callID, policy.Decision{Kind: policy.Denied, DecidedBy: "alice", Channel: "inbox"})
	e.run(`{"session_id":"` + session + `","hook_event_name":"PostToolUseFailure","tool_name":"Edit","tool_input":` + editInput + `,"tool_use_id":"toolu_1","error":"old_string not found"}`)
	recs := rec.records()
	require.Len(t, recs, 1)
	assert.Equal(t, "old_string not found", recs[0].Error)
	assert.Empty(t, recs[0].Output)

	e = newUserHookEnv(t)
	rec = withRecorder(e)
	require.Equal(t, "ask", e.decision(pre("toolu_1", "Edit", editInput)).PermissionDecision)
	callID = e.agent.submitted()[0].CallID
	e.agent.decide(callID, policy.Decision{Kind: policy.Approved, DecidedBy: "bob", Channel: "inbox"})
	require.NoError(t, e.agent.Claim(context.Background(), callID, "claude-code", client.Claim{Run: "toolu_9"}))
	e.run(post("toolu_1", "Edit", editInput, `{"filePath":"/home/u/repo/a.go"}`))
	assert.Empty(t, rec.records(), "approved and claimed by another run: not an end the run went against")
}
