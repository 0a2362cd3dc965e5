import type { ApiError } from './api.js';

type Refusal = NonNullable<NonNullable<ApiError['error']>['refused']>[number];

/** toolgate refused a request, or could not be asked. */
export declare class ToolgateError extends Error {
  constructor(status: number, code: string, message: string, extra?: { refused?: Refusal[]; cause?: unknown });
  /** HTTP status; 0 when toolgate gave no answer */
  readonly status: number;
  /** the API's error code (ErrorCode), or the client's own: unreachable, malformed_answer, wait_timeout, http_<status> */
  readonly code: string;
  /** the API's message, as it sent it */
  readonly apiMessage: string;
  /** with bulk_refused: every refused call, with its code and why */
  readonly refused?: Refusal[];
  /** the request was sent more than once: an earlier attempt may have been applied */
  resent?: boolean;
}
/** 400 (and 413): the request was malformed; the message names the field. */
export declare class InvalidRequestError extends ToolgateError {}
/** 401: no valid token. */
export declare class UnauthorizedError extends ToolgateError {}
/** 403: not_your_session, reserved, self_approval, read_only, forbidden. */
export declare class ForbiddenError extends ToolgateError {}
/** 404: an unknown call (another agent's call answers the same). */
export declare class NotFoundError extends ToolgateError {}
/** 409: already_decided, already_claimed, not_waiting, approval_void, conflict, bulk_refused, … */
export declare class ConflictError extends ToolgateError {}
/** 429, 502, 503, 504: busy or down; worth retrying later. */
export declare class UnavailableError extends ToolgateError {}
/** toolgate could not be reached within the client's retry time. */
export declare class UnreachableError extends ToolgateError {}
/** An answer that is not what the API answers. */
export declare class MalformedAnswerError extends ToolgateError {}
export declare function errorFor(status: number, body: unknown, fallback: string): ToolgateError;
