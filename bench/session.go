package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// BaselineSignalActivityWorkflow waits for one signal, then runs one
// activity and returns: the fair floor for a decision, which wakes a call
// that then runs its tool. Its state query answers when it began to wait
// (workflow.Now there), as a call's query answers when it asked a person.
func BaselineSignalActivityWorkflow(ctx workflow.Context, args json.RawMessage) (json.RawMessage, error) {
	waiting := baselineWaiting{Since: workflow.Now(ctx)}
	if err := workflow.SetQueryHandler(ctx, baselineStateQuery, func() (baselineWaiting, error) { return waiting, nil }); err != nil {
		return nil, err
	}
	var v string
	workflow.GetSignalChannel(ctx, signalName).Receive(ctx, &v)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var out json.RawMessage
	err := workflow.ExecuteActivity(actx, ba.Tool, args).Get(ctx, &out)
	return out, err
}

// OneSession is the cost of many calls waiting in one session, released by
// one approve-for-session, against bare workflows doing the same work.
type OneSession struct {
	Calls int `json:"calls"`
	// ParkPerSec: calls parked in the session per second; BasePerSec: bare
	// workflows started and waiting for a signal per second.
	ParkPerSec float64 `json:"park_per_sec"`
	BasePerSec float64 `json:"base_per_sec"`
	// Each side's rounds (parkRounds, taken in turns), in seconds, in the
	// order each side took them.
	ParkRoundSeconds []float64 `json:"park_round_seconds"`
	BaseRoundSeconds []float64 `json:"base_round_seconds"`
	// FanoutSeconds: from the approve-for-session until every call ran;
	// BaseFanoutSeconds: from the first signal until every bare workflow
	// ran its activity.
	FanoutSeconds     float64 `json:"fanout_seconds"`
	BaseFanoutSeconds float64 `json:"base_fanout_seconds"`
	// The runs (continue-as-new) of the session and of its waiting rooms,
	// and the longest run's history; Terminated says whether the server
	// terminated one (it must not).
	SessionRuns       int  `json:"session_runs"`
	RoomRuns          int  `json:"room_runs"`
	MaxSessionEvents  int  `json:"max_session_events"`
	MaxRoomEvents     int  `json:"max_room_events"`
	SessionTerminated bool `json:"session_terminated"`
}

// oneSession parks Options.OneSession calls in one session, releases them
// with one approve-for-session, and does the same work with bare
// workflows: start N that wait for a signal, signal them all.
func (b *runner) oneSession(ctx context.Context, r *Report) error {
	n := b.o.OneSession
	s := &r.OneSession
	s.Calls = n
	session := b.session("one")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", session, i)
	}
	base, err := b.parkBoth(ctx, session, ids, s)
	if err != nil {
		return err
	}

	if err := b.waitPending(ctx, ids[0]); err != nil { // the session's answer reached it
		return err
	}
	start := time.Now()
	if _, err := b.calls.Decide(ctx, ids[0], policy.Decision{Kind: policy.ApprovedForSession, DecidedBy: "bench", Channel: "cli"}); err != nil {
		return err
	}
	for _, id := range ids {
		res, err := b.calls.Wait(ctx, id)
		if err != nil {
			return err
		}
		if res.Status != workflows.StatusOK {
			return fmt.Errorf("call %s: %s (%s)", id, res.Status, res.Reason)
		}
	}
	s.FanoutSeconds = time.Since(start).Seconds()

	start = time.Now()
	var next atomic.Int64
	if _, err := b.concurrently(ctx, n, func(ctx context.Context) error {
		return b.tc.SignalWorkflow(ctx, base[next.Add(1)-1].GetID(), "", signalName, "approved")
	}); err != nil {
		return err
	}
	for _, run := range base {
		if err := run.Get(ctx, nil); err != nil {
			return err
		}
	}
	s.BaseFanoutSeconds = time.Since(start).Seconds()
	return b.sessionHistory(ctx, session, s)
}

