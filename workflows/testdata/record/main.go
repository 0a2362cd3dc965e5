// Command record re-records the workflow histories that
// workflows/replay_test.go replays. It starts an embedded Temporal server in
// a temporary directory, a toolgate worker with a small policy of its own,
// drives each scenario through the client package and writes every
// workflow's full history as JSON into workflows/testdata/.
//
// Run it from the module root. The histories of 1.0 are the baseline every
// later change must replay (docs/production.md says how): record them
// again only for a new baseline, never for a change in place. A new
// scenario is recorded alone, the others left as they are:
//
//	go run ./workflows/testdata/record
//	go run ./workflows/testdata/record -only agent-claim
//
// It lives under testdata/ so that `go test ./...` never links the server
// into anything but this program.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	sdkclient "go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/toolgate/toolgate/activities"
	toolgate "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/devserver"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/logging"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

const (
	// identity is the client and worker identity written into histories,
	// so re-recording does not leak the host name or churn on the PID.
	identity = "toolgate-record"
	// slowTimeout is how long a "slow" call waits for a person.
	slowTimeout = 2 * time.Second
	// waitTimeout bounds every wait for a condition.
	waitTimeout = 30 * time.Second
	// pollInterval is how often a condition is checked.
	pollInterval = 50 * time.Millisecond
	// approver decides the calls that ask a person.
	approver = "alice"
	// agent is the requester of every call.
	agent = "agent"
	// idle is how long the recorded sessions and rooms stay idle before
	// they close, so their histories end.
	idle = 15 * time.Second
)

func main() {
	out := flag.String("out", filepath.Join("workflows", "testdata"), "directory the histories are written to")
	level := flag.String("log-level", "info", "log level: debug, info, warn or error")
	only := flag.String("only", "", "record only these scenarios (comma-separated names)")
	flag.Parse()

	logger, err := logging.New(*level, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = run(ctx, logger, *out, *only)
	stop()
	if err != nil {
		logger.Error("Recording failed", zap.Error(err))
		_ = logger.Sync()
		os.Exit(1)
	}
}

// run records every scenario into outDir. It stops the worker and the
// server before it returns, also on failure.
func run(ctx context.Context, logger *zap.Logger, outDir, only string) (err error) {
	began := time.Now()
	if fi, err := os.Stat(outDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("output directory %q does not exist: run from the module root or pass -out", outDir)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	dataDir, err := os.MkdirTemp("", "toolgate-record-*")
	if err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(dataDir) }()

	srv, err := devserver.Start(ctx, devserver.Options{
		DataDir:          dataDir,
		SearchAttributes: workflows.SearchAttributeTypes(),
		// The server is noisy; its errors are still worth seeing.
		Logger: logger.Named("temporal").WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel)),
	})
	if err != nil {
		return fmt.Errorf("start embedded Temporal: %w", err)
	}
	defer func() {
		if stopErr := srv.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop embedded Temporal: %w", stopErr))
		}
	}()

	tc, err := sdkclient.Dial(sdkclient.Options{
		HostPort:  srv.FrontendAddress(),
		Namespace: srv.Namespace(),
		Identity:  identity,
		Logger:    logging.NewTemporal(logger.Named("sdk").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))),
	})
	if err != nil {
		return fmt.Errorf("connect to embedded Temporal: %w", err)
	}
	defer tc.Close()

	tools, err := recorderTools()
	if err != nil {
		return err
	}
	// Every scenario recorded from the ledger's release on has one.
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dataDir, "ledger.key"), "record")
	if err != nil {
		return err
	}
	lg, err := ledger.Open(ctx, ledger.Options{DSN: filepath.Join(dataDir, "ledger.db"), Keys: keys})
	if err != nil {
		return err
	}
	defer lg.Close()
	w, err := worker.New(tc, worker.Options{Policy: recorderPolicy{}, Tools: tools, Channels: []activities.Channel{recordChannel{}}, Ledger: lg, Doors: recordDoors})
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()
	logger.Info("Recording", zap.String("temporal", srv.FrontendAddress()), zap.String("out", outDir))

	enc, stopEnc, err := startEncrypted(srv.FrontendAddress(), srv.Namespace(), logger, dataDir, tools, lg)
	if err != nil {
		return err
	}
	defer stopEnc()
	r := &recorder{tc: tc, tg: toolgate.New(tc, "").WithDoor(recordDoor), logger: logger, lg: lg, encrypted: enc}
	scenarios := []struct {
		name string
		run  func(context.Context) error
	}{
		{"auto-approve", r.autoApprove},
		{"ask-approve", r.askApprove},
		{"sticky-fan-out", r.stickyFanOut},
		{"timeout", r.timeout},
		{"session-end", r.sessionEnd},
		{"session-continue-as-new", r.sessionContinueAsNew},
		{"agent-claim", r.agentClaim},
		{"pins", r.pins},
		{"four-eyes", r.fourEyes},
		{"user-decision", r.userDecision},
		{"trust-3", r.trust3},
		{"ledger", r.ledgered},
		{"encrypted", r.encryptedCalls},
		{"statements", r.statements},
		{"evaluated-baseline", r.baseline("evaluated-baseline")}, // baseline-*: the release before
		{"checked", r.checked},
		{"joined", r.baseline("joined")}, // a worker picks the room: joined-*
	}
	wanted := map[string]bool{}
	for _, name := range strings.Split(only, ",") {
		if name != "" {
			wanted[name] = true
		}
	}
	for _, s := range scenarios {
		if len(wanted) > 0 && !wanted[s.name] {
			continue
		}
		delete(wanted, s.name)
		t0 := time.Now()
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		logger.Info("Scenario recorded", zap.String("scenario", s.name), zap.Duration("took", time.Since(t0)))
	}
	if len(wanted) > 0 {
		return fmt.Errorf("-only names scenarios that do not exist: %v", wanted)
	}
	// Written only once every scenario passed, so a failed run never
	// leaves a mix of old and new recordings.
	for _, h := range r.histories {
		path := filepath.Join(outDir, h.name+".json")
		if err := os.WriteFile(path, h.data, 0o644); err != nil {
			return err
		}
		logger.Info("Wrote history", zap.String("file", path))
	}
	logger.Info("All histories recorded", zap.Int("files", len(r.histories)), zap.Duration("took", time.Since(began)))
	return nil
}

