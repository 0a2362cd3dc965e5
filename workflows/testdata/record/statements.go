package main

import (
	"context"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"

	toolgate "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// markerSideEffect is the marker a workflow.SideEffect records: the
// verdict of a statement's check (workflows/statements.go).
const markerSideEffect = "SideEffect"

// statements records the checks of door statements added after 1.0
// (issue 45, behind GetVersion "door-statements"): a decide signal
// without a statement ignored and a signed one taken, each verdict
// recorded; a call started without a submission statement refused; a
// sticky decision checked by the session that records it and by the
// waiting call its room hands it to, and a copy of it the session skips.
func (r *recorder) statements(ctx context.Context) error {
	if err := r.statementsSignal(ctx); err != nil {
		return err
	}
	if err := r.statementsRefusedStart(ctx); err != nil {
		return err
	}
	return r.statementsSticky(ctx)
}

// statementsSignal: a call that asks a person gets a decide signal with no
// statement, which it ignores (its check's verdict recorded), then one
// signed by the recorder's door, which decides it.
func (r *recorder) statementsSignal(ctx context.Context) error {
	const id = "statements-signal-1"
	req := toolgate.CallRequest{CallID: id, Session: "replay-statements-signal", Tool: "write", Args: []byte(`{"path":"signal.txt","content":"hi"}`), Requester: agent}
	if _, err := r.tg.Submit(ctx, req); err != nil {
		return err
	}
	if err := r.waitPending(ctx, id); err != nil {
		return err
	}
	wid := workflows.CallWorkflowID(id)
	d := policy.Decision{Kind: policy.Approved, DecidedBy: approver, Channel: "cli"}

	// As an insider's `temporal workflow signal` would send it.
	if err := r.tc.SignalWorkflow(ctx, wid, "", workflows.SignalDecide, workflows.DecideRequest{CallID: id, Decision: d}); err != nil {
		return fmt.Errorf("unsigned decide signal to %s: %w", id, err)
	}
	if err := r.signalHandled(ctx, wid, "", workflows.SignalDecide, 1); err != nil {
		return err
	}
	if n, err := r.markers(ctx, wid, "", markerSideEffect); err != nil || n != 1 {
		return fmt.Errorf("call %s recorded %d side effects after the unsigned signal (%v), want its verdict", id, n, err)
	}
	st, err := r.tg.Status(ctx, id)
	if err != nil {
		return err
	}
	if st.Result != nil || st.State.Status != workflows.StatusPending {
		return fmt.Errorf("call %s is %s after a decide signal without a statement, want it still pending", id, st.State.Status)
	}

	// The statement a door signs for the decision, naming the call's run.
	desc, err := r.tc.DescribeWorkflowExecution(ctx, wid, "")
	if err != nil {
		return err
	}
	call := policy.Call{ID: id, Session: req.Session, Tool: req.Tool, Args: req.Args, Requester: req.Requester}
	stmt := policy.DecisionStatement(call, d, "")
	stmt.Run = desc.GetWorkflowExecutionInfo().GetFirstRunId()
	if d.Statement, err = recordDoor.Sign(stmt); err != nil {
		return err
	}
	if err := r.tc.SignalWorkflow(ctx, wid, "", workflows.SignalDecide, workflows.DecideRequest{CallID: id, Decision: d}); err != nil {
		return fmt.Errorf("signed decide signal to %s: %w", id, err)
	}
	if err := r.expectResult(ctx, id, workflows.StatusOK, policy.Approved, "cli"); err != nil {
		return err
	}
	if n, err := r.markers(ctx, wid, "", markerSideEffect); err != nil || n != 2 {
		return fmt.Errorf("call %s recorded %d side effects (%v), want the verdicts of its two decide signals", id, n, err)
	}
	return r.writeHistory(ctx, "statements-signal", wid, "")
}

// statementsRefusedStart: a call started straight on Temporal, with no
// submission statement, ends an invalid request refused at its evaluation.
func (r *recorder) statementsRefusedStart(ctx context.Context) error {
	const id = "statements-refused-1"
	in := workflows.CallInput{Call: policy.Call{ID: id, Session: "replay-statements-refused", Tool: "write",
		Args: []byte(`{"path":"forged.txt","content":"x"}`), Requester: agent}}
	// As an insider's `temporal workflow start` would start it.
	run, err := r.tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: workflows.CallWorkflowID(id), TaskQueue: workflows.TaskQueue},
		workflows.ToolCallWorkflowType, in)
	if err != nil {
		return fmt.Errorf("start %s without a submission: %w", id, err)
	}
	var res workflows.Result
	if err := run.Get(ctx, &res); err != nil {
		return fmt.Errorf("call %s: %w", id, err)
	}
	if res.Status != workflows.StatusError || !res.InvalidRequest || !strings.HasPrefix(res.Reason, "refused: ") {
		return fmt.Errorf("call %s without a submission ended %s (invalid request %t): %q, want an invalid request refused",
			id, res.Status, res.InvalidRequest, res.Reason)
	}
	return r.writeHistory(ctx, "statements-refused-start", workflows.CallWorkflowID(id), run.GetRunID())
}

