// Drives toolgate's MCP gateway with the official TypeScript client
// (@modelcontextprotocol/client): argv[2] is a JSON plan, each step's
// outcome is one JSON line on stdout.
//   {"transport": "stdio", "command": "...", "args": [...]}
//   {"transport": "http", "url": "...", "token": "..."}
//   "versions": ["2025-06-18"] (the versions the client supports) or
//   "negotiation": "auto" (2026-07-28 first, as the OpenAI Agents SDK does)
//   "elicit": {"action": "accept", "content": {...}} (the client declares
//             form elicitation and answers every question so; each question
//             is printed as {"op": "elicited", "message": ...})
//   "steps": [{"op": "list"}, {"op": "call", "name": "...", "args": {...},
//             "timeoutMs": 1500 (the client gives up then, and says so)}
//             (a call prints the messages of the progress notifications it got),
//             {"op": "wait-last"} (toolgate_wait on the last call's ID, again
//             while it answers that the call still waits, up to 20 times)]
const { Client, StreamableHTTPClientTransport } = require('@modelcontextprotocol/client');
const { StdioClientTransport } = require('@modelcontextprotocol/client/stdio');

const plan = JSON.parse(process.argv[2]);
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');
let lastCallId;

(async () => {
  const transport = plan.transport === 'http'
    ? new StreamableHTTPClientTransport(new URL(plan.url), { requestInit: { headers: { Authorization: 'Bearer ' + plan.token } } })
    : new StdioClientTransport({ command: plan.command, args: plan.args, stderr: 'ignore' });
  const options = {};
  if (plan.versions) options.supportedProtocolVersions = plan.versions;
  if (plan.negotiation) options.versionNegotiation = { mode: plan.negotiation };
  if (plan.elicit) options.capabilities = { elicitation: { form: {} } };
  const client = new Client({ name: 'toolgate-test', version: '1.0.0' }, options);
  if (plan.elicit) {
    client.setRequestHandler('elicitation/create', async (request) => {
      say({ op: 'elicited', message: request.params.message, schema: request.params.requestedSchema });
      return plan.elicit;
    });
  }
  await client.connect(transport);
  say({ op: 'connect', protocol: client.getNegotiatedProtocolVersion ? client.getNegotiatedProtocolVersion() : transport.protocolVersion });
  for (const step of plan.steps) {
    try {
      if (step.op === 'list') {
        const r = await client.listTools();
        say({ op: 'list', tools: r.tools.map((t) => t.name), described: Object.fromEntries(r.tools.map((t) => [t.name, { title: t.title, outputSchema: !!t.outputSchema }])) });
      } else if (step.op === 'call') {
        const progress = [];
        const options = { onprogress: (p) => progress.push(p.message || '') };
        if (step.timeoutMs) options.timeout = step.timeoutMs;
        const r = await client.callTool({ name: step.name, arguments: step.args || {} }, options);
        lastCallId = r._meta && r._meta['toolgate/callId'];
        say({ op: 'call', name: step.name, result: r, progress });
      } else if (step.op === 'wait-last') {
        let r;
        for (let i = 0; i < 20; i++) {
          r = await client.callTool({ name: 'toolgate_wait', arguments: { call_id: lastCallId } });
          const status = r._meta && r._meta['toolgate/status'];
          if (status !== 'pending' && status !== 'evaluating') break;
        }
        say({ op: 'wait-last', name: 'toolgate_wait', result: r });
      }
    } catch (e) {
      say({ op: step.op, name: step.name, error: { code: e.code, message: e.message } });
    }
  }
  await client.close();
})().catch((e) => { say({ op: 'fatal', error: { code: e.code, message: e.message } }); process.exit(1); });
