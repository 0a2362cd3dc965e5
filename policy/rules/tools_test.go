package rules

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// agentCall builds an agent-executed call.
func agentCall(tool, args string) policy.Call {
	c := call(tool, args)
	c.Execution = policy.ExecutionAgent
	return c
}

// hinted builds a call of a registered tool with the given annotations.
func hinted(tool string, annotations map[string]any) policy.Call {
	c := call(tool, `{}`)
	c.Annotations = annotations
	return c
}

const agentTools = `
default: ask
tools:
  deploy:
    description: Deploy a service
    report_timeout: 30m
    schema:
      type: object
      required: [service]
      additionalProperties: false
      properties:
        service: {type: string, minLength: 1}
        replicas: {type: integer, minimum: 1}
        env: {enum: [staging, production]}
  notify:
    description: Send a message to the team
  lint:
    schema: '{"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"}}}}'
rules:
  - name: deploy-production
    tool: deploy
    when: args.env == 'production'
    action: ask
    report_timeout: 2h
  - name: deploy
    tool: deploy
    action: allow
  - name: lint
    tool: lint
    action: allow
    report_timeout: 5m
`

func TestCheckAgentArgs(t *testing.T) {
	p := parse(t, agentTools)
	tests := []struct {
		name string
		tool string
		args string
		want string // empty: the arguments pass
	}{
		{"fits the schema", "deploy", `{"service":"api","replicas":2,"env":"staging"}`, ""},
		{"missing required field", "deploy", `{"replicas":2}`, `invalid arguments for tool "deploy": at /: missing property 'service'`},
		{"wrong type names the field", "deploy", `{"service":"api","replicas":"two"}`, `at /replicas: got string, want integer`},
		{"below the minimum", "deploy", `{"service":"api","replicas":0}`, `at /replicas: minimum: got 0, want 1`},
		{"not one of the values", "deploy", `{"service":"api","env":"dev"}`, `at /env: value must be one of 'staging', 'production'`},
		{"unknown field", "deploy", `{"service":"api","force":true}`, `additional properties 'force' not allowed`},
		{"several problems are all named", "deploy", `{"replicas":"x"}`, `at /: missing property 'service'; at /replicas: got string, want integer`},
		{"empty arguments are an empty object", "deploy", ``, `missing property 'service'`},
		{"not an object", "deploy", `["api"]`, `at /: got array, want object`},
		{"not JSON", "deploy", `{"service":`, `invalid arguments for tool "deploy": arguments are not valid JSON`},
		{"a schema written as a JSON string", "lint", `{"paths":["a",1]}`, `at /paths/1: got number, want string`},
		{"a tool without a schema takes anything", "notify", `{"anything":[1,2]}`, ""},
		{"an undeclared tool takes anything", "mcp__github__get_issue", `{"n":1}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.CheckAgentArgs(tt.tool, json.RawMessage(tt.args))
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			var ae *ArgumentError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, tt.tool, ae.Tool)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestAgentTools(t *testing.T) {
	p := parse(t, agentTools)
	tools := p.AgentTools()
	require.Len(t, tools, 3)
	assert.Equal(t, []string{"deploy", "lint", "notify"}, []string{tools[0].Name, tools[1].Name, tools[2].Name})
	assert.Equal(t, "Deploy a service", tools[0].Description)
	assert.Equal(t, 30*time.Minute, tools[0].ReportTimeout)
	assert.JSONEq(t, `{"type":"object","required":["service"],"additionalProperties":false,
		"properties":{"service":{"type":"string","minLength":1},"replicas":{"type":"integer","minimum":1},"env":{"enum":["staging","production"]}}}`,
		string(tools[0].Schema))
	assert.JSONEq(t, `{"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"}}}}`, string(tools[1].Schema))
	assert.Nil(t, tools[2].Schema)
	assert.Empty(t, parse(t, "default: ask\n").AgentTools())
}

func TestReportTimeout(t *testing.T) {
	p := parse(t, agentTools)
	tests := []struct {
		name string
		call policy.Call
		want time.Duration
	}{
		{"the deciding rule's report_timeout", agentCall("deploy", `{"service":"api","env":"production"}`), 2 * time.Hour},
		{"a rule without one: the tools section's", agentCall("deploy", `{"service":"api","env":"staging"}`), 30 * time.Minute},
		{"an allow rule's", agentCall("lint", `{}`), 5 * time.Minute},
		{"the default decides: the tools section's", agentCall("notify", `{}`), 0},
		{"neither: zero, the caller's default", agentCall("unknown", `{}`), 0},
		{"a failing condition (no env): the rule that could not judge", agentCall("deploy", `{"service":"api"}`), 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, p.ReportTimeout(tt.call))
		})
	}

	q := parse(t, `
