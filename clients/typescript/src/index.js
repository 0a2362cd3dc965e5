// The toolgate HTTP client: every route of docs/api.md an agent or an
// approver uses, and gate(), the agent-executed flow in one call. No
// dependencies: the runtime's fetch and Web Crypto.
import { ConflictError, InvalidRequestError, MalformedAnswerError, ToolgateError, UnreachableError, errorFor } from './errors.js';

export * from './errors.js';

// @opentelemetry/api, when the application has it: each request carries
// the active span's context as a W3C traceparent, so toolgate's spans of
// the call (execute_tool and its wait) sit in the agent's trace. Optional:
// without it nothing is sent, and nothing else changes.
let otel = null;
try {
  otel = await import('@opentelemetry/api');
} catch {
  // not installed: no trace context
}

/** traceHeaders are the active span's traceparent (and tracestate), or none. */
export function traceHeaders() {
  const span = otel?.trace.getSpan(otel.context.active());
  const sc = span?.spanContext();
  if (!sc || !otel.isSpanContextValid(sc)) return {};
  const headers = { traceparent: `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 1) === 1 ? '01' : '00'}` };
  const state = sc.traceState?.serialize();
  if (state) headers.tracestate = state;
  return headers;
}

/**
 * The statuses of a Result. A WaitingCall's are evaluating, pending,
 * running and approved, and denied or timed_out (with the decision and its
 * reason) for the moment such a call finishes: its tool will not run, so
 * it counts as ended here too.
 */
export const FINAL = Object.freeze(['ok', 'denied', 'timed_out', 'error', 'unknown']);

const retryStatuses = new Set([429, 502, 503, 504]);

/** isFinal says whether a call answer is a Result (the call ended). */
export function isFinal(call) {
  return FINAL.includes(call.status);
}

/**
 * deriveCallId makes toolgate's call ID for a framework's tool call: the
 * same session and tool-call ID give the same call ID, so an agent that
 * restarts with the same state rejoins its call instead of asking again.
 */
export async function deriveCallId(session, toolCallId, generation = 0) {
  if (typeof toolCallId !== 'string' || toolCallId === '') {
    throw new TypeError('toolgate: toolCallId must be a non-empty string');
  }
  const bytes = new TextEncoder().encode(`${session}\u0000${toolCallId}`);
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', bytes));
  const id = 'tc-' + Array.from(digest.subarray(0, 20), (b) => b.toString(16).padStart(2, '0')).join('');
  return generation === 0 ? id : `${id}-${generation}`;
}

/**
 * requireNode20 refuses an older Node.js by name: the client needs its
 * global Web Crypto and fetch, which Node 18 lacks or hides behind flags,
 * and would otherwise fail later with an error that says neither.
 */
function requireNode20() {
  const node = globalThis.process?.versions?.node;
  const major = Number(node?.split('.')[0]);
  if (major > 0 && major < 20) {
    throw new Error(`toolgate: @toolgate/client needs Node.js 20 or later; this is Node.js ${node}`);
  }
}

// At import, so that every entry point says it (deriveCallId, and each
// adapter, which imports this module), not only the constructor.
requireNode20();

/**
 * maxGenerations bounds how many derived call IDs gate tries when others
 * are taken: a call ID another agent submitted first (anyone who knows the
 * session and the tool-call ID can) answers 409 conflict, and gate steps
 * to the next, as the command hook does. A restarted agent steps the same
 * way and rejoins its own call.
 */
const maxGenerations = 8;

