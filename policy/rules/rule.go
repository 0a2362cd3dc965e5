package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/google/cel-go/interpreter"
	"github.com/toolgate/toolgate/policy"
)

// Limits on what a verdict quotes, so that a huge argument cannot bloat
// the approval request stored with the call.
const (
	maxMessageBytes  = 4096
	maxArgsTextBytes = 1024
)

// rule is one entry of `rules:`, or the file's default action.
type rule struct {
	name      string
	line      int
	action    Action
	tools     []string   // globs; only for rules of `rules:`
	cond      *condition // nil: the rule matches every call of its tools
	reason    string     // deny only
	message   *template.Template
	groups    []string
	timeout   time.Duration
	onTimeout policy.TimeoutAction
	stickyBy  []string
	schedule  *Schedule
	// approvals and distinctGroups: four eyes (ApprovalRequest.Approvals).
	approvals      int
	distinctGroups bool
	// user lets the person running the agent decide (ApprovalRequest.User).
	user bool
	// passkey needs a passkey's assertion for each approval
	// (ApprovalRequest.Passkey); passkeyLine is the line that says so.
	passkey     bool
	passkeyLine int
	// reportTimeout bounds the wait for the agent's report of an
	// agent-executed call this rule allows or asks about; 0 leaves it to
	// the tools section or the default.
	reportTimeout time.Duration
	// sandbox grants its calls' processes more than the sandbox's default
	// (allow and ask rules); nil: the default.
	sandbox *policy.SandboxGrant
	// shadow: `mode: shadow`, evaluated and recorded (Policy.ShadowFor),
	// never enforced.
	shadow bool
}

// matches reports whether the call is one of r's tools and satisfies its
// condition. An error means the condition could not be evaluated.
func (r *rule) matches(in *input) (bool, error) {
	if !matchAny(r.tools, in.call.Tool) {
		return false, nil
	}
	if r.cond == nil {
		return true, nil
	}
	if in.argsErr != nil {
		return false, in.argsErr
	}
	return r.cond.eval(in.activation)
}

// askVerdict builds the verdict of an ask rule (or an asking default).
func (r *rule) askVerdict(in *input, reason string) Verdict {
	msg, _ := r.render(in)
	v := Verdict{
		Action: ActionAsk,
		Rule:   r.name,
		Reason: reason,
		Request: &policy.ApprovalRequest{
			Message:   msg,
			Groups:    append([]string(nil), r.groups...),
			Timeout:   r.timeout,
			OnTimeout: r.onTimeout,
			StickyKey: r.stickyKey(in),
			Rule:      r.name,
			Approvals: r.approvals, DistinctGroups: r.distinctGroups,
			User: r.user, Passkey: r.passkey,
		},
	}
	if s := r.schedule; s != nil {
		v.Request.RemindAfter, v.Request.EscalateAfter = s.RemindAfter, s.EscalateAfter
		v.Request.EscalateTo = append([]string(nil), s.EscalateTo...)
	}
	return v
}

// render returns the approval message. When the rule's template fails on
// the call, the message says so and still names the call; the error is
// returned for load-time checks of examples.
func (r *rule) render(in *input) (string, error) {
	if r.message == nil {
		if r.name == RuleDefault {
			return truncate(fmt.Sprintf("No rule matched tool %q; allow this call? Arguments: %s", in.call.Tool, in.argsText()), maxMessageBytes), nil
		}
		return truncate(fmt.Sprintf("Allow %s with arguments %s? (rule %q)", in.call.Tool, in.argsText(), r.name), maxMessageBytes), nil
	}
	var b bytes.Buffer
	if err := r.message.Execute(&limitedWriter{w: &b, n: maxMessageBytes + 1}, in.templateData()); err != nil && !errors.Is(err, errMessageTooLong) {
		problem := templateProblem(err)
		return truncate(fmt.Sprintf("Allow %s with arguments %s? (the message template of rule %q failed on this call: %s)", in.call.Tool, in.argsText(), r.name, problem), maxMessageBytes), errors.New(problem)
	}
	return truncate(b.String(), maxMessageBytes), nil
}

var (
	// templateErrRe splits text/template's execution errors, e.g.
	// `template: w:1:9: executing "w" at <.args.path>: map has no entry
	// for key "path"`, into the action and the cause.
	templateErrRe = regexp.MustCompile(`at <(.+?)>: (.*)$`)
	missingKeyRe  = regexp.MustCompile(`^map has no entry for key `)
)

// templateProblem says why a message template failed on a call, in the
// terms of the template's author: the action that failed, not Go's types.
func templateProblem(err error) string {
	m := templateErrRe.FindStringSubmatch(err.Error())
	switch {
	case m == nil:
		return "it cannot be written for these arguments"
	case missingKeyRe.MatchString(m[2]):
		return fmt.Sprintf("it uses %s, which the call does not set", m[1])
	}
	return fmt.Sprintf("it cannot evaluate {{%s}} on these arguments", m[1])
}

// stickyKey scopes sticky decisions: "" (the whole tool) without sticky_by,
// otherwise the tool and each sticky_by field, e.g.
// "http_get|host=api.github.com". A string is written as is, any other
// value as JSON, a missing field as its bare name; "%" and "|" in values
// are escaped so a value cannot forge another field.
func (r *rule) stickyKey(in *input) string {
	if len(r.stickyBy) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(in.call.Tool)
	obj, _ := in.args.(map[string]any)
	for _, f := range r.stickyBy {
		b.WriteString("|")
		b.WriteString(f)
		v, ok := obj[f]
		if !ok {
			continue
		}
		b.WriteString("=")
		s, isString := v.(string)
		if !isString {
			raw, err := json.Marshal(v)
			if err != nil {
				raw = []byte(fmt.Sprint(v))
			}
			s = string(raw)
		}
		b.WriteString(stickyEscaper.Replace(s))
	}
	return b.String()
}

