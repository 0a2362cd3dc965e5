package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// The person at the agent: a call whose rule lets the person running the
// agent decide (`user: true`) is handed to Claude Code's own permission
// prompt (PreToolUse answers "ask"), where only that person can answer:
// the model cannot. What the prompt decided is recorded as their decision
// (channel client): the tool's PostToolUse (or PostToolUseFailure) means
// they approved it; a turn that ends without one (UserPromptSubmit, Stop,
// SessionEnd) means they did not. Codex has no "ask" answer, so there the
// call waits for a remote approver as any other.

// userPoll is how often the hook looks whether the policy still checks a
// new call.
const userPoll = 100 * time.Millisecond

// mayAskUser reports whether this attempt can be handed to the agent's
// prompt and its outcome recorded: Claude Code's protocol, with reports.
func (at attempt) mayAskUser() bool {
	return at.c.Dialect == ClaudeCode && !at.c.NoReport && at.ev.ToolUseID != ""
}

// waitingForUser returns the call when it waits for a person and its rule
// lets the acting user decide. A first answer is the settled call, so it
// is read without asking again.
func (at attempt) waitingForUser(ctx context.Context, callID string, first *client.FirstAnswer) (client.Waiting, bool) {
	if first != nil {
		st := first.Status
		if st.State == nil || st.State.Status != workflows.StatusPending {
			return client.Waiting{}, false
		}
		w := client.WaitingView(st)
		return w, w.User != ""
	}
	w, ok := client.WaitingForPerson(ctx, at.agent, callID, userPoll)
	return w, ok && w.User != ""
}

// handToUser answers "ask": Claude Code asks its user. The tool_use_id
// maps to the call, marked as the user's to decide, for the events that
// tell what the prompt decided. The attempt's generation stays: an
// identical attempt after a refusal finds the same call and asks again.
func (at attempt) handToUser(log *zap.Logger, callID string, w client.Waiting) permission {
	err := at.store.update(at.ev.SessionID, func(s *sessionState) error {
		s.Uses[at.ev.ToolUseID] = use{CallID: callID, At: time.Now().UTC(), User: true}
		return nil
	})
	if err != nil {
		// Without the mapping the prompt's answer cannot be recorded, and
		// an approval there would run the tool unrecorded: deny instead.
		return at.c.failure(fmt.Errorf("hand call %s to the permission prompt: %w", callID, err))
	}
	log.Info("call handed to the agent's permission prompt", zap.String("user", w.User))
	return permission{decision: "ask", reason: userQuestion(callID, w)}
}

// userQuestion is what Claude Code's prompt shows beside the tool use.
func userQuestion(callID string, w client.Waiting) string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolgate call %s: ", callID)
	if w.Message != "" {
		b.WriteString(w.Message)
	} else {
		fmt.Fprintf(&b, "run %s?", w.Tool)
	}
	fmt.Fprintf(&b, " Rule %q lets %s, who runs this agent, decide it here; toolgate records the answer.", w.Rule, w.User)
	return b.String()
}

// userApproved records that the person approved the call at the prompt
// (its tool ran, with the arguments ran, and did rep) and takes the
// approval for this run, so the report that follows completes it. It
// reports whether the call may be reported: not when toolgate holds
// another outcome, nor when an approver decided first with edited
// arguments (the tool ran the agent's). A call that ended denied or timed
// out before the prompt's approval gets the run recorded against its end
// (ranAfterEnd).
func (c Config) userApproved(ctx context.Context, agent client.Agent, log *zap.Logger, callID, run string, ran json.RawMessage, rep client.Report) bool {
	_, err := agent.DecideAsUser(ctx, callID, c.ActingUser, policy.Decision{Kind: policy.Approved, Comment: "approved at Claude Code's permission prompt"})
	var decided *client.AlreadyDecidedError
	switch {
	case errors.As(err, &decided):
		log.Info("the call was decided in toolgate before the prompt's answer", zap.String("decision", decided.Decision), zap.String("by", decided.DecidedBy))
		if st, err := agent.Status(ctx, callID); err == nil && st.State != nil && st.State.Status == workflows.StatusApproved && !sameArgs(st.State.Call.Args, ran) {
			log.Warn("the tool ran with the agent's arguments once its user approved it at the prompt, but an approver approved edited ones first; not reported")
			return false
		}
	case err != nil:
		log.Warn("the prompt's approval was not recorded", zap.Error(err))
	}
	if err := agent.Claim(ctx, callID, c.Requester, client.Claim{Run: run}); err != nil {
		if c.ranAfterEnd(ctx, agent, log, callID, ran, rep) {
			return false
		}
		log.Warn("the tool ran once its user approved it at the prompt, but toolgate holds another outcome for the call; not reported", zap.Error(err))
		return false
	}
	return true
}

