package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Names of the built-in redaction patterns, as written in
// "[REDACTED:<name>]" and in `redact: disable: [...]`.
const (
	PatternPrivateKey         = "private_key"           // PEM private key blocks, also cut short
	PatternAWSAccessKeyID     = "aws_access_key_id"     // AKIA…/ASIA… key IDs
	PatternAWSSecretAccessKey = "aws_secret_access_key" // 40-character secrets after aws_secret_access_key= or :
	PatternGitHubToken        = "github_token"          // ghp_, gho_, ghu_, ghs_, ghr_, github_pat_
	PatternGitLabToken        = "gitlab_token"          // glpat-
	PatternSlackWebhook       = "slack_webhook"         // https://hooks.slack.com/services/…
	PatternSlackToken         = "slack_token"           // xoxb-, xoxp-, xoxa-, xoxr-, xoxs-
	PatternBearerToken        = "bearer_token"          // the token of "Bearer <token>"
	PatternCredential         = "credential"            // the value of password=, passwd:, secret=, token= pairs
)

// redactionPattern replaces what its regexp matches: the first of groups
// that took part in the match, or the whole match when groups is empty.
type redactionPattern struct {
	name   string
	re     *regexp.Regexp
	groups []int
	accept func(string) bool // optional extra test of the matched text
}

// credentialKey is a key whose value is a secret: it ends in password,
// passwd, secret or token (db_password, client_secret, GITHUB_TOKEN...).
const credentialKey = `[A-Za-z0-9_.-]*(?i:password|passwd|secret|token)`

// credentialKeyRe matches whole JSON object keys whose values are secrets.
var credentialKeyRe = regexp.MustCompile(`^` + credentialKey + `$`)

// builtinPatterns are applied in this order, before the file's own.
var builtinPatterns = []redactionPattern{
	{name: PatternPrivateKey, re: regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`)},
	{name: PatternAWSAccessKeyID, re: regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`)},
	{name: PatternAWSSecretAccessKey, re: regexp.MustCompile(`(?i:aws_secret_access_key|aws_secret_key|secret_access_key)["']?[ \t]*[:=][ \t]*["']?([A-Za-z0-9/+=]{40})(?:[^A-Za-z0-9/+=]|$)`), groups: []int{1}},
	{name: PatternGitHubToken, re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b`)},
	{name: PatternGitLabToken, re: regexp.MustCompile(`\bglpat-[A-Za-z0-9_-]{20,}(?:\.[A-Za-z0-9_-]+)*`)},
	{name: PatternSlackWebhook, re: regexp.MustCompile(`https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+`)},
	{name: PatternSlackToken, re: regexp.MustCompile(`\bxox[baprs]-[A-Za-z0-9-]{10,}`)},
	{name: PatternBearerToken, re: regexp.MustCompile(`\b(?i:bearer)[ \t]+([A-Za-z0-9\-._~+/]{8,}=*)`), groups: []int{1},
		// "Bearer responsibilities" is prose: a token has a non-letter.
		accept: func(s string) bool {
			return strings.ContainsFunc(s, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') })
		}},
	// The value may be quoted; an unquoted value cannot start with = or :
	// so that code such as `token == ""` or `token := x` is left alone.
	{name: PatternCredential, re: regexp.MustCompile(`\b` + credentialKey + `["']?[ \t]*[:=][ \t]*(?:"([^"\r\n]+)"|'([^'\r\n]+)'|([^\s"'&,;=:(){}\[\]<>$][^\s"'&,;]*))`), groups: []int{1, 2, 3}},
}

// builtinPatternNames lists the built-in names, for validating `disable:`.
func builtinPatternNames() []string {
	names := make([]string, len(builtinPatterns))
	for i, p := range builtinPatterns {
		names[i] = p.name
	}
	return names
}

// redactor is the `redact:` section. A nil redactor changes nothing.
type redactor struct {
	patterns []redactionPattern
	keys     bool // redact the values of credential keys of JSON objects
}

// redact returns output with secrets replaced and how many it replaced.
func (r *redactor) redact(output []byte) ([]byte, int) {
	if r == nil || len(output) == 0 {
		return output, 0
	}
	if json.Valid(output) {
		var b bytes.Buffer
		dec := json.NewDecoder(bytes.NewReader(output))
		dec.UseNumber()
		n, err := r.value(dec, &b, "")
		if err == nil && n > 0 {
			return b.Bytes(), n
		}
		return output, 0
	}
	s, n := r.text(string(output))
	if n == 0 {
		return output, 0
	}
	return []byte(s), n
}

// value copies one JSON value from dec to b, redacting its strings, and
// keeping the order of object keys. key is the object key the value is
// under, if any.
func (r *redactor) value(dec *json.Decoder, b *bytes.Buffer, key string) (int, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := 0
		open, close := byte(t), byte('}')
		if t == '[' {
			close = ']'
		}
		b.WriteByte(open)
		for first := true; dec.More(); first = false {
			if !first {
				b.WriteByte(',')
			}
			child := ""
			if open == '{' {
				kt, err := dec.Token()
				if err != nil {
					return n, err
				}
				child, _ = kt.(string)
				writeJSONString(b, child)
				b.WriteByte(':')
			}
			m, err := r.value(dec, b, child)
			n += m
			if err != nil {
				return n, err
			}
		}
		if _, err := dec.Token(); err != nil {
			return n, err
		}
		b.WriteByte(close)
		return n, nil
	case string:
		if r.keys && t != "" && !isRedacted(t) && credentialKeyRe.MatchString(key) {
			writeJSONString(b, placeholder(PatternCredential))
			return 1, nil
		}
		s, n := r.text(t)
		writeJSONString(b, s)
		return n, nil
	case json.Number:
		if r.keys && credentialKeyRe.MatchString(key) {
			writeJSONString(b, placeholder(PatternCredential))
			return 1, nil
		}
		b.WriteString(t.String())
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	}
	return 0, nil
}

