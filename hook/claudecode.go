// Package hook puts toolgate in front of the tools of coding agents through
// their command hooks. Claude Code's PreToolUse hook (and the same protocol
// in Codex and VS Code Copilot) submits each tool use as an agent-executed
// toolgate call and answers with toolgate's decision; the PostToolUse hook
// reports what the tool did, which completes the call.
//
// A call still waiting for a person when the hook must answer is denied
// with a reason that asks the model to try again later; the retry (same
// session, tool and arguments) finds the same call through IDs derived
// from the attempt and a small per-session state file, so nobody is asked
// twice. Each approval is claimed in its call's workflow for one run
// before the hook prints it, so it runs the tool once, whatever the state
// file says.
package hook

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/visible"
	"github.com/toolgate/toolgate/workflows"
)

// Dialect is the agent whose hook protocol the hook speaks.
type Dialect int

const (
	// ClaudeCode: Claude Code (and VS Code Copilot, which reads the same
	// output). Every PreToolUse answer is a JSON permission decision.
	ClaudeCode Dialect = iota + 1
	// Codex: OpenAI Codex CLI, whose PreToolUse hooks may only deny (with
	// a reason) or rewrite the input with "allow" + updatedInput; a plain
	// "allow" is an unsupported output there, so for an allow the hook
	// prints nothing and Codex goes on with its own approval settings.
	Codex
	// GeminiCLI: Google's Gemini CLI, whose BeforeTool hook answers
	// {"decision": ...} and whose events name no tool use (gemini.go).
	GeminiCLI
)

// callIDPrefix starts the call IDs the hook derives, per dialect.
func (d Dialect) callIDPrefix() string {
	switch d {
	case Codex:
		return "cx-"
	case GeminiCLI:
		return "gm-"
	}
	return "cc-"
}

// Defaults of Config.
const (
	// DefaultWait is how long PreToolUse waits for a decision: below Claude
	// Code's 600 s hook timeout, so the hook always answers itself (a hook
	// that times out lets the tool run).
	DefaultWait = 540 * time.Second
	// reportTimeout bounds PostToolUse's report.
	reportTimeout = 30 * time.Second
	// statusTimeout bounds the look at a call still waiting after Wait.
	statusTimeout = 10 * time.Second
	// maxReportBytes caps a reported output; larger ones are cut to a
	// summary (toolgate refuses outputs over activities.DefaultMaxOutputBytes).
	maxReportBytes = 256 << 10
)

// Config is one run of the hook.
type Config struct {
	// Connect opens toolgate (the HTTP API or Temporal) and returns the
	// agent client and a close function. It is called only for an event
	// that needs toolgate, after the event was read and checked. Required.
	Connect func(ctx context.Context) (client.Agent, func(), error)
	// Requester names the agent for calls over Temporal; over the HTTP API
	// the token's name is used instead. Required over Temporal.
	Requester string
	// Wait is how long PreToolUse waits for a decision; 0 means
	// DefaultWait.
	Wait time.Duration
	// StateDir holds the per-session state files; empty means
	// DefaultStateDir().
	StateDir string
	// FailOpen: when toolgate cannot decide (unreachable, a malformed
	// event, any error), ask the user through the agent's own permission
	// prompt instead of denying. Not for Codex, which has no such answer:
	// there failures are denials.
	FailOpen bool
	// NoReport: submit calls that end at the decision, for setups with no
	// PostToolUse hook. Otherwise each allowed call waits for the
	// PostToolUse report of its tool's outcome.
	NoReport bool
	// Dialect is the agent's protocol; 0 means ClaudeCode.
	Dialect Dialect
	// ActingUser names the person running the agent, over Temporal (over
	// the HTTP API the agent token's owner is). A call whose rule lets
	// that person decide (`user: true`) is handed to Claude Code's own
	// permission prompt ("ask"), and what the prompt decided is recorded
	// as theirs.
	ActingUser string
	// Logger logs to stderr (stdout is the protocol); nil means none.
	Logger *zap.Logger
}

// permission is a PreToolUse answer.
type permission struct {
	decision string // "allow", "deny" or "ask"
	reason   string
	// updatedInput replaces the tool input (an approver's edit).
	updatedInput json.RawMessage
	// context is told to the model.
	context string
}

// preToolUseOutput is the JSON a PreToolUse hook prints.
type preToolUseOutput struct {
	HookSpecificOutput preToolUseDecision `json:"hookSpecificOutput"`
}