// viaPrompt is where a run recorded against its call's end was approved.
const viaPrompt = "Claude Code's permission prompt"

// ranAfterEnd records, for a call that ended denied or timed out, that
// its tool ran anyway: the person running the agent approved it at the
// prompt after toolgate had ended the call, and no hook event comes
// between that approval and the run. It reports whether the call ended
// so: then the run is recorded (or why not is logged).
func (c Config) ranAfterEnd(ctx context.Context, agent client.Agent, log *zap.Logger, callID string, ran json.RawMessage, rep client.Report) bool {
	st, err := agent.Status(ctx, callID)
	if err != nil {
		return false
	}
	var status workflows.Status
	switch {
	case st.Result != nil:
		status = st.Result.Status
	case st.State != nil:
		status = st.State.Status
	}
	if status != workflows.StatusDenied && status != workflows.StatusTimedOut {
		return false
	}
	log = log.With(zap.String("status", string(status)))
	recorder, ok := agent.(client.RanAfterEndRecorder)
	if !ok {
		log.Error("the tool ran although its call had ended; this connection to toolgate cannot record that")
		return true
	}
	rec := workflows.RanAfterEnd{User: c.ActingUser, Via: viaPrompt, Args: boundedOutput(ran), Output: rep.Output, Error: rep.Error}
	if rec.Error != "" {
		rec.Output = nil
	}
	if _, err := recorder.RecordRanAfterEnd(ctx, callID, c.Requester, rec); err != nil {
		log.Error("the tool ran although its call had ended, and toolgate refused the record of it", zap.Error(err))
		return true
	}
	log.Warn("the tool ran although its call had ended: its user approved it at the prompt afterwards; recorded against the call's end")
	return true
}

// turnEnded records, for every call of the session handed to the prompt
// and not yet recorded, what the prompt decided: not approved when no
// tool run followed; approved when one did but toolgate could not be told
// at its PostToolUse (the call then ends unknown at its report timeout,
// its outcome never reported).
func (c Config) turnEnded(ctx context.Context, ev Event) {
	log := c.Logger.With(zap.String("event", ev.HookEventName), zap.String("session", ev.SessionID))
	if client.ValidateID("session_id", ev.SessionID) != nil {
		log.Warn("hook event without a valid session_id; nothing to record")
		return
	}
	store := stateStore{dir: c.StateDir}
	asked := map[string]use{} // by tool_use_id
	if err := store.update(ev.SessionID, func(st *sessionState) error {
		for id, u := range st.Uses {
			if u.User {
				asked[id] = u
			}
		}
		return nil
	}); err != nil || len(asked) == 0 {
		if err != nil {
			log.Warn("cannot read the hook state", zap.Error(err))
		}
		return
	}
	rctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	agent, closeFn, err := c.Connect(rctx)
	if err != nil {
		log.Warn("the prompt's answers were not recorded; the calls handed to the prompt wait for their approvers", zap.Error(connectFailure(err)))
		return
	}
	defer closeFn()
	done := map[string]bool{}
	for id, u := range asked {
		d := policy.Decision{Kind: policy.DeniedWithReason, Reason: "the person running the agent did not approve it at Claude Code's permission prompt"}
		if u.Ran {
			d = policy.Decision{Kind: policy.Approved, Comment: "approved at Claude Code's permission prompt; toolgate was not told how the tool went"}
		}
		_, err := agent.DecideAsUser(rctx, u.CallID, c.ActingUser, d)
		var decided *client.AlreadyDecidedError
		if err != nil && !errors.As(err, &decided) {
			log.Warn("the prompt's answer was not recorded", zap.String("callID", u.CallID), zap.Error(err))
			continue
		}
		done[id] = true
		log.Info("recorded the prompt's answer at the turn's end", zap.String("callID", u.CallID), zap.Bool("ran", u.Ran))
	}
	if err := store.update(ev.SessionID, func(st *sessionState) error {
		for id := range done {
			delete(st.Uses, id)
		}
		return nil
	}); err != nil {
		log.Warn("recorded, but the hook state was not updated", zap.Error(err))
	}
}