tools:
  deploy: {report_timeout: 45m}
rules:
  - {name: ask-all, tool: "*", action: ask, report_timeout: 10m}
  - {name: no-deploy-friday, tool: deploy, when: "args.day == 'fri'", action: deny, reason: not on fridays}
`)
	assert.Equal(t, 10*time.Minute, q.ReportTimeout(agentCall("deploy", `{"day":"mon"}`)), "a glob rule wins over the tools section")
	assert.Equal(t, 45*time.Minute, q.ReportTimeout(agentCall("deploy", `{"day":"fri"}`)), "a denied call: the tools section's")
}

func TestDeniesOutright(t *testing.T) {
	tests := []struct {
		name string
		src  string
		tool string
		want bool
	}{
		{"an unconditional deny", "rules: [{name: d, tool: rm, action: deny, reason: no}]", "rm", true},
		{"an unconditional deny by glob", "rules: [{name: d, tool: 'github__delete_*', action: deny, reason: no}]", "github__delete_repo", true},
		{"a glob that does not match", "rules: [{name: d, tool: 'github__delete_*', action: deny, reason: no}]", "github__get_issue", false},
		{"a deny with a condition", "rules: [{name: d, tool: rm, when: \"args.f == '/'\", action: deny, reason: no}]", "rm", false},
		{"an unconditional deny after a conditional one", `
rules:
  - {name: a, tool: rm, when: "args.f == '/'", action: deny, reason: no}
  - {name: b, tool: rm, action: deny, reason: never}
`, "rm", true},
		{"an unconditional deny beats an allow earlier in the file", `
rules:
  - {name: a, tool: rm, action: allow}
  - {name: b, tool: "r*", action: deny, reason: never}
`, "rm", true},
		{"an allow only", "rules: [{name: a, tool: rm, action: allow}]", "rm", false},
		{"default deny, no rule names the tool", "default: deny\nrules: [{name: a, tool: ls, action: allow}]", "rm", true},
		{"default deny, an allow names the tool", "default: deny\nrules: [{name: a, tool: rm, when: \"args.f == 'x'\", action: allow}]", "rm", false},
		{"default deny, a conditional deny names the tool (a failing condition asks)", "default: deny\nrules: [{name: d, tool: rm, when: \"args.f == '/'\", action: deny, reason: no}]", "rm", false},
		{"default deny, an ask glob names the tool", "default: deny\nrules: [{name: a, tool: '*', when: 'false', action: ask}]", "rm", false},
		{"default ask", "default: ask", "rm", false},
		{"default allow", "default: allow", "rm", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := parse(t, tt.src)
			assert.Equal(t, tt.want, p.DeniesOutright(policy.Call{Tool: tt.tool}))
			if tt.want {
				// Whatever the arguments, execution or hints, Evaluate agrees.
				for _, c := range []policy.Call{call(tt.tool, `{"f":"/"}`), agentCall(tt.tool, `[1]`), hinted(tt.tool, map[string]any{"readOnlyHint": true})} {
					assert.Equal(t, ActionDeny, p.Evaluate(c).Action, "%+v", c)
				}
			}
		})
	}
}

func TestExecutionAndAnnotations(t *testing.T) {
	p := parse(t, `
