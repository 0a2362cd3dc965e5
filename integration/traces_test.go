package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Traces through a real backend: Jaeger v2 (all-in-one, memory storage),
// built once per version into the cache from the module proxy's source,
// receiving OTLP from toolgate dev and from the test's agent, and queried
// with its HTTP API, as an operator's browser would.
const jaegerVersion = "v1.75.0"

// buildJaeger returns the Jaeger binary, building it on first use (about
// five minutes on two cores). Its go.mod has replace directives, so it is
// built as its own main module, from the module proxy's copy.
func buildJaeger(t *testing.T) string {
	t.Helper()
	base, err := os.UserCacheDir()
	require.NoError(t, err)
	dir := filepath.Join(base, "toolgate", "jaeger-"+jaegerVersion+"-"+runtime.Version())
	bin := filepath.Join(dir, "jaeger")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	dl := exec.Command("go", "mod", "download", "-json", "github.com/jaegertracing/jaeger@"+jaegerVersion)
	dl.Env = env
	out, err := dl.Output()
	require.NoError(t, err, "download Jaeger %s", jaegerVersion)
	var mod struct{ Dir string }
	require.NoError(t, json.Unmarshal(out, &mod))
	tmp := bin + ".build"
	build := exec.Command("go", "build", "-o", tmp, "./cmd/jaeger")
	build.Dir, build.Env = mod.Dir, env
	out, err = build.CombinedOutput()
	require.NoError(t, err, "build Jaeger %s:\n%s", jaegerVersion, out)
	require.NoError(t, os.Rename(tmp, bin))
	return bin
}

// jaeger is a running Jaeger: OTLP/HTTP in at otlp, its query API at query.
type jaeger struct {
	t           *testing.T
	otlp, query string
}

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := buildJaeger(t)
	otlpPort, queryPort, grpcPort := freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
    traces: {level: none}
extensions:
  jaeger_query:
    storage: {traces: mem}
    http: {endpoint: "127.0.0.1:%d"}
    grpc: {endpoint: "127.0.0.1:%d"}
  jaeger_storage:
    backends:
      mem: {memory: {max_traces: 10000}}
receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:%d"}
processors:
  batch: {timeout: 100ms}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`, queryPort, grpcPort, otlpPort)
	file := filepath.Join(t.TempDir(), "jaeger.yaml")
	require.NoError(t, os.WriteFile(file, []byte(cfg), 0o644))
	cmd := exec.Command(bin, "--config", file)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("jaeger's logs:\n%s", logs.String())
		}
	})
	j := &jaeger{t: t, otlp: fmt.Sprintf("http://127.0.0.1:%d", otlpPort), query: fmt.Sprintf("http://127.0.0.1:%d", queryPort)}
	require.Eventually(t, func() bool {
		resp, err := http.Get(j.query + "/api/services")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 200*time.Millisecond, "jaeger did not start:\n%s", logs.String())
	return j
}

// jaegerSpan is a span as Jaeger's query API returns it.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		SpanID string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
	Duration  int64  `json:"duration"`
}

func (s jaegerSpan) tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

func (s jaegerSpan) parent() string {
	if len(s.References) == 0 {
		return ""
	}
	return s.References[0].SpanID
}

// storedTrace is one trace as Jaeger stored it, and its raw JSON.
type storedTrace struct {
	spans map[string]jaegerSpan
	raw   string
}

func (j *jaeger) trace(traceID string) storedTrace {
	j.t.Helper()
	resp, err := http.Get(j.query + "/api/traces/" + traceID)
	require.NoError(j.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(j.t, err)
	var body struct {
		Data []struct {
			Spans []jaegerSpan `json:"spans"`
		} `json:"data"`
	}
	require.NoError(j.t, json.Unmarshal(raw, &body))
	st := storedTrace{spans: map[string]jaegerSpan{}, raw: string(raw)}
	for _, tr := range body.Data {
		for _, s := range tr.Spans {
			st.spans[s.SpanID] = s
		}
	}
	return st
}

// call finds the execute_tool span of a call.
func (st storedTrace) call(callID string) (jaegerSpan, bool) {
	for _, s := range st.spans {
		if strings.HasPrefix(s.OperationName, "execute_tool ") && s.tag("gen_ai.tool.call.id") == callID {
			return s, true
		}
	}
	return jaegerSpan{}, false
}

// children are the names of a span's children.
func (st storedTrace) children(id string) []string {
	var out []string
	for _, s := range st.spans {
		if s.parent() == id {
			out = append(out, s.OperationName)
		}
	}
	return out
}

// descends reports whether span id has ancestor as an ancestor.
func (st storedTrace) descends(id, ancestor string) bool {
	for i := 0; i < 50 && id != ""; i++ {
		s, ok := st.spans[id]
		if !ok {
			return false
		}
		if s.parent() == ancestor {
			return true
		}
		id = s.parent()
	}
	return false
}

// tracesPolicy allows echo, asks before writing a file, denies the shell.
const tracesPolicy = `
default: allow
rules:
  - {name: writes-ask, tool: write_file, action: ask}
  - {name: no-shell, tool: shell, action: deny, reason: "no shell in this test"}