// parkBoth parks the calls ids in session and as many bare workflows
// that wait for a signal, records each side's parking rate and rounds in
// s, and returns the bare workflows' runs.
func (b *runner) parkBoth(ctx context.Context, session string, ids []string, s *OneSession) (base []client.WorkflowRun, err error) {
	n := len(ids)
	// Both sides are timed by the same mechanism: each workflow records
	// the moment it reaches its waiting state (workflow.Now there: a call
	// when it has joined its waiting room and asked a person, its first
	// notice; a bare workflow when it begins to wait for its signal), and
	// a round's span runs from its first start to the last of those
	// moments, all on the workflows' clocks. The queries that find out
	// when everything waits only end the wait: their latency is not in
	// the figure. Each side's rate is N over the sum of its rounds' spans.
	//
	// The sides take turns in parkRounds rounds, in the order AB BA AB BA,
	// so that a machine's drift over the case hits both alike (one long
	// phase each moved the ratio by ±20 % between runs on two cores).
	// Before each round, visibility lists every workflow either side has
	// parked: otherwise the server's writes of a round's statuses and
	// memos land in the next round's time, by as much as they lagged.
	// Nothing here depends on visibility for correctness.
	var callSpan, baseSpan time.Duration
	parked := 0 // calls, the first of ids
	parkCalls := func(from, to int) error {
		var next atomic.Int64
		if _, err := b.concurrently(ctx, to-from, func(ctx context.Context) error {
			id := ids[from+int(next.Add(1)-1)]
			_, err := b.calls.Submit(ctx, tgclient.CallRequest{Requester: benchAgent, Session: session, Tool: toolAsk, Args: args, CallID: id})
			return err
		}); err != nil {
			return err
		}
		callWorkflows := make([]string, 0, to-from)
		for _, id := range ids[from:to] {
			callWorkflows = append(callWorkflows, workflows.CallWorkflowID(id))
		}
		span, err := b.parkingSpan(ctx, callWorkflows, b.askedAt)
		callSpan += span
		s.ParkRoundSeconds = append(s.ParkRoundSeconds, span.Seconds())
		parked = to
		return err
	}
	parkBare := func(from, to int) error {
		var runs []client.WorkflowRun
		if _, err := b.concurrentlyCollect(ctx, to-from, func(ctx context.Context) (client.WorkflowRun, error) {
			return b.startBare(ctx, BaselineSignalActivityWorkflow, args)
		}, &runs); err != nil {
			return err
		}
		base = append(base, runs...)
		runIDs := make([]string, len(runs))
		for i, run := range runs {
			runIDs[i] = run.GetID()
		}
		span, err := b.parkingSpan(ctx, runIDs, b.waitingSince)
		baseSpan += span
		s.BaseRoundSeconds = append(s.BaseRoundSeconds, span.Seconds())
		return err
	}
	callsListed := fmt.Sprintf("%s = '%s' AND %s = '%s'", workflows.AttrSession.GetName(), session, workflows.AttrStatus.GetName(), workflows.StatusPending)
	bareListed := fmt.Sprintf("TaskQueue = '%s' AND WorkflowType = 'BaselineSignalActivityWorkflow' AND ExecutionStatus = 'Running'", baselineQueue)
	listed := func() error {
		lctx, cancel := context.WithTimeout(ctx, listedWait)
		defer cancel()
		if err := b.awaitListed(lctx, callsListed, int64(parked)); err != nil {
			return fmt.Errorf("the session's parked calls: %w", err)
		}
		if err := b.awaitListed(lctx, bareListed, int64(len(base))); err != nil {
			return fmt.Errorf("the waiting bare workflows: %w", err)
		}
		return nil
	}
	for round := range parkRounds {
		from, to := round*n/parkRounds, (round+1)*n/parkRounds
		if from == to {
			continue
		}
		sides := []func(int, int) error{parkCalls, parkBare}
		if round%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, park := range sides {
			if err := listed(); err != nil {
				return nil, err
			}
			if err := park(from, to); err != nil {
				return nil, err
			}
		}
	}
	s.ParkPerSec, s.BasePerSec = float64(n)/callSpan.Seconds(), float64(n)/baseSpan.Seconds()
	return base, nil
}

// listedWait bounds the wait for visibility to list the one-session
// case's parked workflows: a listing that lags more than this says the
// server is not quiet enough to time the next round.
const listedWait = 2 * time.Minute

// parkRounds is how many turns each side of the one-session case takes.
const parkRounds = 4

