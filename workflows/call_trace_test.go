package workflows

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/calltrace"
	"github.com/toolgate/toolgate/policy"
)

// callerTraceID and callerSpanID are the agent's span the tests' calls
// are started in (their start header, as the SDK's interceptor writes it).
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
)

// traced starts the test again with tracing on for the suite's worker and
// the call in the caller's trace; it returns the spans' recorder.
func (s *CallSuite) traced(content bool) *tracetest.SpanRecorder {
	p, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"traceparent": "00-" + callerTraceID + "-" + callerSpanID + "-01"})
	s.Require().NoError(err)
	// The suite's header goes to the environments made after it.
	s.SetHeader(&commonpb.Header{Fields: map[string]*commonpb.Payload{traceHeaderKey: p}})
	s.T().Cleanup(func() { s.SetHeader(nil) })
	s.SetupTest()
	s.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		&testDoorInterceptor{}, DoorsInterceptor(testDoors), CallerTraceInterceptor()}})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s.acts.Tracing = &activities.Tracing{Tracer: tp.Tracer("test"), CaptureContent: content}
	return rec
}

// spansByName indexes the ended spans by name.
func spansByName(rec *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		out[sp.Name()] = sp
	}
	return out
}

func attrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// An asked call's span sits in the caller's trace and holds the policy,
// the two hours it waited for alice (a reminder on the way) and the
// tool's run, each at the call's own (virtual) times; no argument or
// output in any span.
func (s *CallSuite) TestTraceOfAnAskedCall() {
	rec := s.traced(false)
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write a file?", Rule: "ask-write", Groups: []string{"ops"}, RemindAfter: time.Hour, Timeout: 4 * time.Hour}
	d := decision(policy.Approved, "alice")
	d.DeciderGroups = []string{"ops"}
	o := decideAt(s.env, 2*time.Hour+time.Minute, "c1", d)
	r := s.runOne(call("c1", "write", `{"path":"a","content":"sk-live-123"}`))
	s.Require().True(o.applied, "rejected: %v, failed: %v", o.rejected, o.failed)
	s.Require().Equal(StatusOK, r.Status)

	spans := spansByName(rec)
	s.Require().Len(spans, 4, "execute_tool, policy, wait and run")
	root := spans["execute_tool write"]
	s.Require().NotNil(root)
	s.Equal(callerTraceID, root.SpanContext().TraceID().String())
	s.Equal(callerSpanID, root.Parent().SpanID().String(), "a child of the caller's span")
	a := attrs(root)
	s.Equal("execute_tool", a[calltrace.AttrOperation].AsString())
	s.Equal("write", a[calltrace.AttrToolName].AsString())
	s.Equal("c1", a[calltrace.AttrToolCallID].AsString())
	s.Equal("ask-write", a[calltrace.AttrRule].AsString())
	s.Equal("ask", a[calltrace.AttrVerdict].AsString())
	s.Equal("s1", a[calltrace.AttrSession].AsString())
	s.Equal("server", a[calltrace.AttrExecution].AsString())
	s.Equal("ok", a[calltrace.AttrStatus].AsString())
	s.True(r.RequestedAt.Equal(root.StartTime()), "starts at the request")
	s.True(r.FinishedAt.Equal(root.EndTime()), "ends at the result")

	for _, name := range []string{calltrace.SpanPolicy, calltrace.SpanWait, calltrace.SpanRun + " write"} {
		sp := spans[name]
		s.Require().NotNil(sp, name)
		s.Equal(root.SpanContext().SpanID(), sp.Parent().SpanID(), name+" is a child of execute_tool")
		s.False(sp.StartTime().Before(root.StartTime()), name)
		s.False(sp.EndTime().After(root.EndTime()), name)
	}
	wait := spans[calltrace.SpanWait]
	s.InDelta((2*time.Hour + time.Minute).Seconds(), wait.EndTime().Sub(wait.StartTime()).Seconds(), 1)
	wa := attrs(wait)
	s.Equal([]string{"ops"}, wa[calltrace.AttrGroups].AsStringSlice())
	s.Equal([]string{"fake"}, wa[calltrace.AttrChannels].AsStringSlice())
	s.Equal("alice", wa[calltrace.AttrDecidedBy].AsString())
	s.Equal("cli", wa[calltrace.AttrDecidedVia].AsString())
	s.Equal("approved", wa[calltrace.AttrOutcome].AsString())
	s.Require().Len(wait.Events(), 2, "reminders after one and two hours")
	s.Equal(calltrace.EventReminder, wait.Events()[0].Name)
	s.False(spans[calltrace.SpanRun+" write"].StartTime().Before(wait.EndTime()), "the tool runs after the decision")

	for _, sp := range rec.Ended() {
		for _, kv := range sp.Attributes() {
			s.NotContains(kv.Value.Emit(), "sk-live-123", sp.Name())
			s.NotContains(kv.Value.Emit(), `"path"`, sp.Name())
		}
	}
}

// With content captured, the span carries the arguments after the
// policy's redaction, and the output.
func (s *CallSuite) TestTraceCapturesRedactedContentWhenAsked() {
	rec := s.traced(true)
	r := s.runOne(call("c1", "echo", `{"text":"sk-live-123"}`))
	s.Require().Equal(StatusOK, r.Status)
	root := spansByName(rec)["execute_tool echo"]
	s.Require().NotNil(root)
	a := attrs(root)
	s.Equal(`{"text":"[REDACTED]"}`, a[calltrace.AttrArguments].AsString())
	s.Equal(string(r.Output), a[calltrace.AttrResult].AsString())
	s.NotContains(a[calltrace.AttrResult].AsString(), "sk-live-123")
}

// A call the policy denies is a span with its verdict and status, and no
// wait or run.
func (s *CallSuite) TestTraceOfADeniedCall() {
	rec := s.traced(false)
	s.policy.deny["write"] = "writes are frozen during the release"
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))
	s.Require().Equal(StatusDenied, r.Status)
	spans := spansByName(rec)
	s.Require().Len(spans, 2, "execute_tool and policy")
	a := attrs(spans["execute_tool write"])
	s.Equal("deny", a[calltrace.AttrVerdict].AsString())
	s.Equal("denied", a[calltrace.AttrStatus].AsString())
	s.NotNil(spans[calltrace.SpanPolicy])
}
