// Types of @toolgate/client/openai-agents. The Agents SDK types are
// imported type-only: the adapter needs the SDK at run time only through
// the app that uses it.
import type { RunState, Tool } from '@openai/agents';
import type { Toolgate } from './index.js';

export interface GateToolsOptions {
  /** the toolgate session the calls belong to (one per conversation) */
  session: string;
  /** how long needsApproval waits for toolgate before interrupting the run (default 2) */
  waitSeconds?: number;
}

export interface ResolveOptions {
  session: string;
  /** how long to wait for each interruption's decision (default 0) */
  waitSeconds?: number;
}

/** gateTools returns the function tools behind toolgate; other tools are kept as they are. */
export declare function gateTools<T extends Tool<any>>(tg: Toolgate, tools: T[], options: GateToolsOptions): T[];

/** resolveInterruptions approves or rejects the state's interruptions toolgate decided; it returns how many still wait. */
export declare function resolveInterruptions(tg: Toolgate, state: RunState<any, any>, options: ResolveOptions): Promise<number>;
