// Types of @toolgate/client/claude-agent-sdk. The SDK's types are imported
// type-only.
import type { CanUseTool, HookCallbackMatcher, HookEvent, SDKResultMessage } from '@anthropic-ai/claude-agent-sdk';
import type { CallAnswer, Toolgate } from './index.js';

export interface ToolgateOptionsFor {
  /** the toolgate session the calls belong to (one per Claude session) */
  session: string;
  /** how long the PreToolUse hook waits for toolgate before deferring the call (default 2) */
  waitSeconds?: number;
}

/** What to spread into query()'s options. */
export interface ClaudeQueryOptions {
  canUseTool: CanUseTool;
  hooks: Partial<Record<HookEvent, HookCallbackMatcher[]>>;
}

/** toolgateOptions returns canUseTool and the hooks that gate and report Claude's tool calls, to spread into query()'s options. */
export declare function toolgateOptions(tg: Toolgate, options: ToolgateOptionsFor): ClaudeQueryOptions;

/** awaitDeferred waits for toolgate's decision on the call a result deferred; null when it deferred nothing. */
export declare function awaitDeferred(tg: Toolgate, result: SDKResultMessage, options: { session: string; signal?: AbortSignal }): Promise<CallAnswer | null>;
