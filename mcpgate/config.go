// Package mcpgate connects toolgate to MCP (Model Context Protocol)
// servers. Its upstream side, here, reads the servers a user already lists
// for Claude Code or Claude Desktop, connects to them, and registers each
// of their tools in the worker's tool registry as <server>__<tool>, so an
// MCP tool call runs as a toolgate tool: policy, approval, then an
// activity that calls the upstream.
package mcpgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DefaultUpstreamTimeout bounds one call of an upstream tool unless the
// server's "toolgate": {"timeout": "..."} says otherwise.
const DefaultUpstreamTimeout = 5 * time.Minute

// Transport types of a server entry ("type").
const (
	TypeStdio = "stdio"
	TypeHTTP  = "http"
	TypeSSE   = "sse"
)

// UpstreamConfig is the upstream MCP servers, sorted by name.
type UpstreamConfig struct {
	Servers []UpstreamServer
}

// UpstreamServer is one entry of mcpServers.
type UpstreamServer struct {
	// Name is the entry's key; tools appear as <Name>__<tool>.
	Name string
	// Type is TypeStdio, TypeHTTP or TypeSSE.
	Type string
	// Command, Args and Env start a stdio server. The process gets Env
	// and, from the worker's environment, only HOME, LOGNAME, PATH, SHELL,
	// TERM and USER.
	Command string
	Args    []string
	Env     map[string]string
	// URL and Headers reach an HTTP (streamable HTTP) or SSE server.
	URL     string
	Headers map[string]string
	// Timeout bounds one tool call; DefaultUpstreamTimeout unless set.
	Timeout time.Duration
	// Roots are the directories toolgate offers the server as MCP roots
	// ("toolgate": {"roots": [...]}), absolute; a stdio server's sandbox
	// lets it read and write them. None: toolgate does not offer the roots
	// capability, and the server keeps its own settings (a filesystem
	// server's command-line directories: roots would replace them).
	Roots []string
	// Sandbox is what a stdio server's sandbox opens beside its roots
	// ("toolgate": {"sandbox": {...}}).
	Sandbox UpstreamSandbox
}

// UpstreamSandbox is what a stdio server reaches beside its Roots, the
// system's directories, its own program and a private TMPDIR (see
// sandbox.go). The zero value opens nothing more and allows the network.
type UpstreamSandbox struct {
	// Write ("write") are more directories it reads and writes, absolute:
	// those a server takes on its command line rather than as roots.
	Write []string
	// Read ("read") are more directories it reads and executes, absolute:
	// a program's other files, a cache it needs.
	Read []string
	// NoNetwork ("network": false) refuses it every TCP connect and bind.
	NoNetwork bool
}

// serverNamePattern: letters, digits, _ - . (so <server>__<tool> is a
// valid tool name), starting with a letter or digit.
var serverNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// LoadUpstreams reads an MCP servers file (the format of Claude Code's
// .mcp.json and Claude Desktop's claude_desktop_config.json: an object
// whose "mcpServers" maps names to servers), expanding ${VAR} and
// ${VAR:-default} with lookup (os.LookupEnv when nil).
func LoadUpstreams(path string, lookup func(string) (string, bool)) (*UpstreamConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("MCP servers file: %w", err)
	}
	cfg, err := ParseUpstreams(data, lookup)
	if err != nil {
		return nil, fmt.Errorf("MCP servers file %s: %w", path, err)
	}
	return cfg, nil
}

