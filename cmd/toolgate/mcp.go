package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/mcpgate"
)

func (a *app) mcpCommand() *cobra.Command {
	var (
		wait                     time.Duration
		session, requester, user string
	)
	cmd := &cobra.Command{
		Use:   "mcp [--api URL --token TOKEN] [--wait DUR] [--session S]",
		Short: "Serve toolgate's tools to an MCP client on stdio (Claude Code, Cursor, Codex)",
		Long: `An MCP server on stdin/stdout, for an MCP client to launch from its
configuration: it lists the tools toolgate runs that the policy does not deny
outright (built-in tools, and upstream MCP servers' tools as SERVER__TOOL),
plus toolgate_wait and toolgate_status. Every tools/call becomes a toolgate
call: allowed calls answer with the tool's result, denials with an error
result that gives the reason, and a call that needs a person waits up to
--wait, then answers with its call ID; the model fetches the outcome later
with toolgate_wait {"call_id": "..."}.

It talks to a running toolgate like the other agent verbs: over the HTTP API
with an agent token (--api/TOOLGATE_API and --token/TOOLGATE_TOKEN: the
token names the agent; the way for production), else over Temporal
(--temporal-address/TEMPORAL_ADDRESS; --requester names the agent).
A call whose policy rule says user: true is also asked of the person running
the agent, in the MCP client (elicitation), when the client can ask: over the
HTTP API that person is the agent token's owner, over Temporal --user.
One connection is one toolgate session, unless --session pins one so that
"approve for session" decisions outlive restarts of the client. Logs go to
stderr; stdout carries only MCP.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if session != "" {
				if err := tgclient.ValidateID("session", session); err != nil {
					return usageError("--%v", err)
				}
			}
			if err := tgclient.ValidateID("requester", requester); err != nil {
				return usageError("--%v", err)
			}
			if wait <= 0 {
				return usageError("--wait must be positive")
			}
			if user != "" {
				if a.api.url != "" {
					return usageError("--user is for Temporal: over --api the agent token's owner is the person running the agent")
				}
				if err := tgclient.ValidateID("user", user); err != nil {
					return usageError("--%v", err)
				}
			}
			stopOtel, err := a.conn.otel.start(cmd.Context(), a.logger.Named("otel"))
			if err != nil {
				return err
			}
			defer stopOtel()
			opts := mcpgate.Options{Wait: wait, Session: session, Requester: requester, ActingUser: user, Logger: a.logger.Named("mcp")}
			var agent tgclient.Agent
			if a.api.url != "" {
				if a.api.token == "" {
					return usageError("--api needs --token (or TOOLGATE_TOKEN)")
				}
				agent, opts.AgentNamesRequester = apiclient.New(a.api.url, a.api.token), true
				// A client that connects to a gateway whose token cannot
				// list tools sees no tools and no reason: refuse to start.
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				_, err := agent.Tools(ctx)
				cancel()
				if err != nil {
					return fmt.Errorf("mcp: toolgate at %s refused this agent's token (it must be an agent token): %w", a.api.url, err)
				}
			} else {
				c, closeFn, err := a.client()
				if err != nil {
					return err
				}
				defer closeFn()
				if a.conn.door.signer == nil {
					// Refused before a client connects: its calls would
					// all be refused by the workflows.
					return usageError("%s", noDoorKeyMessage())
				}
				agent = c
			}
			return mcpgate.NewGateway(agent, opts).ServeStdio(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.DurationVar(&wait, "wait", mcpgate.DefaultWait, "how long a tool call waits for a decision before it answers with its call ID (most clients give up at 60s)")
	f.StringVar(&session, "session", "", "toolgate session of every call (default: a new one per connection)")
	f.StringVar(&requester, "requester", mcpgate.DefaultRequester, "who asks, over Temporal (over --api the token names the agent)")
	f.StringVar(&user, "user", "", "the person running the agent, over Temporal: asked in the client about calls whose rule says user: true (over --api: the token's owner)")
	a.conn.addFlags(cmd)
	a.conn.otel.add(cmd)
	a.api.add(cmd)
	return cmd
}
