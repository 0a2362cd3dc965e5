// The OpenAI Agents SDK (`@openai/agents`) behind toolgate.
//
// gateTools wraps function tools so that each invocation runs only once
// toolgate approved the call (the call ID derived from the model's callId).
// Its needsApproval asks toolgate first: a call toolgate decides within
// waitSeconds goes straight on; one it has not decided interrupts the run,
// the SDK's own way. The app keeps `result.state.toString()` and may stop;
// later, in any process, resolveInterruptions approves or rejects the
// restored RunState's interruptions as toolgate decided them, and
// `run(agent, state)` goes on: approved tools run (claimed once, their
// outcome reported), rejected ones tell the model toolgate's reason.
import { deriveCallId, forModel, isFinal } from './index.js';

/** gateTools returns the function tools behind toolgate; other tools (hosted, computer, shell) are kept as they are. */
export function gateTools(tg, tools, { session, waitSeconds = 2 }) {
  if (typeof session !== 'string' || session === '') throw new TypeError('toolgate: a session is required');
  return tools.map((tool) => {
    if (tool.type !== 'function') return tool;
    const needsApproval = async (_runContext, input, callId) => {
      const call = await tg.submit(submission(session, tool.name, input, await callIdOf(session, callId)), { waitSeconds });
      return !(call.status === 'approved' || isFinal(call));
    };
    const invoke = async (runContext, input, details) => {
      const outcome = await tg.gate(
        { session, tool: tool.name, args: parseArgs(input), callId: await callIdOf(session, details?.toolCall?.callId) },
        (args) => tool.invoke(runContext, JSON.stringify(args), details),
        { signal: details?.signal },
      );
      const said = forModel(outcome);
      return typeof said === 'string' ? said : JSON.stringify(said);
    };
    return { ...tool, needsApproval, invoke };
  });
}

/**
 * resolveInterruptions reads toolgate's decision on each of the state's
 * interruptions, waiting up to waitSeconds for each, and approves or
 * rejects (with toolgate's sentence for the model) those decided. It
 * returns how many are still waiting for a person.
 */
export async function resolveInterruptions(tg, state, { session, waitSeconds = 0 }) {
  let waiting = 0;
  for (const item of state.getInterruptions()) {
    const callId = item.rawItem?.callId;
    if (!callId) {
      waiting++; // not one of toolgate's: the app decides it
      continue;
    }
    const call = await tg.status(await deriveCallId(session, callId), { waitSeconds });
    if (call.status === 'approved' || call.status === 'ok') state.approve(item);
    else if (isFinal(call)) state.reject(item, { message: call.model_message || call.reason || `ended ${call.status}` });
    else waiting++;
  }
  return waiting;
}

function submission(session, tool, input, callId) {
  return { session, tool, args: typeof input === 'object' && input !== null ? input : parseArgs(input), call_id: callId, execution: 'agent' };
}

async function callIdOf(session, toolCallId) {
  if (!toolCallId) throw new TypeError('toolgate: the Agents SDK gave no callId for the tool call');
  return deriveCallId(session, toolCallId);
}

function parseArgs(input) {
  if (typeof input !== 'string') return input ?? {};
  if (input.trim() === '') return {};
  return JSON.parse(input);
}
