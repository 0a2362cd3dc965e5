// The Vercel AI SDK behind toolgate: a generateText loop whose tools run
// only once toolgate approved them, and whose approvals may take hours.
//
// A call toolgate has not decided comes back from generateText as the SDK's
// own tool-approval-request. The app keeps its messages (here, a file) and
// may stop. Later, in any process, approvalResponses turns toolgate's
// decisions into tool-approval-response parts, and generateText goes on:
// approved tools run (gated: claimed once, their outcome reported), denied
// ones tell the model why.
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { approvalResponses, gateTools, toolgateApproval } from '@toolgate/client/ai-sdk';
import { descriptions, env, finish, loadState, run, saveState, script, summary, tg, waiting } from './harness.mjs';

const schema = jsonSchema({ type: 'object', properties: { service: { type: 'string' }, env: { type: 'string' } }, required: ['service'] });
const tools = gateTools(tg, {
  deploy: tool({ description: descriptions.deploy, inputSchema: schema, execute: run.deploy }),
  lookup: tool({ description: descriptions.lookup, inputSchema: schema, execute: run.lookup }),
}, { session: env.session });

// The app's state is its message history, kept after every step.
const state = loadState({ messages: [{ role: 'user', content: 'Deploy web to prod.' }] });

for (;;) {
  if (pendingApprovals(state.messages)) waiting();
  const responses = await approvalResponses(tg, state.messages, { session: env.session, waitSeconds: 30 });
  if (responses.length) {
    state.messages.push({ role: 'tool', content: responses });
    saveState(state);
  } else if (pendingApprovals(state.messages)) {
    continue; // nobody decided yet: ask toolgate again
  }
  const result = await generateText({
    model: scriptedModel(),
    tools,
    toolApproval: toolgateApproval(tg, { session: env.session, waitSeconds: 2 }),
    messages: state.messages,
    stopWhen: stepCountIs(5),
  });
  state.messages.push(...result.responseMessages);
  saveState(state);
  if (!pendingApprovals(state.messages)) {
    finish(JSON.parse(result.text));
    break;
  }
}

function pendingApprovals(messages) {
  const answered = new Set(messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []))
    .filter((p) => p.type === 'tool-approval-response').map((p) => p.approvalId));
  return messages.some((m) => Array.isArray(m.content)
    && m.content.some((p) => p.type === 'tool-approval-request' && !p.isAutomatic && !answered.has(p.approvalId)));
}

// The stand-in model, the SDK's own MockLanguageModelV4: its first turn makes
// the script's tool calls; once every one has a result, it answers with
// what it was told of each.
function scriptedModel() {
  const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
  return new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      const told = {};
      for (const message of prompt) {
        if (message.role !== 'tool') continue;
        for (const part of message.content) if (part.type === 'tool-result') told[part.toolCallId] = part.output;
      }
      if (Object.keys(told).length) {
        return { content: [{ type: 'text', text: summary(told) }], finishReason: { unified: 'stop' }, usage, warnings: [] };
      }
      return {
        content: script.map((c) => ({ type: 'tool-call', toolCallId: c.id, toolName: c.tool, input: JSON.stringify(c.args) })),
        finishReason: { unified: 'tool-calls' }, usage, warnings: [],
      };
    },
  });
}
