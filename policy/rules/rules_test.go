package rules

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// parse parses an inline policy or fails the test.
func parse(t testing.TB, src string, opts ...Options) *Policy {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	p, err := Parse("test.yaml", []byte(src), o)
	require.NoError(t, err)
	return p
}

// call builds a call with JSON arguments.
func call(tool, args string) policy.Call {
	return policy.Call{ID: "c1", Session: "s1", Tool: tool, Args: json.RawMessage(args), Requester: "agent-1"}
}

const tiered = `
default: ask
rules:
  - name: allow-shell
    tool: shell
    action: allow
  - name: ask-big-payments
    tool: pay
    when: args.amount > 500
    action: ask
    message: 'Pay {{.args.amount}} to {{.args.to}}?'
  - name: allow-payments
    tool: pay
    action: allow
  - name: first-deny
    tool: shell
    when: args.command.startsWith('rm ')
    action: deny
    reason: no rm
  - name: second-deny
    tool: shell
    when: args.command.contains('rm')
    action: deny
    reason: no rm at all
  - name: fs-reads
    tool: fs.*
    action: allow
  - name: github
    tool: mcp__github__*
    when: requester == 'trusted'
    action: allow
  - name: deny-wrong-session
    tools: [a, b]
    when: session == 'quarantine'
    action: deny
    reason: quarantined
`

func TestEvaluateTiers(t *testing.T) {
	p := parse(t, tiered)
	tests := []struct {
		name       string
		call       policy.Call
		wantAction Action
		wantRule   string
	}{
		{"a deny later in the file beats an earlier allow", call("shell", `{"command":"rm -r x"}`), ActionDeny, "first-deny"},
		{"first match within the deny tier", call("shell", `{"command":"rm x"}`), ActionDeny, "first-deny"},
		{"second deny when the first does not match", call("shell", `{"command":"echo rm"}`), ActionDeny, "second-deny"},
		{"allow when no deny matches", call("shell", `{"command":"ls"}`), ActionAllow, "allow-shell"},
		{"an ask beats an earlier allow... of the same tool", call("pay", `{"amount":501,"to":"bob"}`), ActionAsk, "ask-big-payments"},
		{"allow when the ask condition is false", call("pay", `{"amount":20,"to":"bob"}`), ActionAllow, "allow-payments"},
		{"floating amounts compare too", call("pay", `{"amount":500.5}`), ActionAsk, "ask-big-payments"},
		{"glob fs.*", call("fs.read", `{}`), ActionAllow, "fs-reads"},
		{"glob does not cross into other names", call("fsx.read", `{}`), ActionAsk, RuleDefault},
		{"mcp glob with requester", policy.Call{Tool: "mcp__github__create_issue", Requester: "trusted"}, ActionAllow, "github"},
		{"mcp glob, wrong requester", policy.Call{Tool: "mcp__github__create_issue", Requester: "other"}, ActionAsk, RuleDefault},
		{"tools list and session", policy.Call{Tool: "b", Session: "quarantine"}, ActionDeny, "deny-wrong-session"},
		{"no rule matched: default ask", call("unknown", `{}`), ActionAsk, RuleDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Evaluate(tt.call)
			assert.Equal(t, tt.wantAction, v.Action, "verdict %+v", v)
			assert.Equal(t, tt.wantRule, v.Rule)
			if v.Action == ActionAsk {
				require.NotNil(t, v.Request)
				assert.Equal(t, tt.wantRule, v.Request.Rule)
			} else {
				assert.Nil(t, v.Request)
			}
		})
	}
}

