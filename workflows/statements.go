package workflows

import (
	"encoding/json"
	"errors"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// A message from outside the workers counts only with a statement signed
// by a toolgate door that matches it (package statement; the policy
// package says what each message's statement is). Update validators check
// it before anything is written; they are not replayed, so they check
// against the doors trusted now. A signal, a start and a decision handed
// on between workflows are replayed: their check runs once and its verdict
// is recorded, so a door key revoked later does not change what a replay
// did.
//
// The checks parse JSON, hash and verify Ed25519 signatures: deterministic,
// though workflowcheck cannot tell (a type cache, a FIPS self-test cache);
// their calls are marked for it.

// ErrTypeNoStatement: a message without a valid statement from a trusted
// door that matches it. Nothing was written.
const ErrTypeNoStatement = "StatementRefused"

// MetricStatementsRefused counts the messages refused for their
// statement, tagged message (decide, cancel, claim, submit, sticky, ...).
const MetricStatementsRefused = activities.MetricStatementsRefused

// doorsKey holds the trusted doors in a workflow's context.
type doorsKey struct{}

// DoorsInterceptor hands the workflows the doors whose statements they
// trust (worker.Options.Doors). Without it they trust none: every person's
// decision is refused.
func DoorsInterceptor(doors *statement.Doors) interceptor.WorkerInterceptor {
	return &doorsInterceptor{doors: doors}
}

type doorsInterceptor struct {
	interceptor.WorkerInterceptorBase
	doors *statement.Doors
}

func (i *doorsInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &doorsInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, doors: i.doors}
}

type doorsInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	doors *statement.Doors
}

func (w *doorsInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return w.Next.ExecuteWorkflow(workflow.WithValue(ctx, doorsKey{}, w.doors), in)
}

// doorsOf returns the doors the worker trusts (none without the
// interceptor), from the context the workflow function was given: handlers
// and validators get another, so each run keeps the doors it started with.
func doorsOf(ctx workflow.Context) *statement.Doors {
	if d, ok := ctx.Value(doorsKey{}).(*statement.Doors); ok && d != nil {
		return d
	}
	return statement.NewDoors()
}

// checkNow checks a statement in an update validator, against the doors
// trusted now and the workflow's clock.
func checkNow(ctx workflow.Context, doors *statement.Doors, message, subject string, sd *statement.Signed, want statement.Statement) error {
	_, err := doors.Check(sd, want, workflow.Now(ctx)) //workflowcheck:ignore
	return refusedStatement(ctx, message, subject, err)
}

// checkRecorded checks a statement where the workflow replays, at now
// (zero: a decision handed on, whose time has passed), and records the
// verdict.
func checkRecorded(ctx workflow.Context, doors *statement.Doors, message, subject string, sd *statement.Signed, want statement.Statement, now time.Time) error {
	return recordedVerdict(ctx, doors, message, subject, func(doors *statement.Doors) error {
		_, err := doors.Check(sd, want, now) //workflowcheck:ignore
		return err
	})
}

// recordedVerdict runs check once and records its verdict (a side effect).
func recordedVerdict(ctx workflow.Context, doors *statement.Doors, message, subject string, check func(*statement.Doors) error) error {
	var refusal string
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		if err := check(doors); err != nil {
			return err.Error()
		}
		return ""
	}).Get(&refusal)
	if err != nil {
		return refusedStatement(ctx, message, subject, err)
	}
	if refusal != "" {
		return refusedStatement(ctx, message, subject, statementError(refusal))
	}
	return nil
}

type statementError string

func (e statementError) Error() string { return string(e) }

// refusedStatement logs and counts a refused message, and returns the
// refusal its sender sees.
func refusedStatement(ctx workflow.Context, message, subject string, err error) error {
	if err == nil {
		return nil
	}
	workflow.GetLogger(ctx).Warn("Refused a message without a valid statement from a toolgate door",
		"message", message, "subject", subject, "workflowID", workflow.GetInfo(ctx).WorkflowExecution.ID, "error", err)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"message": message}).Counter(MetricStatementsRefused).Inc(1)
	// Not retryable: the same message is refused again.
	return temporal.NewNonRetryableApplicationError(message+" refused: "+err.Error(), ErrTypeNoStatement, nil)
}

