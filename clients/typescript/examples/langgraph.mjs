// LangGraph.js behind toolgate: a graph whose tool node runs tools only once
// toolgate approved them, and whose approvals may take hours.
//
// A call toolgate has not decided interrupt()s the graph; the checkpointer
// keeps the thread and the process may stop. Later, in any process,
// resumeCommand returns the Command that resumes the thread once toolgate
// decided, and the graph goes on: approved tools run, denied ones tell the
// model why. There is no LLM here: the "model" node is the stand-in.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tool } from '@langchain/core/tools';
import { AIMessage, HumanMessage } from '@langchain/core/messages';
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ToolNode, toolsCondition } from '@langchain/langgraph/prebuilt';
import { gateTools, resumeCommand } from '@toolgate/client/langgraph';
import { descriptions, env, finish, run, script, summary, tg, waiting } from './harness.mjs';

// A MemorySaver kept in a file, so that the thread outlives the process.
// In production use a durable checkpointer (Postgres, SQLite, ...).
class FileSaver extends MemorySaver {
  constructor(path) {
    super();
    this.path = path;
    try {
      Object.assign(this, JSON.parse(readFileSync(path, 'utf8'), (_, v) => (v?.$bytes !== undefined ? new Uint8Array(Buffer.from(v.$bytes, "base64")) : v)));
    } catch {
      // no thread yet
    }
  }

  async put(...args) {
    const at = await super.put(...args);
    this.save();
    return at;
  }

  async putWrites(...args) {
    await super.putWrites(...args);
    this.save();
  }

  save() {
    const bytes = (_, v) => (v instanceof Uint8Array ? { $bytes: Buffer.from(v).toString('base64') } : v);
    writeFileSync(this.path + '.tmp', JSON.stringify({ storage: this.storage, writes: this.writes }, bytes));
    renameSync(this.path + '.tmp', this.path);
  }
}

const schema = { type: 'object', properties: { service: { type: 'string' }, env: { type: 'string' } }, required: ['service'] };
const tools = gateTools(tg, [
  tool(run.deploy, { name: 'deploy', description: descriptions.deploy, schema }),
  tool(run.lookup, { name: 'lookup', description: descriptions.lookup, schema }),
], { session: env.session });

const graph = new StateGraph(MessagesAnnotation)
  .addNode('model', scriptedModel)
  .addNode('tools', new ToolNode(tools))
  .addEdge(START, 'model')
  .addConditionalEdges('model', toolsCondition, ['tools', END])
  .addEdge('tools', 'model')
  .compile({ checkpointer: new FileSaver(env.state) });

// The app's state is the thread, kept by the checkpointer under thread_id.
const config = { configurable: { thread_id: env.session } };
for (;;) {
  const snapshot = await graph.getState(config);
  const interrupted = snapshot.tasks.some((t) => t.interrupts?.length);
  let input;
  if (interrupted) {
    waiting();
    input = await resumeCommand(tg, graph, config, { waitSeconds: 30 });
    if (!input) continue; // nobody decided yet: ask toolgate again
  } else if (snapshot.next.length) {
    input = null; // stopped between steps: go on from the last checkpoint
  } else if (snapshot.values.messages?.length) {
    finish(JSON.parse(snapshot.values.messages.at(-1).content));
    break;
  } else {
    input = { messages: [new HumanMessage('Deploy web to prod.')] };
  }
  await graph.invoke(input, config);
}

// The stand-in model: its first turn makes the script's tool calls; once
// every one has a result, it answers with what it was told of each.
function scriptedModel({ messages }) {
  const told = {};
  for (const m of messages) if (m.getType() === 'tool') told[m.tool_call_id] = parsed(m.content);
  if (Object.keys(told).length) return { messages: [new AIMessage(summary(told))] };
  return { messages: [new AIMessage({ content: '', tool_calls: script.map((c) => ({ id: c.id, name: c.tool, args: c.args, type: 'tool_call' })) })] };
}

function parsed(content) {
  try {
    return JSON.parse(content);
  } catch {
    return content;
  }
}