func TestDefaultActions(t *testing.T) {
	v := parse(t, "rules: []\n").Evaluate(call("x", `{}`))
	assert.Equal(t, ActionAsk, v.Action)
	assert.Contains(t, v.Request.Message, `No rule matched tool "x"`)

	v = parse(t, "default: allow\n").Evaluate(call("x", `{}`))
	assert.Equal(t, Verdict{Action: ActionAllow, Rule: RuleDefault, Reason: "no rule matched; the default allows"}, v)

	v = parse(t, "default: deny\n").Evaluate(call("x", `{}`))
	assert.Equal(t, ActionDeny, v.Action)
	assert.Equal(t, "no rule allows this call", v.Reason)

	p := parse(t, `
default:
  action: ask
  message: 'Unknown tool {{.tool}}'
  groups: [admins]
  timeout: 10m
  remind_after: 5m
`)
	v = p.Evaluate(call("x", `{}`))
	assert.Equal(t, "Unknown tool x", v.Request.Message)
	assert.Equal(t, []string{"admins"}, v.Request.Groups)
	assert.Equal(t, 10*time.Minute, v.Request.Timeout)
	s, ok := p.Schedule(RuleDefault)
	assert.True(t, ok)
	assert.Equal(t, 5*time.Minute, s.RemindAfter)
}

func TestEvaluateApproval(t *testing.T) {
	p := parse(t, tiered)
	ctx := context.Background()

	req, err := p.EvaluateApproval(ctx, call("shell", `{"command":"ls"}`))
	assert.NoError(t, err)
	assert.Nil(t, req)

	req, err = p.EvaluateApproval(ctx, call("shell", `{"command":"rm x"}`))
	assert.Nil(t, req)
	d, ok := policy.AsDeny(err)
	require.True(t, ok)
	assert.Equal(t, &policy.DenyError{Reason: "no rm", Rule: "first-deny"}, d)

	req, err = p.EvaluateApproval(ctx, call("pay", `{"amount":1000,"to":"eve"}`))
	assert.NoError(t, err)
	assert.Equal(t, &policy.ApprovalRequest{Message: "Pay 1000 to eve?", Rule: "ask-big-payments"}, req)
}

func TestFourEyesRules(t *testing.T) {
	p := parse(t, `
rules:
  - name: payments
    tool: send_money
    action: ask
    groups: [finance, risk]
    approvals: 2
    distinct_groups: true
`)
	v := p.Evaluate(call("send_money", `{}`))
	require.NotNil(t, v.Request)
	assert.Equal(t, 2, v.Request.Approvals)
	assert.True(t, v.Request.DistinctGroups)
}

func TestUserRules(t *testing.T) {
	p := parse(t, `
default: ask
rules:
  - name: edits
    tool: write_file
    action: ask
    groups: [ops]
    user: true
`)
	v := p.Evaluate(call("write_file", `{}`))
	require.NotNil(t, v.Request)
	assert.True(t, v.Request.User, "the person running the agent may decide, beside ops")
	assert.Equal(t, []string{"ops"}, v.Request.Groups)
	v = p.Evaluate(call("shell", `{}`))
	require.NotNil(t, v.Request)
	assert.False(t, v.Request.User, "remote approvers only, by default")
}

func TestAskFields(t *testing.T) {
	p := parse(t, `
rules:
  - name: write
    tool: write_file
    action: ask
    message: 'Write {{.args.path}} for {{.requester}} in {{.session}}? {{json .args.opts}}'
    groups: [ops, sre]
    timeout: 2h
    on_timeout: allow
    remind_after: 30m
    escalate_after: 1h
    escalate_to: [leads]
  - name: plain
    tool: other
    action: ask
`)
	v := p.Evaluate(call("write_file", `{"path":"a/b.txt","opts":{"mode":420}}`))
	assert.Equal(t, &policy.ApprovalRequest{
		Message:   `Write a/b.txt for agent-1 in s1? {"mode":420}`,
		Groups:    []string{"ops", "sre"},
		Timeout:   2 * time.Hour,
		OnTimeout: policy.TimeoutApprove,
		Rule:      "write",
		// The schedule reaches the workflow with the request.
		RemindAfter:   30 * time.Minute,
		EscalateAfter: time.Hour,
		EscalateTo:    []string{"leads"},
	}, v.Request)
	s, ok := p.Schedule("write")
	assert.True(t, ok)
	assert.Equal(t, Schedule{RemindAfter: 30 * time.Minute, EscalateAfter: time.Hour, EscalateTo: []string{"leads"}}, s)
	_, ok = p.Schedule("plain")
	assert.False(t, ok, "no schedule fields")
	_, ok = p.Schedule("nope")
	assert.False(t, ok)

	// Without a message, the default one names the call.
	v = p.Evaluate(call("other", `{"x": 1}`))
	assert.Equal(t, `Allow other with arguments {"x":1}? (rule "plain")`, v.Request.Message)
}

