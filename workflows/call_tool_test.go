package workflows

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// toolInputs records what the tool step of each call is given.
func (s *CallSuite) toolInputs() *[]activities.RunToolInput {
	var ins []activities.RunToolInput
	s.env.OnActivity(a.RunToolChecked, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.RunToolInput) (activities.CheckedOutput, error) {
			ins = append(ins, in)
			return activities.CheckedOutput{After: activities.AfterCallOutcome{Output: json.RawMessage(`{"written":true}`)}}, nil
		})
	return &ins
}

// The tool is handed the preview the approver was shown, so that it can
// refuse to act on anything else (write_file through a re-pointed link).
func (s *CallSuite) TestTheToolIsHandedThePreviewTheApproverSaw() {
	ins := s.toolInputs()
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	r := s.runAsked(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Require().Len(*ins, 1)
	in := (*ins)[0]
	s.Equal("c1", in.Call.ID)
	s.JSONEq(`{"path":"a","content":"x"}`, string(in.Call.Args))
	s.Require().NotNil(in.Preview)
	s.Equal(*r.Preview, *in.Preview, "the preview the approver was shown")
	s.Nil(in.PreviewShown, "no edit")
}

// After an edit the tool gets the edited arguments' preview and the one
// the approver was shown.
func (s *CallSuite) TestAfterAnEditTheToolIsHandedBothPreviews() {
	ins := s.toolInputs()
	d := decision(policy.ApprovedWithEdits, "alice")
	d.EditedArgs = json.RawMessage(`{"path":"b","content":"y"}`)
	decideAt(s.env, time.Hour, "c1", d)
	r := s.runAsked(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Require().Len(*ins, 1)
	in := (*ins)[0]
	s.JSONEq(`{"path":"b","content":"y"}`, string(in.Call.Args))
	s.Require().NotNil(in.Preview)
	s.Require().NotNil(in.PreviewShown)
	s.Equal("+++ b/b\n+y", in.Preview.Text, "the edited arguments' own preview")
	s.Equal("+++ b/a\n+x", in.PreviewShown.Text, "and the one the approver was shown")
}

// A call no person was asked about has no preview to hand over.
func (s *CallSuite) TestAnAutoApprovedToolGetsNoPreview() {
	ins := s.toolInputs()
	r := s.runOne(call("c1", "echo", `{"a":1}`))

	s.Equal(StatusOK, r.Status)
	s.Require().Len(*ins, 1)
	s.Nil((*ins)[0].Preview)
	s.Nil((*ins)[0].PreviewShown)
}

// The grant the call was judged with (the rule's sandbox) is what the
// tool is given, asked or not.
func (s *CallSuite) TestTheToolIsHandedTheRulesSandboxGrant() {
	ins := s.toolInputs()
	grant := &policy.SandboxGrant{Read: []string{"/opt/sdk"}, NoNetwork: true}
	s.policy.grants = map[string]*policy.SandboxGrant{"write": grant, "echo": grant}
	decideAt(s.env, time.Hour, "c1", decision(policy.Approved, "alice"))
	r := s.runAsked(call("c1", "write", `{"path":"a","content":"x"}`))

	s.Equal(StatusOK, r.Status)
	s.Require().Len(*ins, 1)
	s.Equal(grant, (*ins)[0].Sandbox)
}