// text applies every pattern to s in order.
func (r *redactor) text(s string) (string, int) {
	total := 0
	for _, p := range r.patterns {
		var n int
		s, n = p.apply(s)
		total += n
	}
	return s, total
}

func (p redactionPattern) apply(s string) (string, int) {
	matches := p.re.FindAllStringSubmatchIndex(s, -1)
	if matches == nil {
		return s, 0
	}
	var b strings.Builder
	last, n := 0, 0
	for _, m := range matches {
		start, end := m[0], m[1]
		if len(p.groups) > 0 {
			start, end = -1, -1
			for _, g := range p.groups {
				if 2*g+1 < len(m) && m[2*g] >= 0 && m[2*g+1] > m[2*g] {
					start, end = m[2*g], m[2*g+1]
					break
				}
			}
		}
		if start < last || end <= start {
			continue
		}
		found := s[start:end]
		if isRedacted(found) || (p.accept != nil && !p.accept(found)) {
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(placeholder(p.name))
		last = end
		n++
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

func placeholder(name string) string { return "[REDACTED:" + name + "]" }

func isRedacted(s string) bool { return strings.HasPrefix(s, "[REDACTED:") }

// writeJSONString writes s as a JSON string without escaping <, > and &.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // cannot fail for a string
	b.Truncate(b.Len() - 1) // Encode's newline
}

// redact reads the `redact:` section: which built-in patterns apply and
// the file's own.
func (l *loader) redact(n *yaml.Node) *redactor {
	f := l.fields(n, "redact", "builtin", "disable", "patterns")
	r := &redactor{}
	builtin := l.boolean(f["builtin"], "redact: builtin", true)
	disable := l.strList(f["disable"], "redact: disable")
	known := builtinPatternNames()
	for _, d := range disable {
		if !slices.Contains(known, d) {
			l.errorf(f["disable"], "redact: disable: unknown built-in pattern %q (known: %s)", d, strings.Join(known, ", "))
		}
	}
	if builtin {
		for _, p := range builtinPatterns {
			if !slices.Contains(disable, p.name) {
				r.patterns = append(r.patterns, p)
			}
		}
		r.keys = !slices.Contains(disable, PatternCredential)
	}
	pn := f["patterns"]
	if pn == nil || isNull(pn) {
		return r
	}
	if pn.Kind != yaml.SequenceNode {
		l.errorf(pn, "redact: patterns must be a list, not %s", describe(pn))
		return r
	}
	names := map[string]bool{}
	for i, en := range pn.Content {
		where := fmt.Sprintf("redact: patterns[%d]", i)
		pf := l.fields(en, where, "name", "regex")
		if en.Kind != yaml.MappingNode {
			continue
		}
		name := l.str(pf["name"], where+": name")
		switch {
		case name == "":
			l.errorf(en, "%s: name is missing", where)
		case !patternNameRe.MatchString(name):
			l.errorf(pf["name"], "%s: name %q may only hold letters, digits, _, . and -", where, name)
		case names[name] || slices.Contains(known, name):
			l.errorf(pf["name"], "%s: the name %q is already used", where, name)
		}
		names[name] = true
		if pf["regex"] == nil {
			l.errorf(en, "%s: regex is missing", where)
			continue
		}
		re := l.regexp(pf["regex"], where+": regex")
		if re == nil {
			continue
		}
		if re.MatchString("") {
			l.errorf(pf["regex"], "%s: the regex matches the empty string", where)
			continue
		}
		p := redactionPattern{name: name, re: re}
		if g := re.SubexpIndex("secret"); g > 0 {
			p.groups = []int{g}
		}
		r.patterns = append(r.patterns, p)
	}
	return r
}

var patternNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
