// opencode (`opencode-ai`) behind toolgate: a server plugin.
//
// opencode calls tool.execute.before for every tool use, then runs the tool
// with the arguments that hook leaves in output.args; a hook that throws
// blocks the tool, and opencode hands the model the error's message. So:
//   - tool.execute.before runs gate() for the use: it submits an
//     agent-executed call (its ID derived from opencode's session ID and the
//     tool-call ID), waits for the decision and claims the approval, then
//     puts the arguments to run (an approver's edit) into output.args and
//     returns. Denied, not decided in time, or toolgate not answering, it
//     throws toolgate's sentence for the model: the tool never runs;
//   - tool.execute.after (opencode calls it when the tool succeeded) reports
//     the output; a failed tool shows up as a tool part in state "error" on
//     the event bus, and that is reported as the error.
// Every run name is new to this process, so a restarted opencode that
// replays a tool-call ID whose approval was already taken is refused by
// toolgate's claim: an approval runs a tool once.
import { Toolgate } from './index.js';

const env = globalThis.process?.env ?? {};

/**
 * ToolgatePlugin is the opencode plugin. Options (opencode passes a plugin's
 * options from opencode.json) win over the environment: url
 * (TOOLGATE_URL), token (TOOLGATE_TOKEN), waitSeconds (TOOLGATE_WAIT_SECONDS,
 * default 540: how long a tool use waits for toolgate's decision before it
 * is blocked).
 */
export async function ToolgatePlugin(_input, options = {}) {
  const waitSeconds = Number(options.waitSeconds ?? env.TOOLGATE_WAIT_SECONDS ?? 540);
  let tg;
  let unusable;
  try {
    if (!(waitSeconds > 0)) throw new RangeError('waitSeconds (TOOLGATE_WAIT_SECONDS) must be a positive number of seconds');
    tg = new Toolgate({
      url: options.url ?? env.TOOLGATE_URL,
      token: options.token ?? env.TOOLGATE_TOKEN,
      pollSeconds: Math.min(30, Math.max(1, Math.floor(waitSeconds))),
      // Give up on an unreachable toolgate before the deadline, so that the
      // model hears that it did not answer rather than only the deadline.
      retryFor: options.retryFor ?? Math.min(60_000, Math.max(500, waitSeconds * 1000 - 1000)),
      fetch: options.fetch,
    });
  } catch (err) {
    // Never throw here: opencode would run without the plugin, every tool
    // ungated. Each tool use is blocked with the reason instead.
    unusable = `toolgate: the opencode plugin is not configured (${err.message}; set TOOLGATE_URL and TOOLGATE_TOKEN), so every tool is blocked`;
  }
  const running = new Map(); // sessionID + callID -> the tool gate() let run

  return {
    'tool.execute.before': async (input, output) => {
      if (unusable) throw new Error(unusable);
      const key = `${input.sessionID}\u0000${input.callID}`;
      if (!input.callID) throw new Error(`toolgate: opencode gave no call ID for this ${input.tool} call, so it cannot be gated`);
      const asked = output.args ?? {};
      // The deadline covers the decision, not the tool's run.
      const decision = new AbortController();
      const timer = setTimeout(() => decision.abort(new Error(`no decision from toolgate within ${waitSeconds} s`)), waitSeconds * 1000);
      let allow;
      const allowed = new Promise((resolve) => { allow = resolve; });
      const outcome = tg.gate(
        { session: input.sessionID, tool: input.tool, args: asked, toolCallId: input.callID },
        (args, { edited }) => {
          clearTimeout(timer);
          return new Promise((resolve, reject) => {
            running.set(key, { resolve, reject, edited, args, outcome });
            allow(args);
          });
        },
        { signal: decision.signal },
      );
      // After the tool was let run, the report goes on in the background.
      outcome.catch(() => {}).finally(() => { clearTimeout(timer); running.delete(key); });
      const first = await Promise.race([
        allowed.then((args) => ({ args })),
        outcome.then((result) => ({ result }), (error) => ({ error })),
      ]);
      if (first.error) throw new Error(`toolgate: ${input.tool} was not run: ${reason(first.error)}`);
      if (first.result) throw new Error(blocked(first.result));
      replaceContents(asked, first.args);
      output.args = asked; // opencode runs the object it passed in: mutated in place
    },

    'tool.execute.after': async (input, output) => {
      const key = `${input.sessionID}\u0000${input.callID}`;
      const run = running.get(key);
      if (!run) return; // not a call this process let run
      running.delete(key);
      if (run.edited) {
        output.output = `toolgate: an approver changed the arguments to ${JSON.stringify(run.args)}; this is what ran.\n${output.output ?? ''}`;
      }
      run.resolve({ title: output.title, output: output.output });
      // Wait for the report, so a run that ends now (opencode run) sends it.
      await run.outcome.catch(() => {});
    },

    // A tool that failed: opencode skips tool.execute.after and publishes
    // the tool part in state "error".
    event: async ({ event }) => {
      const part = event?.type === 'message.part.updated' ? event.properties?.part : undefined;
      if (part?.type !== 'tool' || part.state?.status !== 'error') return;
      const key = `${part.sessionID}\u0000${part.callID}`;
      const run = running.get(key);
      if (!run) return;
      running.delete(key);
      const err = new Error(String(part.state.error ?? 'the tool failed'));
      if (/abort|interrupt/i.test(err.message)) err.name = 'AbortError'; // it may have had its effect: reported unknown
      run.reject(err);
    },
  };
}

// blocked is the model's sentence for a call gate() did not run.
function blocked(outcome) {
  if (outcome.status === 'ok' || outcome.status === 'approved') {
    return `toolgate: call ${outcome.callId} already ran; an approval runs a tool once, so it was not run again`;
  }
  return outcome.message;
}

function reason(err) {
  return (err?.message || String(err)).replace(/^toolgate: /, '');
}

// replaceContents makes target hold exactly source's keys and values.
function replaceContents(target, source) {
  if (target === source) return;
  for (const k of Object.keys(target)) delete target[k];
  Object.assign(target, source);
}
