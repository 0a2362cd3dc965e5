// The opencode plugin's decisions, against the scripted toolgate (the real
// opencode runs in integration/opencode_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { deriveCallId } from '../src/index.js';
import { ToolgatePlugin } from '../src/opencode.js';
import { apiError, fakeToolgate } from './fake-toolgate.js';

const call = (id, status, extra = {}) => ({ status: status === 'ok' || status === 'denied' ? 200 : 202, body: { call_id: id, session: 'ses_1', tool: 'write', status, ...extra } });

async function withPlugin(routes, fn, options = {}) {
  const fake = await fakeToolgate(routes);
  try {
    const hooks = await ToolgatePlugin({}, { url: fake.url, token: 'agent-token', waitSeconds: 5, retryFor: 500, ...options });
    await fn(hooks, fake);
  } finally {
    await fake.close();
  }
}

// before is opencode's call of tool.execute.before; it returns the args
// object opencode then runs (the one it passed in).
async function before(hooks, callID, args) {
  const output = { args };
  await hooks['tool.execute.before']({ tool: 'write', sessionID: 'ses_1', callID }, output);
  return output.args;
}

const after = (hooks, callID, args, text) => {
  const output = { title: 'wrote a.txt', output: text, metadata: {} };
  return hooks['tool.execute.after']({ tool: 'write', sessionID: 'ses_1', callID, args }, output).then(() => output);
};

test('allowed at once: the tool runs with its arguments, and its output is reported by the run that claimed it', async () => {
  const id = await deriveCallId('ses_1', 'call_1');
  await withPlugin({
    'POST /v1/calls': (req) => call(id, 'approved', { execution: 'agent', args: req.body.args, claimed: true }),
    [`POST /v1/calls/${id}/report`]: (req) => call(id, 'ok', { output: req.body.output }),
  }, async (hooks, fake) => {
    const args = { filePath: 'a.txt', content: 'hi' };
    const ran = await before(hooks, 'call_1', args);
    assert.equal(ran, args, 'opencode runs the object it passed in');
    assert.deepEqual(ran, { filePath: 'a.txt', content: 'hi' });
    const submitted = fake.requests.find((r) => r.path === '/v1/calls').body;
    assert.equal(submitted.session, 'ses_1');
    assert.equal(submitted.tool, 'write');
    assert.equal(submitted.call_id, id);
    assert.equal(submitted.execution, 'agent');
    await after(hooks, 'call_1', ran, 'Wrote file successfully.');
    const report = fake.requests.find((r) => r.path.endsWith('/report')).body;
    assert.deepEqual(report.output, { title: 'wrote a.txt', output: 'Wrote file successfully.' });
    assert.equal(report.run, submitted.claim.run);
  });
});

test('waits for a person; an approval with edits runs the edit, and the model is told', async () => {
  const id = await deriveCallId('ses_1', 'call_2');
  await withPlugin({
    'POST /v1/calls': call(id, 'pending'),
    [`GET /v1/calls/${id}`]: [call(id, 'pending'), call(id, 'approved', { execution: 'agent', args: { filePath: 'a.txt', content: 'safe' }, decision: 'approved_with_edits' })],
    [`POST /v1/calls/${id}/claim`]: { status: 204 },
    [`POST /v1/calls/${id}/report`]: (req) => call(id, 'ok', { output: req.body.output }),
  }, async (hooks, fake) => {
    const args = { filePath: 'a.txt', content: 'rm -rf' };
    const ran = await before(hooks, 'call_2', args);
    assert.equal(ran, args);
    assert.deepEqual(ran, { filePath: 'a.txt', content: 'safe' });
    const told = await after(hooks, 'call_2', ran, 'Wrote file successfully.');
    assert.match(told.output, /toolgate: an approver changed the arguments to \{"filePath":"a.txt","content":"safe"\}; this is what ran\.\nWrote file successfully\./);
    assert.equal(fake.requests.filter((r) => r.path.endsWith('/report')).length, 1);
  });
});

