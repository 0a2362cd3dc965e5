package workflows

import (
	"time"

	"github.com/uber-go/tally/v4"
	sdktally "go.temporal.io/sdk/contrib/tally"

	"github.com/toolgate/toolgate/policy"
)

// metricsScope makes the suite's next environment report its metrics to a
// tally test scope.
func (s *CallSuite) metricsScope() tally.TestScope {
	scope := tally.NewTestScope("", nil)
	s.SetMetricsHandler(sdktally.NewMetricsHandler(scope))
	s.T().Cleanup(func() { s.SetMetricsHandler(nil) })
	s.SetupTest()
	return scope
}

// counted is the value of the counter name with exactly tags.
func counted(scope tally.TestScope, name string, tags map[string]string) int64 {
	for _, c := range scope.Snapshot().Counters() {
		if c.Name() == name && sameTags(c.Tags(), tags) {
			return c.Value()
		}
	}
	return 0
}

// timed is what the timer name with exactly tags recorded.
func timed(scope tally.TestScope, name string, tags map[string]string) []time.Duration {
	for _, t := range scope.Snapshot().Timers() {
		if t.Name() == name && sameTags(t.Tags(), tags) {
			return t.Values()
		}
	}
	return nil
}

func sameTags(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// The metrics an operator watches approvals with: verdicts by rule, time
// to decision by rule, channel and outcome, sticky coverage.
func (s *CallSuite) TestVerdictsAndTimeToDecisionAreCountedByRuleChannelAndOutcome() {
	scope := s.metricsScope()
	decideAt(s.env, time.Hour, "c2", decision(policy.ApprovedForSession, "alice"))
	rs := s.runSession(harnessInput{Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"x"}`),
		call("c3", "write", `{"path":"c","content":"x"}`),
	}})
	for _, r := range rs {
		s.Equal(StatusOK, r.Status)
	}

	s.EqualValues(3, counted(scope, MetricVerdicts, map[string]string{"verdict": "ask", "rule": "ask-write", "tool": "write"}))
	took := timed(scope, MetricTimeToDecision, map[string]string{"rule": "ask-write", "channel": "cli", "outcome": "approved"})
	s.Require().Len(took, 1)
	s.InDelta(time.Hour, took[0], float64(time.Second), "alice's decision took an hour from the submission")
	s.Len(timed(scope, MetricTimeToDecision, map[string]string{"rule": "ask-write", "channel": "session", "outcome": "approved"}), 2)
	s.EqualValues(2, counted(scope, MetricStickyCovered, map[string]string{"rule": "ask-write", "tool": "write", "decision": "approved_for_session"}),
		"her approve-for-session covered the two other calls")
}

func (s *CallSuite) TestAutoApprovalsDenialsTimeoutsAndRefusedDecisionsAreCounted() {
	scope := s.metricsScope()
	s.Equal(StatusOK, s.runOne(call("c1", "echo", `{"text":"hi"}`)).Status)
	s.EqualValues(1, counted(scope, MetricVerdicts, map[string]string{"verdict": "allow", "rule": "", "tool": "echo"}))

	scope = s.metricsScope()
	s.policy.deny["write"] = "frozen"
	s.Equal(StatusDenied, s.runOne(call("c2", "write", `{"path":"a","content":"x"}`)).Status)
	s.EqualValues(1, counted(scope, MetricVerdicts, map[string]string{"verdict": "deny", "rule": "deny-write", "tool": "write"}))
	s.Empty(scope.Snapshot().Timers()[MetricTimeToDecision], "nobody was asked")

	scope = s.metricsScope()
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Rule: "ask-write", Timeout: time.Hour}
	own := decideAt(s.env, time.Minute, "c3", decision(policy.Approved, "agent-1")) // the requester itself
	s.Equal(StatusTimedOut, s.runAsked(call("c3", "write", `{"path":"a","content":"x"}`)).Status)
	s.Error(own.rejected)
	s.EqualValues(1, counted(scope, MetricDecisionsRefused, map[string]string{"reason": ErrTypeSelfApproval}), "the agent's own approval was refused and counted")
	took := timed(scope, MetricTimeToDecision, map[string]string{"rule": "ask-write", "channel": "timeout", "outcome": "timed_out"})
	s.Require().Len(took, 1)
	s.InDelta(time.Hour, took[0], float64(time.Second))
}
