// The Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`) behind toolgate.
//
// toolgateOptions returns the query options that put Claude's tool calls
// behind toolgate, the call ID derived from each tool_use ID:
//   - a PreToolUse hook sees every tool call. Decided within waitSeconds, it
//     allows a claimed approval (with the approver's edited arguments as
//     updatedInput) or denies with toolgate's sentence for the model. Not
//     decided, it defers the call, the SDK's durable seam: the turn ends
//     with the call in the session's transcript, the app may stop, and
//     after toolgate decided (awaitDeferred) it resumes the session, where
//     the same tool_use comes back to the hook;
//   - canUseTool, where Claude Code asks rather than defers, waits for
//     toolgate's decision in the process;
//   - PostToolUse and PostToolUseFailure hooks report what the tool did.
// An approve-for-session stays in toolgate's session rather than the SDK's
// updatedPermissions: an SDK session rule would keep later calls from
// toolgate, and from its record.
import { ConflictError, deriveCallId, isFinal } from './index.js';

/** toolgateOptions returns canUseTool and hooks to spread into query()'s options. */
export function toolgateOptions(tg, { session, waitSeconds = 2 }) {
  if (typeof session !== 'string' || session === '') throw new TypeError('toolgate: a session is required');
  const claimed = new Map(); // callId -> { args, note }: the calls this process claimed and may run

  // decide answers one tool call: allow, deny, or (without untilDecided) defer.
  async function decide(toolName, input, toolUseID, { signal, untilDecided }) {
    if (!toolUseID) return { behavior: 'deny', message: 'toolgate: the SDK gave no tool_use ID for this call, so it cannot be gated' };
    const callId = await deriveCallId(session, toolUseID);
    const mine = claimed.get(callId);
    if (mine) return { behavior: 'allow', updatedInput: mine.args };
    let answer = await tg.submit({ session, tool: toolName, args: input, call_id: callId, execution: 'agent' },
      { waitSeconds: untilDecided ? tg.pollSeconds : waitSeconds, signal });
    if (untilDecided && !isFinal(answer) && answer.status !== 'approved') answer = await tg.wait(callId, { untilApproved: true, signal });
    if (isFinal(answer)) return { behavior: 'deny', message: answer.model_message || answer.reason || `${toolName} ended ${answer.status}` };
    if (answer.status !== 'approved') return { behavior: 'defer', message: `waiting in toolgate for a person (call ${callId})` };
    try {
      await tg.claim(callId, { run: toolUseID }, { signal });
    } catch (err) {
      if (err instanceof ConflictError) return { behavior: 'deny', message: `toolgate: ${err.apiMessage}` };
      throw err;
    }
    const args = answer.args ?? input;
    const note = answer.decision === 'approved_with_edits'
      ? `toolgate: ${answer.decided_by ?? 'the approver'} changed the arguments to ${JSON.stringify(args)}; this is what ran.`
      : '';
    claimed.set(callId, { args, note });
    return { behavior: 'allow', updatedInput: args };
  }

  const preToolUse = async (input, _toolUseID, { signal }) => {
    const d = await decide(input.tool_name, input.tool_input ?? {}, input.tool_use_id, { signal, untilDecided: false });
    return {
      hookSpecificOutput: {
        hookEventName: 'PreToolUse',
        permissionDecision: d.behavior,
        ...(d.message ? { permissionDecisionReason: d.message } : {}),
        ...(d.updatedInput ? { updatedInput: d.updatedInput } : {}),
      },
    };
  };

  const canUseTool = async (toolName, input, { signal, toolUseID }) => {
    const d = await decide(toolName, input, toolUseID, { signal, untilDecided: true });
    return d.behavior === 'allow' ? { behavior: 'allow', updatedInput: d.updatedInput, toolUseID } : { behavior: 'deny', message: d.message, toolUseID };
  };

  const report = (outcome) => async (input) => {
    const callId = await deriveCallId(session, input.tool_use_id);
    const mine = claimed.get(callId);
    if (!mine) return {}; // not a call this process claimed: toolgate has no run to hear about
    claimed.delete(callId);
    await tg.report(callId, { ...outcome(input), run: input.tool_use_id });
    return mine.note ? { hookSpecificOutput: { hookEventName: input.hook_event_name, additionalContext: mine.note } } : {};
  };

  return {
    canUseTool,
    hooks: {
      PreToolUse: [{ hooks: [preToolUse] }],
      PostToolUse: [{ hooks: [report((input) => ({ output: input.tool_response ?? null }))] }],
      PostToolUseFailure: [{
        hooks: [report((input) => (input.is_interrupt
          ? { unknown: `the tool was interrupted while it ran (${input.error}): it may or may not have had its effect` }
          : { error: input.error }))],
      }],
    },
  };
}

/**
 * awaitDeferred waits until toolgate decided the call a result deferred
 * (its deferred_tool_use) and returns toolgate's answer; then resume the
 * session. It returns null for a result that deferred nothing.
 */
export async function awaitDeferred(tg, result, { session, signal } = {}) {
  const deferred = result?.deferred_tool_use;
  if (!deferred?.id) return null;
  return tg.wait(await deriveCallId(session, deferred.id), { untilApproved: true, signal });
}