// recorder drives scenarios and collects their histories.
type recorder struct {
	tc        sdkclient.Client
	tg        *toolgate.Client
	logger    *zap.Logger
	histories []recorded
	lg        *ledger.Ledger
	// encrypted reaches the worker whose client encrypts its payloads
	// with the test keyring.
	encrypted *toolgate.Client
}

// recorded is one history, encoded, to be written to <name>.json.
type recorded struct {
	name string
	data []byte
}

// autoApprove: a call the policy approves without asking anyone.
func (r *recorder) autoApprove(ctx context.Context) error {
	id, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "auto-1", Session: "replay-auto", Tool: "echo", Args: []byte(`{"text":"hello"}`), Requester: agent})
	if err != nil {
		return err
	}
	if err := r.expectResult(ctx, id, workflows.StatusOK, policy.Approved, "policy"); err != nil {
		return err
	}
	return r.writeHistory(ctx, "auto-approve", workflows.CallWorkflowID(id), "")
}

// askApprove: a call that asks a person, who approves it.
func (r *recorder) askApprove(ctx context.Context) error {
	id, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "ask-1", Session: "replay-ask", Tool: "write", Args: []byte(`{"path":"notes.txt","content":"hi"}`), Requester: agent})
	if err != nil {
		return err
	}
	if err := r.waitPending(ctx, id); err != nil {
		return err
	}
	if err := r.decide(ctx, id, policy.Approved); err != nil {
		return err
	}
	if err := r.expectResult(ctx, id, workflows.StatusOK, policy.Approved, "cli"); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "ask-approve", workflows.CallWorkflowID(id), ""); err != nil {
		return err
	}
	// The call's notices and outcomes went out from a workflow of their
	// own; it ends once the channel heard the outcome.
	if err := r.tc.GetWorkflow(ctx, workflows.NoticesWorkflowID(id), "").Get(ctx, nil); err != nil {
		return fmt.Errorf("notices of %s: %w", id, err)
	}
	return r.writeHistory(ctx, "ask-approve-notices", workflows.NoticesWorkflowID(id), "")
}