export class Toolgate {
  /**
   * @param {object} options
   * @param {string} options.url toolgate's HTTP address, e.g. http://127.0.0.1:7700
   * @param {string} options.token a bearer token (an agent's for submitting; an approver's for deciding)
   * @param {number} [options.retryFor] how long one request retries network errors and 429/502/503/504, in ms (default 300000)
   * @param {number} [options.pollSeconds] the long poll of each wait request, 1 to 300 s (default 30)
   * @param {typeof fetch} [options.fetch] the fetch to use (default: the global one)
   */
  constructor({ url, token, retryFor = 300_000, pollSeconds = 30, fetch: fetchFn } = {}) {
    requireNode20();
    if (!url) throw new TypeError('toolgate: url is required (e.g. http://127.0.0.1:7700)');
    if (!token) throw new TypeError('toolgate: token is required');
    if (!(pollSeconds >= 1 && pollSeconds <= 300)) throw new RangeError('toolgate: pollSeconds must be 1 to 300');
    this.url = url.replace(/\/+$/, '');
    this.token = token;
    this.retryFor = retryFor;
    this.pollSeconds = Math.floor(pollSeconds);
    this.fetch = fetchFn ?? globalThis.fetch;
    if (typeof this.fetch !== 'function') throw new TypeError('toolgate: no fetch: pass options.fetch');
  }

  // --- agents ---------------------------------------------------------------

  /** Submit a call; the Result when it ends within waitSeconds, else the waiting call. */
  async submit(call, { waitSeconds = 0, signal } = {}) {
    const answer = await this.request('POST', '/v1/calls', { body: call, query: { wait: `${waitSeconds}s` }, waitSeconds, signal });
    return callAnswer(answer);
  }

  /** A call's Result, or the call as it waits; long-polls waitSeconds. */
  async status(callId, { waitSeconds = 0, signal } = {}) {
    const answer = await this.request('GET', `/v1/calls/${seg(callId)}`, { query: { wait: `${waitSeconds}s` }, waitSeconds, signal });
    return callAnswer(answer);
  }

  /**
   * Wait until the call ends (its Result), or, with untilApproved, until an
   * agent-executed call is approved (status "approved", args to run).
   * Resumable: it only reads, so a restarted agent waits again the same way.
   */
  async wait(callId, { untilApproved = false, timeoutMs, signal } = {}) {
    const deadline = timeoutMs === undefined ? Infinity : Date.now() + timeoutMs;
    for (;;) {
      const left = deadline - Date.now();
      const waitSeconds = Math.max(1, Math.min(this.pollSeconds, Math.floor(left / 1000)));
      const call = await this.status(callId, { waitSeconds, signal });
      if (isFinal(call) || (untilApproved && call.status === 'approved')) return call;
      if (Date.now() >= deadline) {
        throw new ToolgateError(0, 'wait_timeout', `call ${callId} is still ${call.status} after ${timeoutMs} ms`);
      }
    }
  }

  /** List calls, newest first (an agent: its own). */
  calls(filter = {}, { signal } = {}) {
    return this.request('GET', '/v1/calls', { query: pageQuery(filter), signal });
  }

  /** Withdraw a call that waits for a person (it ends denied). */
  cancel(callId, { signal } = {}) {
    return this.request('POST', `/v1/calls/${seg(callId)}/cancel`, { body: {}, signal });
  }

  /** Take an approved agent-executed call's approval for one run (409 already_claimed: another run has it). */
  async claim(callId, claim, { signal } = {}) {
    await this.request('POST', `/v1/calls/${seg(callId)}/claim`, { body: claim, signal });
  }

  /**
   * Report how an approved agent-executed call's tool went: {output},
   * {error} or {unknown} (with "run": the run that claimed it). Returns the
   * final Result, after toolgate's after-call checks.
   */
  async report(callId, report, { signal } = {}) {
    let answer;
    try {
      answer = await this.request('POST', `/v1/calls/${seg(callId)}/report`, { body: report, signal });
    } catch (err) {
      // A resent report that is refused as already reported got through the
      // first time: the Result is what that report made.
      if (!(err instanceof ConflictError && err.resent)) throw err;
      return this.wait(callId, { signal });
    }
    answer = callAnswer(answer);
    return isFinal(answer) ? answer : this.wait(callId, { signal });
  }

