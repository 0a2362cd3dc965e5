// Types of @toolgate/client/ai-sdk. The `ai` types are imported type-only:
// the adapter needs `ai` 7 at run time only through the app that uses it.
import type { GenericToolApprovalFunction, ModelMessage, ToolApprovalResponse, ToolSet } from 'ai';
import type { Toolgate } from './index.js';

export interface SessionOptions {
  /** the toolgate session the calls belong to (one per conversation) */
  session: string;
}

export interface WaitOptions extends SessionOptions {
  /** how long to wait for toolgate's decision before answering "still waiting" (default 0) */
  waitSeconds?: number;
}

/** gateTools returns the tools with each execute behind toolgate; tools without execute are kept as they are. */
export declare function gateTools<TOOLS extends ToolSet>(tg: Toolgate, tools: TOOLS, options: SessionOptions): TOOLS;

/** toolgateApproval is a `toolApproval` function: approved or denied as toolgate decided, else the SDK's tool-approval-request. */
export declare function toolgateApproval(tg: Toolgate, options: WaitOptions): GenericToolApprovalFunction<ToolSet, any, any>;

/** approvalResponses returns the tool-approval-response parts of the requests in messages that toolgate decided. */
export declare function approvalResponses(tg: Toolgate, messages: ModelMessage[], options: WaitOptions): Promise<ToolApprovalResponse[]>;