test('denied: the hook throws toolgate\'s sentence, nothing is claimed or reported', async () => {
  const id = await deriveCallId('ses_1', 'call_3');
  await withPlugin({
    'POST /v1/calls': call(id, 'denied', { model_message: 'write was not run: denied by bob: not that file.' }),
  }, async (hooks, fake) => {
    await assert.rejects(before(hooks, 'call_3', { filePath: 'a.txt' }), { message: 'write was not run: denied by bob: not that file.' });
    await after(hooks, 'call_3', {}, 'x');
    assert.deepEqual(fake.requests.map((r) => r.path), ['/v1/calls']);
  });
});

test('a call that already ran, or whose approval another run took, is not run again', async () => {
  const ran = await deriveCallId('ses_1', 'call_4');
  const taken = await deriveCallId('ses_1', 'call_5');
  await withPlugin({
    'POST /v1/calls': (req) => (req.body.call_id === ran
      ? call(ran, 'ok', { output: 'done' })
      : call(taken, 'approved', { execution: 'agent', args: req.body.args, claim_refused: { code: 'already_claimed', message: 'run run-1 took this approval' } })),
  }, async (hooks) => {
    await assert.rejects(before(hooks, 'call_4', { filePath: 'a.txt' }), { message: `toolgate: call ${ran} already ran; an approval runs a tool once, so it was not run again` });
    await assert.rejects(before(hooks, 'call_5', { filePath: 'a.txt' }), /run run-1 took this approval/);
  });
});

test('fails closed: toolgate down, a refused token, a garbage answer, no answer in time, no configuration', async () => {
  const port = await new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
  const down = await ToolgatePlugin({}, { url: `http://127.0.0.1:${port}`, token: 't', waitSeconds: 1, retryFor: 300 });
  await assert.rejects(before(down, 'call_6', {}), /^Error: toolgate: write was not run: toolgate at .* did not answer/);

  await withPlugin({ 'POST /v1/calls': apiError(401, 'unauthorized', 'unknown token') }, async (hooks) => {
    await assert.rejects(before(hooks, 'call_7', {}), /toolgate: write was not run: unknown token/);
  });
  await withPlugin({ 'POST /v1/calls': { status: 200, raw: '<html>proxy</html>' } }, async (hooks) => {
    await assert.rejects(before(hooks, 'call_8', {}), /toolgate: write was not run: .*not JSON/);
  });
  const id = await deriveCallId('ses_1', 'call_9');
  await withPlugin({ 'POST /v1/calls': call(id, 'pending'), [`GET /v1/calls/${id}`]: call(id, 'pending') }, async (hooks) => {
    await assert.rejects(before(hooks, 'call_9', {}), /toolgate: write was not run: no decision from toolgate within 1 s/);
  }, { waitSeconds: 1 });

  const unset = await ToolgatePlugin({}, { url: '', token: '' });
  await assert.rejects(before(unset, 'call_10', {}), /the opencode plugin is not configured .*every tool is blocked/);
});

test('a tool that fails is reported as its error; one interrupted, as unknown', async () => {
  const failed = await deriveCallId('ses_1', 'call_11');
  const stopped = await deriveCallId('ses_1', 'call_12');
  const reported = {};
  await withPlugin({
    'POST /v1/calls': (req) => call(req.body.call_id, 'approved', { execution: 'agent', args: req.body.args, claimed: true }),
    [`POST /v1/calls/${failed}/report`]: (req) => { reported.failed = req.body; return call(failed, 'error'); },
    [`POST /v1/calls/${stopped}/report`]: (req) => { reported.stopped = req.body; return call(stopped, 'unknown'); },
  }, async (hooks) => {
    await before(hooks, 'call_11', {});
    await before(hooks, 'call_12', {});
    const errorEvent = (callID, error) => ({ event: { type: 'message.part.updated', properties: { part: { type: 'tool', sessionID: 'ses_1', callID, state: { status: 'error', error } } } } });
    await hooks.event(errorEvent('call_11', 'EACCES: permission denied'));
    await hooks.event(errorEvent('call_12', 'Tool execution aborted'));
    for (let i = 0; i < 100 && !(reported.failed && reported.stopped); i++) await new Promise((r) => setTimeout(r, 20));
    assert.match(reported.failed.error, /EACCES: permission denied/);
    assert.match(reported.stopped.unknown, /Tool execution aborted.*may or may not have had its effect/);
  });
});