// runMatches reports whether run is this run or the first of its chain (a
// reset run keeps the statements made for the run it resets).
func runMatches(ctx workflow.Context, run string) bool {
	info := workflow.GetInfo(ctx)
	return run == info.WorkflowExecution.RunID || run == info.FirstRunID
}

// callWant is want naming the run its statement must name: this run (or
// the first of its chain, when the statement names that). A statement
// that names no run may serve only where optional says so: a claim sent
// with the call's start, before anyone knows its run.
func callWant(ctx workflow.Context, sd *statement.Signed, want statement.Statement, optional bool) statement.Statement {
	want.Run = workflow.GetInfo(ctx).WorkflowExecution.RunID
	st, err := statement.Parse(sd) //workflowcheck:ignore
	if err == nil && (runMatches(ctx, st.Run) || optional && st.Run == "") {
		want.Run = st.Run
	}
	return want
}

// checkCallStatement checks, in a validator, the statement of a message
// to this call, which must name this run.
func (c *callRun) checkCallStatement(ctx workflow.Context, message string, sd *statement.Signed, want statement.Statement) error {
	return checkNow(ctx, c.doors, message, c.state.Call.ID, sd, callWant(ctx, sd, want, false))
}

// checkHandedOn checks, once, the statement of a sticky decision or a
// session's end that reached the call from its session.
func (c *callRun) checkHandedOn(ctx workflow.Context, message string, d policy.Decision, ended bool) error {
	session, key := c.state.Call.Session, c.stickyKey
	return recordedVerdict(ctx, c.doors, message, c.state.Call.ID, func(doors *statement.Doors) error {
		return policy.CheckHandedOn(doors, d, session, key, "", ended) //workflowcheck:ignore
	})
}

// reportRefused checks the statement of the agent's report that completed
// the call's run (err: a tool failure or uncertainty the agent reported;
// output: what it printed), and says why it is not recorded, or "". A
// report's statement arrives on SignalReport just before the report.
func (c *callRun) reportRefused(ctx workflow.Context, err error, output json.RawMessage) string {
	output, failed, unsure, reported := reportedOutcome(err, output)
	if !reported {
		return "" // no report: a timeout or a lost attempt, said as such
	}
	if c.version(ctx, versionReportStatements, 1) == workflow.DefaultVersion {
		return ""
	}
	var said []*statement.Signed
	reports := workflow.GetSignalChannel(ctx, SignalReport)
	for {
		var sd *statement.Signed
		if !reports.ReceiveAsync(&sd) {
			break
		}
		said = append(said, sd)
	}
	want := policy.ReportStatement(c.submitted(), output, failed, unsure) //workflowcheck:ignore
	err = recordedVerdict(ctx, c.doors, "report", c.state.Call.ID, func(doors *statement.Doors) error {
		if len(said) == 0 {
			return statement.ErrMissing
		}
		var last error
		for _, sd := range said { // the latest that holds
			st, _ := statement.Parse(sd) //workflowcheck:ignore
			w := want
			w.Run = st.Run
			if !runMatches(ctx, st.Run) {
				w.Run = workflow.GetInfo(ctx).WorkflowExecution.RunID
			}
			_, last = doors.Check(sd, w, time.Time{}) //workflowcheck:ignore
			if last == nil {
				return nil
			}
		}
		return last
	})
	if err != nil {
		return "a report of this call came without a valid statement from a toolgate door, so what it says is not recorded: the agent's run may or may not have happened as it says (" + err.Error() + ")"
	}
	return ""
}

// submitted is the call as its agent submitted it, which a door's
// statement names: with the agent's arguments, before an approver's edit.
func (c *callRun) submitted() policy.Call {
	call := c.state.Call
	if c.originalArgs != nil {
		call.Args = c.originalArgs
	}
	return call
}

// reportedOutcome reads what an agent's report said from the report
// step's outcome (err: a failure or an uncertainty it reported; output:
// what it printed); reported is false when no report ended the step.
func reportedOutcome(err error, output json.RawMessage) (out json.RawMessage, failed, unsure string, reported bool) {
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeAgentReported:
		failed = appErr.Message()
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeAgentUnsure:
		unsure = appErr.Message()
		if appErr.HasDetails() {
			_ = appErr.Details(&output)
		}
	default:
		return nil, "", "", false
	}
	return output, failed, unsure, true
}
