import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ConflictError, ForbiddenError, MalformedAnswerError, Toolgate, UnauthorizedError, UnreachableError,
  deriveCallId, forModel,
} from '../src/index.js';
import { apiError, fakeToolgate } from './fake-toolgate.js';

const waiting = (id, extra = {}) => ({ status: 202, body: { call_id: id, session: 's1', tool: 'deploy', status: 'pending', ...extra } });
const approved = (id, args, extra = {}) => ({ status: 202, body: { call_id: id, session: 's1', tool: 'deploy', status: 'approved', execution: 'agent', args, ...extra } });
const result = (id, extra) => ({ status: 200, body: { call_id: id, session: 's1', tool: 'deploy', ...extra } });

async function withToolgate(routes, fn, options = {}) {
  const fake = await fakeToolgate(routes);
  try {
    await fn(new Toolgate({ url: fake.url, token: 'agent-token', retryFor: 2000, pollSeconds: 1, ...options }), fake);
  } finally {
    await fake.close();
  }
}

test('deriveCallId is the same for the same session and tool call, and a valid call ID', async () => {
  const a = await deriveCallId('s1', 'call_abc');
  assert.equal(a, await deriveCallId('s1', 'call_abc'));
  assert.notEqual(a, await deriveCallId('s2', 'call_abc'));
  assert.notEqual(a, await deriveCallId('s1', 'call_abd'));
  assert.match(a, /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/);
  await assert.rejects(deriveCallId('s1', ''), TypeError);
});

test('gate waits for the approval, claims it, runs the edited arguments once and reports the output', async () => {
  const id = await deriveCallId('s1', 'tc1');
  let runs = 0;
  await withToolgate({
    'POST /v1/calls': waiting(id),
    [`GET /v1/calls/${id}`]: [waiting(id), approved(id, { env: 'staging' }, { decision: 'approved_with_edits', decided_by: 'alice' })],
    [`POST /v1/calls/${id}/claim`]: { status: 204 },
    [`POST /v1/calls/${id}/report`]: (req) => result(id, {
      status: 'ok', output: req.body.output, args: { env: 'staging' }, original_args: { env: 'prod' }, decided_by: 'alice',
      model_message: 'You ran deploy and toolgate recorded its output, approved by alice; alice changed the arguments to {"env":"staging"}.',
    }),
  }, async (tg, fake) => {
    const outcome = await tg.gate({ session: 's1', tool: 'deploy', args: { env: 'prod' }, toolCallId: 'tc1' }, async (args, ctx) => {
      runs++;
      assert.deepEqual(args, { env: 'staging' });
      assert.equal(ctx.edited, true);
      return { deployed: args.env };
    });
    assert.equal(runs, 1);
    assert.equal(outcome.status, 'ok');
    assert.equal(outcome.ran, true);
    assert.equal(outcome.edited, true);
    assert.deepEqual(outcome.output, { deployed: 'staging' });
    assert.deepEqual(forModel(outcome), { output: { deployed: 'staging' }, toolgate: outcome.message });
    const submit = fake.requests.find((r) => r.method === 'POST' && r.path === '/v1/calls');
    const claim = fake.requests.find((r) => r.path.endsWith('/claim'));
    const report = fake.requests.find((r) => r.path.endsWith('/report'));
    assert.ok(claim.body.run);
    assert.deepEqual(submit.body, { session: 's1', tool: 'deploy', args: { env: 'prod' }, call_id: id, execution: 'agent', claim: { run: claim.body.run } },
      'the submission names the run that claims: asked, the call comes back unclaimed, and the run claims once approved');
    assert.equal(submit.headers.authorization, 'Bearer agent-token');
    assert.deepEqual(report.body, { output: { deployed: 'staging' }, run: claim.body.run });
    // claimed before it ran: the claim came before the report
    assert.ok(fake.requests.indexOf(claim) < fake.requests.indexOf(report));
  });
});