`

// An agent's span holds each of its calls' execute_tool span, with the
// policy, the wait for a person and the tool's run as its children: an
// auto-approved call and a denied one over the API, a call asked and
// decided in the API after a wait, a call of the TypeScript client
// inside an active @opentelemetry/api span, an MCP call with
// _meta.traceparent and a command hook's call with TRACEPARENT. No span
// holds the calls' arguments or outputs.
func TestTracesInTheAgentsTrace(t *testing.T) {
	j := startJaeger(t)
	d := startDevWithPolicy(t, tracesPolicy, "--otel-endpoint", j.otlp)

	// The agent's own tracer, exporting to the same Jaeger.
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(j.otlp+"/v1/traces"))
	require.NoError(t, err)
	res := resource.NewSchemaless(attribute.String("service.name", "test-agent"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	defer func() { _ = tp.Shutdown(ctx) }()
	actx, agentSpan := tp.Tracer("test-agent").Start(ctx, "invoke_agent test")
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(actx, carrier)
	traceparent := carrier["traceparent"]
	require.NotEmpty(t, traceparent)
	traceID, agentID := agentSpan.SpanContext().TraceID().String(), agentSpan.SpanContext().SpanID().String()

	const secret = "SECRET-trace-5c1e"
	base := "http://" + d.httpAddr
	submit := func(body map[string]any) map[string]any {
		t.Helper()
		data, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequest("POST", base+"/v1/calls?wait=20s", strings.NewReader(string(data)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer token-agent-1")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", traceparent)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return out
	}

	// Auto-approved and denied calls over the API, with its header.
	auto := submit(map[string]any{"session": "t1", "tool": "echo", "args": map[string]any{"text": secret + "-auto"}})
	require.Equal(t, "ok", auto["status"], auto)
	denied := submit(map[string]any{"session": "t1", "tool": "shell", "args": map[string]any{"command": "echo " + secret}})
	require.Equal(t, "denied", denied["status"], denied)

	// Asked, and decided by bob in the API after a short wait.
	asked := submit(map[string]any{"session": "t1", "tool": "write_file", "args": map[string]any{"path": "t.txt", "content": secret + "-asked"}})
	askedID, _ := asked["call_id"].(string)
	require.Equal(t, "pending", asked["status"], asked)
	time.Sleep(1500 * time.Millisecond) // the wait the trace shows
	bob := apiClient{t: t, base: base, token: "token-bob"}
	r := bob.do("POST", "/v1/calls/"+askedID+"/decision", map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	// The TypeScript client, inside the agent's span.
	app := frameworkApp(t)
	script := filepath.Join(app, "traced.mjs")
	require.NoError(t, os.WriteFile(script, []byte(tracedScript), 0o644))
	node, err := exec.LookPath("node")
	require.NoError(t, err)
	cmd := exec.Command(node, script)
	cmd.Dir = app
	cmd.Env = append(os.Environ(), "TOOLGATE_URL="+base, "TOOLGATE_TOKEN=token-agent-1", "AGENT_TRACEPARENT="+traceparent, "SECRET="+secret)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var tsCall struct {
		CallID string `json:"call_id"`
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal(out, &tsCall), "%s", out)
	require.Equal(t, "ok", tsCall.Status)

	// An MCP call with _meta.traceparent (its HTTP request has none).
	cs, err := d.mcpHTTP("token-agent-1", "?session=t-mcp")
	require.NoError(t, err)
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	mres, err := cs.CallTool(mctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": secret + "-mcp"},
		Meta: mcp.Meta{"traceparent": traceparent}})
	require.NoError(t, err)
	mcpID, _ := mres.Meta["toolgate/callId"].(string)
	require.NotEmpty(t, mcpID)

	// A command hook's call (Claude Code's PreToolUse) with TRACEPARENT.
	event := fmt.Sprintf(`{"hook_event_name":"PreToolUse","session_id":"t-hook","tool_name":"Read","tool_use_id":"tu-1","tool_input":{"file_path":"%s.txt"},"cwd":%q}`, secret, d.workspace)
	hook := exec.Command(binary, "hook", "claude-code", "--api", base, "--no-report", "--state-dir", t.TempDir())
	hook.Env = append(os.Environ(), "TOOLGATE_TOKEN=token-agent-1", "TRACEPARENT="+traceparent)
	hook.Stdin = strings.NewReader(event)
	hookOut, err := hook.CombinedOutput()
	require.NoError(t, err, "%s", hookOut)

	agentSpan.End()

	calls := map[string]string{"auto": auto["call_id"].(string), "denied": denied["call_id"].(string), "asked": askedID, "typescript": tsCall.CallID, "mcp": mcpID}
	var st storedTrace
	require.Eventually(t, func() bool {
		st = j.trace(traceID)
		if _, ok := st.spans[agentID]; !ok {
			return false
		}
		for _, id := range calls {
			if _, ok := st.call(id); !ok {
				return false
			}
		}
		n := 0
		for _, s := range st.spans {
			if s.tag("toolgate.session") == "t-hook" {
				n++
			}
		}
		return n > 0
	}, time.Minute, 500*time.Millisecond, "the calls' spans never reached Jaeger")

	for what, id := range calls {
		s, _ := st.call(id)
		require.True(t, st.descends(s.SpanID, agentID), "%s: execute_tool sits in the agent's span", what)
		kids := st.children(s.SpanID)
		require.Contains(t, kids, "toolgate.policy", what)
		switch what {
		case "denied":
			require.Equal(t, "deny", s.tag("toolgate.verdict"))
			require.Equal(t, "denied", s.tag("toolgate.status"))
			require.NotContains(t, kids, "toolgate.tool.run shell")
		case "asked":
			require.Equal(t, "ask", s.tag("toolgate.verdict"))
			require.Equal(t, "writes-ask", s.tag("toolgate.rule"))
			require.Contains(t, kids, "toolgate.approval.wait")
			require.Contains(t, kids, "toolgate.tool.run write_file")
			for _, c := range st.spans {
				if c.parent() == s.SpanID && c.OperationName == "toolgate.approval.wait" {
					require.Equal(t, "bob", c.tag("toolgate.approval.decided_by"))
					require.Equal(t, "approved", c.tag("toolgate.approval.outcome"))
					require.GreaterOrEqual(t, c.Duration, int64(time.Second/time.Microsecond), "the wait lasts the second and a half bob took")
				}
			}
		default:
			require.Equal(t, "allow", s.tag("toolgate.verdict"), what)
			require.Contains(t, kids, "toolgate.tool.run echo", what)
		}
	}
	hooked := false
	for _, sp := range st.spans {
		if strings.HasPrefix(sp.OperationName, "execute_tool ") && sp.tag("toolgate.session") == "t-hook" {
			hooked = true
			require.True(t, st.descends(sp.SpanID, agentID), "the hook's call sits in the agent's span")
			require.Equal(t, "agent", sp.tag("toolgate.execution"))
		}
	}
	require.True(t, hooked, "the hook's call is in the agent's trace")
	require.NotContains(t, st.raw, secret, "no argument or output in any span")
}

// tracedScript runs the TypeScript client inside an active span of
// @opentelemetry/api, whose context the agent's traceparent names (a
// context manager on AsyncLocalStorage, as @opentelemetry/context-async-hooks
// has).
const tracedScript = `
import { AsyncLocalStorage } from 'node:async_hooks';
import { context, trace, ROOT_CONTEXT, TraceFlags } from '@opentelemetry/api';
import { Toolgate } from '@toolgate/client';

const als = new AsyncLocalStorage();
context.setGlobalContextManager({
  active: () => als.getStore() ?? ROOT_CONTEXT,
  with: (ctx, fn, thisArg, ...args) => als.run(ctx, () => fn.call(thisArg, ...args)),
  bind: (ctx, target) => target,
  enable() { return this; },
  disable() { return this; },
});
const [, traceId, spanId] = process.env.AGENT_TRACEPARENT.split('-');
const span = trace.wrapSpanContext({ traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
const tg = new Toolgate({ url: process.env.TOOLGATE_URL, token: process.env.TOOLGATE_TOKEN });
const result = await context.with(trace.setSpan(ROOT_CONTEXT, span), () =>
  tg.submit({ session: 't-ts', tool: 'echo', args: { text: process.env.SECRET + '-ts' } }, { waitSeconds: 20 }));
console.log(JSON.stringify({ call_id: result.call_id, status: result.status }));
`
