package rules

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

// FuzzParse: Parse never panics, whatever the bytes.
func FuzzParse(f *testing.F) {
	// Small seeds, one feature each: the fuzzer minimises every new input,
	// and a large seed (say examples/policy.yaml) makes that take minutes.
	f.Add([]byte(""))
	f.Add([]byte("default: ask\n"))
	f.Add([]byte("rules:\n  - name: r\n    tool: x\n    when: args.a.matches('(')\n    action: allow\n"))
	f.Add([]byte("rules:\n  - name: r\n    tool: '['\n    when: |\n      args.a +\n    action: deny\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("rules:\n  - name: r\n    tool: [x, y*]\n    when: args.p.startsWith(workspace) && args.n > 2\n    action: deny\n    reason: no\n    examples:\n      match: [{tool: x, args: {p: /ws/a, n: 3}}]\n      no_match: [{tool: y, args: {p: /b, n: 1}, session: s}]\n"))
	f.Add([]byte("default: {action: ask, message: 'Run {{.tool}} {{json .args}}?', groups: [ops], timeout: 2h, on_timeout: allow, remind_after: 1h, escalate_after: 90m, escalate_to: [lead], sticky_by: [host]}\n"))
	f.Add([]byte("after:\n  - {name: a, tools: ['*'], max_output_bytes: 10, reject_pattern: 'x+', reason: big}\n"))
	f.Add([]byte("redact:\n  builtin: false\n  disable: [credential]\n"))
	f.Add([]byte("rules:\n  - name: r\n    tool: x\n    action: ask\n    message: '{{template \"x\"}}'\n    examples:\n      match: [{tool: x, args: {a: [1, .inf, !!binary aGk=]}}]\n"))
	f.Add([]byte("redact:\n  patterns:\n    - {name: p, regex: '(?P<secret>x)|'}\nguards:\n  protected_paths: ['**/[']\nquotas: [{name: q, tools: x, max: 99999999999999999999, per: 1ns}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data, Options{Workspace: "/ws"})
		if err != nil {
			return
		}
		// A policy that loaded must also evaluate without panicking.
		p.Evaluate(policy.Call{Tool: "x", Args: json.RawMessage(`{"a":1,"path":"../x"}`)})
		p.TransformOutput(context.Background(), policy.Call{}, json.RawMessage(`{"a":"token=x"}`))
	})
}

// fuzzPolicy allows a payment only when a CEL condition on the arguments
// holds; on anything else that condition errors or is false.
const fuzzPolicy = `
workspace: /ws
guards:
  protected_paths: ["**/.env"]
rules:
  - name: deny-blocked
    tool: pay
    when: args.to in ['mallory', 'eve'] || args.note.matches('(?i)urgent')
    action: deny
    reason: blocked
  - name: ask-named
    tool: pay
    when: has(args.ref) && args.ref.startsWith(workspace)
    action: ask
    message: 'Pay {{.args.amount}} to {{.args.to}} ({{json .args}})?'
    sticky_by: [to]
  - name: allow-small
    tool: pay
    when: args.amount < 100 && args.items.all(i, i.price >= 0)
    action: allow
`

// FuzzEvaluate: arbitrary arguments never make Evaluate panic, and
// allow-small never allows a call on which its condition errors.
func FuzzEvaluate(f *testing.F) {
	p, err := Parse("fuzz.yaml", []byte(fuzzPolicy), Options{})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"to":"bob","note":"","amount":5,"items":[]}`,
		`{"to":"bob","note":"","amount":5,"items":[{"price":1}]}`,
		`{"to":"bob","note":"","amount":5,"items":[{"price":-1}]}`,
		`{"to":"bob","note":"","amount":"5","items":[]}`,
		`{"to":"bob","note":"","amount":5}`,
		`{"to":"bob","note":"","amount":5,"items":[{}]}`,
		`{"to":"bob","note":"","amount":1e400,"items":[]}`,
		`{"to":"bob","note":"","amount":-9223372036854775809,"items":[]}`,
		`{"to":"mallory"}`,
		`{"to":1,"note":"URGENT"}`,
		`{"to":"bob","note":"x","ref":"/ws/a","amount":5}`,
		`{"path":"../../x"}`,
		`[]`, `null`, `"x"`, `{`, ``, `{"a":1}{}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, args string) {
		v := p.Evaluate(policy.Call{ID: "c", Tool: "pay", Args: json.RawMessage(args)})
		switch v.Action {
		case ActionAllow:
			if v.Rule != "allow-small" || !smallPayment(args) {
				t.Fatalf("allowed %s by %q", args, v.Rule)
			}
		case ActionAsk:
			if v.Request == nil || v.Request.Message == "" {
				t.Fatalf("ask without a request: %+v", v)
			}
		case ActionDeny:
			if v.Reason == "" {
				t.Fatalf("deny without a reason: %+v", v)
			}
		default:
			t.Fatalf("unknown action %+v", v)
		}
		if _, err := p.EvaluateApproval(context.Background(), policy.Call{Tool: "pay", Args: json.RawMessage(args)}); err != nil {
			if _, ok := policy.AsDeny(err); !ok {
				t.Fatalf("EvaluateApproval returned %v", err)
			}
		}
	})
}

// smallPayment checks allow-small's condition independently of CEL: the
// arguments are an object with a numeric amount below 100 and a list of
// items, each an object with a numeric price >= 0.
func smallPayment(args string) bool {
	var a struct {
		Amount *float64 `json:"amount"`
		Items  *[]struct {
			Price *float64 `json:"price"`
		} `json:"items"`
	}
	if json.Unmarshal([]byte(args), &a) != nil || a.Amount == nil || *a.Amount >= 100 || a.Items == nil {
		return false
	}
	for _, it := range *a.Items {
		if it.Price == nil || *it.Price < 0 {
			return false
		}
	}
	return true
}

// FuzzRedact: redaction keeps JSON valid and never panics, for any string
// inside a JSON output and for any raw output.
func FuzzRedact(f *testing.F) {
	p, err := Parse("fuzz.yaml", []byte("redact:\n  patterns:\n    - {name: pin, regex: 'PIN (?P<secret>\\d+)'}\n"), Options{})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		"password=hunter2", "AKIAIOSFODNN7EXAMPLE", pemKey, "Bearer abc.def-123", "PIN 1234",
		`{"token":"x","a":[1,"secret: y"]}`, "\xff\xfe", "token=[REDACTED:x]",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, _ := json.Marshal(map[string]string{"out": s, "password": s})
		out, n, err := p.TransformOutput(context.Background(), policy.Call{}, in)
		if err != nil || n < 0 || !json.Valid(out) {
			t.Fatalf("redact(%q) = %s, %d, %v", s, out, n, err)
		}
		if n == 0 && string(out) != string(in) {
			t.Fatalf("no redaction but the output changed: %s", out)
		}
		out, _, _ = p.TransformOutput(context.Background(), policy.Call{}, json.RawMessage(s))
		if json.Valid([]byte(s)) && !json.Valid(out) {
			t.Fatalf("redact(%s) broke the JSON: %s", s, out)
		}
	})
}