rules:
  - name: agent-shell
    tool: shell
    when: execution == 'agent'
    action: ask
    message: '{{.execution}} runs {{.tool}}'
  - name: destructive
    tool: mcp__*
    when: annotations.destructiveHint
    action: ask
    message: '{{.tool}} may destroy (read-only: {{.annotations.readOnlyHint}})'
  - name: titled
    tool: titled__*
    when: has(annotations.title) && annotations.title.startsWith('Get')
    action: allow
  - name: title-unchecked
    tool: untitled__*
    when: annotations.title == 'x'
    action: allow
  - name: reads
    tool: mcp__*
    when: annotations.readOnlyHint == true
    action: allow
  - name: toolgate-shell
    tool: shell
    when: execution == 'toolgate'
    action: allow
  - name: idempotent
    tool: retry__*
    when: annotations.idempotentHint && !annotations.openWorldHint
    action: allow
`)
	tests := []struct {
		name   string
		call   policy.Call
		action Action
		rule   string
		msg    string
	}{
		{"execution is agent", agentCall("shell", `{}`), ActionAsk, "agent-shell", "agent runs shell"},
		{"execution is toolgate", call("shell", `{}`), ActionAllow, "toolgate-shell", ""},
		{"read-only runs", hinted("mcp__gh__get", map[string]any{"readOnlyHint": true}), ActionAllow, "reads", ""},
		{"read-only but destructive asks", hinted("mcp__gh__get", map[string]any{"readOnlyHint": true, "destructiveHint": true}), ActionAsk, "destructive", "mcp__gh__get may destroy (read-only: true)"},
		{"no readOnlyHint: not read-only, so destructive by default", hinted("mcp__gh__create", map[string]any{"title": "Create"}), ActionAsk, "destructive", "(read-only: false)"},
		{"not destructive, not read-only: the default", hinted("mcp__gh__update", map[string]any{"readOnlyHint": false, "destructiveHint": false}), ActionAsk, RuleDefault, ""},
		{"no annotations at all (an agent-executed call)", agentCall("mcp__gh__get", `{}`), ActionAsk, "destructive", ""},
		{"has() on a key the tool sets", hinted("titled__get", map[string]any{"title": "Get issue"}), ActionAllow, "titled", ""},
		{"has() on a key the tool leaves out", hinted("titled__get", nil), ActionAsk, RuleDefault, ""},
		{"a key the tool leaves out fails the condition: a person decides", hinted("untitled__get", nil), ActionAsk, "title-unchecked", ""},
		{"hints that are not booleans are JSON values", hinted("retry__x", map[string]any{"idempotentHint": true, "openWorldHint": false}), ActionAllow, "idempotent", ""},
		{"default openWorldHint is true", hinted("retry__x", map[string]any{"idempotentHint": true}), ActionAsk, RuleDefault, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Evaluate(tt.call)
			assert.Equal(t, tt.action, v.Action, "%+v", v)
			assert.Equal(t, tt.rule, v.Rule)
			if tt.msg != "" {
				require.NotNil(t, v.Request)
				assert.Contains(t, v.Request.Message, tt.msg)
			}
		})
	}
	failed := p.Evaluate(hinted("untitled__get", nil))
	assert.Contains(t, failed.Reason, `the condition of allow rule "title-unchecked" failed on this call`)
	assert.Contains(t, failed.Reason, "no such key: title")
}

// TestAnnotationsFromGoValues: the registry's hints are Go values (ints,
// typed maps), which conditions see as JSON values.
func TestAnnotationsFromGoValues(t *testing.T) {
	p := parse(t, `
rules:
  - name: r
    tool: x
    when: annotations.level > 2 && annotations.tags[0] == 'a' && annotations.readOnlyHint
    action: allow
`)
	v := p.Evaluate(hinted("x", map[string]any{"level": 3, "tags": []string{"a"}, "readOnlyHint": true}))
	assert.Equal(t, ActionAllow, v.Action, "%+v", v)
}

func TestAgentToolsLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"a bad schema names the tool and the line of the keyword", `
tools:
  deploy:
    schema:
      type: object
      properties:
        service: {type: strin}
