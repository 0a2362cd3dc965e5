// The Claude Agent SDK behind toolgate: Claude Code's tool calls wait for
// toolgate's decision, and its approvals may take hours.
//
// A call toolgate has not decided is deferred, the SDK's own way: the turn
// ends with it in the Claude session's transcript (under CLAUDE_CONFIG_DIR).
// The app keeps the session's ID and may stop. Later, in any process,
// awaitDeferred waits for toolgate's decision and the app resumes the
// session: the same tool_use comes back, finds the same toolgate call, and
// runs (claimed once, its outcome reported) or is denied with the reason.
// The model is whatever ANTHROPIC_BASE_URL serves (the test suite points
// it at a stand-in that makes the script's tool calls).
import { randomUUID } from 'node:crypto';
import { createSdkMcpServer, query, tool } from '@anthropic-ai/claude-agent-sdk';
import { awaitDeferred, toolgateOptions } from '@toolgate/client/claude-agent-sdk';
import { z } from 'zod';
import { descriptions, env, finish, loadState, run, saveState, tg, waiting } from './harness.mjs';

// The tools, as an in-process MCP server: Claude names them mcp__ops__deploy
// and mcp__ops__lookup, and so does toolgate's policy.
const args = { service: z.string(), env: z.string().optional() };
const asResult = (output) => ({ content: [{ type: 'text', text: JSON.stringify(output) }] });
const ops = createSdkMcpServer({
  name: 'ops',
  version: '1.0.0',
  tools: [
    tool('deploy', descriptions.deploy, args, async (a) => asResult(run.deploy(a))),
    tool('lookup', descriptions.lookup, args, async (a) => asResult(run.lookup(a))),
  ],
});

// The app's state: the Claude session's ID, chosen before the first turn.
const state = loadState(null) ?? { sessionId: randomUUID(), started: false };
saveState(state);

for (;;) {
  const result = await turn();
  if (result?.deferred_tool_use) {
    waiting();
    await awaitDeferred(tg, result, { session: env.session }); // a person decides; this process may stop meanwhile
  } else if (result) {
    finish(JSON.parse(result.result));
    break;
  }
  // else: the turn ended before its last result; resume the session again
}

// turn runs the session (new, or resumed) until a result that ends it:
// finished, or deferred to toolgate.
async function turn() {
  const conversation = query({
    prompt: state.started ? '' : 'Deploy web to prod.',
    options: {
      ...(state.started ? { resume: state.sessionId } : { sessionId: state.sessionId }),
      mcpServers: { ops },
      tools: [], // no built-in tools: only ops's
      permissionMode: 'default',
      settingSources: [],
      ...toolgateOptions(tg, { session: env.session }),
    },
  });
  for await (const message of conversation) {
    if (message.type === 'system' && message.subtype === 'init' && !state.started) {
      state.started = true;
      saveState(state);
    }
    // On a resume Claude Code may try the deferred call before the in-process
    // MCP server is connected, say so in a result, and try again once it is.
    if (message.type === 'result' && message.terminal_reason !== 'tool_deferred_unavailable') {
      conversation.close();
      return message;
    }
  }
  return null;
}
