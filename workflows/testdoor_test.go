package workflows

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// The tests' door: the workers of the tests trust it, and a test that is
// not about statements sends its messages through it, as the client does
// for a person a real door authenticated: what a message says is signed
// as it arrives, when it came without a statement. Tests about statements
// send through an environment without it (useDoors(env, false)).

var (
	testDoor = statement.NewSigner("test", ed25519.NewKeyFromSeed(seed("test door")))
	// revokedDoor's key is in testDoors, revoked; strangerDoor's is not.
	revokedDoor  = statement.NewSigner("old", ed25519.NewKeyFromSeed(seed("revoked door")))
	strangerDoor = statement.NewSigner("test", ed25519.NewKeyFromSeed(seed("stranger door")))
	testDoors    = statement.NewDoors(testDoor.Public(), revoked(revokedDoor.Public()))
)

func revoked(k statement.DoorKey) statement.DoorKey {
	k.Revoked = true
	return k
}

func seed(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// useDoors makes env's workers trust testDoors; with sign, the test door
// signs every message that comes without a statement.
func useDoors(env *testsuite.TestWorkflowEnvironment, sign bool) {
	ics := []interceptor.WorkerInterceptor{}
	if sign {
		ics = append(ics, &testDoorInterceptor{})
	}
	env.SetWorkerOptions(worker.Options{Interceptors: append(ics, DoorsInterceptor(testDoors))})
}

type testDoorInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (i *testDoorInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &testDoorInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

// testDoorInbound signs for one workflow: it knows the call or session it
// started with.
type testDoorInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	call    *policy.Call
	session string
}

// Init puts the door on the workflow's way out too: it reports for the
// agent (reportDoor).
func (d *testDoorInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return d.Next.Init(&reportDoor{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, in: d})
}

func (d *testDoorInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	for i, arg := range in.Args {
		switch v := arg.(type) {
		case CallInput:
			if v.Submission == nil { // signed as it was started
				start := workflow.GetInfo(ctx).WorkflowStartTime
				sd, err := testDoor.WithClock(func() time.Time { return start }).Sign(policy.SubmissionStatement(v.Call)) //workflowcheck:ignore
				if err != nil {
					return nil, err
				}
				v.Submission = sd
			}
			in.Args[i], d.call = v, &v.Call
		case SessionInput:
			d.session = v.Session
		}
	}
	return d.Next.ExecuteWorkflow(ctx, in)
}

func (d *testDoorInbound) ValidateUpdate(ctx workflow.Context, in *interceptor.UpdateInput) error {
	d.sign(ctx, in.Args)
	return d.Next.ValidateUpdate(ctx, in)
}

func (d *testDoorInbound) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	d.sign(ctx, in.Args)
	return d.Next.ExecuteUpdate(ctx, in)
}

func (d *testDoorInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	dc := converter.GetDefaultDataConverter()
	var arg any
	switch in.SignalName {
	case SignalDecide:
		var req DecideRequest
		if dc.FromPayloads(in.Arg, &req) != nil {
			return d.Next.HandleSignal(ctx, in)
		}
		arg = &req
	case SignalSticky:
		var sd StickyDecision
		if dc.FromPayloads(in.Arg, &sd) != nil {
			return d.Next.HandleSignal(ctx, in)
		}
		arg = &sd
	default:
		return d.Next.HandleSignal(ctx, in)
	}
	args := []any{arg}
	d.sign(ctx, args)
	p, err := dc.ToPayloads(args[0])
	if err != nil {
		return err
	}
	in.Arg = p
	return d.Next.HandleSignal(ctx, in)
}