// stickyFanOut: three calls of one tool wait at once; approving one for the
// session resolves the other two through the session workflow.
func (r *recorder) stickyFanOut(ctx context.Context) error {
	const session = "replay-sticky"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	// Twelve waiting calls; their waiting rooms hand the eleven others the
	// sticky decision when the first is approved for the session.
	var ids []string
	for i := 1; i <= 12; i++ {
		ids = append(ids, fmt.Sprintf("sticky-%d", i))
	}
	// One at a time, so every recording has the same shape.
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
	for _, id := range ids[1:] {
		if err := r.expectResult(ctx, id, workflows.StatusOK, policy.ApprovedForSession, "session"); err != nil {
			return err
		}
	}
	// A later call finds the sticky decision when it is evaluated, and never
	// waits in a room.
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "sticky-4", Session: session, Tool: "write", Args: []byte(`{"path":"sticky-4.txt","content":"x"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "sticky-4", workflows.StatusOK, policy.ApprovedForSession, "session"); err != nil {
		return err
	}
	if err := r.endSession(ctx, session, "", 0); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "sticky-fan-out-call", workflows.CallWorkflowID(ids[1]), ""); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "sticky-lookup", workflows.CallWorkflowID("sticky-4"), ""); err != nil {
		return err
	}
	room := workflows.RoomWorkflowID(session, workflows.RoomOf(ids[1]))
	if err := r.tc.GetWorkflow(ctx, room, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("room %s: %w", room, err)
	}
	if err := r.writeHistory(ctx, "sticky-fan-out-room", room, ""); err != nil {
		return err
	}
	return r.writeHistory(ctx, "sticky-fan-out-session", workflows.SessionWorkflowID(session), "")
}

// timeout: nobody answers a "slow" call, which is denied on timeout.
func (r *recorder) timeout(ctx context.Context) error {
	id, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "timeout-1", Session: "replay-timeout", Tool: "slow", Args: []byte(`{}`), Requester: agent})
	if err != nil {
		return err
	}
	res, err := r.tg.Wait(ctx, id)
	if err != nil {
		return err
	}
	if res.Status != workflows.StatusTimedOut {
		return fmt.Errorf("call %s: status %s (%s), want %s", id, res.Status, res.Reason, workflows.StatusTimedOut)
	}
	if took := res.FinishedAt.Sub(res.RequestedAt); took < slowTimeout {
		return fmt.Errorf("call %s timed out after %s, before its %s timeout", id, took, slowTimeout)
	}
	return r.writeHistory(ctx, "timeout", workflows.CallWorkflowID(id), "")
}

// sessionContinueAsNew: a session started with a continue-as-new limit of
// one message. Call 1's approve-for-session makes the first run continue as
// new; call 2 finds that sticky decision in the second run, which is then
// ended.
func (r *recorder) sessionContinueAsNew(ctx context.Context) error {
	const session = "replay-can"
	sessionID := workflows.SessionWorkflowID(session)
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle, ContinueAsNewAfter: 1}); err != nil {
		return err
	}
	first, err := r.tc.DescribeWorkflowExecution(ctx, sessionID, "")
	if err != nil {
		return err
	}
	firstRun := first.GetWorkflowExecutionInfo().GetExecution().GetRunId()

	// can-1's approve-for-session is the session's first message: the run
	// continues as new with the sticky decision.
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "can-1", Session: session, Tool: "write", Args: []byte(`{"path":"can-1.txt","content":"x"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.waitPending(ctx, "can-1"); err != nil {
		return err
	}
	if err := r.decide(ctx, "can-1", policy.ApprovedForSession); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "can-1", workflows.StatusOK, policy.ApprovedForSession, "cli"); err != nil {
		return err
	}
	var secondRun string
	err = eventually(ctx, "the first session run continued as new", func(ctx context.Context) (bool, error) {
		desc, err := r.tc.DescribeWorkflowExecution(ctx, sessionID, firstRun)
		if err != nil {
			return false, err
		}
		if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			return false, nil
		}
		latest, err := r.tc.DescribeWorkflowExecution(ctx, sessionID, "")
		if err != nil {
			return false, err
		}
		secondRun = latest.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		return secondRun != firstRun, nil
	})
	if err != nil {
		return err
	}
	view, err := r.tg.Session(ctx, session)
	if err != nil {
		return err
	}
	if len(view.Sticky) != 1 || view.Sticky[0].FromCall != "can-1" {
		return fmt.Errorf("second session run holds sticky decisions %+v, want can-1's", view.Sticky)
	}
	// can-2 finds the sticky decision the second run carried over.
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "can-2", Session: session, Tool: "write", Args: []byte(`{"path":"can-2.txt","content":"x"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "can-2", workflows.StatusOK, policy.ApprovedForSession, "session"); err != nil {
		return err
	}
	if err := r.endSession(ctx, session, secondRun, 0); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "session-continue-as-new", sessionID, firstRun); err != nil {
		return err
	}
	return r.writeHistory(ctx, "session-continue-as-new-next-run", sessionID, secondRun)
}

// waitPending waits until the call waits for a person, who was notified
// (so every recording has the same shape).
func (r *recorder) waitPending(ctx context.Context, callID string) error {
	return eventually(ctx, "call "+callID+" is pending", func(ctx context.Context) (bool, error) {
		st, err := r.tg.Status(ctx, callID)
		if err != nil {
			return false, err
		}
		if st.Result != nil {
			return false, fmt.Errorf("call %s finished (%s: %s) instead of waiting", callID, st.Result.Status, st.Result.Reason)
		}
		return st.State.Status == workflows.StatusPending && len(st.State.Notices) > 0, nil
	})
}

func (r *recorder) decide(ctx context.Context, callID string, kind policy.DecisionKind) error {
	if _, err := r.tg.Decide(ctx, callID, policy.Decision{Kind: kind, DecidedBy: approver, Channel: "cli"}); err != nil {
		return fmt.Errorf("decide %s: %w", callID, err)
	}
	return nil
}

// expectResult waits for the call's Result and checks how it ended.
func (r *recorder) expectResult(ctx context.Context, callID string, status workflows.Status, kind policy.DecisionKind, channel string) error {
	res, err := r.tg.Wait(ctx, callID)
	if err != nil {
		return err
	}
	if res.Status != status || res.Decision != kind.String() || res.Channel != channel {
		return fmt.Errorf("call %s ended %s/%s via %q (%s), want %s/%s via %q",
			callID, res.Status, res.Decision, res.Channel, res.Reason, status, kind, channel)
	}
	return nil
}

// agentClaim: agent-executed calls the policy allows, as a hook runs them:
// one claimed and reported, one claimed with no report to follow, one
// reported as run with an outcome the agent cannot tell.
func (r *recorder) agentClaim(ctx context.Context) error {
	const session = "replay-agent"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	for _, c := range []struct {
		name, id string
		claim    toolgate.Claim
		report   *toolgate.Report
		status   workflows.Status
	}{
		{"agent-claim", "agent-1", toolgate.Claim{Run: "toolu_1"}, &toolgate.Report{Output: []byte(`{"stdout":"ok"}`), Run: "toolu_1"}, workflows.StatusOK},
		{"agent-claim-no-report", "agent-2", toolgate.Claim{Run: "toolu_2", NoReport: true}, nil, workflows.StatusOK},
		{"agent-report-unknown", "agent-3", toolgate.Claim{Run: "toolu_3"}, &toolgate.Report{Output: []byte(`"out\n"`), Unknown: "no exit status", Run: "toolu_3"}, workflows.StatusUnknown},
	} {
		req := toolgate.CallRequest{CallID: c.id, Session: session, Tool: "Bash", Args: []byte(`{"command":"ls"}`), Requester: agent, Execution: policy.ExecutionAgent}
		if _, err := r.tg.Submit(ctx, req); err != nil {
			return err
		}
		if _, err := r.tg.WaitDecided(ctx, c.id); err != nil {
			return err
		}
		if err := r.tg.Claim(ctx, c.id, agent, c.claim); err != nil {
			return err
		}
		if err := r.tg.Claim(ctx, c.id, agent, toolgate.Claim{Run: "toolu_other"}); !toolgate.IsApprovalUsed(err) {
			return fmt.Errorf("a second run's claim of %s: %v, want it refused", c.id, err)
		}
		if c.report != nil {
			if err := r.tg.Report(ctx, c.id, agent, *c.report); err != nil {
				return err
			}
		}
		if err := r.expectResult(ctx, c.id, c.status, policy.Approved, "policy"); err != nil {
			return err
		}
		if err := r.writeHistory(ctx, c.name, workflows.CallWorkflowID(c.id), ""); err != nil {
			return err
		}
	}
	return nil
}

// pins: an MCP server's pins take two tools at first sight, refuse one
// whose definition changed, pin it once approved, and move to a new run.
func (r *recorder) pins(ctx context.Context) error {
	const server = "replay-docs"
	id := workflows.PinsWorkflowID(server)
	run, err := r.tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
		workflows.PinsWorkflowType, workflows.PinsInput{Server: server, ContinueAsNewAfter: 3})
	if err != nil {
		return err
	}
	def := func(name, description string) workflows.ToolDefinition {
		d := fmt.Sprintf(`{"description":%q,"name":%q}`, description, name)
		return workflows.ToolDefinition{Tool: name, Hash: workflows.DefinitionHash(d), Definition: d}
	}
	first, err := r.tg.CheckPins(ctx, workflows.CheckPinsRequest{Server: server, By: identity,
		Tools: []workflows.ToolDefinition{def("search", "Search the docs."), def("fetch", "Fetch a page.")}})
	if err != nil {
		return err
	}
	if len(first) != 2 || !first[0].Pinned || !first[1].Pinned {
		return fmt.Errorf("first sight: %+v, want both pinned", first)
	}
	changed := def("search", "Search the docs, in more languages.")
	later, err := r.tg.CheckPins(ctx, workflows.CheckPinsRequest{Server: server, By: identity, Tools: []workflows.ToolDefinition{changed}})
	if err != nil {
		return err
	}
	if len(later) != 1 || later[0].Pinned || later[0].Previous == nil {
		return fmt.Errorf("a changed definition: %+v, want it held with the pinned one", later)
	}
	if err := r.tg.Pin(ctx, workflows.PinRequest{Server: server, Definition: changed, By: approver, CallID: "definition-change.replay"}); err != nil {
		return err
	}
	for {
		d, err := r.tc.DescribeWorkflowExecution(ctx, id, run.GetRunID())
		if err != nil {
			return err
		}
		if d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return r.writeHistory(ctx, "pins", id, run.GetRunID())
}

// fourEyes: a call with a preview whose rule needs two approvers; alice's
// approval is counted, bob's decides it.
func (r *recorder) fourEyes(ctx context.Context) error {
	id, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "four-eyes-1", Session: "replay-four-eyes", Tool: "pay", Args: []byte(`{"amount":100}`), Requester: agent})
	if err != nil {
		return err
	}
	if err := r.waitPending(ctx, id); err != nil {
		return err
	}
	for _, by := range []string{approver, "bob"} {
		if _, err := r.tg.Decide(ctx, id, policy.Decision{Kind: policy.Approved, DecidedBy: by, Channel: "cli"}); err != nil {
			return fmt.Errorf("%s approves %s: %w", by, id, err)
		}
	}
	res, err := r.tg.Wait(ctx, id)
	if err != nil {
		return err
	}
	if res.Status != workflows.StatusOK || res.Approvals == nil || len(res.Approvals.Given) != 2 || res.Preview == nil {
		return fmt.Errorf("call %s ended %+v, want ok after two approvals, with its preview", id, res)
	}
	return r.writeHistory(ctx, "four-eyes", workflows.CallWorkflowID(id), "")
}

// userDecision: the person running the agent approves a call for the
// session in the agent's client; the next call of the tool takes that
// sticky decision at its evaluation.
func (r *recorder) userDecision(ctx context.Context) error {
	const session, user = "replay-user", "dana"
	first, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "user-1", Session: session, Tool: "edit", Args: []byte(`{"n":1}`), Requester: agent, ActingUser: user})
	if err != nil {
		return err
	}
	if err := r.waitPending(ctx, first); err != nil {
		return err
	}
	if _, err := r.tg.DecideAsUser(ctx, first, user, policy.Decision{Kind: policy.ApprovedForSession}); err != nil {
		return fmt.Errorf("%s approves %s for the session: %w", user, first, err)
	}
	if res, err := r.tg.Wait(ctx, first); err != nil || res.Status != workflows.StatusOK || res.Channel != policy.ChannelClient {
		return fmt.Errorf("call %s ended %+v (%v), want ok, decided in the client", first, res, err)
	}
	// The session learns the sticky decision by a signal sent while the
	// tool runs.
	if err := eventually(ctx, "session "+session+" holds the user's sticky decision", func(ctx context.Context) (bool, error) {
		v, err := r.tg.Session(ctx, session)
		return err == nil && len(v.Sticky) == 1, nil
	}); err != nil {
		return err
	}
	second, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "user-2", Session: session, Tool: "edit", Args: []byte(`{"n":2}`), Requester: agent, ActingUser: user})
	if err != nil {
		return err
	}
	if res, err := r.tg.Wait(ctx, second); err != nil || res.Status != workflows.StatusOK || res.DecidedBy != user {
		return fmt.Errorf("call %s ended %+v (%v), want ok by the user's sticky decision", second, res, err)
	}
	if err := r.writeHistory(ctx, "user-decision", workflows.CallWorkflowID(first), ""); err != nil {
		return err
	}
	return r.writeHistory(ctx, "user-decision-sticky", workflows.CallWorkflowID(second), "")
}

// sessionEnd: two calls wait in a session that an admin ends; both are
// denied, and a call that comes later is denied at its evaluation.
func (r *recorder) sessionEnd(ctx context.Context) error {
	const session = "replay-end"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	for _, id := range []string{"end-1", "end-2"} {
		args := fmt.Sprintf(`{"path":%q,"content":"x"}`, id+".txt")
		if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: id, Session: session, Tool: "write", Args: []byte(args), Requester: agent}); err != nil {
			return err
		}
		if err := r.waitPending(ctx, id); err != nil {
			return err
		}
	}
	if err := r.endSession(ctx, session, "", 2); err != nil {
		return err
	}
	for _, id := range []string{"end-1", "end-2"} {
		if err := r.expectResult(ctx, id, workflows.StatusDenied, policy.DeniedWithReason, "session"); err != nil {
			return err
		}
	}
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "end-3", Session: session, Tool: "write", Args: []byte(`{"path":"end-3.txt","content":"x"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "end-3", workflows.StatusDenied, policy.DeniedWithReason, "session"); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "session-end-call", workflows.CallWorkflowID("end-1"), ""); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "session-end-later-call", workflows.CallWorkflowID("end-3"), ""); err != nil {
		return err
	}
	if err := r.tc.GetWorkflow(ctx, workflows.SessionWorkflowID(session), "").Get(ctx, nil); err != nil {
		return fmt.Errorf("session %s: %w", session, err)
	}
	return r.writeHistory(ctx, "session-end", workflows.SessionWorkflowID(session), "")
}

