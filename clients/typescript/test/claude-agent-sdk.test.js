// The Claude Agent SDK adapter's decisions, against the scripted toolgate
// (the SDK itself runs in integration/frameworks_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Toolgate, deriveCallId } from '../src/index.js';
import { awaitDeferred, toolgateOptions } from '../src/claude-agent-sdk.js';
import { apiError, fakeToolgate } from './fake-toolgate.js';

const call = (id, status, extra = {}) => ({ status: status === 'ok' || status === 'denied' ? 200 : 202, body: { call_id: id, session: 's1', tool: 'deploy', status, ...extra } });
const signal = new AbortController().signal;

async function withOptions(routes, fn) {
  const fake = await fakeToolgate(routes);
  try {
    const tg = new Toolgate({ url: fake.url, token: 'agent-token', retryFor: 2000, pollSeconds: 1 });
    await fn(toolgateOptions(tg, { session: 's1', waitSeconds: 1 }), fake, tg);
  } finally {
    await fake.close();
  }
}

const preToolUse = (opts, toolUseId) => opts.hooks.PreToolUse[0].hooks[0](
  { hook_event_name: 'PreToolUse', tool_name: 'deploy', tool_input: { env: 'prod' }, tool_use_id: toolUseId }, toolUseId, { signal });
const postToolUse = (opts, toolUseId, response) => opts.hooks.PostToolUse[0].hooks[0](
  { hook_event_name: 'PostToolUse', tool_name: 'deploy', tool_input: { env: 'prod' }, tool_response: response, tool_use_id: toolUseId }, toolUseId, { signal });

test('undecided: the hook defers; approved with an edit: allowed with the edit, reported, and the model told', async () => {
  const id = await deriveCallId('s1', 'toolu_1');
  const decided = call(id, 'approved', { execution: 'agent', args: { env: 'staging' }, decision: 'approved_with_edits', decided_by: 'alice' });
  await withOptions({
    'POST /v1/calls': [call(id, 'pending'), decided],
    [`POST /v1/calls/${id}/claim`]: { status: 204 },
    [`POST /v1/calls/${id}/report`]: (req) => call(id, 'ok', { output: req.body.output }),
  }, async (opts, fake) => {
    const first = await preToolUse(opts, 'toolu_1');
    assert.equal(first.hookSpecificOutput.permissionDecision, 'defer');
    assert.match(first.hookSpecificOutput.permissionDecisionReason, new RegExp(id));
    assert.equal(fake.requests.filter((r) => r.path.endsWith('/claim')).length, 0, 'nothing claimed while undecided');

    const second = await preToolUse(opts, 'toolu_1'); // the resumed session's same tool_use
    assert.equal(second.hookSpecificOutput.permissionDecision, 'allow');
    assert.deepEqual(second.hookSpecificOutput.updatedInput, { env: 'staging' });
    assert.equal(fake.requests.find((r) => r.path.endsWith('/claim')).body.run, 'toolu_1');

    const after = await postToolUse(opts, 'toolu_1', { content: 'deployed' });
    assert.deepEqual(fake.requests.find((r) => r.path.endsWith('/report')).body, { output: { content: 'deployed' }, run: 'toolu_1' });
    assert.match(after.hookSpecificOutput.additionalContext, /alice changed the arguments to \{"env":"staging"\}/);
  });
});

test('denied: the hook and canUseTool deny with toolgate\'s sentence for the model', async () => {
  const id = await deriveCallId('s1', 'toolu_2');
  await withOptions({
    'POST /v1/calls': call(id, 'denied', { model_message: 'deploy was not run: denied by bob: frozen.' }),
  }, async (opts, fake) => {
    const hook = await preToolUse(opts, 'toolu_2');
    assert.equal(hook.hookSpecificOutput.permissionDecision, 'deny');
    assert.equal(hook.hookSpecificOutput.permissionDecisionReason, 'deploy was not run: denied by bob: frozen.');
    const asked = await opts.canUseTool('deploy', { env: 'prod' }, { signal, toolUseID: 'toolu_2' });
    assert.deepEqual(asked, { behavior: 'deny', message: 'deploy was not run: denied by bob: frozen.', toolUseID: 'toolu_2' });
    assert.deepEqual(await postToolUse(opts, 'toolu_2', 'x'), {}, 'a call this process did not claim is not reported');
    assert.equal(fake.requests.filter((r) => r.path.endsWith('/report')).length, 0);
  });
});

test('canUseTool waits for the decision; an approval another run claimed is denied, never allowed', async () => {
  const id = await deriveCallId('s1', 'toolu_3');
  await withOptions({
    'POST /v1/calls': call(id, 'pending'),
    [`GET /v1/calls/${id}`]: [call(id, 'pending'), call(id, 'approved', { execution: 'agent', args: { env: 'prod' } })],
    [`POST /v1/calls/${id}/claim`]: apiError(409, 'already_claimed', 'run r-1 took this approval'),
  }, async (opts) => {
    const asked = await opts.canUseTool('deploy', { env: 'prod' }, { signal, toolUseID: 'toolu_3' });
    assert.equal(asked.behavior, 'deny');
    assert.match(asked.message, /run r-1 took this approval/);
  });
});

test('awaitDeferred waits for the deferred call and ignores a result that deferred nothing', async () => {
  const id = await deriveCallId('s1', 'toolu_4');
  await withOptions({
    [`GET /v1/calls/${id}`]: [call(id, 'pending'), call(id, 'approved', { execution: 'agent' })],
  }, async (_opts, _fake, tg) => {
    assert.equal(await awaitDeferred(tg, { type: 'result', terminal_reason: 'completed' }, { session: 's1' }), null);
    const answer = await awaitDeferred(tg, { type: 'result', deferred_tool_use: { id: 'toolu_4', name: 'deploy', input: {} } }, { session: 's1' });
    assert.equal(answer.status, 'approved');
  });
});

test('a session is required', () => {
  assert.throws(() => toolgateOptions(new Toolgate({ url: 'http://127.0.0.1:1', token: 't' }), {}), /a session is required/);
});
