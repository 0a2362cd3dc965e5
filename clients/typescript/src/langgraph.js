// LangGraph.js (`@langchain/langgraph`) behind toolgate.
//
// gateTools wraps LangChain tools for a ToolNode: each call is submitted to
// toolgate (the call ID derived from the model's tool-call ID); one toolgate
// has not decided within waitSeconds interrupt()s the graph with the
// toolgate call, the graph's own way, and its checkpointer keeps the
// thread. The process may stop. Later, in any process, resumeCommand reads
// the thread's interrupts, asks toolgate about each, and returns the
// Command({resume}) that continues the thread once one is decided: the
// tool node runs again, finds the decision, and the tool runs (claimed
// once, its outcome reported) or the model is told toolgate's reason.
import { tool as langchainTool } from '@langchain/core/tools';
import { Command, interrupt } from '@langchain/langgraph';
import { deriveCallId, forModel, isFinal } from './index.js';

/** gateTools returns the tools behind toolgate, for a ToolNode. */
export function gateTools(tg, tools, { session, waitSeconds = 2 }) {
  if (typeof session !== 'string' || session === '') throw new TypeError('toolgate: a session is required');
  return tools.map((inner) => langchainTool(async (input, config) => {
    const toolCallId = config?.toolCall?.id;
    if (!toolCallId) throw new TypeError(`toolgate: ${inner.name} was called without a tool call ID: run it from a ToolNode or invoke it with a ToolCall`);
    const callId = await deriveCallId(session, toolCallId);
    let call = await tg.submit({ session, tool: inner.name, args: input, call_id: callId, execution: 'agent' }, { waitSeconds, signal: config.signal });
    // Each interrupt() either stops the graph here (checkpointed) or, on a
    // resume, returns; then toolgate, not the resume value, says what next.
    while (!decided(call)) {
      interrupt({ toolgate: { call_id: callId, tool: inner.name, args: call.args ?? input, status: call.status, message: call.message } });
      call = await tg.status(callId, { waitSeconds, signal: config.signal });
    }
    const { toolCall: _, ...innerConfig } = config; // without the tool call, the inner tool returns its content, not a ToolMessage
    const outcome = await tg.gate(
      { session, tool: inner.name, args: input, callId },
      (args) => inner.invoke(args, innerConfig),
      { signal: config.signal },
    );
    const said = forModel(outcome);
    return typeof said === 'string' ? said : JSON.stringify(said);
  }, { name: inner.name, description: inner.description, schema: inner.schema }));
}

/**
 * resumeCommand reads the thread's toolgate interrupts and returns the
 * Command that resumes those toolgate decided (waiting up to waitSeconds
 * for each), or null while none is decided. Other interrupts are left to
 * the app.
 */
export async function resumeCommand(tg, graph, config, { waitSeconds = 0 } = {}) {
  const snapshot = await graph.getState(config);
  const resume = {};
  for (const task of snapshot.tasks ?? []) {
    for (const waiting of task.interrupts ?? []) {
      const callId = waiting.value?.toolgate?.call_id;
      if (!callId || !waiting.id) continue;
      const call = await tg.status(callId, { waitSeconds });
      if (decided(call)) resume[waiting.id] = { toolgate: { call_id: callId, status: call.status } };
    }
  }
  return Object.keys(resume).length ? new Command({ resume }) : null;
}

// A call is decided once it ended or is approved to run (or running).
function decided(call) {
  return isFinal(call) || call.status === 'approved' || call.status === 'running';
}