// trust3 walks the paths closed after 1.0 (issue 34): an edit into a
// four-eyes rule refused, then the call approved as it is; a waiting call
// cancelled, whose room hears it left; an approval voided at its claim by
// the session's end.
func (r *recorder) trust3(ctx context.Context) error {
	const session = "replay-trust"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	admin := policy.Approver{Name: approver, Groups: []string{"*"}}

	edit, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "trust-edit", Session: session, Tool: "pay", Args: []byte(`{"amount":50}`), Requester: agent})
	if err != nil {
		return err
	}
	if err := r.waitPending(ctx, edit); err != nil {
		return err
	}
	edited := policy.Decision{Kind: policy.ApprovedWithEdits, DecidedBy: approver, Channel: "cli", EditedArgs: []byte(`{"amount":5000}`)}
	if _, err := r.tg.Decide(ctx, edit, edited); err == nil || !strings.Contains(err.Error(), "needs 2 approvals") {
		return fmt.Errorf("an edit of %s into the two-keys rule: %v, want it refused", edit, err)
	}
	if err := r.decide(ctx, edit, policy.Approved); err != nil {
		return err
	}
	if err := r.expectResult(ctx, edit, workflows.StatusOK, policy.Approved, "cli"); err != nil {
		return err
	}

	cancelled, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "trust-cancel", Session: session, Tool: "write", Args: []byte(`{"path":"c.txt","content":"x"}`), Requester: agent})
	if err != nil {
		return err
	}
	if err := r.waitPending(ctx, cancelled); err != nil {
		return err
	}
	if _, err := r.tg.Cancel(ctx, cancelled, admin); err != nil {
		return err
	}
	if err := r.expectResult(ctx, cancelled, workflows.StatusDenied, policy.DeniedWithReason, workflows.ChannelCancel); err != nil {
		return err
	}

	deploy, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "trust-void", Session: session, Tool: "deploy", Args: []byte(`{"env":"prod"}`), Requester: agent, Execution: policy.ExecutionAgent})
	if err != nil {
		return err
	}
	if err := r.waitPending(ctx, deploy); err != nil {
		return err
	}
	if err := r.decide(ctx, deploy, policy.Approved); err != nil {
		return err
	}
	if _, err := r.tg.WaitDecided(ctx, deploy); err != nil {
		return err
	}
	if err := r.endSession(ctx, session, "", 0); err != nil {
		return err
	}
	var refused *toolgate.RefusedError
	if err := r.tg.Claim(ctx, deploy, agent, toolgate.Claim{Run: "toolu_late"}); !errors.As(err, &refused) || refused.Type != workflows.ErrTypeApprovalVoided {
		return fmt.Errorf("a claim of %s after the session ended: %v, want it void", deploy, err)
	}
	if err := r.expectResult(ctx, deploy, workflows.StatusDenied, policy.DeniedWithReason, "session"); err != nil {
		return err
	}
	room := workflows.RoomWorkflowID(session, workflows.RoomOf(cancelled))
	if err := r.tc.GetWorkflow(ctx, room, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("room %s: %w", room, err)
	}
	for name, id := range map[string]string{
		"edit-into-four-eyes":        workflows.CallWorkflowID(edit),
		"cancel-leaves-room":         workflows.CallWorkflowID(cancelled),
		"cancel-leaves-room-room":    room,
		"session-end-voids-approval": workflows.CallWorkflowID(deploy),
	} {
		if err := r.writeHistory(ctx, name, id, ""); err != nil {
			return err
		}
	}
	return nil
}

