// The client's types: every request and answer is a type of api.d.ts,
// generated from toolgate's OpenAPI document.
import type { ApiError, Operations, Result, WaitingCall } from './api.js';

export type * from './api.js';
export * from './errors.js';

type Body<K extends keyof Operations> = Operations[K] extends { body: infer B } ? B : never;
type Answer<K extends keyof Operations, S extends number> = S extends keyof Operations[K]['responses'] ? Operations[K]['responses'][S] : never;
type Query<K extends keyof Operations> = Operations[K] extends { query: infer Q } ? Q : never;

/** The API's error codes, as the OpenAPI document lists them. */
export type ErrorCode = NonNullable<NonNullable<ApiError['error']>['code']>;
export type FinalStatus = Result['status'];
export type CallAnswer = Result | WaitingCall;

export declare const FINAL: readonly NonNullable<FinalStatus>[];
export declare function isFinal(call: CallAnswer): call is Result;
/**
 * traceHeaders are the W3C traceparent (and tracestate) of the active
 * OpenTelemetry span, which every request sends when the application has
 * @opentelemetry/api; none without it or without an active span.
 */
export declare function traceHeaders(): { traceparent?: string; tracestate?: string };
export declare function deriveCallId(session: string, toolCallId: string, generation?: number): Promise<string>;

export type SubmitRequest = Body<'POST /v1/calls'>;
export type ClaimRequest = Body<'POST /v1/calls/{call_id}/claim'>;
export type ReportRequest = Body<'POST /v1/calls/{call_id}/report'>;
export type UserDecisionRequest = Body<'POST /v1/calls/{call_id}/user-decision'>;
export type DecisionRequest = Body<'POST /v1/calls/{call_id}/decision'>;
export type RanAfterEndRequest = Body<'POST /v1/calls/{call_id}/ran-after-end'>;
export type CallFilter = {
  session?: string;
  tool?: string;
  status?: string;
  requester?: string;
  pageSize?: number;
  pageToken?: string;
};
export type PendingFilter = {
  session?: string;
  tool?: string;
  /** e.g. "5m": calls waiting at least this long */
  minAge?: string;
  pageSize?: number;
  pageToken?: string;
};

export interface ToolgateOptions {
  /** toolgate's HTTP address, e.g. http://127.0.0.1:7700 */
  url: string;
  /** a bearer token: an agent's to submit, an approver's to decide */
  token: string;
  /** how long one request retries network errors and 429/502/503/504, in ms (default 300000) */
  retryFor?: number;
  /** the long poll of each wait request, 1 to 300 s (default 30) */
  pollSeconds?: number;
  fetch?: typeof fetch;
}

export interface RequestOptions {
  signal?: AbortSignal;
}

/** A tool call to put behind toolgate with gate(). */
export interface GateCall {
  session: string;
  tool: string;
  args?: Record<string, unknown>;
  /** the framework's tool-call ID: the call ID is derived from it and the session, so a restarted agent rejoins the call */
  toolCallId?: string;
  /** toolgate's call ID, when the agent keeps its own (overrides toolCallId) */
  callId?: string;
  /** what the call will change, shown to the approver as computed_by "agent" */
  preview?: { kind: 'diff' | 'command' | 'text'; text: string };
}

export interface RunContext {
  callId: string;
  /** an approver changed the arguments: the function gets the edited ones */
  edited: boolean;
}

/** What happened to a gated call, and why. */
export interface GateOutcome<T = unknown> {
  callId: string;
  status: NonNullable<FinalStatus>;
  /** the function ran in this gate() (false: denied, timed out, or the call had ended before) */
  ran: boolean;
  /** the output toolgate recorded (after its output redaction) */
  output?: T | unknown;
  /** one plain sentence for the model: what happened and why */
  message: string;
  /** the arguments the tool ran with (or would have) */
  args: unknown;
  /** an approver edited the arguments */
  edited: boolean;
  /** what the function threw, when it threw */
  error?: unknown;
  result: Result;
}

