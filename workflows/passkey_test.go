package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/passkeytest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

const (
	testRPID   = "toolgate.example.com"
	testOrigin = "https://toolgate.example.com"
)

// fakePasskeys is a registry of passkeys as the worker reads it.
type fakePasskeys struct {
	mu    sync.Mutex
	creds map[string]passkey.Credential // by credential ID
	count map[string]uint32
}

func (f *fakePasskeys) add(person string, auth *passkeytest.Authenticator) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creds[string(auth.ID)] = auth.Credential(person, testRPID)
}

func (f *fakePasskeys) Credential(_ context.Context, person string, id []byte) (passkey.Credential, uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.creds[string(id)]
	if !ok || c.Person != person {
		return passkey.Credential{}, 0, activities.PasskeyRefusal(fmt.Errorf("not a passkey registered to %s", person))
	}
	return c, f.count[string(id)], nil
}

func (f *fakePasskeys) Used(_ context.Context, id []byte, before, after uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count[string(id)] != before {
		return fmt.Errorf("the passkey was used again at the same time")
	}
	f.count[string(id)] = after
	return nil
}

// usePasskeys makes the tool write a passkey rule's and registers alice's
// and bob's passkeys.
func (s *CallSuite) usePasskeys(req policy.ApprovalRequest) (alice, bob *passkeytest.Authenticator) {
	req.Passkey, req.Rule = true, "pay"
	s.policy.ask["write"] = req
	keys := &fakePasskeys{creds: map[string]passkey.Credential{}, count: map[string]uint32{}}
	alice, bob = passkeytest.New(), passkeytest.New()
	keys.add("alice", alice)
	keys.add("bob", bob)
	s.acts.Passkeys, s.acts.RelyingParty = keys, passkey.RelyingParty{ID: testRPID, Origins: []string{testOrigin}}
	return alice, bob
}

// signed is d with auth's assertion over it, made when it is sent (the
// call's run known then); change alters the decision the device is shown.
func (s *CallSuite) signed(callID string, auth *passkeytest.Authenticator, d policy.Decision, change func(*passkey.Decision)) func() any {
	return func() any {
		v, err := s.env.QueryWorkflowByID(CallWorkflowID(callID), QueryCall)
		s.Require().NoError(err)
		var st CallState
		s.Require().NoError(v.Get(&st))
		args := st.Call.Args
		if d.Kind == policy.ApprovedWithEdits {
			args = d.EditedArgs
		}
		pd := passkey.Decision{Call: callID, Run: st.Run, Tool: st.Call.Tool, Args: statement.Digest(args),
			Kind: d.Kind.String(), By: d.DecidedBy, Expires: s.env.Now().Add(2 * time.Minute)}
		if change != nil {
			change(&pd)
		}
		d.Passkey = auth.Assert(pd, testRPID, testOrigin)
		return DecideRequest{CallID: callID, Decision: d}
	}
}

func (s *CallSuite) TestAPasskeyRuleRunsItsCallOnlyOnTheDecidingPersonsOwnPasskey() {
	alice, _ := s.usePasskeys(policy.ApprovalRequest{Message: "pay?", Timeout: 4 * time.Hour})
	bare := decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	signed := updateMadeAt(s.env, 2*time.Hour, "c1", UpdateDecide, s.signed("c1", alice, decision(policy.Approved, "alice"), nil))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(ErrTypePasskeyRequired, errorType(bare.rejected), "a door's word alone does not approve: %v", bare.rejected)
	s.Contains(bare.rejected.Error(), "needs alice's passkey")
	s.True(signed.applied, "%v %v", signed.rejected, signed.failed)
	s.Equal(StatusOK, r.Status)
	s.Equal(1, s.runs.count("c1"))

	_, e := s.ledger.kinds(s.T(), "c1")
	d := e[1]["decision"].(map[string]any)
	s.Equal("alice", d["decided_by"])
	s.NotNil(d["passkey"], "the ledger keeps the assertion, to be checked offline")
	s.NotNil(d["statement"], "and the door's statement, which carries its digest")
	s.NotEmpty(d["run"], "and the run its challenge names")
	s.Equal(true, e[0]["passkey_rule"], "the submission says its rule needs a passkey")
}