func TestMessageTemplateFailureAtRunTime(t *testing.T) {
	p := parse(t, `
rules:
  - name: w
    tool: w
    action: ask
    message: '{{len .args.content}} bytes'
`)
	v := p.Evaluate(call("w", `{"content":"abc"}`))
	assert.Equal(t, "3 bytes", v.Request.Message)
	v = p.Evaluate(call("w", `{}`))
	assert.Equal(t, ActionAsk, v.Action)
	assert.Contains(t, v.Request.Message, `the message template of rule "w" failed`)
	assert.Contains(t, v.Request.Message, `Allow w with arguments {}`)
}

func TestMessageIsBounded(t *testing.T) {
	p := parse(t, `
rules:
  - name: w
    tool: w
    action: ask
    message: 'Write {{.args.content}}?'
`)
	big := make([]byte, 100_000)
	for i := range big {
		big[i] = 'x'
	}
	args, _ := json.Marshal(map[string]string{"content": string(big)})
	v := p.Evaluate(call("w", string(args)))
	assert.LessOrEqual(t, len(v.Request.Message), maxMessageBytes)
	assert.Contains(t, v.Request.Message, "…")
}

func TestStickyKeys(t *testing.T) {
	p := parse(t, `
rules:
  - name: get
    tool: http_get
    action: ask
    sticky_by: [host]
  - name: multi
    tool: multi
    action: ask
    sticky_by: [host, port]
  - name: whole-tool
    tool: whole
    action: ask
`)
	tests := []struct {
		call policy.Call
		want string
	}{
		{call("http_get", `{"host":"api.github.com","path":"/x"}`), "http_get|host=api.github.com"},
		{call("http_get", `{"host":"a|port=1"}`), "http_get|host=a%7Cport=1"},
		{call("http_get", `{}`), "http_get|host"},
		{call("multi", `{"host":"h","port":443}`), "multi|host=h|port=443"},
		{call("multi", `{"host":"h","port":{"a":true}}`), `multi|host=h|port={"a":true}`},
		{call("whole", `{"host":"h"}`), ""},
	}
	for _, tt := range tests {
		v := p.Evaluate(tt.call)
		require.Equal(t, ActionAsk, v.Action)
		assert.Equal(t, tt.want, v.Request.StickyKey, "%s", tt.call.Args)
	}
}

func TestRuntimeErrorAsks(t *testing.T) {
	p := parse(t, `
rules:
  - name: deny-big
    tool: pay
    when: args.amount > 1000
    action: deny
    reason: too much
  - name: deny-blocked
    tool: pay
    when: args.to == 'mallory'
    action: deny
    reason: blocked payee
  - name: allow-small
    tool: pay
    when: args.amount < 10
    action: allow
  - name: allow-path
    tool: read
    when: args.path.startsWith('docs/')
    action: allow
  - name: ask-cmd
    tool: sh
    when: args.command.matches('^git ')
    action: ask
    groups: [dev]
    on_timeout: allow
`)
	tests := []struct {
		name     string
		call     policy.Call
		action   Action
		rule     string
		contains string
	}{
		{"missing field in a deny rule", call("pay", `{"to":"bob"}`), ActionAsk, "deny-big", "no such key: amount"},
		{"a later clean deny still denies", call("pay", `{"to":"mallory"}`), ActionDeny, "deny-blocked", ""},
		{"wrong type in a deny rule", call("pay", `{"amount":"lots","to":"bob"}`), ActionAsk, "deny-big", "no such overload"},
		{"missing field in an allow rule never allows", call("read", `{}`), ActionAsk, "allow-path", "no such key: path"},
		{"wrong type in an allow rule", call("read", `{"path":42}`), ActionAsk, "allow-path", "no such overload"},
		{"args that are not an object", call("read", `[1,2]`), ActionAsk, "allow-path", "not an object"},
		{"args that are not JSON", call("read", `{"path":`), ActionAsk, "allow-path", "not valid JSON"},
		{"ask rule", call("sh", `{"cmd":"git"}`), ActionAsk, "ask-cmd", "no such key: command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Evaluate(tt.call)
			assert.Equal(t, tt.action, v.Action, "%+v", v)
			assert.Equal(t, tt.rule, v.Rule)
			if tt.action != ActionAsk {
				return
			}
			require.NotNil(t, v.Request)
			assert.Contains(t, v.Request.Message, `Rule "`+tt.rule+`" could not judge this call`)
			assert.Contains(t, v.Request.Message, tt.contains)
			assert.Contains(t, v.Reason, tt.contains)
			assert.Equal(t, tt.rule, v.Request.Rule)
			assert.Equal(t, policy.TimeoutDeny, v.Request.OnTimeout, "silence never approves an unjudged call")
			assert.Equal(t, tt.call.Tool+"|unjudged="+tt.rule+"|call=c1", v.Request.StickyKey,
				"a sticky decision about the tool must not cover an unjudged call")
		})
	}
	v := p.Evaluate(call("sh", `{}`))
	assert.Equal(t, []string{"dev"}, v.Request.Groups, "an ask rule keeps its approvers")
}