  /** Record that the tool of a call that ended denied or timed out ran anyway, approved at the agent's own prompt. */
  ranAfterEnd(callId, record, { signal } = {}) {
    return this.request('POST', `/v1/calls/${seg(callId)}/ran-after-end`, { body: record, signal });
  }

  /** The person running the agent (the token's owner) decides a call whose rule says user: true. */
  userDecision(callId, decision, { signal } = {}) {
    return this.request('POST', `/v1/calls/${seg(callId)}/user-decision`, { body: decision, signal });
  }

  /** The tools an agent may ask for, as toolgate describes them or in OpenAI's or Anthropic's shape. */
  tools({ format = 'json', signal } = {}) {
    return this.request('GET', '/v1/tools', { query: { format }, signal });
  }

  // --- approvers -------------------------------------------------------------

  /** A page of the waiting calls this token may decide, oldest first. */
  pending(filter = {}, { signal } = {}) {
    return this.request('GET', '/v1/pending', { query: pageQuery(filter), signal });
  }

  /** Decide one call: approve (with edited args), approve_for_session, deny (with reason), deny_always. */
  decide(callId, decision, { signal } = {}) {
    return this.request('POST', `/v1/calls/${seg(callId)}/decision`, { body: decision, signal });
  }

  /**
   * The WebAuthn challenge of a decision of a call whose rule needs a passkey:
   * pass it to navigator.credentials.get, then send decide() with the same
   * decision and webauthn: { credential: cred.toJSON(), expires }.
   */
  passkeyChallenge(callId, decision, { signal } = {}) {
    return this.request('POST', `/v1/calls/${seg(callId)}/passkey-challenge`, { body: decision, signal });
  }

  /** Decide up to 100 calls, all or none (409 bulk_refused lists the refusals in error.refused). */
  decideAll(decisions, { signal } = {}) {
    return this.request('POST', '/v1/decisions', { body: { decisions }, signal });
  }

  /** A session's sticky decisions and waiting calls. */
  session(session, { signal } = {}) {
    return this.request('GET', `/v1/sessions/${seg(session)}`, { signal });
  }

  /** Revoke a session's sticky decision for a tool (agent~TOOL for an agent-executed tool). */
  revokeSticky(session, tool, { signal } = {}) {
    return this.request('DELETE', `/v1/sessions/${seg(session)}/sticky/${seg(tool)}`, { signal });
  }

  /** End a session: its waiting calls end denied, unclaimed approvals are void. */
  endSession(session, { signal } = {}) {
    return this.request('POST', `/v1/sessions/${seg(session)}/end`, { body: {}, signal });
  }

  // --- the decision ledger ---------------------------------------------------

  /** The ledger's latest signed checkpoint (C2SP signed note). */
  auditCheckpoint({ signal } = {}) {
    return this.request('GET', '/v1/audit/checkpoint', { signal, text: true });
  }

  /** The ledger's verifier key, in note format. */
  auditKey({ signal } = {}) {
    return this.request('GET', '/v1/audit/key', { signal, text: true });
  }

  /** Ledger entries start <= index < end, one page: {entries, nextStart}. */
  async auditEntries({ start, end, signal } = {}) {
    const { text, headers } = await this.request('GET', '/v1/audit/entries', { query: { start, end }, signal, text: true, withHeaders: true });
    const entries = text.split('\n').filter((line) => line !== '').map((line) => parseJSON(line, 'a ledger entry'));
    const next = headers.get('x-next-start');
    return { entries, nextStart: next === null ? undefined : Number(next) };
  }

  /**
   * The consistency proof that the latest signed checkpoint extends the
   * tree of size old: {checkpoint, old, proof}. Check it with the log's key
   * you hold, never one the server names.
   */
  auditProof(old, { signal } = {}) {
    return this.request('GET', '/v1/audit/proof', { query: { old }, signal });
  }

  /** A call's receipt: its ledger entries with inclusion proofs against a signed checkpoint. */
  receipt(callId, { signal } = {}) {
    return this.request('GET', `/v1/audit/calls/${seg(callId)}`, { signal });
  }