/** What a gated tool hands its model: the output, with toolgate's sentence when edited, or the sentence alone when it did not run ok. */
export declare function forModel(outcome: GateOutcome): unknown;

export declare class Toolgate {
  constructor(options: ToolgateOptions);
  readonly url: string;
  readonly pollSeconds: number;

  submit(call: SubmitRequest, options?: RequestOptions & { waitSeconds?: number }): Promise<Answer<'POST /v1/calls', 200> | Answer<'POST /v1/calls', 202>>;
  status(callId: string, options?: RequestOptions & { waitSeconds?: number }): Promise<Answer<'GET /v1/calls/{call_id}', 200> | Answer<'GET /v1/calls/{call_id}', 202>>;
  wait(callId: string, options: RequestOptions & { untilApproved: true; timeoutMs?: number }): Promise<CallAnswer>;
  wait(callId: string, options?: RequestOptions & { untilApproved?: false; timeoutMs?: number }): Promise<Result>;
  calls(filter?: CallFilter, options?: RequestOptions): Promise<Answer<'GET /v1/calls', 200>>;
  cancel(callId: string, options?: RequestOptions): Promise<Answer<'POST /v1/calls/{call_id}/cancel', 200>>;
  claim(callId: string, claim: ClaimRequest, options?: RequestOptions): Promise<void>;
  report(callId: string, report: ReportRequest, options?: RequestOptions): Promise<Result>;
  ranAfterEnd(callId: string, record: RanAfterEndRequest, options?: RequestOptions): Promise<Answer<'POST /v1/calls/{call_id}/ran-after-end', 200>>;
  userDecision(callId: string, decision: UserDecisionRequest, options?: RequestOptions): Promise<Answer<'POST /v1/calls/{call_id}/user-decision', 200>>;
  tools(options?: RequestOptions & { format?: Query<'GET /v1/tools'>['format'] }): Promise<Answer<'GET /v1/tools', 200>>;

  pending(filter?: PendingFilter, options?: RequestOptions): Promise<Answer<'GET /v1/pending', 200>>;
  decide(callId: string, decision: DecisionRequest, options?: RequestOptions): Promise<Answer<'POST /v1/calls/{call_id}/decision', 200>>;
  passkeyChallenge(callId: string, decision: DecisionRequest, options?: RequestOptions): Promise<Answer<'POST /v1/calls/{call_id}/passkey-challenge', 200>>;
  decideAll(decisions: Body<'POST /v1/decisions'>['decisions'], options?: RequestOptions): Promise<Answer<'POST /v1/decisions', 200>>;
  session(session: string, options?: RequestOptions): Promise<Answer<'GET /v1/sessions/{session}', 200>>;
  revokeSticky(session: string, tool: string, options?: RequestOptions): Promise<Answer<'DELETE /v1/sessions/{session}/sticky/{tool}', 200>>;
  endSession(session: string, options?: RequestOptions): Promise<Answer<'POST /v1/sessions/{session}/end', 200>>;

  auditCheckpoint(options?: RequestOptions): Promise<string>;
  auditKey(options?: RequestOptions): Promise<string>;
  auditEntries(options?: RequestOptions & { start?: number; end?: number }): Promise<{ entries: Array<{ index: number; entry: unknown }>; nextStart?: number }>;
  auditProof(old: number, options?: RequestOptions): Promise<Answer<'GET /v1/audit/proof', 200>>;
  receipt(callId: string, options?: RequestOptions): Promise<Answer<'GET /v1/audit/calls/{call_id}', 200>>;

  gate<T>(call: GateCall, run: (args: any, context: RunContext) => T | Promise<T>, options?: RequestOptions & { runName?: string }): Promise<GateOutcome<T>>;

  request(method: string, path: string, options?: RequestOptions & { body?: unknown; query?: Record<string, unknown>; waitSeconds?: number }): Promise<unknown>;
}