// openSession starts a session and its rooms as the first call would,
// with in's idle timeout and limits, so their histories end soon.
// ledgered: the calls and the session write to the decision ledger: an
// auto-approved call; a call approved for the session; a later call the
// sticky decision covers at evaluation; the sticky decision revoked, and
// the session ended.
func (r *recorder) ledgered(ctx context.Context) error {
	const session = "replay-ledger"
	if err := r.openSession(ctx, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "ledger-auto", Session: session, Tool: "echo", Args: []byte(`{"text":"hi"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "ledger-auto", workflows.StatusOK, policy.Approved, "policy"); err != nil {
		return err
	}
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "ledger-sticky", Session: session, Tool: "write", Args: []byte(`{"path":"l.txt","content":"x"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.waitPending(ctx, "ledger-sticky"); err != nil {
		return err
	}
	if err := r.decide(ctx, "ledger-sticky", policy.ApprovedForSession); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "ledger-sticky", workflows.StatusOK, policy.ApprovedForSession, "cli"); err != nil {
		return err
	}
	if _, err := r.tg.Submit(ctx, toolgate.CallRequest{CallID: "ledger-covered", Session: session, Tool: "write", Args: []byte(`{"path":"m.txt","content":"y"}`), Requester: agent}); err != nil {
		return err
	}
	if err := r.expectResult(ctx, "ledger-covered", workflows.StatusOK, policy.ApprovedForSession, "session"); err != nil {
		return err
	}
	if err := r.tg.Revoke(ctx, session, "write", policy.Approver{Name: approver, Groups: []string{"*"}}); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	if err := r.endSession(ctx, session, "", 0); err != nil {
		return err
	}
	for _, h := range [][2]string{{"ledger-auto", "ledger-auto"}, {"ledger-sticky", "ledger-sticky"}, {"ledger-covered", "ledger-covered"}} {
		if err := r.writeHistory(ctx, h[0], workflows.CallWorkflowID(h[1]), ""); err != nil {
			return err
		}
	}
	if n, err := r.lg.Size(ctx); err != nil || n < 10 {
		return fmt.Errorf("the ledger has %d entries (%v), want the calls' and the session's", n, err)
	}
	return r.writeHistory(ctx, "ledger-session", workflows.SessionWorkflowID(session), "")
}

func (r *recorder) openSession(ctx context.Context, in workflows.SessionInput) error {
	return openSessionOn(ctx, r.tc, workflows.TaskQueue, in)
}

// openSessionOn starts a session and its rooms on a task queue.
func openSessionOn(ctx context.Context, tc sdkclient.Client, queue string, in workflows.SessionInput) error {
	id := workflows.SessionWorkflowID(in.Session)
	_, err := tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: id, TaskQueue: queue,
		Memo: map[string]any{activities.MemoOwner: in.Owner}}, workflows.SessionWorkflowType, in)
	if err != nil {
		return fmt.Errorf("start session %s: %w", in.Session, err)
	}
	for room := range workflows.Rooms {
		_, err := tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: workflows.RoomWorkflowID(in.Session, room), TaskQueue: queue},
			workflows.RoomWorkflowType, workflows.RoomInput{Session: in.Session, Room: room, IdleTimeout: in.IdleTimeout, Revision: workflows.RoomRevision})
		if err != nil {
			return fmt.Errorf("start room %d of session %s: %w", room, in.Session, err)
		}
	}
	return nil
}

