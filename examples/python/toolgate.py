"""A single-file client for toolgate's HTTP API (standard library only).

Copy this file next to your agent. It submits tool calls, waits for their
decision and Result (long polls that ride out a toolgate restart), reports
the outcome of the tools the agent runs itself, and puts a Python function
behind an approval gate:

    tg = Client("http://127.0.0.1:7700", token=os.environ["TOOLGATE_TOKEN"], session="s1")

    # A tool toolgate runs (registered in its worker): wait for the Result.
    result = tg.call("read_file", {"path": "README.md"})

    # A tool the agent runs itself: toolgate decides, the function runs on
    # the approved (possibly edited) arguments, its return value is reported.
    @tg.gate("deploy")
    def deploy(service, replicas=1):
        ...
        return {"deployed": service}

    try:
        output = deploy(service="api")
    except Denied as e:
        tell_the_model(e.model_message)      # e.reason is the approver's reason

Every call has an ID chosen here (or by you), so a submit repeated after a
lost answer is the same call, never a second one. Network errors and 429,
502, 503 and 504 answers are retried with backoff for `retry_for` seconds
(a restart of toolgate takes a few); other refusals, 500 included, raise
ToolgateError at once.
"""

import functools
import http.client
import inspect
import json
import socket
import time
import urllib.error
import urllib.request
import uuid

__all__ = ["Client", "ToolgateError", "CallNotOK", "Denied", "Failed"]

# Final statuses of a Result; "approved" (an agent-executed call that waits
# for its report), "pending", "evaluating" and "running" are not final.
FINAL = ("ok", "denied", "timed_out", "error", "unknown")

_RETRY_STATUSES = (429, 502, 503, 504)


class ToolgateError(Exception):
    """toolgate refused a request: HTTP status, error code and message."""

    def __init__(self, status, code, message):
        super().__init__("toolgate: %s (%s, HTTP %d)" % (message, code, status))
        self.status, self.code, self.message = status, code, message


class CallNotOK(Exception):
    """A gated call did not end ok. `result` is toolgate's Result; say
    `model_message` to the model: it tells what happened in its terms."""

    def __init__(self, result):
        self.result = result
        self.status = result.get("status", "")
        self.reason = result.get("reason", "")
        self.model_message = result.get("model_message") or self.reason
        super().__init__("%s %s: %s" % (result.get("tool", "call"), self.status, self.model_message))


class Denied(CallNotOK):
    """The call was denied, by the policy or a person (`reason` says why)."""


class Failed(CallNotOK):
    """The call ended error, timed_out or unknown (it may have run)."""


def _raise_for(result):
    status = result.get("status")
    if status == "ok":
        return
    if status == "denied":
        raise Denied(result)
    raise Failed(result)


