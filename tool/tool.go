// Package tool holds the registry of tools an agent may ask for: Go
// functions with an argument schema, timeouts and a retry policy. The agent
// never holds a tool; it can only ask toolgate to run one.
package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolgate/toolgate/argcheck"
	"github.com/toolgate/toolgate/policy"
)

// Input is what a tool receives.
type Input struct {
	// CallID is stable across retries of the same call: use it as the
	// idempotency key for side effects.
	CallID  string          `json:"call_id"`
	Session string          `json:"session"`
	Args    json.RawMessage `json:"args"`
	// Previewed are the files the call's previews showed
	// (policy.Preview.Target): the one the approvers were shown and, when
	// an approver edited the arguments, that of the edited arguments. A
	// tool that writes a file refuses when a path leads elsewhere than
	// its preview showed. Empty when no preview named a file (a call no
	// person was asked about, or one scheduled by an older toolgate).
	Previewed []policy.PreviewTarget `json:"previewed,omitempty"`
	// Sandbox is what the rule that allowed or asked about the call grants
	// its process beyond the sandbox's default (Tool.Process); nil: the
	// default.
	Sandbox *policy.SandboxGrant `json:"sandbox,omitempty"`
}

// Func runs a tool and returns its output as JSON.
type Func func(ctx context.Context, in Input) (json.RawMessage, error)

// RetryPolicy says how a failed tool is retried. Only idempotent tools are
// retried: Temporal runs an activity at least once, so a retried attempt
// may repeat a side effect the lost attempt already had.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; 1 means no retry. Default 1,
	// or 3 for a tool with Options.Idempotent; more than 1 needs
	// Idempotent.
	MaxAttempts int32 `json:"max_attempts,omitempty"`
	// InitialInterval is the wait before the first retry; default 1s.
	InitialInterval time.Duration `json:"initial_interval,omitempty"`
	// MaxInterval caps the exponential backoff; default 30s.
	MaxInterval time.Duration `json:"max_interval,omitempty"`
}

// Options are the execution settings the workflow applies to a tool.
type Options struct {
	// Timeout bounds one attempt; default 1 minute.
	Timeout time.Duration `json:"timeout,omitempty"`
	// HeartbeatTimeout, when set, fails an attempt whose worker stops
	// heartbeating for that long (the worker heartbeats while the tool
	// runs), so a call whose worker died is retried or failed in seconds.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	Retry            RetryPolicy   `json:"retry"`
	// Idempotent declares that running the tool twice with the same
	// Input.CallID has the effect of running it once (at-least-once is
	// then safe). Idempotent tools are retried (default 3 attempts); a
	// tool that is not runs exactly one attempt, and a lost attempt (its
	// worker died, or it ran past Timeout) ends the call with status
	// unknown: it may or may not have run. Default false.
	Idempotent bool `json:"idempotent,omitempty"`
}

// Tool is a function an agent may ask to run.
type Tool struct {
	Name        string
	Description string
	// Title is a name for people (MCP's title); optional.
	Title string
	// OutputSchema is a JSON Schema of the structured output, when the
	// tool declares one (an MCP tool's outputSchema); optional.
	OutputSchema json.RawMessage
	// Schema is a JSON Schema for the arguments; nil accepts any JSON
	// object.
	Schema  json.RawMessage
	Run     Func
	Options Options
	// Annotations are hints about the tool's behaviour, in MCP's words
	// (readOnlyHint, destructiveHint, idempotentHint, openWorldHint,
	// title). Policies see them; nil means none are known.
	Annotations map[string]any
	// Preview, when set, tells the person asked about a call what it will
	// change (a diff of a file, the command that will run), from its
	// arguments, without changing anything. Optional.
	Preview func(ctx context.Context, args json.RawMessage) (policy.Preview, error)
	// Process says whether the tool starts a process per call, and how it
	// runs: the preview a person approves says so, and a rule's sandbox
	// grant reaches it (Input.Sandbox). Default: it starts none.
	Process Process
}

// Process is how a tool's per-call process runs.
type Process int

const (
	// NoProcess: the tool starts no process.
	NoProcess Process = iota
	// Sandboxed: its process runs in toolgate's sandbox (package sandbox).
	Sandboxed
	// Unsandboxed: its process runs unconfined, as the operator's
	// --unsandboxed-tools says.
	Unsandboxed
)

// Descriptor is what an agent (or a model) is told about a tool: its name,
// what it does, and the JSON Schema of its arguments.
type Descriptor struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	Schema       json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Annotations  map[string]any  `json:"annotations,omitempty"`
}

// Describe lists the descriptors of the registered tools that are not
// held, sorted by name.
func (r *Registry) Describe() []Descriptor {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Descriptor, 0, len(r.tools))
	for name, e := range r.tools {
		if _, held := r.held[name]; held {
			continue
		}
		t := e.tool
		out = append(out, Descriptor{Name: t.Name, Title: t.Title, Description: t.Description, Schema: t.Schema, OutputSchema: t.OutputSchema, Annotations: t.Annotations})
	}
	slices.SortFunc(out, func(a, b Descriptor) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ErrUnknownTool is returned for a tool that is not registered.
var ErrUnknownTool = errors.New("unknown tool")

// ErrHeldTool is returned (as a *HeldError) for a tool that is registered
// but held (Registry.Hold).
var ErrHeldTool = errors.New("tool held")

// HeldError says why a held tool cannot run.
type HeldError struct {
	Tool string
	Why  string
}

func (e *HeldError) Error() string        { return fmt.Sprintf("tool %q is held: %s", e.Tool, e.Why) }
func (e *HeldError) Is(target error) bool { return target == ErrHeldTool }

// ArgumentError says why a call's arguments were refused.
type ArgumentError struct {
	Tool    string
	Problem string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("invalid arguments for tool %q: %s", e.Tool, e.Problem)
}

type entry struct {
	tool   Tool
	schema *jsonschema.Schema
}

// Registry is the set of tools a worker can run. It is safe for concurrent
// use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]entry
	held  map[string]string // name → why
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]entry{}, held: map[string]string{}} }

