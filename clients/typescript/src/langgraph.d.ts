// Types of @toolgate/client/langgraph. The LangChain and LangGraph types
// are imported type-only.
import type { StructuredToolInterface } from '@langchain/core/tools';
import type { RunnableConfig } from '@langchain/core/runnables';
import type { Command } from '@langchain/langgraph';
import type { Toolgate } from './index.js';

export interface GateToolsOptions {
  /** the toolgate session the calls belong to (one per conversation or thread) */
  session: string;
  /** how long a tool waits for toolgate before interrupting the graph (default 2) */
  waitSeconds?: number;
}

/** What a toolgate interrupt carries (the interrupt's value). */
export interface ToolgateInterrupt {
  toolgate: { call_id: string; tool: string; args: unknown; status?: string; message?: string };
}

/** gateTools returns the tools behind toolgate, for a ToolNode. */
export declare function gateTools(tg: Toolgate, tools: StructuredToolInterface[], options: GateToolsOptions): StructuredToolInterface[];

/** A compiled graph with a checkpointer (only getState is read). */
export interface GraphWithState {
  getState(config: RunnableConfig): Promise<{ tasks: ReadonlyArray<{ interrupts?: ReadonlyArray<{ id?: string; value?: unknown }> }> }>;
}

/** resumeCommand returns the Command that resumes the thread's toolgate interrupts that toolgate decided, or null while none is. */
export declare function resumeCommand(tg: Toolgate, graph: GraphWithState, config: RunnableConfig, options?: { waitSeconds?: number }): Promise<Command<unknown, any, any> | null>;