test('a call the policy approves comes back claimed with its submission: no separate claim', async () => {
  await withToolgate({
    'POST /v1/calls': (req) => approved('c1', { env: 'qa' }, { claimed: req.body.claim?.run === 'r-1' }),
    'POST /v1/calls/c1/report': (req) => result('c1', { status: 'ok', output: req.body.output, model_message: 'ran' }),
  }, async (tg, fake) => {
    let runs = 0;
    const outcome = await tg.gate({ session: 's1', tool: 'deploy', callId: 'c1', args: { env: 'qa' } }, () => ++runs, { runName: 'r-1' });
    assert.equal(outcome.status, 'ok');
    assert.equal(runs, 1);
    assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.path}`), ['POST /v1/calls', 'POST /v1/calls/c1/report']);
    assert.equal(fake.requests[1].body.run, 'r-1');
  });
});

test('a claim refused in the submission is its error, and the tool does not run', async () => {
  await withToolgate({
    'POST /v1/calls': approved('c1', {}, { claim_refused: { code: 'approval_void', message: 'the session has ended before the agent took the approval' } }),
  }, async (tg, fake) => {
    await assert.rejects(
      tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => assert.fail('ran without its approval')),
      (err) => err instanceof ConflictError && err.code === 'approval_void' && /session has ended/.test(err.message),
    );
    assert.equal(fake.requests.length, 1);
  });
});

test('a toolgate from before claims in the submission gets the call without it, then the claim', async () => {
  await withToolgate({
    'POST /v1/calls': (req) => (req.body.claim ? apiError(400, 'invalid_request', 'claim is not a known field') : approved('c1', {})),
    'POST /v1/calls/c1/claim': { status: 204 },
    'POST /v1/calls/c1/report': (req) => result('c1', { status: 'ok', output: req.body.output, model_message: 'ran' }),
  }, async (tg, fake) => {
    const outcome = await tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => 'done');
    assert.equal(outcome.status, 'ok');
    assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.path}`), ['POST /v1/calls', 'POST /v1/calls', 'POST /v1/calls/c1/claim', 'POST /v1/calls/c1/report']);
    assert.equal(fake.requests[1].body.claim, undefined);
  });
});

test('a denied call never runs, and the model is told the reason', async () => {
  await withToolgate({
    'POST /v1/calls': result('c1', { status: 'denied', reason: 'prod is frozen', decided_by: 'bob', model_message: 'deploy was not run: denied by bob: prod is frozen.' }),
  }, async (tg, fake) => {
    const outcome = await tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => assert.fail('ran a denied call'));
    assert.equal(outcome.status, 'denied');
    assert.equal(outcome.ran, false);
    assert.equal(forModel(outcome), 'deploy was not run: denied by bob: prod is frozen.');
    assert.equal(fake.requests.length, 1);
  });
});

test('a thrown error is reported as error; an abort while running as unknown', async () => {
  const reports = [];
  const routes = {
    'POST /v1/calls': approved('c1', {}),
    'POST /v1/calls/c1/claim': { status: 204 },
    'POST /v1/calls/c1/report': (req) => {
      reports.push(req.body);
      return result('c1', { status: req.body.error ? 'error' : 'unknown', reason: req.body.error ?? req.body.unknown, model_message: 'told' });
    },
  };
  await withToolgate(routes, async (tg) => {
    const failed = await tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => { throw new RangeError('disk full'); });
    assert.equal(failed.status, 'error');
    assert.ok(failed.error instanceof RangeError);
    assert.equal(reports[0].error, 'RangeError: disk full');

    const controller = new AbortController();
    await tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => {
      const err = new Error('aborted');
      err.name = 'AbortError';
      throw err;
    }, { signal: controller.signal });
    assert.match(reports[1].unknown, /may or may not have had its effect/);
  });
});