// endSession ends the session, checks how many waiting calls it denied
// and waits until the run completed (after its idle timeout).
func (r *recorder) endSession(ctx context.Context, session, runID string, wantDenied int) error {
	denied, err := r.tg.EndSession(ctx, session, policy.Approver{Name: approver, Groups: []string{"*"}})
	if err != nil {
		return fmt.Errorf("end session %s: %w", session, err)
	}
	if denied != wantDenied {
		return fmt.Errorf("ending session %s denied %d waiting calls, want %d", session, denied, wantDenied)
	}
	if err := r.tc.GetWorkflow(ctx, workflows.SessionWorkflowID(session), runID).Get(ctx, nil); err != nil {
		return fmt.Errorf("session %s: %w", session, err)
	}
	return nil
}

// writeHistory fetches a closed run's full history and keeps it for
// <name>.json, in the JSON form that client.HistoryFromJSON and the
// replayer read.
func (r *recorder) writeHistory(ctx context.Context, name, workflowID, runID string) error {
	hist := &historypb.History{}
	it := r.tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return fmt.Errorf("history of %s: %w", workflowID, err)
		}
		hist.Events = append(hist.Events, ev)
	}
	if n := len(hist.Events); n == 0 || !closing(hist.Events[n-1].GetEventType()) {
		return fmt.Errorf("history of %s does not end with the run closing", workflowID)
	}
	// temporalproto, not google's protojson: the same JSON, but with stable
	// whitespace, so a re-recording diffs only where the history changed.
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		return fmt.Errorf("encode history of %s: %w", workflowID, err)
	}
	data = append(data, '\n')
	back, err := sdkclient.HistoryFromJSON(bytes.NewReader(data), sdkclient.HistoryJSONOptions{})
	if err != nil || len(back.GetEvents()) != len(hist.Events) {
		return fmt.Errorf("history of %s does not read back (%d events): %v", workflowID, len(back.GetEvents()), err)
	}
	r.histories = append(r.histories, recorded{name: name, data: data})
	r.logger.Info("Fetched history", zap.String("name", name), zap.String("workflowID", workflowID),
		zap.Int("events", len(hist.Events)), zap.Stringer("last", hist.Events[len(hist.Events)-1].GetEventType()))
	return nil
}