func TestConditionVariables(t *testing.T) {
	ws := t.TempDir()
	p := parse(t, `
rules:
  - name: in-ws
    tool: read
    when: args.path.startsWith(workspace + '/')
    action: allow
  - name: integers
    tool: even
    when: args.n % 2 == 0 && args.items.size() == 2 && args.items.exists(i, i == 'b')
    action: allow
  - name: strings-ext
    tool: lower
    when: args.s.lowerAscii() == 'abc' && args.s.split('B').size() == 2
    action: allow
  - name: has
    tool: opt
    when: has(args.flag) && args.flag
    action: allow
`, Options{Workspace: ws})
	assert.Equal(t, ws, p.Workspace())
	assert.Equal(t, ActionAllow, p.Evaluate(call("read", `{"path":"`+ws+`/a"}`)).Action)
	assert.Equal(t, ActionAsk, p.Evaluate(call("read", `{"path":"/etc/a"}`)).Action)
	assert.Equal(t, ActionAllow, p.Evaluate(call("even", `{"n":4,"items":["a","b"]}`)).Action)
	assert.Equal(t, ActionAllow, p.Evaluate(call("lower", `{"s":"aBc"}`)).Action)
	assert.Equal(t, ActionAllow, p.Evaluate(call("opt", `{"flag":true}`)).Action)
	v := p.Evaluate(call("opt", `{}`))
	assert.Equal(t, RuleDefault, v.Rule, "has() guards a missing field")
	v = p.Evaluate(call("opt", `{"flag":"yes"}`))
	assert.Equal(t, "has", v.Rule)
	assert.Equal(t, ActionAsk, v.Action, "a non-bool result is an error")
}

func TestFileWorkspaceWins(t *testing.T) {
	p := parse(t, "workspace: /srv/ws\n", Options{Workspace: "/other"})
	assert.Equal(t, "/srv/ws", p.Workspace())
	p = parse(t, "workspace: ws\n")
	assert.Equal(t, mustAbs(t, "ws"), p.Workspace(), "relative to the file's directory")
}

func TestQuotas(t *testing.T) {
	p := parse(t, `
quotas:
  - name: shell-per-hour
    tools: [shell]
    max: 20
    per: 1h
  - name: mcp
    tools: [mcp__*, fetch]
    max: 100
    per: 24h
`)
	assert.Equal(t, []Quota{
		{Name: "shell-per-hour", Tools: []string{"shell"}, Max: 20, Per: time.Hour},
		{Name: "mcp", Tools: []string{"mcp__*", "fetch"}, Max: 100, Per: 24 * time.Hour},
	}, p.Quotas())
	q, ok := p.QuotaFor("mcp__github__x")
	assert.True(t, ok)
	assert.Equal(t, "mcp", q.Name)
	_, ok = p.QuotaFor("echo")
	assert.False(t, ok)
}