test('another run holding the approval is already_claimed, and the tool does not run', async () => {
  await withToolgate({
    'POST /v1/calls': approved('c1', {}),
    'POST /v1/calls/c1/claim': apiError(409, 'already_claimed', 'run r-1 took this approval'),
  }, async (tg) => {
    await assert.rejects(
      tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => assert.fail('ran without a claim')),
      (err) => err instanceof ConflictError && err.code === 'already_claimed' && err.status === 409 && err.apiMessage === 'run r-1 took this approval',
    );
  });
});

test('401 and 403 not_your_session are typed errors with the API message', async () => {
  await withToolgate({ 'POST /v1/calls': apiError(401, 'unauthorized', 'a valid bearer token is required') }, async (tg) => {
    await assert.rejects(tg.gate({ session: 's1', tool: 'deploy' }, () => assert.fail('ran')), (err) => err instanceof UnauthorizedError && err.code === 'unauthorized');
  });
  await withToolgate({ 'POST /v1/calls': apiError(403, 'not_your_session', 'the session belongs to another agent') }, async (tg) => {
    await assert.rejects(tg.submit({ session: 's1', tool: 'deploy' }), (err) => err instanceof ForbiddenError
      && err.code === 'not_your_session' && err.message.includes('the session belongs to another agent'));
  });
});

test('bulk_refused carries every refusal', async () => {
  const refused = [{ call_id: 'a', code: 'self_approval', message: 'you asked for it' }];
  await withToolgate({ 'POST /v1/decisions': { status: 409, body: { error: { code: 'bulk_refused', message: '1 of 2 decisions refused', refused } } } }, async (tg) => {
    await assert.rejects(tg.decideAll([{ call_id: 'a', decision: 'approve' }, { call_id: 'b', decision: 'approve' }]),
      (err) => err instanceof ConflictError && err.code === 'bulk_refused' && err.refused[0].code === 'self_approval');
  });
});

test('a malformed answer is a MalformedAnswerError and the tool does not run', async () => {
  await withToolgate({ 'POST /v1/calls': { status: 200, raw: '<html>proxy login</html>' } }, async (tg) => {
    await assert.rejects(tg.gate({ session: 's1', tool: 'deploy' }, () => assert.fail('ran')), (err) => err instanceof MalformedAnswerError && err.code === 'malformed_answer');
  });
  await withToolgate({ 'POST /v1/calls': { status: 202, body: { hello: 'world' } } }, async (tg) => {
    await assert.rejects(tg.gate({ session: 's1', tool: 'deploy' }, () => assert.fail('ran')), MalformedAnswerError);
  });
});

test('toolgate unreachable is an UnreachableError after the retry time', async () => {
  const tg = new Toolgate({ url: 'http://127.0.0.1:1', token: 't', retryFor: 300 });
  await assert.rejects(tg.gate({ session: 's1', tool: 'deploy' }, () => assert.fail('ran')),
    (err) => err instanceof UnreachableError && err.code === 'unreachable' && err.message.includes('127.0.0.1:1'));
});

test('503 with Retry-After is retried; a resent report refused as already reported reads the Result', async () => {
  await withToolgate({
    'POST /v1/calls': [apiError(503, 'unavailable', 'Temporal is not reachable', { 'retry-after': '0' }), approved('c1', {})],
    'POST /v1/calls/c1/claim': { status: 204 },
    'POST /v1/calls/c1/report': [apiError(503, 'unavailable', 'down', { 'retry-after': '0' }), apiError(409, 'not_waiting', 'already reported')],
    'GET /v1/calls/c1': result('c1', { status: 'ok', output: 7, model_message: 'ran' }),
  }, async (tg) => {
    const outcome = await tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => 7);
    assert.equal(outcome.status, 'ok');
    assert.equal(outcome.output, 7);
  });
});

test('a call that ended before (a restarted agent rejoining it) is not run again', async () => {
  await withToolgate({ 'POST /v1/calls': result('c1', { status: 'ok', output: 'done before', model_message: 'ran' }) }, async (tg) => {
    const outcome = await tg.gate({ session: 's1', tool: 'deploy', callId: 'c1' }, () => assert.fail('ran twice'));
    assert.equal(outcome.ran, false);
    assert.equal(outcome.output, 'done before');
  });
});

