// The OpenAI Agents SDK behind toolgate: an agent whose function tools run
// only once toolgate approved them, and whose approvals may take hours.
//
// A call toolgate has not decided interrupts the run, the SDK's own way. The
// app keeps the serialized RunState (here, a file) and may stop. Later, in
// any process, resolveInterruptions approves or rejects the restored state's
// interruptions as toolgate decided them, and run() goes on from there.
import { Agent, RunState, Usage, run, setTracingDisabled, tool } from '@openai/agents';
import { gateTools, resolveInterruptions } from '@toolgate/client/openai-agents';
import { descriptions, env, finish, loadState, run as runTool, saveState, script, summary, tg, waiting } from './harness.mjs';

setTracingDisabled(true);

const parameters = {
  type: 'object',
  properties: { service: { type: 'string' }, env: { type: 'string' } },
  required: ['service', 'env'],
  additionalProperties: false,
};
const agent = new Agent({
  name: 'deployer',
  instructions: 'Deploy what you are asked to.',
  model: scriptedModel(),
  tools: gateTools(tg, [
    tool({ name: 'deploy', description: descriptions.deploy, parameters, strict: true, execute: runTool.deploy }),
    tool({ name: 'lookup', description: descriptions.lookup, parameters, strict: true, execute: runTool.lookup }),
  ], { session: env.session }),
});

// The app's state: the serialized RunState while a run is interrupted.
const saved = loadState(null);
let input = saved ? await RunState.fromString(agent, saved.runState) : 'Deploy web to prod.';
for (;;) {
  if (input instanceof RunState) {
    waiting();
    while (await resolveInterruptions(tg, input, { session: env.session, waitSeconds: 30 })) {
      // still waiting for a person: ask toolgate again
    }
  }
  const result = await run(agent, input);
  if (result.interruptions?.length) {
    saveState({ runState: result.state.toString() });
    input = result.state;
    continue;
  }
  finish(JSON.parse(result.finalOutput));
  break;
}

// The stand-in model, a Model of the SDK's: its first turn makes the
// script's tool calls; once every one has a result, it answers with what
// it was told of each.
function scriptedModel() {
  return {
    async getResponse(request) {
      const told = {};
      for (const item of Array.isArray(request.input) ? request.input : []) {
        if (item.type === 'function_call_result') told[item.callId] = item.output;
      }
      if (Object.keys(told).length) {
        return { usage: new Usage(), output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: summary(told) }] }] };
      }
      return {
        usage: new Usage(),
        output: script.map((c) => ({ type: 'function_call', callId: c.id, name: c.tool, arguments: JSON.stringify(c.args), status: 'completed' })),
      };
    },
    // eslint-disable-next-line require-yield
    async *getStreamedResponse() {
      throw new Error('the stand-in model does not stream');
    },
  };
}
