// The errors the client throws. Every one is a ToolgateError carrying the
// HTTP status and the API's error code, so callers branch on `code`
// (`not_your_session`, `already_claimed`, …) or on the class.

/** toolgate refused a request, or could not be asked. */
export class ToolgateError extends Error {
  /**
   * @param {number} status HTTP status; 0 when toolgate gave no answer
   * @param {string} code the API's error code, or the client's own
   *   (`unreachable`, `malformed_answer`)
   * @param {string} message the API's message
   * @param {{refused?: Array<{call_id?: string, code?: string, message?: string}>, cause?: unknown}} [extra]
   */
  constructor(status, code, message, extra = {}) {
    super(`toolgate: ${message} (${code}${status ? `, HTTP ${status}` : ''})`, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.apiMessage = message;
    if (extra.refused) this.refused = extra.refused;
  }
}

/** 400: the request was malformed; the message names the field. */
export class InvalidRequestError extends ToolgateError {}
/** 401: no valid token. */
export class UnauthorizedError extends ToolgateError {}
/** 403: the token's role, groups or session do not allow it (`not_your_session`, `reserved`, `self_approval`, `read_only`, `forbidden`). */
export class ForbiddenError extends ToolgateError {}
/** 404: an unknown call (another agent's call answers the same). */
export class NotFoundError extends ToolgateError {}
/** 409: the call is not in a state that allows it (`already_decided`, `already_claimed`, `not_waiting`, `approval_void`, `conflict`, `bulk_refused`, …). */
export class ConflictError extends ToolgateError {}
/** 429, 503, 504: Temporal or toolgate is busy or down; worth retrying later. */
export class UnavailableError extends ToolgateError {}
/** No answer: toolgate could not be reached within the client's retry time. */
export class UnreachableError extends ToolgateError {}
/** An answer that is not what the API answers (not JSON, or the wrong shape). */
export class MalformedAnswerError extends ToolgateError {}

const byStatus = {
  400: InvalidRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  409: ConflictError,
  413: InvalidRequestError,
  429: UnavailableError,
  502: UnavailableError,
  503: UnavailableError,
  504: UnavailableError,
};

/** errorFor makes the typed error for an HTTP answer toolgate refused with. */
export function errorFor(status, body, fallback) {
  const err = body && typeof body === 'object' ? body.error : undefined;
  const code = typeof err?.code === 'string' ? err.code : `http_${status}`;
  const message = typeof err?.message === 'string' ? err.message : fallback;
  const Class = byStatus[status] ?? ToolgateError;
  return new Class(status, code, message, { refused: err?.refused });
}