var stickyEscaper = strings.NewReplacer("%", "%25", "|", "%7C")

// templateFuncs are available in message templates besides text/template's.
var templateFuncs = template.FuncMap{
	// json writes a value as compact JSON, e.g. {{json .args}}.
	"json": func(v any) (string, error) {
		raw, err := json.Marshal(v)
		return string(raw), err
	},
}

var errMessageTooLong = errors.New("message too long")

// limitedWriter stops a template once the message is longer than shown.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		l.w.Write(p[:l.n])
		l.n = 0
		return 0, errMessageTooLong
	}
	l.n -= len(p)
	return l.w.Write(p)
}

// truncate cuts s to at most max bytes on a rune boundary, marking the cut.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// input is a call prepared for evaluation: its arguments decoded once.
type input struct {
	call      policy.Call
	workspace string
	args      any // a map[string]any when argsErr is nil
	argsErr   error
	execution string
	// annotations are the tool's hints with MCP's defaults (annotationsOf).
	annotations map[string]any
	activation  interpreter.Activation
}

func newInput(call policy.Call, workspace string) *input {
	in := &input{call: call, workspace: workspace}
	in.args, in.argsErr = decodeArgs(call.Args)
	args := in.args
	if in.argsErr != nil {
		args = map[string]any{}
	}
	in.execution = executionName(call.Execution)
	in.annotations = annotationsOf(call.Annotations)
	in.activation, _ = interpreter.NewActivation(map[string]any{
		"tool":        call.Tool,
		"args":        args,
		"session":     call.Session,
		"requester":   call.Requester,
		"workspace":   workspace,
		"execution":   in.execution,
		"annotations": in.annotations,
	})
	return in
}

// Values of `execution` in conditions and templates.
const (
	executionToolgate = "toolgate"
	executionAgent    = "agent"
)

// executionName is what conditions see as `execution`: "toolgate" for a
// tool toolgate's worker runs, "agent" for one the agent runs itself.
func executionName(e policy.Execution) string {
	if e == policy.ExecutionToolgate {
		return executionToolgate
	}
	return string(e)
}

// annotationsOf is what conditions see as `annotations`: the tool's hints
// as JSON values, with MCP's defaults for the four hints it leaves out, so
// that `annotations.readOnlyHint == true` is false rather than an error
// for a tool without hints (every agent-executed tool): readOnlyHint
// false, destructiveHint true unless the tool is read-only (MCP gives it
// meaning only for tools that are not), idempotentHint false and
// openWorldHint true. Other keys, title included, are there only when the
// tool sets them; test them with has(annotations.title).
func annotationsOf(hints map[string]any) map[string]any {
	out := map[string]any{}
	if len(hints) > 0 {
		// A JSON round trip turns whatever Go values the registry holds
		// into the values CEL and templates know (as for args).
		if raw, err := json.Marshal(hints); err == nil {
			if v, err := decodeArgs(raw); err == nil {
				out = v.(map[string]any)
			}
		}
	}
	readOnly, _ := out["readOnlyHint"].(bool)
	defaults := map[string]any{
		"readOnlyHint":    false,
		"destructiveHint": !readOnly,
		"idempotentHint":  false,
		"openWorldHint":   true,
	}
	for k, v := range defaults {
		if _, set := out[k]; !set {
			out[k] = v
		}
	}
	return out
}

// templateData is what message templates see. Arguments that are null
// are left out, so that a template using one fails and says so, as for a
// missing one, instead of printing "<no value>".
func (in *input) templateData() map[string]any {
	args := any(map[string]any{})
	if in.argsErr == nil {
		args = withoutNulls(in.args)
	}
	return map[string]any{
		"tool":        in.call.Tool,
		"args":        args,
		"session":     in.call.Session,
		"requester":   in.call.Requester,
		"workspace":   in.workspace,
		"execution":   in.execution,
		"annotations": in.annotations,
	}
}

// withoutNulls returns a copy of the decoded JSON value v in which objects
// have no null members.
func withoutNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if e != nil {
				out[k] = withoutNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = withoutNulls(e)
		}
		return out
	}
	return v
}

// argsText shows the arguments to a person, compact and bounded.
func (in *input) argsText() string {
	raw := bytes.TrimSpace(in.call.Args)
	if len(raw) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil {
		raw = b.Bytes()
	}
	return truncate(string(raw), maxArgsTextBytes)
}

// decodeArgs decodes a call's JSON arguments for CEL and templates: an
// object becomes a map[string]any, whole numbers int64 (so that `%` and
// integer comparisons work), other numbers float64. Empty arguments and
// null are an empty object; anything but an object is an error.
func decodeArgs(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("arguments are not valid JSON: data after the value")
	}
	switch v.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return normalizeNumbers(v), nil
	}
	return nil, fmt.Errorf("arguments are a JSON %s, not an object", jsonKind(v))
}

func normalizeNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = normalizeNumbers(e)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64() // out of range: ±Inf, still a number
		return f
	}
	return v
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number, float64, int64:
		return "number"
	}
	return "value"
}
