// Types of @toolgate/client/opencode. opencode's plugin types are imported
// type-only.
import type { Plugin } from '@opencode-ai/plugin';

export interface ToolgatePluginOptions {
  /** toolgate's HTTP address (default: TOOLGATE_URL) */
  url?: string;
  /** an agent token (default: TOOLGATE_TOKEN) */
  token?: string;
  /** how long a tool use waits for toolgate's decision before it is blocked, in seconds (default: TOOLGATE_WAIT_SECONDS, else 540) */
  waitSeconds?: number;
  /** how long one request retries network errors and 429/502/503/504, in ms (default 60000, or 1 s less than waitSeconds when that is shorter) */
  retryFor?: number;
  /** the fetch to use (default: the global one) */
  fetch?: typeof fetch;
}

/**
 * The opencode server plugin: every tool use waits for toolgate's decision
 * in tool.execute.before (blocked, with toolgate's sentence for the model,
 * unless approved), runs with the approver's edited arguments, and is
 * reported in tool.execute.after.
 */
export declare const ToolgatePlugin: Plugin;