  // --- the agent-executed flow -----------------------------------------------

  /**
   * gate puts a tool the agent runs itself behind toolgate: it submits an
   * agent-executed call (its ID derived from session and toolCallId, so a
   * restarted agent rejoins it), waits for the decision, claims the
   * approval, runs `run` once with the arguments to run (an approver's edit,
   * if any), reports the outcome and returns it. `run` never runs without a
   * claimed approval. A thrown error is reported as `error`; an abort or
   * timeout while it ran, which may have had its effect, as `unknown`.
   */
  async gate(call, run, { signal, runName } = {}) {
    const { session, tool, args = {}, toolCallId, preview } = call;
    const derived = call.callId === undefined && Boolean(toolCallId);
    let callId = call.callId ?? (derived ? await deriveCallId(session, toolCallId) : 'tc-' + globalThis.crypto.randomUUID());
    const claimedBy = runName ?? `run-${globalThis.crypto.randomUUID()}`;
    const body = { session, tool, args, call_id: callId, execution: 'agent', claim: { run: claimedBy } };
    if (preview) body.preview = preview;
    // A call the policy settles comes back decided and claimed at once.
    let answer;
    for (let generation = 1; ; generation++) {
      try {
        answer = await submitClaiming(this, body, { waitSeconds: this.pollSeconds, signal });
        break;
      } catch (err) {
        // Another request took the derived ID first: the next one is ours.
        if (!(derived && err instanceof ConflictError && err.code === 'conflict' && generation < maxGenerations)) throw err;
        callId = body.call_id = await deriveCallId(session, toolCallId, generation);
      }
    }
    if (answer.claim_refused) throw errorFor(409, { error: answer.claim_refused }, 'the approval could not be taken');
    if (!isFinal(answer) && answer.status !== 'approved') {
      answer = await this.wait(callId, { untilApproved: true, signal });
    }
    if (isFinal(answer)) return outcomeOf(answer, { ran: false, asked: args });

    const toRun = answer.args ?? args;
    if (!answer.claimed) await this.claim(callId, { run: claimedBy }, { signal });

    let report;
    let thrown;
    try {
      const output = await run(toRun, { callId, edited: answer.decision === 'approved_with_edits' || !sameJSON(toRun, args) });
      report = jsonOutput(output);
    } catch (err) {
      thrown = err;
      report = mayHaveRun(err, signal)
        ? { unknown: `the tool was stopped while it ran (${describe(err)}): it may or may not have had its effect` }
        : { error: describe(err) };
    }
    const result = await this.report(callId, { ...report, run: claimedBy });
    return outcomeOf(result, { ran: true, asked: args, ranWith: toRun, error: thrown });
  }

  // --- HTTP ------------------------------------------------------------------

  /**
   * request sends one API request, retrying network errors and
   * 429/502/503/504 answers for retryFor ms (Retry-After honoured), and
   * returns the decoded JSON answer (null for 204).
   */
  async request(method, path, { body, query, waitSeconds = 0, signal, text = false, withHeaders = false } = {}) {
    const url = this.url + path + queryString(query);
    const deadline = Date.now() + this.retryFor;
    let delay = 200;
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      let response;
      try {
        const timeout = AbortSignal.timeout((waitSeconds + 15) * 1000);
        response = await this.fetch(url, {
          method,
          headers: {
            ...traceHeaders(),
            authorization: `Bearer ${this.token}`,
            accept: text ? 'text/plain, application/x-ndjson, application/json' : 'application/json',
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        });
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (Date.now() >= deadline) {
          throw new UnreachableError(0, 'unreachable', `toolgate at ${this.url} did not answer: ${describe(err)}`, { cause: err });
        }
        await sleep(Math.min(delay, Math.max(0, deadline - Date.now())), signal);
        delay = Math.min(delay * 2, 5000);
        continue;
      }
      const raw = await response.text();
      if (response.ok) {
        if (text) return withHeaders ? { text: raw, headers: response.headers } : raw;
        if (response.status === 204 || raw === '') return null;
        return parseJSON(raw, `the answer to ${method} ${path}`);
      }
      let decoded;
      try {
        decoded = JSON.parse(raw);
      } catch {
        decoded = undefined;
      }
      const err = errorFor(response.status, decoded, `HTTP ${response.status} from ${method} ${path}: ${raw.slice(0, 200) || response.statusText}`);
      if (!retryStatuses.has(response.status) || Date.now() >= deadline) {
        if (attempt > 1) err.resent = true;
        throw err;
      }
      const after = Number(response.headers.get('retry-after'));
      await sleep(Math.min(Math.max(delay, Number.isFinite(after) ? after * 1000 : 0), Math.max(0, deadline - Date.now())), signal);
      delay = Math.min(delay * 2, 5000);
    }
  }
}