// sign signs what each argument says, as a door would for its author.
func (d *testDoorInbound) sign(ctx workflow.Context, args []any) {
	run := workflow.GetInfo(ctx).WorkflowExecution.RunID
	onCall := func(st statement.Statement) *statement.Signed {
		st.Run = run
		return mustSign(ctx, st)
	}
	for i, arg := range args {
		switch v := arg.(type) {
		case DecideRequest:
			signDecision(d.call, &v, onCall)
			args[i] = v
		case *DecideRequest:
			signDecision(d.call, v, onCall)
		case CancelRequest:
			if v.Statement == nil && d.call != nil {
				v.Statement = onCall(policy.CancelStatement(*d.call, policy.Approver{Name: v.By, Groups: v.Groups, Identity: v.Identity}, v.AsRequester)) //workflowcheck:ignore
			}
			args[i] = v
		case ClaimRequest:
			if v.Statement == nil && d.call != nil {
				v.Statement = onCall(policy.ClaimStatement(*d.call, v.Run)) //workflowcheck:ignore
			}
			args[i] = v
		case RevokeRequest:
			if v.Statement == nil {
				v.Statement = mustSign(ctx, policy.RevokeStatement(d.session, v.Key, v.approver())) //workflowcheck:ignore
			}
			args[i] = v
		case EndRequest:
			if v.Statement == nil {
				v.Statement = mustSign(ctx, policy.EndStatement(d.session, v.approver())) //workflowcheck:ignore
			}
			args[i] = v
		case *StickyDecision:
			if v.Decision.Statement == nil {
				v.Decision.Statement = signedSticky(ctx, d.session, *v)
			}
		}
	}
}

func signDecision(call *policy.Call, req *DecideRequest, onCall func(statement.Statement) *statement.Signed) {
	if req.Decision.Statement != nil || call == nil || req.CallID != call.ID {
		return
	}
	key := policy.ApprovalRequest{}.StickyKeyFor(*call)
	req.Decision.Statement = onCall(policy.DecisionStatement(*call, req.Decision, key)) //workflowcheck:ignore
}

// signedSticky is the statement a door made of a sticky decision d on
// call d.FromCall of session.
func signedSticky(ctx workflow.Context, session string, d StickyDecision) *statement.Signed {
	call := policy.Call{ID: d.FromCall, Session: session, Tool: d.Tool}
	return mustSign(ctx, policy.DecisionStatement(call, d.Decision, d.Key)) //workflowcheck:ignore
}

// mustSign signs st as the test door at the workflow's time (nil ctx: the
// machine's).
func mustSign(ctx workflow.Context, st statement.Statement) *statement.Signed {
	door := testDoor
	if ctx != nil {
		door = door.WithClock(func() time.Time { return workflow.Now(ctx) })
	}
	sd, err := door.Sign(st) //workflowcheck:ignore
	if err != nil {
		panic(err)
	}
	return sd
}

// reportDoor signs an agent's report as the door it came through would:
// the tests complete the report activity with a mock, so the door watches
// the report come back and hands its statement over on SignalReport.
type reportDoor struct {
	interceptor.WorkflowOutboundInterceptorBase
	in       *testDoorInbound
	reported *statement.Signed
}

func (r *reportDoor) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	f := r.Next.ExecuteActivity(ctx, activityType, args...)
	if activityType != "AwaitReport" || r.in.call == nil {
		return f
	}
	return &reportFuture{Future: f, door: r, ctx: ctx}
}

func (r *reportDoor) GetSignalChannel(ctx workflow.Context, name string) workflow.ReceiveChannel {
	ch := r.Next.GetSignalChannel(ctx, name)
	if name != SignalReport || r.reported == nil {
		return ch
	}
	sd := r.reported
	r.reported = nil
	return &signedReport{ReceiveChannel: ch, sd: sd}
}

// reportFuture signs what the report said once the workflow reads it.
type reportFuture struct {
	workflow.Future
	door *reportDoor
	ctx  workflow.Context
}

func (f *reportFuture) Get(ctx workflow.Context, valuePtr any) error {
	err := f.Future.Get(ctx, valuePtr)
	var output json.RawMessage
	if p, ok := valuePtr.(*json.RawMessage); ok && p != nil {
		output = *p
	}
	output, failed, unsure, reported := reportedOutcome(err, output)
	if !reported {
		return err
	}
	st := policy.ReportStatement(*f.door.in.call, output, failed, unsure) //workflowcheck:ignore
	st.Run = workflow.GetInfo(f.ctx).WorkflowExecution.RunID
	f.door.reported = mustSign(f.ctx, st)
	return err
}

// signedReport is the report channel with the door's statement first.
type signedReport struct {
	workflow.ReceiveChannel
	sd *statement.Signed
}

func (c *signedReport) ReceiveAsync(valuePtr any) bool {
	if c.sd != nil {
		*valuePtr.(**statement.Signed) = c.sd
		c.sd = nil
		return true
	}
	return c.ReceiveChannel.ReceiveAsync(valuePtr)
}
