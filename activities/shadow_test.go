package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// shadowed asks like askAll and has a shadow rule that would deny "big".
type shadowed struct{ askAll }

func (shadowed) ShadowFor(c policy.Call) *policy.Shadow {
	if c.Tool == "big" || c.Tool == "no" {
		return &policy.Shadow{Rule: "no-big", Action: "deny"}
	}
	return nil
}

func TestEvaluateRecordsTheShadowVerdictAndEnforcesTheRules(t *testing.T) {
	a := &Activities{Policy: shadowed{}, Tools: registry(t)}
	var ev Evaluation
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "big"}}, &ev))
	assert.Equal(t, "ask", ev.Verdict(), "the enforced rules decide")
	assert.Equal(t, "ask-all", ev.Rule)
	assert.Equal(t, &policy.Shadow{Rule: "no-big", Action: "deny"}, ev.Shadow, "what the shadow rule would do goes with the evaluation")

	ev = Evaluation{}
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "no"}}, &ev))
	assert.Equal(t, "deny", ev.Verdict())
	assert.NotNil(t, ev.Shadow, "a denied call has one too")

	ev = Evaluation{}
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "unknown"}}, &ev))
	assert.NotEmpty(t, ev.Problem)
	assert.Equal(t, "", ev.Verdict(), "a call the policy never judged has no verdict")
	assert.Nil(t, ev.Shadow)

	ev = Evaluation{}
	a = &Activities{Policy: askAll{}, Tools: registry(t)}
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "big"}}, &ev))
	assert.Nil(t, ev.Shadow, "a policy without shadow rules records none")
}

func TestEvaluationVerdict(t *testing.T) {
	assert.Equal(t, "allow", Evaluation{}.Verdict())
	assert.Equal(t, "ask", Evaluation{Ask: &policy.ApprovalRequest{}}.Verdict())
	assert.Equal(t, "deny", Evaluation{Denied: true}.Verdict())
	assert.Equal(t, "", Evaluation{Unsubmitted: "refused"}.Verdict())
	assert.Equal(t, "", Evaluation{Problem: "unknown tool"}.Verdict())
}

// allowNamed allows every call and names the rule that does.
type allowNamed struct{ policy.Base }

func (allowNamed) EvaluateApproval(context.Context, policy.Call) (*policy.ApprovalRequest, error) {
	return nil, nil
}

func (allowNamed) AllowRule(policy.Call) string { return "reads" }

func TestEvaluateNamesTheRuleThatAllows(t *testing.T) {
	a := &Activities{Policy: allowNamed{}, Tools: registry(t)}
	var ev Evaluation
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "big"}}, &ev))
	assert.Equal(t, "allow", ev.Verdict())
	assert.Equal(t, "reads", ev.Rule, "the result, the ledger and the metrics name it")
}