func closing(t enumspb.EventType) bool {
	switch t {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
		return true
	}
	return false
}

// eventually checks cond every pollInterval until it holds, fails, or
// waitTimeout passes.
func eventually(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("waiting until %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting until %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// recorderPolicy is the recorder's own policy, so a change to the built-in
// policy never changes the recorded histories: "echo" runs without asking,
// "write" asks a person with the default timeout, "slow" asks with a short
// timeout and the default deny on timeout.
type recorderPolicy struct{ policy.Base }

var _ policy.ToolPolicy = recorderPolicy{}

// EvaluateApproval asks a person for "write" and "slow".
func (recorderPolicy) EvaluateApproval(_ context.Context, call policy.Call) (*policy.ApprovalRequest, error) {
	switch call.Tool {
	case "write":
		return &policy.ApprovalRequest{Message: "Write a file?", Rule: "ask-write"}, nil
	case "slow":
		return &policy.ApprovalRequest{Message: "Run the slow tool?", Rule: "ask-slow", Timeout: slowTimeout}, nil
	case "pay": // two approvals from 100 on
		var a struct{ Amount int }
		_ = json.Unmarshal(call.Args, &a)
		if a.Amount < 100 {
			return &policy.ApprovalRequest{Message: "Pay?", Rule: "one-key"}, nil
		}
		return &policy.ApprovalRequest{Message: "Pay?", Rule: "two-keys", Approvals: 2}, nil
	case "deploy":
		return &policy.ApprovalRequest{Message: "Deploy?", Rule: "ask-deploy"}, nil
	case "edit":
		return &policy.ApprovalRequest{Message: "Edit?", Rule: "at-the-agent", User: true}, nil
	}
	return nil, nil
}

// Version names the policy in every Result.
func (recorderPolicy) Version() string { return "record/1" }

// recordChannel is a notification channel that reaches nobody: it makes
// the recorded calls send notices and announce outcomes.
type recordChannel struct{}

func (recordChannel) Name() string { return "record" }

func (recordChannel) Notify(_ context.Context, n activities.Notice) (activities.Receipt, error) {
	return activities.Receipt{Ref: map[string]string{"seq": fmt.Sprint(n.Seq)}}, nil
}

func (recordChannel) Resolve(context.Context, activities.Outcome, []activities.Receipt) error {
	return nil
}

func recorderTools() (*tool.Registry, error) {
	reg := tool.NewRegistry()
	for _, t := range []tool.Tool{
		{Name: "echo", Run: func(_ context.Context, in tool.Input) (json.RawMessage, error) { return in.Args, nil }},
		{Name: "edit", Run: func(_ context.Context, in tool.Input) (json.RawMessage, error) { return in.Args, nil }},
		{Name: "write", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`{"written":true}`), nil
		}},
		{Name: "fail", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return nil, errors.New("disk full writing " + encryptedSecret)
		}},
		{Name: "slow", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`{"done":true}`), nil
		}},
		{Name: "pay", Run: func(context.Context, tool.Input) (json.RawMessage, error) {
			return json.RawMessage(`{"paid":true}`), nil
		}, Preview: func(context.Context, json.RawMessage) (policy.Preview, error) {
			return policy.Preview{Kind: policy.PreviewText, Text: "pay 100 to acme"}, nil
		}},
	} {
		if err := reg.Register(t); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