type preToolUseDecision struct {
	HookEventName            string          `json:"hookEventName"`
	PermissionDecision       string          `json:"permissionDecision"`
	PermissionDecisionReason string          `json:"permissionDecisionReason,omitempty"`
	UpdatedInput             json.RawMessage `json:"updatedInput,omitempty"`
	AdditionalContext        string          `json:"additionalContext,omitempty"`
}

// Run handles one hook event read from stdin and returns the process's exit
// status. PreToolUse always gets an answer on stdout with status 0; only
// when stdout cannot be written does it exit 2 (which blocks the tool) with
// the reason on stderr. It never returns 1, which agents treat as a
// non-blocking error. PostToolUse always exits 0: the tool already ran.
func (c Config) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	c = c.withDefaults()
	raw, err := io.ReadAll(io.LimitReader(stdin, MaxEventBytes+1))
	var ev Event
	if err == nil {
		ev, err = ParseEvent(raw)
	} else {
		err = fmt.Errorf("read the hook event: %w", err)
	}
	if err == nil {
		if ev.HookEventName == EventBeforeTool || ev.HookEventName == EventAfterTool {
			// Gemini CLI's events get Gemini CLI's answers, whichever
			// agent the hook line names: its protocol reads any other
			// answer as "no objection".
			c.Dialect = GeminiCLI
		}
		switch ev.HookEventName {
		case EventPostToolUse, EventPostToolUseFailure, EventPermissionDenied, EventAfterTool:
			c.post(ctx, ev)
			return 0
		case EventUserPromptSubmit, EventStop, EventSessionEnd:
			c.turnEnded(ctx, ev)
			return 0
		case EventPreToolUse, EventBeforeTool, "":
		default:
			c.Logger.Warn("hook event not handled; configure toolgate for the events 'toolgate hook claude-code --print-settings' lists", zap.String("event", ev.HookEventName))
			return 0
		}
	}
	var p permission
	if err != nil {
		p = c.failure(err)
	} else {
		p = c.preWithin(ctx, ev, c.Wait+answerSlack)
	}
	return c.write(stdout, stderr, p)
}

// answerSlack is how long past Wait the hook may take to answer: the last
// look at a waiting call, and the writes of its state. It keeps the hook
// below the agents' hook timeouts (600 s for Claude Code and Codex with
// the printed settings, DefaultWait 540 s), so it always answers itself.
const answerSlack = statusTimeout + 10*time.Second

// preWithin is preSafely with a hard deadline: whatever hangs (a state
// file lock another process holds, a connection that never answers), the
// hook answers by limit, with a failure.
func (c Config) preWithin(ctx context.Context, ev Event, limit time.Duration) permission {
	answer := make(chan permission, 1)
	go func() { answer <- c.preSafely(ctx, ev) }()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case p := <-answer:
		return p
	case <-timer.C:
		return c.failure(fmt.Errorf("the hook got no answer within %s", limit.Round(100*time.Millisecond)))
	}
}