func TestVersion(t *testing.T) {
	a := parse(t, "default: ask\n")
	b := parse(t, "default: ask\n")
	c := parse(t, "default: ask # changed\n")
	assert.Regexp(t, `^sha256:[0-9a-f]{12}$`, a.Version())
	assert.Equal(t, a.Version(), b.Version())
	assert.NotEqual(t, a.Version(), c.Version())
	assert.Equal(t, a.Version(), policy.VersionOf(a))
}

func mustAbs(t testing.TB, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	require.NoError(t, err)
	return abs
}

// TestMessageTemplateMissingArgument: a message that uses an argument the
// call lacks (or sends as null) says so in the template's terms, never
// with Go's "<no value>" or "%!q(<nil>)".
func TestMessageTemplateMissingArgument(t *testing.T) {
	p := parse(t, `
rules:
  - name: write
    tool: write_file
    action: ask
    message: 'Write to {{printf "%q" .args.path}}?'
  - name: plain
    tool: other
    action: ask
    message: 'Run {{.args.opts.name}}?'
`)
	for _, tc := range []struct{ tool, args, want string }{
		{"write_file", `{"content":"x"}`, `Allow write_file with arguments {"content":"x"}? (the message template of rule "write" failed on this call: it uses .args.path, which the call does not set)`},
		{"write_file", `{"content":"x","path":null}`, `Allow write_file with arguments {"content":"x","path":null}? (the message template of rule "write" failed on this call: it uses .args.path, which the call does not set)`},
		{"other", `{"opts":{}}`, `Allow other with arguments {"opts":{}}? (the message template of rule "plain" failed on this call: it uses .args.opts.name, which the call does not set)`},
		{"other", `{"opts":{"name":null}}`, `Allow other with arguments {"opts":{"name":null}}? (the message template of rule "plain" failed on this call: it uses .args.opts.name, which the call does not set)`},
	} {
		v := p.Evaluate(call(tc.tool, tc.args))
		assert.Equal(t, tc.want, v.Request.Message, tc.args)
	}
	assert.Equal(t, `Write to "a.txt"?`, p.Evaluate(call("write_file", `{"path":"a.txt"}`)).Request.Message)

	// An optional argument is read with index, which does not fail.
	p = parse(t, `
rules:
  - name: write
    tool: write_file
    action: ask
    message: '{{if index .args "append"}}Append to{{else}}Write{{end}} {{.args.path}}?'
`)
	assert.Equal(t, `Write a.txt?`, p.Evaluate(call("write_file", `{"path":"a.txt"}`)).Request.Message)
	assert.Equal(t, `Write a.txt?`, p.Evaluate(call("write_file", `{"path":"a.txt","append":null}`)).Request.Message)
	assert.Equal(t, `Append to a.txt?`, p.Evaluate(call("write_file", `{"path":"a.txt","append":true}`)).Request.Message)
}

// TestVerdictJSON: a verdict is printed (`toolgate policy eval`) with
// durations and on_timeout as the file writes them.
func TestVerdictJSON(t *testing.T) {
	p := parse(t, `
rules:
  - name: write
    tool: write_file
    action: ask
    message: 'Write?'
    timeout: 2h
    on_timeout: allow
    remind_after: 30m
    escalate_after: 90m
    escalate_to: [leads]
  - name: plain
    tool: other
    action: ask
    message: 'Other?'
`)
	raw, err := json.Marshal(p.Evaluate(call("write_file", `{}`)))
	require.NoError(t, err)
	assert.JSONEq(t, `{"action":"ask","rule":"write","reason":"rule \"write\" asks","request":{
		"message":"Write?","timeout":"2h","on_timeout":"allow","rule":"write",
		"remind_after":"30m","escalate_after":"1h30m","escalate_to":["leads"]}}`, string(raw))

	// The defaults are shown as they apply.
	raw, err = json.Marshal(p.Evaluate(call("other", `{}`)))
	require.NoError(t, err)
	assert.JSONEq(t, `{"action":"ask","rule":"plain","reason":"rule \"plain\" asks","request":{
		"message":"Other?","timeout":"24h","on_timeout":"deny","rule":"plain"}}`, string(raw))

	raw, err = json.Marshal(p.Evaluate(call("x", `[1]`)))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "json:")
}