// parkingSpan waits until every workflow in ids (workflow IDs) says when
// it reached its waiting state (waitedAt, asked in turn) and returns the
// span from the first workflow's start to the last of those moments.
func (b *runner) parkingSpan(ctx context.Context, ids []string, waitedAt func(context.Context, string) (time.Time, bool)) (time.Duration, error) {
	var first, last time.Time
	for _, id := range ids {
		for {
			at, ok := waitedAt(ctx, id)
			if ok {
				last = maxTime(last, at)
				break
			}
			if err := sleep(ctx, waitPoll); err != nil {
				return 0, fmt.Errorf("workflow %s never waited: %w", id, err)
			}
		}
		d, err := b.tc.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return 0, err
		}
		started := d.GetWorkflowExecutionInfo().GetStartTime().AsTime()
		if first.IsZero() || started.Before(first) {
			first = started
		}
	}
	span := last.Sub(first)
	if span <= 0 {
		return 0, fmt.Errorf("the workflows say they waited %s after the first start", span)
	}
	return span, nil
}

// seconds formats spans for a line of the report: "5.2 4.9 5.1".
func seconds(spans []float64) string {
	parts := make([]string, len(spans))
	for i, v := range spans {
		parts[i] = strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strings.Join(parts, " ")
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// baselineStateQuery is BaselineSignalActivityWorkflow's query.
const baselineStateQuery = "state"

// baselineWaiting answers baselineStateQuery.
type baselineWaiting struct {
	Since time.Time `json:"since"`
}

// waitingSince is when a bare workflow began to wait for its signal, once
// it answers its query.
func (b *runner) waitingSince(ctx context.Context, id string) (time.Time, bool) {
	v, err := b.tc.QueryWorkflow(ctx, id, "", baselineStateQuery)
	var w baselineWaiting
	if err != nil || v.Get(&w) != nil {
		return time.Time{}, false
	}
	return w.Since, !w.Since.IsZero()
}

// waitPoll is how often the parking checks look again, on both sides.
const waitPoll = 10 * time.Millisecond

// askedAt is when a waiting call asked a person (its first notice, which
// it records once it has heard from its waiting room), once it has.
func (b *runner) askedAt(ctx context.Context, workflowID string) (time.Time, bool) {
	v, err := b.tc.QueryWorkflow(ctx, workflowID, "", workflows.QueryCall)
	var st workflows.CallState
	if err != nil || v.Get(&st) != nil || len(st.Notices) == 0 {
		return time.Time{}, false
	}
	return st.Notices[0].At, true
}

// sessionHistory counts the runs of the session and its rooms, and their
// longest histories (visibility lists the runs; this is after the timing).
func (b *runner) sessionHistory(ctx context.Context, session string, s *OneSession) error {
	var token []byte
	for {
		resp, err := b.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%[1]s' OR WorkflowId STARTS_WITH '%[1]s/room/'", workflows.SessionWorkflowID(session)), NextPageToken: token,
		})
		if err != nil {
			return fmt.Errorf("list session runs: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			d, err := b.tc.DescribeWorkflowExecution(ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId())
			if err != nil {
				return fmt.Errorf("describe session run: %w", err)
			}
			info := d.GetWorkflowExecutionInfo()
			if e.GetExecution().GetWorkflowId() == workflows.SessionWorkflowID(session) {
				s.SessionRuns++
				s.MaxSessionEvents = max(s.MaxSessionEvents, int(info.GetHistoryLength()))
			} else {
				s.RoomRuns++
				s.MaxRoomEvents = max(s.MaxRoomEvents, int(info.GetHistoryLength()))
			}
			if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
				s.SessionTerminated = true
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// concurrentlyCollect is concurrently for functions with a result.
func (b *runner) concurrentlyCollect(ctx context.Context, n int, f func(context.Context) (client.WorkflowRun, error), into *[]client.WorkflowRun) (time.Duration, error) {
	runs := make([]client.WorkflowRun, n)
	var next atomic.Int64
	d, err := b.concurrently(ctx, n, func(ctx context.Context) error {
		run, err := f(ctx)
		runs[next.Add(1)-1] = run
		return err
	})
	*into = runs
	return d, err
}

// signalActivityOnce times one bare workflow woken by a signal that then
// runs one activity: the fair baseline for a decision.
func (b *runner) signalActivityOnce(ctx context.Context) (time.Duration, error) {
	run, err := b.startBare(ctx, BaselineSignalActivityWorkflow, args)
	if err != nil {
		return 0, err
	}
	if err := b.waitFirstTask(ctx, run.GetID()); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := b.tc.SignalWorkflow(ctx, run.GetID(), "", signalName, "approved"); err != nil {
		return 0, err
	}
	if err := run.Get(ctx, nil); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
