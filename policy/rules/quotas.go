package rules

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Quota bounds how often tools may be called. The policy only parses and
// validates quotas; the session workflow enforces them.
type Quota struct {
	// Name identifies the quota in messages and the audit trail.
	Name string `json:"name"`
	// Tools are the globs (path.Match syntax) of the tools it counts.
	Tools []string `json:"tools"`
	// Max is how many calls are allowed per window; always > 0.
	Max int `json:"max"`
	// Per is the window's length; always > 0.
	Per time.Duration `json:"per"`
}

// Matches reports whether the quota counts calls of tool.
func (q Quota) Matches(tool string) bool { return matchAny(q.Tools, tool) }

// quotas reads the `quotas:` section.
func (l *loader) quotas(n *yaml.Node) []Quota {
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, "quotas must be a list, not %s", describe(n))
		return nil
	}
	var out []Quota
	names := map[string]bool{}
	for i, en := range n.Content {
		where := fmt.Sprintf("quotas[%d]", i)
		if name := peekName(en); name != "" && !names[name] {
			where = fmt.Sprintf("quota %q", name)
		}
		f := l.fields(en, where, "name", "tools", "max", "per")
		if en.Kind != yaml.MappingNode {
			continue
		}
		q := Quota{Name: strings.TrimSpace(l.str(f["name"], where+": name"))}
		switch {
		case q.Name == "":
			l.errorf(en, "%s: name is missing", where)
		case names[q.Name]:
			l.errorf(f["name"], "%s: another quota is named %q", where, q.Name)
		}
		names[q.Name] = true
		q.Tools = l.globs(f["tools"], where+": tools")
		if len(q.Tools) == 0 && f["tools"] == nil {
			l.errorf(en, "%s: tools is missing", where)
		}
		if f["max"] == nil {
			l.errorf(en, "%s: max is missing", where)
		}
		q.Max = l.positiveInt(f["max"], where+": max")
		if f["per"] == nil {
			l.errorf(en, "%s: per is missing (a duration such as 1h)", where)
		}
		q.Per = l.duration(f["per"], where+": per")
		out = append(out, q)
	}
	return out
}