`, `test.yaml:7: tool "deploy": schema does not compile: at /properties/service/type: value must be one of`},
		{"a bad schema in a JSON string", "tools:\n  deploy:\n    schema: '{\"type\": 5}'\n", `test.yaml:3: tool "deploy": schema does not compile: at /type:`},
		{"a schema string that is not JSON", "tools:\n  deploy:\n    schema: 'type: object'\n", `test.yaml:3: tool "deploy": schema is not JSON`},
		{"a bad pattern", "tools:\n  t:\n    schema: {properties: {x: {pattern: '('}}}\n", `test.yaml:3: tool "t": schema does not compile: at /properties/x/pattern: '(' is not valid regex`},
		{"a schema may not read other files", "tools:\n  t:\n    schema:\n      $ref: file:///etc/passwd\n", `test.yaml:4: tool "t": schema does not compile: a schema in a policy file cannot refer to other documents`},
		{"globs are refused", "tools:\n  'github__*': {description: x}\n", `test.yaml:2: tools: "github__*" is a glob; the tools section describes one tool per entry, by its exact name`},
		{"unknown field", "tools:\n  t:\n    timeout: 1h\n", `test.yaml:3: tool "t": unknown field "timeout" (known fields: description, schema, report_timeout)`},
		{"bad report_timeout", "tools:\n  t: {report_timeout: soon}\n", `test.yaml:2: tool "t": report_timeout: "soon" is not a duration`},
		{"zero report_timeout", "tools:\n  t: {report_timeout: 0s}\n", `test.yaml:2: tool "t": report_timeout must be positive`},
		{"not a mapping", "tools: [deploy]\n", `test.yaml:1: tools must be a mapping from tool names`},
		{"an entry that is not a mapping", "tools:\n  t: deploy things\n", `test.yaml:2: tool "t" must be a mapping of fields`},
		{"report_timeout on a deny rule", "rules:\n  - {name: d, tool: x, action: deny, reason: no, report_timeout: 1h}\n", `test.yaml:2: rule "d": report_timeout is only for allow and ask rules`},
		{"negative report_timeout on a rule", "rules:\n  - {name: a, tool: x, action: ask, report_timeout: -1m}\n", `test.yaml:2: rule "a": report_timeout must be positive`},
		{"report_timeout is not for the default", "default: {action: ask, report_timeout: 1h}\n", `test.yaml:1: default: unknown field "report_timeout"`},
		{"bad execution in an example", `
rules:
  - name: r
    tool: x
    action: allow
    examples: {match: [{tool: x, execution: worker}]}
`, `test.yaml:6: rule "r": example match[0]: execution must be toolgate or agent, not "worker"`},
		{"an example that fails on its annotations", `
rules:
  - name: r
    tool: x
    when: annotations.readOnlyHint == true
    action: allow
    examples: {match: [{tool: x, annotations: {readOnlyHint: false}}]}
`, `test.yaml:7: rule "r": example match[0] {"tool":"x","args":{},"annotations":{"readOnlyHint":false}} does not match the rule (the condition is false)`},
		{"an example that fails on its execution", `
rules:
  - name: r
    tool: x
    when: execution == 'agent'
    action: allow
    examples: {no_match: [{tool: x}], match: [{tool: x, execution: toolgate}]}
`, `rule "r": example match[0] {"tool":"x","args":{}} does not match the rule`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.src), Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestReloaderAgentTools(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, agentTools)
	r, err := NewReloader(path, Options{}, nil)
	require.NoError(t, err)
	var p policy.ToolPolicy = r
	at, ok := p.(policy.AgentToolPolicy)
	require.True(t, ok)
	assert.ErrorContains(t, at.CheckAgentArgs("deploy", json.RawMessage(`{}`)), "missing property 'service'")
	assert.Equal(t, 30*time.Minute, at.ReportTimeout(agentCall("deploy", `{"service":"api","env":"staging"}`)))
	od, ok := p.(policy.OutrightDenier)
	require.True(t, ok)
	assert.False(t, od.DeniesOutright(policy.Call{Tool: "deploy"}))
	assert.Len(t, r.AgentTools(), 3)

	writeFile(t, path, "default: deny\ntools: {deploy: {report_timeout: 1m}}\n")
	require.NoError(t, r.Reload())
	assert.NoError(t, at.CheckAgentArgs("deploy", json.RawMessage(`{}`)), "the new file declares no schema")
	assert.Equal(t, time.Minute, at.ReportTimeout(agentCall("deploy", `{}`)))
	assert.True(t, od.DeniesOutright(policy.Call{Tool: "deploy"}))
}
