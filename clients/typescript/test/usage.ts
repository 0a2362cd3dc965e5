// A program written against the client's types: test/api-types.test.js
// compiles it, so a type that no longer matches the API breaks the test.
import { ConflictError, Toolgate, forModel, isFinal, type ErrorCode, type GateOutcome, type Result } from '@toolgate/client';

const tg = new Toolgate({ url: 'http://127.0.0.1:7700', token: 'agent' });

export async function agent(): Promise<string> {
  const answer = await tg.submit({ session: 's1', tool: 'deploy', args: { env: 'prod' }, execution: 'agent' }, { waitSeconds: 5 });
  if (isFinal(answer)) {
    const r: Result = answer;
    return r.model_message ?? r.status ?? '';
  }
  const status: 'evaluating' | 'pending' | 'running' | 'approved' | undefined = answer.status;
  await tg.claim(answer.call_id ?? '', { run: 'r1' });
  const result = await tg.report(answer.call_id ?? '', { output: { ok: true }, run: 'r1' });
  const outcome: GateOutcome<number> = await tg.gate({ session: 's1', tool: 'deploy', toolCallId: 'call_1' }, async (args: { env: string }) => args.env.length);
  const forTheModel: unknown = forModel(outcome);
  void forTheModel;
  return `${status} ${result.decided_by} ${outcome.message}`;
}

export async function approver(): Promise<void> {
  const page = await tg.pending({ session: 's1', pageSize: 10 });
  for (const call of page.calls ?? []) {
    await tg.decide(call.call_id ?? '', { decision: 'approve', args: { env: 'staging' }, comment: 'staging first' });
  }
  await tg.decideAll([{ call_id: 'a', decision: 'deny', reason: 'no' }]);
  const session = await tg.session('s1');
  void session.sticky?.[0]?.decision?.kind;
}

export function codeOf(err: unknown): ErrorCode | string | undefined {
  if (err instanceof ConflictError) {
    const known: ErrorCode = 'already_claimed';
    return err.code === known ? known : err.code;
  }
  return undefined;
}