// statementsSticky: a call of a tool waits while another is approved for
// the session. The session checks the sticky decision before it records
// it; the waiting room hands it to the waiting call, which checks it
// again; a copy of it signalled to the session is skipped.
func (r *recorder) statementsSticky(ctx context.Context) error {
	const session = "replay-statements-sticky"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	ids := []string{"statements-sticky-1", "statements-sticky-2"}
	for _, id := range ids {
		args := fmt.Sprintf(`{"path":%q,"content":"x"}`, id+".txt")
		if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: id, Session: session, Tool: "write", Args: []byte(args), Requester: agent}); err != nil {
			return err
		}
		if err := r.waitPending(ctx, id); err != nil {
			return err
		}
	}
	if err := r.decide(ctx, ids[0], policy.ApprovedForSession); err != nil {
		return err
	}
	if err := r.expectResult(ctx, ids[0], workflows.StatusOK, policy.ApprovedForSession, "cli"); err != nil {
		return err
	}
	if err := r.expectResult(ctx, ids[1], workflows.StatusOK, policy.ApprovedForSession, "session"); err != nil {
		return err
	}

	// A copy of the sticky decision the session recorded, signalled again:
	// its call's decision was recorded before, so the session skips it.
	sessionID := workflows.SessionWorkflowID(session)
	view, err := r.tg.Session(ctx, session)
	if err != nil {
		return err
	}
	if len(view.Sticky) != 1 || view.Sticky[0].FromCall != ids[0] || view.Sticky[0].Decision.Statement == nil {
		return fmt.Errorf("session %s holds sticky decisions %+v, want %s's with its statement", session, view.Sticky, ids[0])
	}
	if err := r.tc.SignalWorkflow(ctx, sessionID, "", workflows.SignalSticky, view.Sticky[0]); err != nil {
		return fmt.Errorf("copy of the sticky decision to %s: %w", session, err)
	}
	if err := r.signalHandled(ctx, sessionID, "", workflows.SignalSticky, 2); err != nil {
		return err
	}
	if n, err := r.markers(ctx, sessionID, "", markerSideEffect); err != nil || n != 1 {
		return fmt.Errorf("session %s recorded %d side effects (%v), want the one verdict of the sticky decision, none of its copy", session, n, err)
	}

	if err := r.endSession(ctx, session, "", 0); err != nil {
		return err
	}
	if n, err := r.markers(ctx, workflows.CallWorkflowID(ids[1]), "", markerSideEffect); err != nil || n != 1 {
		return fmt.Errorf("call %s recorded %d side effects (%v), want the verdict of the sticky decision its room handed it", ids[1], n, err)
	}
	if err := r.writeHistory(ctx, "statements-sticky-call", workflows.CallWorkflowID(ids[1]), ""); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "statements-sticky-session", sessionID, ""); err != nil {
		return err
	}
	room := workflows.RoomWorkflowID(session, workflows.RoomOf(ids[1]))
	if err := r.tc.GetWorkflow(ctx, room, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("room %s: %w", room, err)
	}
	return r.writeHistory(ctx, "statements-sticky-room", room, "")
}

// signalHandled waits until the run's history holds n signals named
// signal and a completed workflow task after the last of them, so the
// next message finds it handled (and every recording has one shape).
func (r *recorder) signalHandled(ctx context.Context, workflowID, runID, signal string, n int) error {
	what := fmt.Sprintf("%s handled %d %s signals", workflowID, n, signal)
	return eventually(ctx, what, func(ctx context.Context) (bool, error) {
		seen, handled := 0, false
		it := r.tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return false, err
			}
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
				if ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == signal {
					seen++
					handled = false
				}
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				handled = true
			}
		}
		if seen > n {
			return false, fmt.Errorf("%s got %d %s signals, want %d", workflowID, seen, signal, n)
		}
		return seen == n && handled, nil
	})
}

// markers counts the markers named name in the run's history.
func (r *recorder) markers(ctx context.Context, workflowID, runID, name string) (int, error) {
	n := 0
	it := r.tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, err
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_MARKER_RECORDED && ev.GetMarkerRecordedEventAttributes().GetMarkerName() == name {
			n++
		}
	}
	return n, nil
}
