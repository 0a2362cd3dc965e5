package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/hook"
)

func (a *app) hookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook claude-code|codex",
		Short: "Gate a coding agent's tool calls through toolgate (command hook)",
		Long: `Command hooks for coding agents: configure 'toolgate hook claude-code' for
Claude Code's PreToolUse and PostToolUse events (VS Code Copilot reads the
same output), 'toolgate hook codex' for Codex's. The hook reads the event on
stdin; for PreToolUse it submits the tool call to toolgate, waits up to
--wait for the decision and prints it; for PostToolUse it reports the tool's
outcome to the call that allowed it. See the README, "Coding agents".`,
	}
	cmd.AddCommand(
		a.hookAgentCommand("claude-code", hook.ClaudeCode, "claude-code"),
		a.hookAgentCommand("codex", hook.Codex, "codex"),
	)
	return cmd
}

func (a *app) hookAgentCommand(name string, dialect hook.Dialect, defaultRequester string) *cobra.Command {
	cfg := hook.Config{Dialect: dialect}
	var api apiFlags
	cmd := &cobra.Command{
		Use:   name,
		Short: "Command hook for " + name + "'s PreToolUse and PostToolUse events",
		Long: `Reads one hook event on stdin.
PreToolUse: submits the tool call to toolgate (session = session_id, tool =
tool_name, arguments = tool_input), waits up to --wait and prints the
permission decision. A call still waiting for a person is denied with a
reason telling the model to try again later; the identical retry finds the
same call. When toolgate cannot decide (unreachable, a malformed event) the
call is denied, or with --fail-open handed to the agent's own permission
prompt. Exit status 0 with the decision on stdout; 2 (blocks the tool) only
when stdout cannot be written.
PostToolUse / PostToolUseFailure: reports tool_response (or the error) as
the outcome of the call that allowed that tool_use_id; always exit 0.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = a.logger.Named("hook")
			cfg.Connect = a.hookConnect(api)
			code := cfg.Run(cmd.Context(), os.Stdin, a.stdout, a.stderr)
			if code != 0 {
				return &exitError{code: code, err: fmt.Errorf("")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Wait, "wait", hook.DefaultWait, "how long PreToolUse waits for a decision; keep it below the hook's timeout (Claude Code: 600s)")
	f.StringVar(&cfg.Requester, "requester", defaultRequester, "who asks, over Temporal (over --api the token's name)")
	f.StringVar(&cfg.StateDir, "state-dir", hook.DefaultStateDir(), "where the hook keeps its per-session state")
	f.BoolVar(&cfg.FailOpen, "fail-open", false, "when toolgate cannot decide, ask the user through the agent's permission prompt instead of denying")
	f.BoolVar(&cfg.NoReport, "no-report", false, "calls end at the decision; for setups without the PostToolUse hook")
	a.conn.addFlags(cmd)
	api.add(cmd)
	return cmd
}

// hookConnect opens toolgate the way the other agent verbs do: the HTTP API
// with an agent token when --api is given, else Temporal.
func (a *app) hookConnect(api apiFlags) func(context.Context) (tgclient.Agent, func(), error) {
	return func(context.Context) (tgclient.Agent, func(), error) {
		if api.url != "" {
			if api.token == "" {
				return nil, nil, fmt.Errorf("--api needs --token (or TOOLGATE_TOKEN)")
			}
			return apiclient.New(api.url, api.token), func() {}, nil
		}
		c, closeFn, err := a.client()
		if err != nil {
			return nil, nil, err
		}
		return c, closeFn, nil
	}
}
