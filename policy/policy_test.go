package policy

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fixed struct {
	Base
	req     *ApprovalRequest
	err     error
	hookErr error
	version string
}

func (f fixed) EvaluateApproval(context.Context, Call) (*ApprovalRequest, error) { return f.req, f.err }
func (f fixed) BeforeCall(context.Context, Call) error                           { return f.hookErr }
func (f fixed) AfterCall(context.Context, Call, json.RawMessage) error           { return f.hookErr }
func (f fixed) Version() string                                                  { return f.version }

func TestChain(t *testing.T) {
	ask1 := &ApprovalRequest{Message: "first"}
	ask2 := &ApprovalRequest{Message: "second"}
	tests := []struct {
		name     string
		policies []ToolPolicy
		wantAsk  *ApprovalRequest
		wantDeny string
	}{
		{"all approve", []ToolPolicy{fixed{}, fixed{}}, nil, ""},
		{"first request wins", []ToolPolicy{fixed{}, fixed{req: ask1}, fixed{req: ask2}}, ask1, ""},
		{"a later refusal beats an earlier request", []ToolPolicy{fixed{req: ask1}, fixed{err: Deny("protected path")}}, nil, "protected path"},
		{"first refusal wins", []ToolPolicy{fixed{err: Deny("a")}, fixed{err: Deny("b")}}, nil, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Chain(tt.policies...).EvaluateApproval(context.Background(), Call{Tool: "x"})
			if tt.wantDeny != "" {
				d, ok := AsDeny(err)
				require.True(t, ok, "want a refusal, got %v", err)
				assert.Equal(t, tt.wantDeny, d.Reason)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantAsk, req)
		})
	}
}

func TestChainHooksStopAtFirstError(t *testing.T) {
	c := Chain(fixed{}, fixed{hookErr: errors.New("quota reached")}, fixed{hookErr: errors.New("never seen")})
	assert.EqualError(t, c.BeforeCall(context.Background(), Call{}), "quota reached")
	assert.EqualError(t, c.AfterCall(context.Background(), Call{}, nil), "quota reached")
	assert.NoError(t, Chain(fixed{}, Base{}).BeforeCall(context.Background(), Call{}))
}

func TestChainVersionJoinsVersionedPolicies(t *testing.T) {
	assert.Equal(t, "rules/ab12+guards/3", VersionOf(Chain(fixed{version: "rules/ab12"}, Base{}, fixed{version: "guards/3"})))
	assert.Equal(t, "", VersionOf(Base{}))
}

func TestDecisionValidate(t *testing.T) {
	tests := []struct {
		name    string
		d       Decision
		wantErr string
	}{
		{"approved", Decision{Kind: Approved, DecidedBy: "alice"}, ""},
		{"no kind", Decision{DecidedBy: "alice"}, "kind is missing"},
		{"no approver", Decision{Kind: Denied}, "no approver identity"},
		{"reason required", Decision{Kind: DeniedWithReason, DecidedBy: "alice"}, "needs a reason"},
		{"edits required", Decision{Kind: ApprovedWithEdits, DecidedBy: "alice"}, "needs edited arguments"},
		{"edits must be JSON", Decision{Kind: ApprovedWithEdits, DecidedBy: "alice", EditedArgs: json.RawMessage(`{bad`)}, "not valid JSON"},
		{"edits only with edits", Decision{Kind: Approved, DecidedBy: "alice", EditedArgs: json.RawMessage(`{}`)}, "only allowed with approved_with_edits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.d.Validate()
			if tt.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}

func TestDecisionKindJSONRoundTrip(t *testing.T) {
	for k := Approved; k <= ApprovedWithEdits; k++ {
		b, err := json.Marshal(Decision{Kind: k})
		require.NoError(t, err)
		var back Decision
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, k, back.Kind)
	}
	var d Decision
	assert.ErrorContains(t, json.Unmarshal([]byte(`{"kind":"maybe"}`), &d), `unknown decision "maybe"`)
	assert.True(t, ApprovedForSession.Sticky() && DeniedAlways.Sticky() && !Approved.Sticky())
	assert.True(t, ApprovedWithEdits.Approves() && !DeniedWithReason.Approves())
}

func TestApproverMayDecide(t *testing.T) {
	for _, tc := range []struct {
		name      string
		approver  Approver
		requester string
		groups    []string
		want      string
	}{
		{"no groups asked: anyone", Approver{Name: "alice"}, "agent-1", nil, ""},
		{"one of the groups", Approver{Name: "alice", Groups: []string{"ops"}}, "agent-1", []string{"finance", "ops"}, ""},
		{"every group", Approver{Name: "root", Groups: []string{"*"}}, "agent-1", []string{"finance"}, ""},
		{"another group", Approver{Name: "fin1", Groups: []string{"finance"}}, "agent-1", []string{"ops"}, "it is asked of ops; their groups: finance"},
		{"no group", Approver{Name: "carol"}, "agent-1", []string{"ops"}, "it is asked of ops; their groups: none"},
		{"own call, even with every group", Approver{Name: "root", Groups: []string{"*"}}, "root", nil, "they requested the call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.approver.MayDecide(tc.requester, tc.groups)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
		})
	}
	require.ErrorIs(t, Approver{Name: "root"}.MayDecide("root", nil), ErrSelfApproval)
}