// Register adds a tool, compiling its schema. Registering a name twice is
// an error.
func (r *Registry) Register(t Tool) error {
	e, err := compile(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[t.Name]; dup {
		return fmt.Errorf("register tool %q: already registered", t.Name)
	}
	r.tools[t.Name] = e
	return nil
}

// Replace registers t, or puts it in the place of the tool of its name
// (an upstream MCP tool whose definition changed). A hold on the name
// stays.
func (r *Registry) Replace(t Tool) error {
	e, err := compile(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tools[t.Name] = e
	return nil
}

// Hold keeps the named tool from being looked up, described or run until
// Release: its calls are refused with why (e.g. "its definition changed
// and waits for approval").
func (r *Registry) Hold(name, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held[name] = why
}

// Release ends a hold.
func (r *Registry) Release(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, name)
}

func compile(t Tool) (entry, error) {
	if t.Name == "" || t.Run == nil {
		return entry{}, errors.New("register tool: name and Run are required")
	}
	if t.Options.Retry.MaxAttempts > 1 && !t.Options.Idempotent {
		return entry{}, fmt.Errorf("register tool %q: %d attempts need Options.Idempotent: a retry may run a side effect twice", t.Name, t.Options.Retry.MaxAttempts)
	}
	e := entry{tool: t}
	if len(t.Schema) > 0 {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Schema))
		if err != nil {
			return entry{}, fmt.Errorf("register tool %q: schema is not JSON: %w", t.Name, err)
		}
		c := jsonschema.NewCompiler()
		url := "toolgate:///" + t.Name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			return entry{}, fmt.Errorf("register tool %q: %w", t.Name, err)
		}
		if e.schema, err = c.Compile(url); err != nil {
			return entry{}, fmt.Errorf("register tool %q: schema does not compile: %w", t.Name, err)
		}
	}
	e.tool.Options = withDefaults(t.Options)
	return e, nil
}

// MustRegister is Register for program set-up: it panics on error.
func (r *Registry) MustRegister(tools ...Tool) {
	for _, t := range tools {
		if err := r.Register(t); err != nil {
			panic(err)
		}
	}
}

// Lookup returns the named tool, unless it is held.
func (r *Registry) Lookup(name string) (Tool, bool) {
	t, err := r.Get(name)
	return t, err == nil
}

// Get returns the named tool, or why it cannot run: ErrUnknownTool or
// ErrHeldTool (wrapped).
func (r *Registry) Get(name string) (Tool, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.get(name)
}

func (r *Registry) get(name string) (Tool, error) {
	if why, held := r.held[name]; held {
		return Tool{}, &HeldError{Tool: name, Why: why}
	}
	e, ok := r.tools[name]
	if !ok {
		return Tool{}, fmt.Errorf("%w %q", ErrUnknownTool, name)
	}
	return e.tool, nil
}

// Names lists the registered tools that are not held, in order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.tools))
	for n := range r.tools {
		if _, held := r.held[n]; !held {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Validate checks that the tool exists and that args satisfy its schema.
// It returns ErrUnknownTool (wrapped) or an *ArgumentError.
func (r *Registry) Validate(name string, args json.RawMessage) error {
	r.mu.RLock()
	_, err := r.get(name)
	e := r.tools[name]
	r.mu.RUnlock()
	if errors.Is(err, ErrUnknownTool) {
		return fmt.Errorf("%w (known tools: %s)", err, strings.Join(r.Names(), ", "))
	}
	if err != nil {
		return err
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &ArgumentError{Tool: name, Problem: "arguments are not valid JSON: " + err.Error()}
	}
	if e.schema == nil {
		return nil
	}
	if err := e.schema.Validate(doc); err != nil {
		return &ArgumentError{Tool: name, Problem: argcheck.Problem(err)}
	}
	return nil
}

func withDefaults(o Options) Options {
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.Retry.MaxAttempts <= 0 {
		o.Retry.MaxAttempts = 1
		if o.Idempotent {
			o.Retry.MaxAttempts = 3
		}
	}
	if o.Retry.InitialInterval <= 0 {
		o.Retry.InitialInterval = time.Second
	}
	if o.Retry.MaxInterval <= 0 {
		o.Retry.MaxInterval = 30 * time.Second
	}
	return o
}

// PermanentError marks a tool failure that retrying cannot fix (bad input,
// refused by the remote side). The call fails at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the tool is not retried.
func Permanent(err error) error { return &PermanentError{Err: err} }

// OutcomeUnknownError says the tool may or may not have had its effect
// (e.g. the process that ran it died mid-call). The call ends with status
// unknown and is never retried.
type OutcomeUnknownError struct{ Err error }

func (e *OutcomeUnknownError) Error() string { return e.Err.Error() }
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// OutcomeUnknown wraps err to say the tool may have run.
func OutcomeUnknown(err error) error { return &OutcomeUnknownError{Err: err} }
