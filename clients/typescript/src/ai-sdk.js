// The Vercel AI SDK (`ai` 7) behind toolgate.
//
// gateTools wraps a ToolSet so that each tool's execute runs only once
// toolgate approved the call (the call ID derived from the SDK's toolCallId).
// For approvals that take hours, toolgateApproval is a `toolApproval`
// function: a call toolgate has not decided becomes the SDK's own
// tool-approval-request, generateText returns, the app keeps its messages,
// and approvalResponses, in any process and any time later, turns
// toolgate's decisions into tool-approval-response parts to continue with.
import { deriveCallId, forModel, isFinal } from './index.js';

/** gateTools returns the tools with each execute behind toolgate. Tools without execute (the app's own) are kept as they are. */
export function gateTools(tg, tools, { session }) {
  requireSession(session);
  return Object.fromEntries(Object.entries(tools).map(([name, tool]) => {
    if (typeof tool.execute !== 'function') return [name, tool];
    const execute = async (input, options) => {
      const outcome = await tg.gate(
        { session, tool: name, args: input, toolCallId: options.toolCallId },
        (args) => lastValue(tool.execute(args, options)),
        { signal: options.abortSignal },
      );
      return forModel(outcome);
    };
    return [name, { ...tool, execute }];
  }));
}

/**
 * toolgateApproval is a GenericToolApprovalFunction: it submits the call
 * to toolgate and answers 'approved' or 'denied' (with toolgate's reason)
 * when toolgate decided within waitSeconds, else 'user-approval', so that
 * generateText returns a tool-approval-request for the app to keep.
 */
export function toolgateApproval(tg, { session, waitSeconds = 0 }) {
  requireSession(session);
  return async ({ toolCall }) => {
    const callId = await deriveCallId(session, toolCall.toolCallId);
    const call = await tg.submit({ session, tool: toolCall.toolName, args: toolCall.input ?? {}, call_id: callId, execution: 'agent' }, { waitSeconds });
    return statusOf(call);
  };
}

/**
 * approvalResponses reads toolgate's decision on every tool-approval-request
 * in messages that has no response yet, and returns the
 * tool-approval-response parts of those toolgate decided (waiting up to
 * waitSeconds for each). Add them as `{ role: 'tool', content }` and call
 * generateText again: approved tools run, denied ones tell the model why.
 */
export async function approvalResponses(tg, messages, { session, waitSeconds = 0 }) {
  requireSession(session);
  const answered = new Set();
  const requests = [];
  for (const message of messages) {
    if (!Array.isArray(message.content)) continue;
    for (const part of message.content) {
      if (part.type === 'tool-approval-response') answered.add(part.approvalId);
      if (part.type === 'tool-approval-request' && !part.isAutomatic) requests.push(part);
    }
  }
  const responses = [];
  for (const request of requests) {
    if (answered.has(request.approvalId)) continue;
    const call = await tg.status(await deriveCallId(session, request.toolCallId), { waitSeconds });
    const status = statusOf(call);
    if (status.type === 'user-approval') continue;
    responses.push({ type: 'tool-approval-response', approvalId: request.approvalId, approved: status.type === 'approved', reason: status.reason });
  }
  return responses;
}

// statusOf maps a toolgate call to the SDK's approval status. An approved
// agent-executed call waits for its run ("approved"); a call that ended is
// denied to the model unless it ended ok (then gate returns its output).
function statusOf(call) {
  if (call.status === 'approved' || (isFinal(call) && call.status === 'ok')) {
    return { type: 'approved', reason: `approved in toolgate${call.decided_by ? ` by ${call.decided_by}` : ''} (call ${call.call_id})` };
  }
  if (isFinal(call)) return { type: 'denied', reason: call.model_message || call.reason || `ended ${call.status}` };
  return { type: 'user-approval', reason: `waiting in toolgate for a person (call ${call.call_id})` };
}

// A tool's execute may stream its output; the SDK's final output is the last value.
async function lastValue(value) {
  if (value && typeof value[Symbol.asyncIterator] === 'function') {
    let last;
    for await (const v of value) last = v;
    return last;
  }
  return value;
}

function requireSession(session) {
  if (typeof session !== 'string' || session === '') throw new TypeError('toolgate: a session is required');
}
