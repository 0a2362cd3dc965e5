package rules

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/policy"
)

// ruleExamples are a rule's examples, kept until they are checked.
type ruleExamples struct {
	rule  *rule
	where string
	cases []example
}

type example struct {
	node  *yaml.Node
	label string // e.g. "match[0]"
	want  bool
	call  policy.Call
	text  string // the example as JSON, for messages
}

func (l *loader) examples(n *yaml.Node, where string) []example {
	f := l.fields(n, where+": examples", "match", "no_match")
	var out []example
	for _, list := range []string{"match", "no_match"} {
		ln := f[list]
		if ln == nil || isNull(ln) {
			continue
		}
		if ln.Kind != yaml.SequenceNode {
			l.errorf(ln, "%s: examples: %s must be a list of calls, not %s", where, list, describe(ln))
			continue
		}
		for i, en := range ln.Content {
			ex := example{node: en, label: fmt.Sprintf("%s[%d]", list, i), want: list == "match"}
			what := where + ": example " + ex.label
			ef := l.fields(en, what, "tool", "args", "session", "requester", "execution", "annotations")
			if en.Kind != yaml.MappingNode {
				continue
			}
			ex.call.Tool = l.str(ef["tool"], what+": tool")
			if ex.call.Tool == "" {
				l.errorf(en, "%s: tool is missing", what)
			}
			ex.call.Session = l.str(ef["session"], what+": session")
			ex.call.Requester = l.str(ef["requester"], what+": requester")
			switch e := l.str(ef["execution"], what+": execution"); e {
			case "", executionToolgate:
			case executionAgent:
				ex.call.Execution = policy.ExecutionAgent
			default:
				l.errorf(ef["execution"], "%s: execution must be toolgate or agent, not %q", what, e)
			}
			if an := ef["annotations"]; an != nil && !isNull(an) {
				if an.Kind != yaml.MappingNode {
					l.errorf(an, "%s: annotations must be a mapping, not %s", what, describe(an))
					continue
				}
				v, ok := l.plain(an, what+": annotations")
				if !ok {
					continue
				}
				ex.call.Annotations = v.(map[string]any)
			}
			args := map[string]any{}
			if an := ef["args"]; an != nil && !isNull(an) {
				if an.Kind != yaml.MappingNode {
					l.errorf(an, "%s: args must be a mapping, not %s", what, describe(an))
					continue
				}
				v, ok := l.plain(an, what+": args")
				if !ok {
					continue
				}
				args = v.(map[string]any)
			}
			raw, err := json.Marshal(args)
			if err != nil {
				l.errorf(en, "%s: args cannot be written as JSON: %v", what, err)
				continue
			}
			ex.call.Args = raw
			ex.call.ID = "example-" + ex.label
			text, _ := json.Marshal(struct {
				Tool        string           `json:"tool"`
				Args        json.RawMessage  `json:"args"`
				Session     string           `json:"session,omitempty"`
				Requester   string           `json:"requester,omitempty"`
				Execution   policy.Execution `json:"execution,omitempty"`
				Annotations map[string]any   `json:"annotations,omitempty"`
			}{ex.call.Tool, raw, ex.call.Session, ex.call.Requester, ex.call.Execution, ex.call.Annotations})
			ex.text = string(text)
			out = append(out, ex)
		}
	}
	return out
}

// checkExample runs one example against its rule alone.
func (l *loader) checkExample(r *rule, where string, ex example, workspace string) {
	in := newInput(ex.call, workspace)
	got, err := r.matches(in)
	switch {
	case err != nil:
		l.errorf(ex.node, "%s: example %s %s: the condition fails on it: %v", where, ex.label, ex.text, err)
		return
	case got && !ex.want:
		l.errorf(ex.node, "%s: example %s %s matches the rule, but is listed under no_match", where, ex.label, ex.text)
		return
	case !got && ex.want:
		why := "the condition is false"
		if !matchAny(r.tools, ex.call.Tool) {
			why = fmt.Sprintf("tool %q is not one of %s", ex.call.Tool, strings.Join(r.tools, ", "))
		}
		l.errorf(ex.node, "%s: example %s %s does not match the rule (%s)", where, ex.label, ex.text, why)
		return
	}
	if got && r.action == ActionAsk && r.message != nil {
		if _, err := r.render(in); err != nil {
			l.errorf(ex.node, "%s: example %s %s: the message template fails on it: %v", where, ex.label, ex.text, err)
		}
	}
}
