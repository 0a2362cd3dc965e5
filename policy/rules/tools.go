package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/argcheck"
	"github.com/toolgate/toolgate/policy"
)

// AgentTool is one entry of the file's `tools:` section: a tool the agent
// runs itself (an agent-executed call), which toolgate's registry does not
// know.
type AgentTool struct {
	// Name is the tool's exact name; the section takes no globs.
	Name string `json:"name"`
	// Description says what the tool does; optional.
	Description string `json:"description,omitempty"`
	// Schema is the JSON Schema of the tool's arguments, as JSON; nil when
	// the file declares none (any JSON object passes).
	Schema json.RawMessage `json:"input_schema,omitempty"`
	// ReportTimeout is how long an approved call of the tool waits for the
	// agent's report, unless the rule that decided the call sets its own;
	// zero leaves it to policy.DefaultReportTimeout.
	ReportTimeout time.Duration `json:"report_timeout,omitempty"`
}

// agentTool is an AgentTool with its compiled schema.
type agentTool struct {
	AgentTool
	schema *jsonschema.Schema // nil: no schema
}

// ArgumentError says why an agent-executed call's arguments do not fit the
// schema the policy file declares for its tool.
type ArgumentError struct {
	Tool string
	// Problem names the offending field, e.g. "at /path: missing property".
	Problem string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("invalid arguments for tool %q: %s", e.Tool, e.Problem)
}

var toolFields = []string{"description", "schema", "report_timeout"}

// tools reads the `tools:` section: a mapping from exact tool names to
// their description, schema and report_timeout.
func (l *loader) tools(n *yaml.Node) map[string]*agentTool {
	out := map[string]*agentTool{}
	if n == nil || isNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		l.errorf(n, "tools must be a mapping from tool names to their description, schema and report_timeout, not %s", describe(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		where := fmt.Sprintf("tool %q", name)
		switch {
		case k.Kind != yaml.ScalarNode || isNull(k) || strings.TrimSpace(name) == "":
			l.errorf(k, "tools: each key must be a tool's name, not %s", describe(k))
			continue
		case strings.ContainsAny(name, `*?[\`):
			l.errorf(k, "tools: %q is a glob; the tools section describes one tool per entry, by its exact name (rules take globs)", name)
			continue
		case out[name] != nil:
			l.errorf(k, "tools: %q is given twice", name)
			continue
		}
		f := l.fields(v, where, toolFields...)
		t := &agentTool{AgentTool: AgentTool{Name: name}}
		t.Description = strings.TrimSpace(l.str(f["description"], where+": description"))
		t.ReportTimeout = l.duration(f["report_timeout"], where+": report_timeout")
		if sn := f["schema"]; sn != nil && !isNull(sn) {
			t.Schema, t.schema = l.schema(sn, name, where)
		}
		out[name] = t
	}
	return out
}

// schema compiles a tool's JSON Schema, written as YAML (a mapping, or
// JSON in flow style) or as a string holding JSON. A schema that does not
// compile is reported at the line of the offending keyword when it can be
// found.
func (l *loader) schema(n *yaml.Node, name, where string) (json.RawMessage, *jsonschema.Schema) {
	var raw []byte
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		raw = []byte(n.Value)
	default:
		v, ok := l.plain(n, where+": schema")
		if !ok {
			return nil, nil
		}
		var err error
		if raw, err = json.Marshal(v); err != nil {
			l.errorf(n, "%s: schema cannot be written as JSON: %v", where, err)
			return nil, nil
		}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		l.errorf(n, "%s: schema is not JSON: %v", where, err)
		return nil, nil
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	loc := "toolgate-policy:///tools/" + url.PathEscape(name) + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		l.errorf(n, "%s: schema: %v", where, err)
		return nil, nil
	}
	s, err := c.Compile(loc)
	if err != nil {
		at, problem := n, err.Error()
		var se *jsonschema.SchemaValidationError
		var le *jsonschema.LoadURLError
		if errors.As(err, &le) {
			problem = le.Err.Error()
		}
		if errors.As(err, &se) {
			if ve, ok := se.Err.(*jsonschema.ValidationError); ok {
				// The first leaf is the plainest; the others of an anyOf
				// only restate it ("got string, want array").
				leaf := argcheck.Leaves(ve)[0]
				if n.Kind != yaml.ScalarNode {
					at = nodeAt(n, leaf.InstanceLocation)
				}
				problem = argcheck.Line(leaf)
			}
		}
		l.errorf(at, "%s: schema does not compile: %s", where, problem)
		return nil, nil
	}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) == nil {
		raw = compact.Bytes()
	}
	return raw, s
}

// noLoader refuses the documents a schema refers to ($ref to a file or a
// URL): a policy file is checked on its own, and reads nothing else.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("a schema in a policy file cannot refer to other documents (%s)", u)
}

// nodeAt returns the YAML node at a JSON pointer's tokens under n, or the
// deepest node found on the way.
func nodeAt(n *yaml.Node, path []string) *yaml.Node {
	for _, tok := range path {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					next = n.Content[i+1]
					break
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

// AgentTools returns the file's `tools:` section, sorted by name.
func (p *Policy) AgentTools() []AgentTool {
	out := make([]AgentTool, 0, len(p.tools))
	for _, t := range p.tools {
		out = append(out, t.AgentTool)
	}
	slices.SortFunc(out, func(a, b AgentTool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// CheckAgentArgs implements policy.AgentToolPolicy: it checks the
// arguments of an agent-executed call against the schema the `tools:`
// section declares for the tool. It returns nil when the tool has no
// schema (any arguments pass), and otherwise an *ArgumentError naming the
// offending fields. Empty arguments are an empty object.
func (p *Policy) CheckAgentArgs(tool string, args json.RawMessage) error {
	t := p.tools[tool]
	if t == nil || t.schema == nil {
		return nil
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &ArgumentError{Tool: tool, Problem: "arguments are not valid JSON: " + err.Error()}
	}
	if err := t.schema.Validate(doc); err != nil {
		return &ArgumentError{Tool: tool, Problem: argcheck.Problem(err)}
	}
	return nil
}

// ReportTimeout implements policy.AgentToolPolicy: how long an approved
// agent-executed call waits for the agent's report. It is the
// report_timeout of the rule that decides the call (the one Evaluate
// names), else the `tools:` section's for the tool, else 0 (the caller
// applies policy.DefaultReportTimeout).
func (p *Policy) ReportTimeout(call policy.Call) time.Duration {
	if r := p.byName[p.Evaluate(call).Rule]; r != nil && r.reportTimeout > 0 {
		return r.reportTimeout
	}
	if t := p.tools[call.Tool]; t != nil {
		return t.ReportTimeout
	}
	return 0
}

// DeniesOutright implements policy.OutrightDenier: it reports whether
// every call of the call's tool is denied, whatever its arguments,
// execution or annotations. That is so when a deny rule without a `when`
// names the tool (deny rules come first, and one that matches denies even
// if an earlier one failed), or when the default is deny and no rule at
// all names the tool. A tool that some rule with a condition names is
// never denied outright, since a condition that fails on a call asks a
// person. Tool listings leave such tools out.
func (p *Policy) DeniesOutright(call policy.Call) bool {
	for _, r := range p.deny {
		if r.cond == nil && matchAny(r.tools, call.Tool) {
			return true
		}
	}
	if p.fallback.action != ActionDeny {
		return false
	}
	for _, tier := range [][]*rule{p.deny, p.ask, p.allow} {
		for _, r := range tier {
			if matchAny(r.tools, call.Tool) {
				return false
			}
		}
	}
	return true
}
