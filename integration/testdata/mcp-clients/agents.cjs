// Drives toolgate's MCP gateway over stdio with the OpenAI Agents SDK's
// MCPServerStdio (@openai/agents): argv[2] is {"command", "args",
// "call": {"name", "args"}}; the outcomes are JSON lines on stdout.
const { MCPServerStdio } = require('@openai/agents');

const plan = JSON.parse(process.argv[2]);
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');

(async () => {
  const server = new MCPServerStdio({ command: plan.command, args: plan.args, name: 'toolgate' });
  await server.connect();
  say({ op: 'list', tools: (await server.listTools()).map((t) => t.name) });
  try {
    say({ op: 'call', name: plan.call.name, result: await server.callToolResult(plan.call.name, plan.call.args) });
  } catch (e) {
    say({ op: 'call', name: plan.call.name, error: { code: e.code, message: e.message } });
  }
  await server.close();
})().catch((e) => { say({ op: 'fatal', error: { code: e.code, message: e.message } }); process.exit(1); });