test('a request sends no traceparent without an active OpenTelemetry span', async () => {
  await withToolgate({ 'POST /v1/calls': result('c1', { status: 'ok', output: {} }) }, async (tg, fake) => {
    await tg.submit({ session: 's1', tool: 'deploy', args: {} });
    assert.equal(fake.requests[0].headers.traceparent, undefined);
    assert.equal(fake.requests[0].headers.authorization, 'Bearer agent-token');
  });
});

test('a derived call ID another agent took first does not stop the victim: gate steps to the next and runs its tool once', async () => {
  const taken = await deriveCallId('s1', 'tc9');
  const next = await deriveCallId('s1', 'tc9', 1);
  assert.equal(next, `${taken}-1`);
  assert.equal(await deriveCallId('s1', 'tc9', 0), taken, 'generation 0 is the ID agents always derived');
  let runs = 0;
  await withToolgate({
    'POST /v1/calls': (req) => (req.body.call_id === taken
      ? apiError(409, 'conflict', `call ID ${taken} is taken by a call with other arguments`)
      : approved(req.body.call_id, { n: 1 }, { claimed: true })),
    [`POST /v1/calls/${next}/report`]: (req) => result(next, { status: 'ok', output: req.body.output, model_message: 'ran' }),
  }, async (tg, fake) => {
    const outcome = await tg.gate({ session: 's1', tool: 'deploy', args: { n: 1 }, toolCallId: 'tc9' }, () => ++runs);
    assert.equal(outcome.status, 'ok');
    assert.equal(outcome.callId, next);
    assert.equal(runs, 1);
    assert.deepEqual(fake.requests.map((r) => r.body?.call_id ?? r.path), [taken, next, `/v1/calls/${next}/report`]);
  });
});

test('gate gives up after a bounded number of taken IDs, and never steps away from an ID the caller chose', async () => {
  await withToolgate({
    'POST /v1/calls': apiError(409, 'conflict', 'call ID is taken'),
  }, async (tg, fake) => {
    await assert.rejects(tg.gate({ session: 's1', tool: 'deploy', args: {}, toolCallId: 'tc10' }, () => assert.fail('never runs')),
      (err) => err instanceof ConflictError && err.code === 'conflict');
    assert.equal(fake.requests.length, 8, 'eight derived IDs tried');
    assert.equal(new Set(fake.requests.map((r) => r.body.call_id)).size, 8);
  });
  await withToolgate({
    'POST /v1/calls': apiError(409, 'conflict', 'call ID is taken'),
  }, async (tg, fake) => {
    await assert.rejects(tg.gate({ session: 's1', tool: 'deploy', args: {}, callId: 'mine' }, () => assert.fail('never runs')), ConflictError);
    assert.equal(fake.requests.length, 1, "the caller's own ID is not replaced");
  });
});

test('on Node.js older than 20 the client says it needs 20', async () => {
  const { execFileSync } = await import('node:child_process');
  // The check runs as the package is imported, under the Node.js version
  // the process reports: each entry point an app imports without a
  // framework says it before anything else can fail less clearly.
  const run = (version, entry) => {
    const script = `Object.defineProperty(process.versions, 'node', { value: ${JSON.stringify(version)} });
      try {
        await import(${JSON.stringify(new URL(`../src/${entry}`, import.meta.url).href)});
        console.log('no error');
      } catch (err) { console.log(err.message); }`;
    return execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }).trim();
  };
  for (const entry of ['index.js', 'ai-sdk.js', 'openai-agents.js', 'claude-agent-sdk.js']) {
    assert.equal(run('18.19.0', entry), 'toolgate: @toolgate/client needs Node.js 20 or later; this is Node.js 18.19.0', entry);
  }
  assert.equal(run('20.0.0', 'index.js'), 'no error');
  assert.equal(run('22.11.0', 'ai-sdk.js'), 'no error');
});