class Client:
    """A toolgate HTTP client for one agent token and one session.

    base_url: toolgate's API, e.g. "http://127.0.0.1:7700".
    token: an agent token (sent as a bearer token).
    session: the session calls belong to (sticky decisions, quotas).
    retry_for: how long, in seconds, one request keeps retrying network
        errors and 429/502/503/504 answers (default 300).
    poll: the long-poll of each wait request, in seconds (default 30;
        toolgate's limit is 300).
    """

    def __init__(self, base_url, token, session, retry_for=300.0, poll=30):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.session = session
        self.retry_for = retry_for
        self.poll = poll

    # --- the API -----------------------------------------------------------

    def submit(self, tool, args=None, call_id=None, execution=None, report=True, wait=0):
        """Submit a call and return toolgate's answer: a final Result or the
        waiting call (its "status" says which; see FINAL). execution="agent"
        for a tool the agent runs itself; report=False ends such a call at
        its decision. wait long-polls that many seconds."""
        body = {"session": self.session, "tool": tool, "args": args or {},
                "call_id": call_id or new_call_id()}
        if execution:
            body["execution"] = execution
            if not report:
                body["report"] = False
        return self._request("POST", "/v1/calls?wait=%ds" % wait, body, timeout=wait)[1]

    def get(self, call_id, wait=0):
        """The call's Result, or the call as it waits (long-polls wait s)."""
        return self._request("GET", "/v1/calls/%s?wait=%ds" % (call_id, wait), timeout=wait)[1]

    def wait(self, call_id, until_approved=False, timeout=None):
        """Wait for the call's Result; with until_approved, also return when
        an agent-executed call is approved (status "approved": its "args"
        are the ones to run). timeout (seconds, default none) raises
        TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            poll = self.poll
            if deadline is not None:
                poll = max(1, min(poll, int(deadline - time.monotonic())))
            call = self.get(call_id, wait=poll)
            if call.get("status") in FINAL or (until_approved and call.get("status") == "approved"):
                return call
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("call %s is still %s" % (call_id, call.get("status")))

    def report(self, call_id, output=None, error=None):
        """Report what an approved agent-executed call's tool did: its
        output (any JSON value), or the error it failed with. Returns the
        final Result (after toolgate's after-call checks on the output).
        A call reported twice raises ToolgateError (409), except when a
        retry finds that the first attempt got through."""
        if error is not None:
            body = {"error": str(error) or "failed"}
        else:
            body = {"output": output}
        try:
            status, answer = self._request("POST", "/v1/calls/%s/report" % call_id, body, timeout=35)
        except _Resent as e:
            # The first attempt may have landed before the connection broke:
            # a 409 now means "already reported". Read the Result instead.
            if e.error.status != 409:
                raise e.error
            return self.wait(call_id)
        if status == 202:
            return self.wait(call_id)
        return answer

    def call(self, tool, args=None, call_id=None, timeout=None):
        """Run a tool toolgate runs: submit, then wait for the Result."""
        call_id = call_id or new_call_id()
        answer = self.submit(tool, args, call_id=call_id, wait=min(self.poll, 10))
        if answer.get("status") in FINAL:
            return answer
        return self.wait(call_id, timeout=timeout)

    def run_agent_call(self, tool, args, fn, call_id=None):
        """Put fn behind an agent-executed call: submit, wait for the
        decision, run fn(**approved_args), report its return value (or the
        exception it raised) and return the final Result. A call that was
        not approved returns its Result without running fn."""
        call_id = call_id or new_call_id()
        answer = self.submit(tool, args, call_id=call_id, execution="agent", wait=min(self.poll, 10))
        if answer.get("status") not in FINAL and answer.get("status") != "approved":
            answer = self.wait(call_id, until_approved=True)
        if answer.get("status") in FINAL:
            return answer
        approved = answer.get("args") or {}
        try:
            output = fn(**approved)
        except Exception as e:  # the tool's failure is the call's outcome
            return self.report(call_id, error="%s: %s" % (type(e).__name__, e))
        try:
            json.dumps(output)
        except (TypeError, ValueError) as e:
            return self.report(call_id, error="the output is not JSON: %s" % e)
        return self.report(call_id, output=output)

    def gate(self, tool=None):
        """Decorate a function to run only once toolgate approves it.

        Calling the decorated function submits an agent-executed call of
        `tool` (default: the function's name) with its arguments by name,
        waits for the decision, runs the function on the approved arguments
        (an approver may have edited them), reports its return value, and
        returns the output toolgate recorded (after redaction). A call that
        does not end ok raises Denied or Failed, whose model_message is for
        the model. Pass call_id=... to resume a call after the agent itself
        restarted."""

        def decorate(fn):
            sig = inspect.signature(fn)
            name = tool or fn.__name__

            @functools.wraps(fn)
            def gated(*args, call_id=None, **kwargs):
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                result = self.run_agent_call(name, dict(bound.arguments), fn, call_id=call_id)
                _raise_for(result)
                return result.get("output")

            return gated

        return decorate

    # --- HTTP --------------------------------------------------------------

    def _request(self, method, path, body=None, timeout=0):
        """Send one request, retrying network errors and 429/502/503/504 answers
        for retry_for seconds. Returns (HTTP status, decoded body)."""
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + self.retry_for
        delay, attempt = 0.2, 0
        while True:
            attempt += 1
            req = urllib.request.Request(self.base_url + path, data=data, method=method)
            req.add_header("Authorization", "Bearer " + self.token)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=timeout + 15) as resp:
                    return resp.status, json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as e:
                err = _error_of(e)
                if e.code not in _RETRY_STATUSES or time.monotonic() >= deadline:
                    raise (_Resent(err) if attempt > 1 else err)
                retry_after = e.headers.get("Retry-After")
                if retry_after and retry_after.isdigit():
                    delay = max(delay, float(retry_after))
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout) as e:
                # Refused, reset or cut off mid-answer: toolgate is down or
                # restarting.
                if time.monotonic() >= deadline:
                    raise ToolgateError(0, "unreachable", "toolgate at %s: %s" % (self.base_url, e)) from e
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 5.0)


class _Resent(ToolgateError):
    """A refusal of a request that was sent more than once: the first
    attempt may have been applied. report() tells the two apart; callers
    of _request see a ToolgateError either way."""

    def __init__(self, error):
        super().__init__(error.status, error.code, error.message)
        self.error = error


def _error_of(e):
    try:
        body = json.loads(e.read() or b"{}")
        err = body.get("error") or {}
        return ToolgateError(e.code, err.get("code", ""), err.get("message", e.reason))
    except ValueError:
        return ToolgateError(e.code, "", str(e.reason))


def new_call_id():
    """A fresh call ID (toolgate's identifier rules: letters, digits, ._:@-)."""
    return "py-" + uuid.uuid4().hex