// ParseUpstreams parses the contents of an MCP servers file (LoadUpstreams).
// Every problem found is reported, each naming the server and the field.
// Fields other clients use (e.g. "disabled", "autoApprove") are ignored,
// except that a server with "disabled": true is left out.
func ParseUpstreams(data []byte, lookup func(string) (string, bool)) (*UpstreamConfig, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	rawServers, ok := top["mcpServers"]
	if !ok {
		return nil, errors.New(`no "mcpServers" object: the file lists servers as {"mcpServers": {"<name>": {...}}}`)
	}
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(rawServers, &servers); err != nil || servers == nil {
		return nil, errors.New(`"mcpServers" must be an object mapping server names to servers`)
	}
	cfg := &UpstreamConfig{}
	var errs []error
	for _, name := range sortedKeys(servers) {
		p := &parser{server: name, lookup: lookup}
		s, disabled := p.parse(servers[name])
		errs = append(errs, p.errs...)
		if len(p.errs) == 0 && !disabled {
			cfg.Servers = append(cfg.Servers, s)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parser reads one server entry and collects its problems.
type parser struct {
	server string
	lookup func(string) (string, bool)
	errs   []error
}

func (p *parser) errorf(field, format string, args ...any) {
	where := fmt.Sprintf("server %q", p.server)
	if field != "" {
		where += ": " + field
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
}

// toolgateFields are the toolgate-only settings of a server, under
// "toolgate" so that they never clash with another client's fields.
type toolgateFields struct {
	Timeout string         `json:"timeout"`
	Roots   []string       `json:"roots"`
	Sandbox *sandboxFields `json:"sandbox"`
}

// sandboxFields are "toolgate": {"sandbox": {...}} (UpstreamSandbox).
type sandboxFields struct {
	Write   []string `json:"write"`
	Read    []string `json:"read"`
	Network *bool    `json:"network"`
}

func (p *parser) parse(raw json.RawMessage) (s UpstreamServer, disabled bool) {
	s.Name = p.server
	switch {
	case !serverNamePattern.MatchString(p.server):
		p.errorf("", "the name must be 1-64 letters, digits, _ - or ., starting with a letter or digit (tools are named <server>__<tool>)")
	case strings.Contains(p.server, "__") || strings.HasSuffix(p.server, "_"):
		p.errorf("", `the name may not contain "__" or end with "_": tools are named <server>__<tool>, so the server must be clear from the name`)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		p.errorf("", "must be an object")
		return s, false
	}
	p.decode(fields, "disabled", &disabled, "true or false")
	var typ string
	p.decode(fields, "type", &typ, "a string")
	p.decode(fields, "command", &s.Command, "a string")
	p.decode(fields, "args", &s.Args, "an array of strings")
	p.decode(fields, "env", &s.Env, "an object of strings")
	p.decode(fields, "url", &s.URL, "a string")
	p.decode(fields, "headers", &s.Headers, "an object of strings")
	var tg toolgateFields
	p.decode(fields, "toolgate", &tg, `an object, e.g. {"timeout": "10m"}`)
	if disabled {
		return s, true
	}

	s.Command = p.expand("command", s.Command)
	for i := range s.Args {
		s.Args[i] = p.expand(fmt.Sprintf("args[%d]", i), s.Args[i])
	}
	for _, k := range sortedKeys(s.Env) {
		s.Env[k] = p.expand("env."+k, s.Env[k])
	}
	s.URL = p.expand("url", s.URL)
	for _, k := range sortedKeys(s.Headers) {
		s.Headers[k] = p.expand("headers."+k, s.Headers[k])
	}

	switch typ {
	case "":
		switch {
		case s.Command != "":
			typ = TypeStdio
		case s.URL != "":
			typ = TypeHTTP
		default:
			p.errorf("", `needs "command" (a stdio server) or "url" (an HTTP server)`)
		}
	case TypeStdio, TypeHTTP, TypeSSE:
	default:
		p.errorf("type", "%q is not a server type; use %q, %q or %q", typ, TypeStdio, TypeHTTP, TypeSSE)
	}
	s.Type = typ
	switch typ {
	case TypeStdio:
		if s.Command == "" {
			p.errorf("command", "is required for a stdio server")
		}
		for _, f := range []string{"url", "headers"} {
			if _, ok := fields[f]; ok {
				p.errorf(f, "is for HTTP servers; a stdio server takes command, args and env")
			}
		}
	case TypeHTTP, TypeSSE:
		if s.URL == "" {
			p.errorf("url", "is required for an %s server", typ)
		} else if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.errorf("url", "must be an http:// or https:// URL")
		}
		for _, f := range []string{"command", "args", "env"} {
			if _, ok := fields[f]; ok {
				p.errorf(f, "is for stdio servers; an %s server takes url and headers", typ)
			}
		}
	}

	s.Roots = p.dirs("toolgate.roots", tg.Roots)
	if b := tg.Sandbox; b != nil {
		if typ != TypeStdio {
			p.errorf("toolgate.sandbox", "is for stdio servers: toolgate starts no process for an %s server", typ)
		}
		s.Sandbox.Write = p.dirs("toolgate.sandbox.write", b.Write)
		s.Sandbox.Read = p.dirs("toolgate.sandbox.read", b.Read)
		s.Sandbox.NoNetwork = b.Network != nil && !*b.Network
	}
	s.Timeout = DefaultUpstreamTimeout
	if tg.Timeout != "" {
		d, err := time.ParseDuration(tg.Timeout)
		if err != nil || d <= 0 {
			p.errorf("toolgate.timeout", "%q is not a positive duration such as \"90s\" or \"10m\"", tg.Timeout)
		} else {
			s.Timeout = d
		}
	}
	return s, false
}

// dirs are the absolute directories of field, ${VAR}s expanded, cleaned.
func (p *parser) dirs(field string, list []string) []string {
	var out []string
	for i, d := range list {
		where := fmt.Sprintf("%s[%d]", field, i)
		d = p.expand(where, d)
		if !filepath.IsAbs(d) {
			p.errorf(where, "%q must be an absolute directory", d)
			continue
		}
		out = append(out, filepath.Clean(d))
	}
	return out
}

// decode reads an optional field; a value of the wrong type is a problem
// that says what it should be.
func (p *parser) decode(fields map[string]json.RawMessage, name string, out any, want string) {
	raw, ok := fields[name]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	if name == "toolgate" {
		d.DisallowUnknownFields() // toolgate's own settings: a typo is an error
	}
	if err := d.Decode(out); err != nil {
		if name == "toolgate" {
			p.errorf(name, "must be %s (%v)", want, err)
			return
		}
		p.errorf(name, "must be %s", want)
	}
}

// varPattern matches ${VAR} and ${VAR:-default}.
var varPattern = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expand replaces ${VAR} with the variable's value and ${VAR:-default}
// with the value or, when it is unset or empty, the default. An unset
// variable without a default is a problem naming field and variable.
func (p *parser) expand(field, s string) string {
	return varPattern.ReplaceAllStringFunc(s, func(m string) string {
		g := varPattern.FindStringSubmatch(m)
		v, ok := p.lookup(g[1])
		if g[2] != "" {
			if !ok || v == "" {
				return g[3]
			}
			return v
		}
		if !ok {
			p.errorf(field, "${%s} is not set in the environment", g[1])
		}
		return v
	})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
