// A program that uses the adapters with the frameworks' own types:
// test/api-types.test.js compiles it. Each @ts-expect-error is a misuse
// the adapter's types must refuse: were a framework's types missing (any),
// the directive would be unused and the compile would fail.
import { Toolgate } from '@toolgate/client';
import * as aiSdk from '@toolgate/client/ai-sdk';
import * as agentsSdk from '@toolgate/client/openai-agents';
import * as langgraph from '@toolgate/client/langgraph';
import * as claude from '@toolgate/client/claude-agent-sdk';
import { query, type SDKResultMessage } from '@anthropic-ai/claude-agent-sdk';
import { generateText, jsonSchema, tool as aiTool, type ModelMessage } from 'ai';
import { RunState, tool as agentsTool, type Agent } from '@openai/agents';
import { tool as langchainTool } from '@langchain/core/tools';
import { MemorySaver, MessagesAnnotation, StateGraph } from '@langchain/langgraph';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import { z } from 'zod';

const tg = new Toolgate({ url: 'http://127.0.0.1:7700', token: 'agent' });

export async function withAiSdk(messages: ModelMessage[]): Promise<number> {
  const tools = aiSdk.gateTools(tg, {
    lookup: aiTool({ inputSchema: jsonSchema<{ q: string }>({ type: 'object' }), execute: async ({ q }) => q.length }),
  }, { session: 's1' });
  const execute: ((input: { q: string }, options: any) => unknown) | undefined = tools.lookup.execute;
  void execute;
  // @ts-expect-error a session is required
  aiSdk.gateTools(tg, {}, {});
  const responses = await aiSdk.approvalResponses(tg, messages, { session: 's1', waitSeconds: 1 });
  // @ts-expect-error the messages are the SDK's ModelMessage[]
  await aiSdk.approvalResponses(tg, [{ role: 'nobody' }], { session: 's1' });
  const approved: boolean = responses[0]?.approved ?? false;
  void approved;
  void generateText;
  return aiSdk.toolgateApproval(tg, { session: 's1' }).length;
}

export async function withAgentsSdk(agent: Agent, serialized: string): Promise<number> {
  const tools = agentsSdk.gateTools(tg, [
    agentsTool({ name: 'deploy', description: 'deploy', parameters: z.object({ env: z.string() }), execute: async ({ env }) => env }),
  ], { session: 's1', waitSeconds: 2 });
  const name: string = tools[0]!.name;
  void name;
  const state = await RunState.fromString(agent, serialized);
  // @ts-expect-error the state is a RunState, not its serialized form
  await agentsSdk.resolveInterruptions(tg, serialized, { session: 's1' });
  return agentsSdk.resolveInterruptions(tg, state, { session: 's1', waitSeconds: 0 });
}

export async function withLangGraph(): Promise<boolean> {
  const tools = langgraph.gateTools(tg, [
    langchainTool(async ({ env }: { env: string }) => env, { name: 'deploy', description: 'deploy', schema: z.object({ env: z.string() }) }),
  ], { session: 's1' });
  const graph = new StateGraph(MessagesAnnotation).addNode('tools', new ToolNode(tools)).addEdge('__start__', 'tools')
    .compile({ checkpointer: new MemorySaver() });
  const config = { configurable: { thread_id: 's1' } };
  const resume = await langgraph.resumeCommand(tg, graph, config, { waitSeconds: 1 });
  // @ts-expect-error the tools are LangChain tools, not functions
  langgraph.gateTools(tg, [async () => 'x'], { session: 's1' });
  if (resume) await graph.invoke(resume, config);
  return resume !== null;
}

export async function withClaudeAgentSdk(sessionId: string): Promise<string | undefined> {
  for await (const message of query({ prompt: 'go', options: { resume: sessionId, ...claude.toolgateOptions(tg, { session: sessionId, waitSeconds: 2 }) } })) {
    if (message.type !== 'result') continue;
    const result: SDKResultMessage = message;
    const answer = await claude.awaitDeferred(tg, result, { session: sessionId });
    // @ts-expect-error a result message, not a string
    await claude.awaitDeferred(tg, 'result', { session: sessionId });
    return answer?.status;
  }
  return undefined;
}
