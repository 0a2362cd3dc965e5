// What the examples share: toolgate's address and the agent's token from
// the environment, two tools with a visible side effect, the agent's state
// in a file (what a real app keeps in its database), and the script of the
// stand-in model (which tool calls it makes), so that the test suite runs
// every example as it is. Replace `script` with your model.
import { appendFileSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { Toolgate } from '@toolgate/client';

export const env = {
  url: process.env.TOOLGATE_URL ?? 'http://127.0.0.1:7700',
  token: required('TOOLGATE_TOKEN'),
  session: process.env.TOOLGATE_SESSION ?? 'example',
  state: process.env.EXAMPLE_STATE ?? 'example-state.json',
  effects: process.env.EXAMPLE_EFFECTS ?? 'example-effects.jsonl',
};

export const tg = new Toolgate({ url: env.url, token: env.token });

/**
 * The tool calls the stand-in model makes, in its first turn: [{id, tool, args}].
 * A real model names its tool calls anew each time it is asked, so the
 * stand-in does too from the second attempt (EXAMPLE_ATTEMPT) of the same
 * run on: an app that lost its state after a restart would ask the model
 * again and get calls toolgate has not seen.
 */
const attempt = Number(process.env.EXAMPLE_ATTEMPT ?? 1);
export const script = JSON.parse(process.env.EXAMPLE_SCRIPT ?? '[{"id":"call-1","tool":"deploy","args":{"service":"web","env":"prod"}}]')
  .map((c) => (attempt > 1 ? { ...c, id: `${c.id}-attempt${attempt}` } : c));

/** The tools themselves: each run leaves a line in the effects file. */
export const run = {
  deploy: ({ service, env: target }) => effect('deploy', { service, env: target }, { deployed: service, env: target }),
  lookup: ({ service }) => effect('lookup', { service }, { service, status: 'healthy' }),
};

export const descriptions = {
  deploy: 'Deploy a service to an environment',
  lookup: 'Look up how a service is doing',
};

function effect(tool, args, output) {
  appendFileSync(env.effects, JSON.stringify({ tool, args }) + '\n');
  return output;
}

export function loadState(initial) {
  try {
    return JSON.parse(readFileSync(env.state, 'utf8'));
  } catch {
    return initial;
  }
}

/** saveState writes the state whole or not at all. */
export function saveState(state) {
  writeFileSync(env.state + '.tmp', JSON.stringify(state));
  renameSync(env.state + '.tmp', env.state);
}

let saidWaiting = false;

/** waiting says, once, that the state is saved and the app waits for a person: stopping it now loses nothing. */
export function waiting() {
  if (!saidWaiting) console.log(JSON.stringify({ waiting: true }));
  saidWaiting = true;
}

/** What the model was told of each tool call, printed as the example's last line. */
export function finish(told) {
  console.log(JSON.stringify({ done: true, told }));
}

/** The stand-in model's last turn: what it was told, as text. */
export function summary(told) {
  return JSON.stringify(told);
}

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: an agent token of toolgate's (see toolgate token new)`);
  return v;
}
