package workflows

import (
	"encoding/json"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// An insider who reaches Temporal (a raw client, the stock CLI) sends
// these; only a statement of a trusted door that says exactly what the
// message does makes it count.

const testRunID = "default-test-run-id" // the test environment's run

// asInsider turns off the test door: messages arrive as sent.
func (s *CallSuite) asInsider() { useDoors(s.env, false) }

// submitted is in with the test door's statement that its requester asked
// for it, made at the environment's start.
func (s *CallSuite) submitted(in CallInput) CallInput {
	sd, err := testDoor.WithClock(s.env.Now).Sign(policy.SubmissionStatement(in.Call))
	s.Require().NoError(err)
	in.Submission = sd
	return in
}

// signedBy signs st with door at the environment's time (when the update
// is sent), after change.
func (s *CallSuite) signedBy(door *statement.Signer, st statement.Statement, change func(*statement.Statement)) *statement.Signed {
	return s.signedAgo(0, door, st, change)
}

// signedAgo is signedBy, age before the environment's time.
func (s *CallSuite) signedAgo(age time.Duration, door *statement.Signer, st statement.Statement, change func(*statement.Statement)) *statement.Signed {
	if change != nil {
		change(&st)
	}
	sd, err := door.WithClock(func() time.Time { return s.env.Now().Add(-age) }).Sign(st)
	s.Require().NoError(err)
	return sd
}

func (s *CallSuite) TestAStartWithoutAValidSubmissionRunsNothing() {
	in := call("c1", "echo", `{"text":"hi"}`)
	other := call("c1", "echo", `{"text":"other"}`)
	for name, submission := range map[string]*statement.Signed{
		"none":            nil,
		"unknown door":    s.signedBy(strangerDoor, policy.SubmissionStatement(in.Call), nil),
		"revoked door":    s.signedBy(revokedDoor, policy.SubmissionStatement(in.Call), nil),
		"other arguments": s.signedBy(testDoor, policy.SubmissionStatement(other.Call), nil),
		"other requester": s.signedBy(testDoor, policy.SubmissionStatement(in.Call), func(st *statement.Statement) { st.By = "agent-2" }),
		"expired":         s.signedAgo(time.Hour, testDoor, policy.SubmissionStatement(in.Call), nil),
	} {
		s.SetupTest()
		s.asInsider()
		in.Submission = submission
		r := s.runOne(in)

		s.Equal(StatusError, r.Status, name)
		s.True(r.InvalidRequest, name)
		s.Contains(r.Reason, "refused: ", name)
		s.Empty(r.DecidedBy, name)
		s.Zero(s.runs.total(), name)
		kinds, _ := s.ledger.kinds(s.T(), "c1")
		s.NotContains(kinds, ledger.KindCallDecided, name)
	}
}

func (s *CallSuite) TestOnlyADecisionItsDoorSignedDecides() {
	d := decision(policy.Approved, "alice")
	d.DeciderGroups = []string{"ops"}
	target := call("c1", "write", `{"path":"a","content":"x"}`).Call
	say := func() statement.Statement {
		st := policy.DecisionStatement(target, d, "")
		st.Run = testRunID
		return st
	}
	forgedAgo := func(age time.Duration, change func(*statement.Statement), door *statement.Signer, decided func(*policy.Decision)) func() any {
		return func() any {
			dd := d
			if decided != nil {
				decided(&dd)
			}
			if door != nil {
				dd.Statement = s.signedAgo(age, door, say(), change)
			}
			return DecideRequest{CallID: "c1", Decision: dd}
		}
	}
	forged := func(change func(*statement.Statement), door *statement.Signer, decided func(*policy.Decision)) func() any {
		return forgedAgo(0, change, door, decided)
	}
	s.asInsider()
	attempts := map[string]*updateOutcome{}
	at := time.Minute
	for name, arg := range map[string]func() any{
		"no statement":            forged(nil, nil, nil),
		"groups it does not name": forged(nil, testDoor, func(dd *policy.Decision) { dd.DeciderGroups = []string{"*"} }),
		"someone else's":          forged(nil, testDoor, func(dd *policy.Decision) { dd.DecidedBy = "mallory" }),
		"forged identity": forged(nil, testDoor, func(dd *policy.Decision) {
			dd.Identity = &policy.Identity{Issuer: "https://idp.example.com", Subject: "alice-sub-forged"}
		}),
		"another call":    forged(func(st *statement.Statement) { st.Call = "c2" }, testDoor, nil),
		"another run":     forged(func(st *statement.Statement) { st.Run = "another-run" }, testDoor, nil),
		"other arguments": forged(func(st *statement.Statement) { st.Args = statement.Digest(json.RawMessage(`{"path":"b"}`)) }, testDoor, nil),
		"another kind":    forged(func(st *statement.Statement) { st.Decision = policy.Denied.String() }, testDoor, nil),
		"unknown door":    forged(nil, strangerDoor, nil),
		"revoked door":    forged(nil, revokedDoor, nil),
		"expired":         forgedAgo(statement.Lifetime+time.Minute, nil, testDoor, nil),
	} {
		attempts[name] = updateMadeAt(s.env, at, "c1", UpdateDecide, arg)
		at += time.Minute
	}
	approved := updateMadeAt(s.env, time.Hour, "c1", UpdateDecide, forged(nil, testDoor, nil))
	r := s.runOne(s.submitted(CallInput{Call: target}))

	for name, o := range attempts {
		var appErr *temporal.ApplicationError
		s.Require().ErrorAs(o.rejected, &appErr, name)
		s.Equal(ErrTypeNoStatement, appErr.Type(), name)
		s.False(o.applied, name)
	}
	s.True(approved.applied, "the decision its door signed decides")
	s.Equal(StatusOK, r.Status)
	s.Equal("alice", r.DecidedBy)
	s.Equal(1, s.runs.count("c1"))
	kinds, entries := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)
	s.NotNil(entries[0]["statement"], "the submission's statement is in the ledger")
	s.NotNil(entries[1]["decision"].(map[string]any)["statement"], "the decision's statement is in the ledger")
}

