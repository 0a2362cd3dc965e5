package bench

import (
	"context"
	"encoding/json"
	"fmt"
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
// that then runs its tool. Its state query answers "waiting", as a call's
// query answers its state.
func BaselineSignalActivityWorkflow(ctx workflow.Context, args json.RawMessage) (json.RawMessage, error) {
	if err := workflow.SetQueryHandler(ctx, baselineStateQuery, func() (string, error) { return "waiting", nil }); err != nil {
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
	// Both sides are timed the same way: start N at Options.Concurrency,
	// then ask each in turn, by a query its worker answers, until it
	// waits (a call: it heard its waiting room and asked a person; a bare
	// workflow: it waits for its signal). One checker per side, and the
	// same probe, so the checks load both sides alike. Nothing here reads
	// visibility.
	start := time.Now()
	var next atomic.Int64
	if _, err := b.concurrently(ctx, n, func(ctx context.Context) error {
		id := ids[next.Add(1)-1]
		_, err := b.calls.Submit(ctx, tgclient.CallRequest{Session: session, Tool: toolAsk, Args: args, CallID: id})
		return err
	}); err != nil {
		return err
	}
	if err := b.forEach(ctx, ids, b.waitNotified); err != nil {
		return err
	}
	s.ParkPerSec = float64(n) / time.Since(start).Seconds()

	start = time.Now()
	var base []client.WorkflowRun
	if _, err := b.concurrentlyCollect(ctx, n, func(ctx context.Context) (client.WorkflowRun, error) {
		return b.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: baselineQueue}, BaselineSignalActivityWorkflow, args)
	}, &base); err != nil {
		return err
	}
	baseIDs := make([]string, len(base))
	for i, run := range base {
		baseIDs[i] = run.GetID()
	}
	if err := b.forEach(ctx, baseIDs, b.waitQueryable); err != nil {
		return err
	}
	s.BasePerSec = float64(n) / time.Since(start).Seconds()

	if err := b.waitPending(ctx, ids[0]); err != nil { // the session's answer reached it
		return err
	}
	start = time.Now()
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
	next.Store(0)
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

// forEach runs check on every ID in turn.
func (b *runner) forEach(ctx context.Context, ids []string, check func(context.Context, string) error) error {
	for _, id := range ids {
		if err := check(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// baselineStateQuery is BaselineSignalActivityWorkflow's query.
const baselineStateQuery = "state"

// waitQueryable waits until a bare workflow answers its query: it has run
// its first task and waits for its signal.
func (b *runner) waitQueryable(ctx context.Context, id string) error {
	for {
		v, err := b.tc.QueryWorkflow(ctx, id, "", baselineStateQuery)
		var state string
		if err == nil && v.Get(&state) == nil && state == "waiting" {
			return nil
		}
		if err := sleep(ctx, waitPoll); err != nil {
			return fmt.Errorf("workflow %s never waited: %w", id, err)
		}
	}
}

// waitPoll is how often the parking checks look again, on both sides.
const waitPoll = 10 * time.Millisecond

// waitNotified waits until a waiting call has asked a person (its first
// notice is recorded), i.e. heard from its waiting room.
func (b *runner) waitNotified(ctx context.Context, callID string) error {
	for {
		st, err := b.calls.Status(ctx, callID)
		if err == nil && st.State != nil && len(st.State.Notices) > 0 {
			return nil
		}
		if err := sleep(ctx, waitPoll); err != nil {
			return fmt.Errorf("call %s never asked a person: %w", callID, err)
		}
	}
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
	run, err := b.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: baselineQueue}, BaselineSignalActivityWorkflow, args)
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