// submitClaiming submits a call with a claim. A toolgate from before
// claims in the submission refuses the field without taking the call; the
// call is then submitted without it, to be claimed once approved.
async function submitClaiming(tg, body, options) {
  try {
    return await tg.submit(body, options);
  } catch (err) {
    if (!(err instanceof InvalidRequestError && err.apiMessage === 'claim is not a known field')) throw err;
    const { claim: _, ...withoutClaim } = body;
    return tg.submit(withoutClaim, options);
  }
}

/** outcomeOf turns a final Result into what gate returns. */
function outcomeOf(result, { ran, asked, ranWith, error }) {
  const edited = result.original_args !== undefined || result.decision === 'approved_with_edits';
  const message = result.model_message || result.reason || `${result.tool} ended ${result.status}`;
  const outcome = {
    callId: result.call_id,
    status: result.status,
    ran,
    output: result.output,
    message,
    args: ranWith ?? result.args ?? asked,
    edited,
    result,
  };
  if (error !== undefined) outcome.error = error;
  return outcome;
}

/**
 * forModel is what a gated tool hands its model: the output when the call
 * ran as asked, the output and toolgate's sentence when an approver edited
 * the arguments, and toolgate's sentence (the denial's reason, the error)
 * otherwise.
 */
export function forModel(outcome) {
  if (outcome.status !== 'ok') return outcome.message;
  if (outcome.edited) return { output: outcome.output ?? null, toolgate: outcome.message };
  return outcome.output ?? null;
}

function callAnswer(answer) {
  if (!answer || typeof answer !== 'object' || typeof answer.call_id !== 'string' || typeof answer.status !== 'string') {
    throw new MalformedAnswerError(0, 'malformed_answer', `toolgate answered without a call_id and status: ${JSON.stringify(answer)?.slice(0, 200)}`);
  }
  return answer;
}

function jsonOutput(output) {
  if (output === undefined) return { output: null };
  try {
    JSON.stringify(output);
  } catch (err) {
    return { error: `the tool's output is not JSON: ${describe(err)}` };
  }
  return { output };
}

// An abort or timeout while the tool ran may have left its effect.
function mayHaveRun(err, signal) {
  return signal?.aborted || err?.name === 'AbortError' || err?.name === 'TimeoutError';
}

function describe(err) {
  if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
  return String(err);
}

function parseJSON(raw, what) {
  try {
    return JSON.parse(raw);
  } catch (err) {
    throw new MalformedAnswerError(0, 'malformed_answer', `${what} is not JSON: ${raw.slice(0, 200)}`, { cause: err });
  }
}

function sameJSON(a, b) {
  return canonical(a) === canonical(b);
}

function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

function pageQuery({ pageSize, pageToken, minAge, ...rest }) {
  return { ...rest, page_size: pageSize, page_token: pageToken, min_age: minAge };
}

function queryString(query) {
  if (!query) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) params.set(k, String(v));
  const s = params.toString();
  return s ? `?${s}` : '';
}

function seg(value) {
  if (typeof value !== 'string' || value === '') throw new TypeError('toolgate: an ID must be a non-empty string');
  return encodeURIComponent(value);
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}