func (s *CallSuite) TestADecideSignalWithoutAValidStatementIsIgnored() {
	target := call("c1", "write", `{"path":"a","content":"x"}`).Call
	d := decision(policy.Approved, "alice")
	s.asInsider()
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalDecide, DecideRequest{CallID: "c1", Decision: d})
	}, time.Minute)
	s.env.RegisterDelayedCallback(func() {
		signed := d
		st := policy.DecisionStatement(target, d, "")
		st.Run = testRunID
		signed.Statement = s.signedBy(testDoor, st, nil)
		s.env.SignalWorkflow(SignalDecide, DecideRequest{CallID: "c1", Decision: signed})
	}, time.Hour)
	r := s.runOne(s.submitted(CallInput{Call: target}))

	s.Equal(StatusOK, r.Status)
	s.True(s.start.Add(time.Hour).Equal(r.DecidedAt), "the unsigned signal an hour before decided nothing")
}

func (s *CallSuite) TestACancelWithoutAValidStatementIsRefused() {
	target := call("c1", "write", `{"path":"a","content":"x"}`).Call
	by := policy.Approver{Name: "root", Groups: []string{"*"}}
	s.asInsider()
	plain := updateAt(s.env, time.Minute, "c1", UpdateCancel, CancelRequest{CallID: "c1", By: "root", Groups: []string{"*"}})
	asOther := updateMadeAt(s.env, 2*time.Minute, "c1", UpdateCancel, func() any {
		st := policy.CancelStatement(target, policy.Approver{Name: "viewer", Groups: []string{"docs"}}, false)
		st.Run = testRunID
		return CancelRequest{CallID: "c1", By: "root", Groups: []string{"*"}, Statement: s.signedBy(testDoor, st, nil)}
	})
	signed := updateMadeAt(s.env, time.Hour, "c1", UpdateCancel, func() any {
		st := policy.CancelStatement(target, by, false)
		st.Run = testRunID
		return CancelRequest{CallID: "c1", By: "root", Groups: []string{"*"}, Statement: s.signedBy(testDoor, st, nil)}
	})
	r := s.runOne(s.submitted(CallInput{Call: target}))

	s.ErrorContains(plain.rejected, "no statement")
	s.ErrorContains(asOther.rejected, "by differs")
	s.True(signed.applied)
	s.Equal(StatusDenied, r.Status)
	s.Equal("cancelled by root", r.Reason)
	s.Zero(s.runs.total())
}

// An agent's report counts only with its door's statement of what it
// says: one completed around the door (an insider completing the report
// activity with the stock CLI) is not recorded, nor one whose statement
// says the run printed something else.
func (s *CallSuite) TestAReportWithoutItsStatementIsNotRecorded() {
	in := agentCall("c1", "sql", `{"q":"select"}`)
	for name, said := range map[string]json.RawMessage{
		"no statement":         nil,
		"another run's output": json.RawMessage(`{"rows":1}`),
	} {
		s.SetupTest()
		s.asInsider()
		var a *activities.Activities
		s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Minute).Return(json.RawMessage(`{"rows":"forged"}`), nil)
		if said != nil {
			s.env.RegisterDelayedCallback(func() {
				st := policy.ReportStatement(in.Call, said, "", "")
				st.Run = testRunID
				s.env.SignalWorkflow(SignalReport, s.signedBy(testDoor, st, nil))
			}, 30*time.Second)
		}
		r := s.runOne(s.submitted(in))

		s.Equal(StatusUnknown, r.Status, name)
		s.Contains(r.Reason, "came without a valid statement from a toolgate door", name)
		s.Empty(r.Output, "%s: what the forged report said is not recorded", name)
	}

	s.SetupTest()
	s.asInsider()
	var a *activities.Activities
	s.env.OnActivity(a.AwaitReport, mock.Anything, mock.Anything).After(time.Minute).Return(json.RawMessage(`{"rows":1}`), nil)
	s.env.RegisterDelayedCallback(func() {
		st := policy.ReportStatement(in.Call, json.RawMessage(`{"rows": 1}`), "", "")
		st.Run = testRunID
		s.env.SignalWorkflow(SignalReport, s.signedBy(testDoor, st, nil))
	}, 30*time.Second)
	r := s.runOne(s.submitted(in))
	s.Equal(StatusOK, r.Status, "the report its door signed is recorded")
	s.JSONEq(`{"rows":1}`, string(r.Output))
}