func TestValidateIncomingRefusesWhatToolgateSetsItself(t *testing.T) {
	ok := Decision{Kind: Approved, DecidedBy: "alice", Channel: "api", DeciderGroups: []string{"ops"}}
	require.NoError(t, ok.ValidateIncoming())
	for name, mutate := range map[string]func(*Decision){
		"reserved channel session": func(d *Decision) { d.Channel = "session" },
		"reserved channel policy":  func(d *Decision) { d.Channel = "policy" },
		"reserved channel timeout": func(d *Decision) { d.Channel = "timeout" },
		"reserved channel handler": func(d *Decision) { d.Channel = "handler" },
		"leading space":            func(d *Decision) { d.DecidedBy = " alice" },
		"trailing space":           func(d *Decision) { d.DecidedBy = "alice\t" },
		"spaced group":             func(d *Decision) { d.DeciderGroups = []string{"ops "} },
		"no identity":              func(d *Decision) { d.DecidedBy = "" },
	} {
		d := ok
		mutate(&d)
		require.Error(t, d.ValidateIncoming(), name)
	}
}

// agentTools declares a schema and a report timeout for "deploy", and
// denies "drop" outright.
type agentTools struct{ fixed }

func (agentTools) CheckAgentArgs(tool string, args json.RawMessage) error {
	if tool == "deploy" && string(args) != `{"env":"prod"}` {
		return errors.New("at /env: want prod")
	}
	return nil
}

func (agentTools) ReportTimeout(c Call) time.Duration {
	if c.Tool == "deploy" {
		return 2 * time.Hour
	}
	return 0
}

func (agentTools) DeniesOutright(c Call) bool { return c.Tool == "drop" }

func TestChainKeepsWhatItsPoliciesSayAboutAgentTools(t *testing.T) {
	c := Chain(fixed{}, agentTools{})
	ap, ok := c.(AgentToolPolicy)
	require.True(t, ok, "a chain is an AgentToolPolicy")
	assert.EqualError(t, ap.CheckAgentArgs("deploy", json.RawMessage(`{"env":"dev"}`)), "at /env: want prod")
	assert.NoError(t, ap.CheckAgentArgs("deploy", json.RawMessage(`{"env":"prod"}`)))
	assert.Equal(t, 2*time.Hour, ap.ReportTimeout(Call{Tool: "deploy"}))
	assert.Zero(t, ap.ReportTimeout(Call{Tool: "other"}))
	d, ok := c.(OutrightDenier)
	require.True(t, ok)
	assert.True(t, d.DeniesOutright(Call{Tool: "drop"}))
	assert.False(t, d.DeniesOutright(Call{Tool: "deploy"}))
}
