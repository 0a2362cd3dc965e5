package activities

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

type askAll struct{ policy.Base }

func (askAll) EvaluateApproval(_ context.Context, c policy.Call) (*policy.ApprovalRequest, error) {
	switch c.Tool {
	case "boom":
		return nil, errors.New("rules backend down")
	case "no":
		return nil, &policy.DenyError{Reason: "never", Rule: "r1"}
	}
	return &policy.ApprovalRequest{Message: "ok?", Rule: "ask-all"}, nil
}

func registry(t *testing.T) *tool.Registry {
	r := tool.NewRegistry()
	r.MustRegister(
		tool.Tool{Name: "big", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`), nil
		}},
		tool.Tool{Name: "garbage", Run: func(context.Context, tool.Input) (json.RawMessage, error) { return json.RawMessage(`{not json`), nil }},
		tool.Tool{Name: "refuses", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return nil, tool.Permanent(errors.New("account closed"))
		}},
		tool.Tool{Name: "boom", Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }},
		tool.Tool{Name: "no", Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, nil }},
	)
	return r
}

func run(t *testing.T, a *Activities, fn any, arg any, out any) error {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	v, err := env.ExecuteActivity(fn, arg)
	if err == nil && out != nil {
		require.NoError(t, v.Get(out))
	}
	return err
}

func TestRunToolRefusesOutputThatCannotTravel(t *testing.T) {
	a := &Activities{Policy: askAll{}, Tools: registry(t), MaxOutputBytes: 1000}
	err := run(t, a, a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: "big"}}, nil)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr))
	assert.Equal(t, ErrTypeOutputTooLarge, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "2002 bytes, over the 1000-byte limit")

	err = run(t, a, a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: "garbage"}}, nil)
	require.True(t, errors.As(err, &appErr))
	assert.Contains(t, appErr.Message(), "not valid JSON")
	assert.True(t, appErr.NonRetryable())

	err = run(t, a, a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: "refuses"}}, nil)
	require.True(t, errors.As(err, &appErr))
	assert.Equal(t, "account closed", appErr.Message())
	assert.True(t, appErr.NonRetryable(), "a permanent tool error is not retried")
}

func TestEvaluateVerdicts(t *testing.T) {
	a := &Activities{Policy: askAll{}, Tools: registry(t)}
	var ev Evaluation
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "big"}}, &ev))
	assert.Equal(t, "ask-all", ev.Rule)
	assert.Nil(t, ev.Sticky, "no client: no lookup")

	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "no"}}, &ev))
	assert.True(t, ev.Denied)
	assert.Equal(t, "never", ev.Reason)

	ev = Evaluation{}
	require.NoError(t, run(t, a, a.Evaluate, EvaluateInput{Call: policy.Call{Tool: "boom"}}, &ev))
	assert.Equal(t, "policy failed: rules backend down", ev.Problem)
	assert.False(t, ev.InvalidRequest, "the policy's failure is not the caller's")
}

func TestAskHandlerRefusesAnInvalidDecision(t *testing.T) {
	a := &Activities{Policy: askAll{}, Tools: registry(t), Handler: policy.ApprovalHandlerFunc(
		func(context.Context, policy.Call, policy.ApprovalRequest) (*policy.Decision, error) {
			return &policy.Decision{Kind: policy.DeniedWithReason}, nil // no reason
		})}
	err := run(t, a, a.AskHandler, AskHandlerInput{Call: policy.Call{Tool: "big"}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "approval handler returned an invalid decision: denied_with_reason needs a reason")
}

func TestRunToolHeartbeatsWhileALongToolRuns(t *testing.T) {
	slow := func(context.Context, tool.Input) (json.RawMessage, error) {
		time.Sleep(100 * time.Millisecond)
		return json.RawMessage(`{}`), nil
	}
	r := tool.NewRegistry()
	r.MustRegister(
		tool.Tool{Name: "slow", Options: tool.Options{HeartbeatTimeout: 30 * time.Millisecond, Idempotent: true}, Run: slow},
		tool.Tool{Name: "slow-silent", Run: slow},
	)
	a := &Activities{Policy: askAll{}, Tools: r}
	beats := func(toolName string) int32 {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		env.RegisterActivity(a)
		var n atomic.Int32
		// The SDK throttles what it sends to the server; the listener sees
		// what reaches the SDK.
		env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { n.Add(1) })
		_, err := env.ExecuteActivity(a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: toolName}})
		require.NoError(t, err)
		return n.Load()
	}
	assert.Positive(t, beats("slow"), "a tool with a heartbeat timeout is heartbeaten while it runs")
	assert.Equal(t, int32(1), beats("slow-silent"), "one heartbeat, the start mark, for a tool without a heartbeat timeout")
}

// A tool that is not idempotent runs at most once: an attempt that finds
// the previous attempt's start mark ends unknown without running it; one
// that finds no mark (the previous attempt was lost before the tool began)
// runs it.
func TestRunToolRunsAToolThatIsNotIdempotentAtMostOnce(t *testing.T) {
	var ran atomic.Int32
	r := tool.NewRegistry()
	count := func(context.Context, tool.Input) (json.RawMessage, error) {
		ran.Add(1)
		return json.RawMessage(`{}`), nil
	}
	r.MustRegister(
		tool.Tool{Name: "pay", Run: count},
		tool.Tool{Name: "get", Run: count, Options: tool.Options{Idempotent: true}},
		tool.Tool{Name: "fails", Run: func(context.Context, tool.Input) (json.RawMessage, error) { return nil, errors.New("card declined") }},
	)
	a := &Activities{Policy: askAll{}, Tools: r}
	attempt := func(toolName string, previous *ToolHeartbeat) (error, []ToolHeartbeat) {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		env.RegisterActivity(a)
		if previous != nil {
			env.SetHeartbeatDetails(*previous)
		}
		var marks []ToolHeartbeat
		env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
			var m ToolHeartbeat
			require.NoError(t, d.Get(&m))
			marks = append(marks, m)
		})
		_, err := env.ExecuteActivity(a.RunTool, RunToolInput{Call: policy.Call{ID: "c1", Tool: toolName}})
		return err, marks
	}

	err, marks := attempt("pay", nil)
	require.NoError(t, err)
	assert.Equal(t, []ToolHeartbeat{{Started: true}}, marks, "the mark is recorded before the tool runs")
	assert.Equal(t, int32(1), ran.Load())

	err, _ = attempt("pay", &ToolHeartbeat{Started: true})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	assert.Equal(t, ErrTypeOutcomeUnknown, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "previous attempt was lost after the tool began")
	assert.Equal(t, int32(1), ran.Load(), "a lost attempt that had begun is not run again")

	err, _ = attempt("pay", &ToolHeartbeat{})
	require.NoError(t, err, "no mark: the previous attempt never reached the tool")
	assert.Equal(t, int32(2), ran.Load())

	err, marks = attempt("get", &ToolHeartbeat{Started: true})
	require.NoError(t, err, "an idempotent tool is simply run again")
	assert.Empty(t, marks)
	assert.Equal(t, int32(3), ran.Load())

	err, _ = attempt("fails", nil)
	require.True(t, errors.As(err, &appErr))
	assert.True(t, appErr.NonRetryable(), "a tool that is not idempotent and failed is not run again")
	assert.Equal(t, "card declined", appErr.Message())
}

type brokenChannel struct{ err error }

func (brokenChannel) Name() string { return "broken" }
func (b brokenChannel) Notify(context.Context, Notice) (Receipt, error) {
	return Receipt{}, b.err
}
func (b brokenChannel) Resolve(context.Context, Outcome, []Receipt) error { return b.err }

func TestChannelErrorsKeepTheirRetryability(t *testing.T) {
	for _, tc := range []struct {
		err       error
		retryable bool
	}{
		{temporal.NewNonRetryableApplicationError("invalid_auth", "SlackError", nil), false},
		{errors.New("connection refused"), true},
	} {
		a := &Activities{Policy: askAll{}, Tools: registry(t), Channels: []Channel{brokenChannel{tc.err}}}
		err := run(t, a, a.Notify, NotifyInput{Channel: "broken"}, nil)
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr), "%v", err)
		assert.Equal(t, !tc.retryable, appErr.NonRetryable(), "%v", tc.err)
		assert.Contains(t, appErr.Message(), "notify via broken")
	}
}