func (c Config) withDefaults() Config {
	if c.Wait <= 0 {
		c.Wait = DefaultWait
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir()
	}
	if c.Dialect == 0 {
		c.Dialect = ClaudeCode
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// preSafely is pre, with a panic turned into a failure: a crash must never
// let a tool run.
func (c Config) preSafely(ctx context.Context, ev Event) (p permission) {
	defer func() {
		if r := recover(); r != nil {
			p = c.failure(fmt.Errorf("internal error: %v", r))
		}
	}()
	return c.pre(ctx, ev)
}

// maxGenerations bounds how many used calls of one attempt pre steps
// over before it gives up (each is a call toolgate says was used).
const maxGenerations = 64

// pre submits the attempt as a call (or finds the call an earlier
// identical attempt left waiting), waits for its decision, and turns it
// into a permission. An approval is delivered only once the call's
// workflow accepted this run's claim: the state file only helps find the
// call, and whether its approval was already used is toolgate's to say.
func (c Config) pre(ctx context.Context, ev Event) permission {
	args, err := ev.checkPre()
	if err != nil {
		return c.failure(err)
	}
	if c.Dialect == GeminiCLI && ev.ToolUseID == "" {
		ev.ToolUseID = newGeminiRun()
	}
	at := attempt{c: c, ev: ev, args: args, run: runName(ev), store: stateStore{dir: c.StateDir},
		log: c.Logger.With(zap.String("session", ev.SessionID), zap.String("tool", ev.ToolName), zap.String("toolUseID", ev.ToolUseID))}
	var gen int
	err = at.store.update(ev.SessionID, func(st *sessionState) error {
		at.key = attemptKey(st.Salt, ev.SessionID, ev.ToolName, args)
		gen = st.Keys[at.key].Gen
		return nil
	})
	if err != nil {
		return c.failure(err)
	}

	wctx, cancel := context.WithTimeout(ctx, c.Wait)
	defer cancel()
	agent, closeFn, err := c.Connect(wctx)
	if err != nil {
		return c.failure(connectFailure(err))
	}
	defer closeFn()
	at.agent = agent

	for tries := 0; tries < maxGenerations; tries, gen = tries+1, gen+1 {
		if p, done := at.try(ctx, wctx, gen); done {
			return p
		}
	}
	return c.failure(fmt.Errorf("the last %d calls of this attempt were all used; remove %s to start the session's attempts afresh", maxGenerations, at.store.path(ev.SessionID)))
}

// SetupError is a Config.Connect error that says the hook lacks what it
// needs to reach toolgate (a flag or an environment variable, such as the
// agent token for the HTTP API), as opposed to toolgate being unreachable.
// The hook fails as for any other error: the tool is blocked (or, with
// FailOpen, the user is asked), with this error's text as the reason.
type SetupError struct {
	// Problem says what is missing and which flag or variable sets it.
	Problem string
}

func (e *SetupError) Error() string { return e.Problem }

// connectFailure says why Connect failed: the hook's setup, or toolgate
// out of reach.
func connectFailure(err error) error {
	var setup *SetupError
	if errors.As(err, &setup) {
		return fmt.Errorf("the hook is not set up to reach toolgate: %w", err)
	}
	return fmt.Errorf("toolgate is unreachable: %w", err)
}

// attempt is one PreToolUse: the tool use, its arguments in canonical
// form, the key its calls derive from, and the run that claims an
// approval.
type attempt struct {
	c     Config
	ev    Event
	args  json.RawMessage
	key   string
	run   string
	store stateStore
	agent client.Agent
	log   *zap.Logger
}

// try asks with the call of generation gen. done is false when that call
// cannot answer this tool use (its ID is another request's, or its
// approval was used): the next generation is asked then.
func (at attempt) try(ctx, wctx context.Context, gen int) (p permission, done bool) {
	c, ev := at.c, at.ev
	callID := callIDFor(c.Dialect.callIDPrefix(), at.key, gen)
	log := at.log.With(zap.String("callID", callID))
	req := client.CallRequest{
		CallID: callID, Session: ev.SessionID, Tool: ev.ToolName, Args: at.args,
		Requester: c.Requester, ActingUser: c.ActingUser, Execution: policy.ExecutionAgent, Preview: previewOf(ev),
	}
	first, err := at.submit(wctx, req)
	if err != nil {
		var inputErr *client.InputError
		switch {
		case callIDTaken(err): // another request holds this ID (another requester, say)
			return permission{}, false
		case errors.As(err, &inputErr):
			return c.failure(fmt.Errorf("toolgate refused the call: %w", err)), true
		}
		return c.failure(fmt.Errorf("submit the call to toolgate: %w", err)), true
	}
	if at.mayAskUser() {
		if w, ok := at.waitingForUser(wctx, callID, first); ok {
			return at.handToUser(log, callID, w), true
		}
	}
	if first != nil && !decided(first.Status) {
		first = nil // it asks a person: wait the usual way
	}
	var st client.Status
	if first != nil {
		st = first.Status
	} else {
		st, err = at.agent.WaitDecided(wctx, callID)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// The wait ran out: look once more, a decision may have just come.
		sctx, scancel := context.WithTimeout(ctx, statusTimeout)
		st, err = at.agent.Status(sctx, callID)
		scancel()
		if err == nil && !decided(st) {
			if err := at.store.remember(ev.SessionID, at.key, gen); err != nil {
				return c.failure(err), true
			}
			log.Info("call still waiting; denied for now, the retry will find it")
			return permission{decision: "deny", reason: stillWaitingReason(callID, st)}, true
		}
	}
	if err != nil {
		return c.failure(fmt.Errorf("wait for toolgate call %s: %w", callID, err)), true
	}
	if used(st) {
		log.Info("the call's approval was already used; asking with the next call")
		return permission{}, false
	}
	p = decide(callID, at.args, st)
	if p.decision == "allow" {
		err := at.claim(wctx, callID, first)
		if client.IsApprovalUsed(err) {
			log.Info("another run took the call's approval; asking with the next call", zap.Error(err))
			return permission{}, false
		}
		if err != nil {
			return c.failure(fmt.Errorf("take the approval of toolgate call %s: %w", callID, err)), true
		}
	}
	at.delivered(log, callID, gen, p)
	return p, true
}

// submit starts the call. An agent that can (a client.FastAgent: the
// hook on Temporal, over the API, or served over HTTP) answers in the
// same round trip with the settled call and its approval taken for this
// run: the first answer. Otherwise first is nil and the call is waited
// for.
func (at attempt) submit(ctx context.Context, req client.CallRequest) (first *client.FirstAnswer, err error) {
	if fast, ok := at.agent.(client.FastAgent); ok {
		return fast.SubmitAndClaim(ctx, req, client.Claim{Run: at.run, NoReport: at.c.NoReport})
	}
	_, err = at.agent.Submit(ctx, req)
	return nil, err
}

// claim takes the approval for this run, unless the first answer did.
func (at attempt) claim(ctx context.Context, callID string, first *client.FirstAnswer) error {
	switch {
	case first != nil && first.Claimed:
		return nil
	case first != nil && first.ClaimErr != nil:
		return first.ClaimErr
	}
	return at.agent.Claim(ctx, callID, at.c.Requester, client.Claim{Run: at.run, NoReport: at.c.NoReport})
}

// delivered records a decision handed to the agent: the next identical
// attempt starts at the next call (a sticky decision answers it at once),
// and the tool_use_id maps to this call for PostToolUse.
func (at attempt) delivered(log *zap.Logger, callID string, gen int, p permission) {
	allowed := p.decision == "allow"
	err := at.store.update(at.ev.SessionID, func(s *sessionState) error {
		if s.Keys[at.key].Gen <= gen {
			s.Keys[at.key] = keyState{Gen: gen + 1}
		}
		if allowed && !at.c.NoReport && at.ev.ToolUseID != "" {
			u := use{CallID: callID, At: time.Now().UTC()}
			if at.c.Dialect == GeminiCLI {
				// Its AfterTool is found by what runs (gemini.go).
				runs := at.args
				if len(p.updatedInput) > 0 {
					runs = p.updatedInput
				}
				u.Input = inputDigest(at.ev.ToolName, runs)
			}
			s.Uses[at.ev.ToolUseID] = u
		}
		return nil
	})
	if err != nil && allowed {
		// Without the mapping PostToolUse cannot report; the claim already
		// keeps the approval from a second run.
		log.Warn("the hook state was not updated; the call will end unknown", zap.Error(err))
	}
	log.Info("decision delivered", zap.String("decision", p.decision))
	if allowed && at.ev.PermissionMode == "auto" {
		log.Info("Claude Code's auto mode may still refuse this tool use; with the PermissionDenied hook the call records that it did not run, else it ends unknown after its report timeout")
	}
}

// runName names this run of the tool in its claim and its report: the
// agent's tool_use_id (hashed when too long to be a run name), else a
// random name (no second hook run can claim with it).
func runName(ev Event) string {
	switch {
	case ev.ToolUseID == "":
		var b [12]byte
		_, _ = rand.Read(b[:])
		return "run-" + hex.EncodeToString(b[:])
	case len(ev.ToolUseID) > workflows.MaxRunBytes:
		sum := sha256.Sum256([]byte(ev.ToolUseID))
		return "sha256-" + hex.EncodeToString(sum[:])
	}
	return ev.ToolUseID
}

// callIDTaken recognises the refusal of a call ID that names another call
// (over Temporal and over the HTTP API alike).
func callIDTaken(err error) bool { return errors.Is(err, client.ErrCallIDTaken) }

// decided reports whether st carries a decision the hook can deliver: a
// Result, or an agent-executed call approved and waiting for its run.
func decided(st client.Status) bool {
	switch {
	case st.Result != nil:
		return true
	case st.State == nil:
		return false
	case st.State.Result != nil:
		return true
	}
	return st.State.Status == workflows.StatusApproved
}

// used reports whether a decided call's approval can no longer be
// delivered: a run took it (the call ran, failed or may have run), or it
// lapsed untaken (no report came in time). A denial is not used up: it is
// delivered again.
func used(st client.Status) bool {
	r := st.Result
	if r == nil && st.State != nil {
		r = st.State.Result
	}
	return r != nil && (r.Claim != nil || r.Status == workflows.StatusOK || r.Status == workflows.StatusUnknown)
}

// decide turns a decided call into a permission.
func decide(callID string, args json.RawMessage, st client.Status) permission {
	r := st.Result
	if r == nil && st.State != nil {
		r = st.State.Result
	}
	if r != nil {
		if r.Status != workflows.StatusOK {
			return permission{decision: "deny", reason: denialReason(callID, *r)}
		}
		p := permission{decision: "allow", reason: approvalText(callID, r.Decision, r.DecidedBy, r.Channel)}
		return withEdits(p, args, r.Args)
	}
	if st.State == nil || st.State.Status != workflows.StatusApproved {
		return permission{decision: "deny", reason: stillWaitingReason(callID, st)}
	}
	p := permission{decision: "allow"}
	if d := st.State.Decision; d != nil {
		p.reason = approvalText(callID, d.Kind.String(), d.DecidedBy, d.Channel)
	} else {
		p.reason = approvalText(callID, "", "", "")
	}
	return withEdits(p, args, st.State.Call.Args)
}

// withEdits adds the approver's arguments when they differ from the
// agent's.
func withEdits(p permission, asked, approved json.RawMessage) permission {
	if len(approved) == 0 || sameArgs(asked, approved) {
		return p
	}
	p.updatedInput = approved
	p.reason += "; an approver edited the arguments"
	p.context = "toolgate: an approver edited this tool call's arguments before it ran; it ran with " + string(approved)
	return p
}

func approvalText(callID, decision, by, channel string) string {
	s := "toolgate call " + callID + ": "
	switch {
	case by == "policy" || channel == "policy":
		return s + "allowed by policy"
	case by != "":
		if decision == "" {
			decision = "approved"
		}
		return s + decision + " by " + by + " via " + channel
	}
	return s + "approved"
}

// denialReason is what the model reads when toolgate refused the call:
// the Result's model_message (one sentence that says what happened and
// why), else a sentence built from its status and reason.
func denialReason(callID string, r workflows.Result) string {
	if r.ModelMessage != "" {
		return "toolgate call " + callID + ": " + r.ModelMessage
	}
	var what string
	switch r.Status {
	case workflows.StatusDenied:
		what = "was denied"
		if r.DecidedBy != "" && r.DecidedBy != "policy" {
			what += " by " + r.DecidedBy
		}
	case workflows.StatusTimedOut:
		what = "timed out: nobody decided it in time"
	case workflows.StatusUnknown:
		what = "ended unknown"
	default:
		what = "ended with an error"
	}
	s := "toolgate call " + callID + " " + what
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

// stillWaitingReason tells the model that the call waits for a person and
// how to get the decision: ask again, the same way.
func stillWaitingReason(callID string, st client.Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolgate call %s is waiting for a person to approve it", callID)
	if st.State != nil && st.State.Request != nil && st.State.Request.Message != "" {
		fmt.Fprintf(&b, " (%q)", st.State.Request.Message)
	}
	b.WriteString(". The tool did not run. Try the same action again later, with the same tool and exactly the same arguments: toolgate will then apply the decision taken meanwhile, without asking again")
	if st.State != nil && !st.State.Deadline.IsZero() {
		fmt.Fprintf(&b, " (the request stays open until %s)", st.State.Deadline.UTC().Format(time.RFC3339))
	}
	b.WriteString(". Meanwhile, go on with work that does not need it, or tell the user you are waiting for approval of " + callID + ".")
	return b.String()
}

// failure is the answer when toolgate could not decide: deny (fail
// closed), or with FailOpen ask the user.
func (c Config) failure(err error) permission {
	if c.FailOpen && c.Dialect != Codex { // Codex cannot ask: no output would run the tool
		c.Logger.Warn("toolgate could not decide; asking the user (--fail-open)", zap.Error(err))
		return permission{decision: "ask", reason: "toolgate could not check this tool call (" + err.Error() + "); asking you instead"}
	}
	c.Logger.Warn("toolgate could not decide; denied (fail closed)", zap.Error(err))
	return permission{decision: "deny", reason: "toolgate could not check this tool call, so it is blocked: " + err.Error()}
}

// write prints the permission in the dialect's protocol. Its reason,
// which the agent shows its user (a message, a denial's reason), has what
// a terminal would obey or hide escaped.
func (c Config) write(stdout, stderr io.Writer, p permission) int {
	p.reason = visible.Text(p.reason)
	if c.Dialect == Codex && p.decision == "allow" && len(p.updatedInput) == 0 {
		// No output: Codex goes on with its own approval settings.
		return 0
	}
	var out any = preToolUseOutput{HookSpecificOutput: preToolUseDecision{
		HookEventName:            EventPreToolUse,
		PermissionDecision:       p.decision,
		PermissionDecisionReason: p.reason,
		UpdatedInput:             p.updatedInput,
		AdditionalContext:        p.context,
	}}
	if c.Dialect == GeminiCLI {
		out = geminiAnswer(p)
	}
	b, err := json.Marshal(out)
	if err == nil {
		_, err = stdout.Write(append(b, '\n'))
	}
	if err != nil {
		reason := p.reason
		if p.decision != "deny" {
			reason = "toolgate could not write its answer, so the tool is blocked: " + err.Error()
		}
		fmt.Fprintln(stderr, reason)
		return 2
	}
	return 0
}