func (s *CallSuite) TestAPasskeyApprovalIsRefusedForWhatIsWrongWithIt() {
	alice, bob := s.usePasskeys(policy.ApprovalRequest{Message: "pay?", Timeout: 4 * time.Hour})
	approve := decision(policy.Approved, "alice")
	cases := []struct {
		name   string
		auth   *passkeytest.Authenticator
		d      policy.Decision
		change func(*passkey.Decision)
		want   error
	}{
		{"another call's", alice, approve, func(d *passkey.Decision) { d.Call = "c2" }, passkey.ErrChallenge},
		{"another run's", alice, approve, func(d *passkey.Decision) { d.Run = "old-run" }, passkey.ErrChallenge},
		{"other arguments", alice, approve, func(d *passkey.Decision) { d.Args = statement.Digest(json.RawMessage(`{}`)) }, passkey.ErrChallenge},
		{"another decision kind", alice, approve, func(d *passkey.Decision) { d.Kind = policy.ApprovedForSession.String() }, passkey.ErrChallenge},
		{"expired", alice, approve, func(d *passkey.Decision) { d.Expires = s.env.Now().Add(-time.Second) }, passkey.ErrExpired},
		{"bob's passkey for alice's approval", bob, approve, nil, nil},
	}
	var sent []*updateOutcome
	for i, c := range cases {
		sent = append(sent, updateMadeAt(s.env, time.Duration(i+1)*time.Minute, "c1", UpdateDecide, s.signed("c1", c.auth, c.d, c.change)))
	}
	noUV := passkeytest.New()
	noUV.NoUV = true
	s.acts.Passkeys.(*fakePasskeys).add("carol", noUV)
	unverified := updateMadeAt(s.env, 10*time.Minute, "c1", UpdateDecide, s.signed("c1", noUV, decision(policy.Approved, "carol"), nil))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	for i, c := range cases {
		s.Equal(ErrTypePasskeyRefused, errorType(sent[i].failed), "%s: %v %v", c.name, sent[i].rejected, sent[i].failed)
		if c.want != nil && sent[i].failed != nil {
			s.Contains(sent[i].failed.Error(), c.want.Error(), c.name)
		}
	}
	s.Contains(sent[len(cases)-1].failed.Error(), "not a passkey registered to alice")
	s.Equal(ErrTypePasskeyRefused, errorType(unverified.failed))
	s.Contains(unverified.failed.Error(), passkey.ErrNotVerified.Error())
	s.Equal(StatusTimedOut, r.Status, "nothing approved it")
	s.Equal(0, s.runs.count("c1"))
}

func (s *CallSuite) TestAPasskeyEditSignsTheEditedArguments() {
	alice, _ := s.usePasskeys(policy.ApprovalRequest{Message: "pay?", Timeout: 4 * time.Hour})
	edit := decision(policy.ApprovedWithEdits, "alice")
	edit.EditedArgs = json.RawMessage(`{"path":"b","content":"x"}`)
	// The device was shown the original arguments: the edit came after.
	late := edit
	late.EditedArgs = json.RawMessage(`{"path":"c","content":"x"}`)
	stale := updateMadeAt(s.env, time.Hour, "c1", UpdateDecide, func() any {
		req := s.signed("c1", alice, edit, nil)().(DecideRequest)
		req.Decision.EditedArgs = late.EditedArgs
		return req
	})
	ok := updateMadeAt(s.env, 2*time.Hour, "c1", UpdateDecide, s.signed("c1", alice, edit, nil))
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(ErrTypePasskeyRefused, errorType(stale.failed), "%v %v", stale.rejected, stale.failed)
	s.True(ok.applied, "%v %v", ok.rejected, ok.failed)
	s.Equal(StatusOK, r.Status)
	s.JSONEq(`{"path":"b","content":"x"}`, string(r.Args))
}

func (s *CallSuite) TestAPasskeyRulesCallsEachNeedTheirOwnPasskey() {
	alice, _ := s.usePasskeys(policy.ApprovalRequest{Message: "pay?", Timeout: time.Hour, OnTimeout: policy.TimeoutApprove})
	forSession := updateMadeAt(s.env, time.Minute, "c1", UpdateDecide, s.signed("c1", alice, decision(policy.ApprovedForSession, "alice"), nil))
	rs := s.runSession(harnessInput{Gap: 10 * time.Minute, Sequential: false, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
	}})

	s.True(forSession.applied, "%v %v", forSession.rejected, forSession.failed)
	s.Equal(StatusOK, rs[0].Status)
	s.Equal(StatusTimedOut, rs[1].Status, "the sticky approval does not cover a call that needs its own passkey, and no timeout approves it")
	s.Equal(0, s.runs.count("c2"))
}

func (s *CallSuite) TestADenialOfAPasskeyRuleNeedsNoPasskey() {
	s.usePasskeys(policy.ApprovalRequest{Message: "pay?"})
	deny := decideAt(s.env, time.Hour, "c1", policy.Decision{Kind: policy.DeniedWithReason, Reason: "no", DecidedBy: "bob", Channel: "slack"})
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))

	s.True(deny.applied, "%v %v", deny.rejected, deny.failed)
	s.Equal(StatusDenied, r.Status)
}
