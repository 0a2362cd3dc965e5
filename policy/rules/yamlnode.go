package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// fileError is one problem of a file, at a line.
type fileError struct {
	file string
	line int
	msg  string
}

func (e *fileError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg)
	}
	return e.file + ": " + e.msg
}

// loader walks the YAML nodes of a file, collecting problems with lines.
type loader struct {
	file string
	dir  string
	errs []error
	// own are toolgate's own files, which no sandbox grant may reach.
	own []string
	// all are the file's rules, shadow ones included.
	all tiers
}

func (l *loader) errorf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.errs = append(l.errs, &fileError{file: l.file, line: line, msg: fmt.Sprintf(format, args...)})
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data into the root node of its only document.
func (l *loader) document(data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The YAML parser reads untrusted files; a bug in it must not bring
		// down a server that hot-reloads its policy.
		if x := recover(); x != nil {
			root, err = nil, &fileError{file: l.file, msg: fmt.Sprintf("the YAML parser failed: %v", x)}
		}
	}()
	syntax := func(err error) error {
		if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return &fileError{file: l.file, line: line, msg: m[2]}
		}
		return &fileError{file: l.file, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &fileError{file: l.file, msg: "the file is empty"}
		}
		return nil, syntax(err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, &fileError{file: l.file, line: next.Line, msg: "a policy file holds one YAML document; remove the second"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntax(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &fileError{file: l.file, msg: "the file is empty"}
	}
	root = doc.Content[0]
	// Aliases are refused: they make line numbers ambiguous, and expanding
	// them can blow up (billion laughs).
	if a := findAlias(root, 0); a != nil {
		return nil, &fileError{file: l.file, line: a.Line, msg: "YAML aliases (*name) are not supported in a policy file"}
	}
	return root, nil
}

func findAlias(n *yaml.Node, depth int) *yaml.Node {
	if n.Kind == yaml.AliasNode || depth > 10000 {
		return n
	}
	for _, c := range n.Content {
		if a := findAlias(c, depth+1); a != nil {
			return a
		}
	}
	return nil
}

// fields checks that n is a mapping with only the allowed keys, each once,
// and returns the values by key. A missing or null n is an empty mapping.
func (l *loader) fields(n *yaml.Node, what string, allowed ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n == nil || isNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		l.errorf(n, "%s must be a mapping of fields, not %s", what, describe(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.errorf(k, "%s: field names must be plain strings", what)
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			l.errorf(k, "%s: unknown field %q (known fields: %s)", what, k.Value, strings.Join(allowed, ", "))
			continue
		}
		if _, dup := out[k.Value]; dup {
			l.errorf(k, "%s: field %q is given twice", what, k.Value)
			continue
		}
		out[k.Value] = v
	}
	return out
}

// peekName returns the name field of a mapping, for messages about it.
func peekName(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode {
			return strings.TrimSpace(v.Value)
		}
	}
	return ""
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}

// str returns a scalar's text; a null or absent node is "".
func (l *loader) str(n *yaml.Node, what string) string {
	if n == nil || isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		l.errorf(n, "%s must be a string, not %s", what, describe(n))
		return ""
	}
	return n.Value
}

// strList returns a list of non-empty strings; a single string is a list
// of one.
func (l *loader) strList(n *yaml.Node, what string) []string {
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		if n.Value == "" {
			l.errorf(n, "%s must not be empty", what)
			return nil
		}
		return []string{n.Value}
	}
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, "%s must be a list of strings, not %s", what, describe(n))
		return nil
	}
	var out []string
	for _, e := range n.Content {
		if e.Kind != yaml.ScalarNode || isNull(e) || e.Value == "" {
			l.errorf(e, "%s: each entry must be a non-empty string, not %s", what, describe(e))
			continue
		}
		out = append(out, e.Value)
	}
	return out
}

// duration parses a Go duration such as "90s" or "2h"; it must be > 0.
func (l *loader) duration(n *yaml.Node, what string) time.Duration {
	s := l.str(n, what)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.errorf(n, "%s: %q is not a duration (write e.g. 90s, 30m or 2h)", what, s)
		return 0
	}
	if d <= 0 {
		l.errorf(n, "%s must be positive, not %s", what, s)
		return 0
	}
	return d
}

// positiveInt parses a whole number > 0.
func (l *loader) positiveInt(n *yaml.Node, what string) int {
	if n == nil || isNull(n) {
		return 0
	}
	i, err := strconv.ParseInt(n.Value, 0, 64)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || err != nil || i > math.MaxInt32 {
		l.errorf(n, "%s must be a whole number, not %s", what, describe(n))
		return 0
	}
	if i <= 0 {
		l.errorf(n, "%s must be positive, not %d", what, i)
		return 0
	}
	return int(i)
}

func (l *loader) boolean(n *yaml.Node, what string, def bool) bool {
	if n == nil || isNull(n) {
		return def
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		l.errorf(n, "%s must be true or false, not %s", what, describe(n))
		return def
	}
	return b
}

// globs parses tool globs (path.Match syntax). Tool names are not paths,
// so they keep path.Match, where "*" matches any name; protected_paths,
// which are paths, use doublestar (matchPathGlob).
func (l *loader) globs(n *yaml.Node, what string) []string {
	globs := l.strList(n, what)
	for _, g := range globs {
		if _, err := path.Match(g, ""); err != nil {
			l.errorf(n, "%s: bad glob %q: %v", what, g, err)
		}
	}
	return globs
}

func (l *loader) regexp(n *yaml.Node, what string) *regexp.Regexp {
	s := l.str(n, what)
	if s == "" {
		return nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		l.errorf(n, "%s: bad regular expression: %v", what, err)
		return nil
	}
	return re
}

// absDir makes a workspace directory absolute: relative to base when it
// comes from the file, to the working directory otherwise.
func (l *loader) absDir(n *yaml.Node, dir, base string) string {
	if dir == "" {
		return ""
	}
	if !filepath.IsAbs(dir) && base != "" {
		dir = filepath.Join(base, dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		l.errorf(n, "directory %q: %v", dir, err)
		return ""
	}
	return abs
}

// plain converts a YAML node to the JSON value it denotes.
func (l *loader) plain(n *yaml.Node, what string) (any, bool) {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				l.errorf(k, "%s: keys must be strings", what)
				return nil, false
			}
			v, ok := l.plain(n.Content[i+1], what)
			if !ok {
				return nil, false
			}
			m[k.Value] = v
		}
		return m, true
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, ok := l.plain(c, what)
			if !ok {
				return nil, false
			}
			s = append(s, v)
		}
		return s, true
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, true
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				return i, true
			}
			var f float64
			if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
		case "!!float":
			var f float64
			if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
			l.errorf(n, "%s: %s is not a JSON number", what, n.Value)
			return nil, false
		}
		return n.Value, true
	}
	l.errorf(n, "%s: unsupported YAML", what)
	return nil, false
}
