package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/traceparent"
)

func (a *app) hookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook claude-code|codex|gemini-cli",
		Short: "Gate a coding agent's tool calls through toolgate (command hook)",
		// A hook line that names no agent, or one toolgate does not know,
		// must block, not print help: an agent reads exit 0 as "no
		// decision" and runs the tool.
		Args:               cobra.ArbitraryArgs,
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			problem := "no agent named"
			if len(args) > 0 {
				problem = fmt.Sprintf("unknown agent %q", args[0])
			}
			problem += ": the hook command is 'toolgate hook claude-code', 'toolgate hook codex' or 'toolgate hook gemini-cli', so this tool use is blocked"
			if !isTerminal(os.Stdin) {
				hook.Refuse(os.Stdin, a.stdout, "toolgate hook: "+problem)
			}
			return usageError("hook: %s", problem)
		},
		Long: `Command hooks for coding agents: configure 'toolgate hook claude-code' for
Claude Code's PreToolUse, PostToolUse, PostToolUseFailure and
PermissionDenied events (VS Code Copilot reads the same output),
'toolgate hook codex' for Codex's PreToolUse and PostToolUse, and
'toolgate hook gemini-cli' for Gemini CLI's BeforeTool and AfterTool. The
hook reads the event on stdin; for PreToolUse (BeforeTool) it submits the
tool call to toolgate,
waits up to --wait for the decision and prints it; the other events report
the tool's outcome to the call that allowed it.
'toolgate hook AGENT --print-settings' prints the agent's settings, set to
block the tool whenever the hook cannot answer. A hook line that names no
agent, or one toolgate does not know, blocks (exit 2). See
docs/coding-agents.md.`,
	}
	cmd.AddCommand(
		a.hookAgentCommand("claude-code", hook.ClaudeCode, "claude-code"),
		a.hookAgentCommand("codex", hook.Codex, "codex"),
		a.hookAgentCommand("gemini-cli", hook.GeminiCLI, "gemini-cli"),
	)
	return cmd
}

func (a *app) hookAgentCommand(name string, dialect hook.Dialect, defaultRequester string) *cobra.Command {
	cfg := hook.Config{Dialect: dialect}
	var api apiFlags
	var printSettings bool
	var httpURL string
	var fast, overTemporal bool
	cmd := &cobra.Command{
		Use:   name,
		Short: "Command hook for " + name + "'s tool events",
		Long: `Reads one hook event on stdin.
PreToolUse: submits the tool call to toolgate (session = session_id, tool =
tool_name, arguments = tool_input), waits up to --wait and prints the
permission decision. An approval is claimed in the call's workflow for this
run (tool_use_id) before it is printed, so each approval runs the tool once.
A call still waiting for a person is denied with a reason telling the model
to try again later; the identical retry finds the same call. When toolgate
cannot decide (unreachable, a malformed event, no answer by --wait + 20s)
the call is denied, or for Claude Code with --fail-open handed to its own
permission prompt. Exit status 0 with the decision on stdout; 2 (blocks
the tool) when stdout cannot be written or the flags are wrong.
PostToolUse, PostToolUseFailure, PermissionDenied: report the tool's
outcome (its response, its error, or that it did not run) to the call that
allowed that tool_use_id; always exit 0.
Gemini CLI's BeforeTool and AfterTool are answered the same way, in its
own answer shape; its events name no tool use, so AfterTool is matched to
the run the hook allowed with the same tool and input.
A call whose rule says user: true is, for Claude Code, handed to its own
permission prompt ("ask"): the person running the agent (the agent token's
owner over --api, else --user) decides there, and the hook records it:
approved when the tool's PostToolUse comes, not approved when the turn ends
without it (UserPromptSubmit, Stop, SessionEnd).
--print-settings: print the hook settings for the agent and exit. The hook
they run talks to toolgate's HTTP API at --api URL (default
http://127.0.0.1:7700, toolgate dev's) with the agent token from
TOOLGATE_TOKEN: no keyring on the agent's machine, any project directory.
With --temporal, a hook that talks to Temporal, with the workers' keyring
named by absolute path (for operators). With
--http URL (Claude Code only), the settings of Claude Code's HTTP hooks,
which post each event to toolgate serve or dev at URL: no process per tool
use. With --fast --api URL, the settings run toolgate-hook (cmd/toolgate-hook,
installed next to toolgate), a small command that forwards each event to
toolgate at URL and starts in milliseconds.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if httpURL != "" {
				if !printSettings {
					return usageError("--http goes with --print-settings: an HTTP hook is answered by toolgate serve or dev itself, not by this command")
				}
				return a.printHTTPHookSettings(name, httpURL)
			}
			if fast {
				if !printSettings || api.url == "" {
					return usageError("--fast goes with --print-settings and --api URL: toolgate-hook forwards each event to toolgate serve or dev at URL")
				}
				return a.printFastHookSettings(name, api.url)
			}
			if printSettings {
				if overTemporal {
					return a.printTemporalHookSettings(name)
				}
				return a.printHookSettings(name, api.url)
			}
			if overTemporal {
				return usageError("--temporal goes with --print-settings: without --api the hook talks to Temporal already")
			}
			if cfg.FailOpen && dialect == hook.Codex {
				// Codex has no "ask" for a hook: failing open would run
				// the tool unseen.
				return usageError("hook codex: --fail-open is not available for Codex, whose hooks cannot hand a call to the user: the tool would run unseen, so it is blocked")
			}
			if cfg.ActingUser != "" {
				if api.url != "" {
					return usageError("--user is for Temporal: over --api the agent token's owner is the person running the agent")
				}
				if err := tgclient.ValidateID("user", cfg.ActingUser); err != nil {
					return usageError("--%v", err)
				}
			}
			cfg.Logger = a.logger.Named("hook")
			cfg.Connect = a.hookConnect(api)
			// The agent's trace (TRACEPARENT), to the call over the API or
			// over Temporal.
			a.conn.otel.propagate = hookTraceContext()
			code := cfg.Run(traceparent.FromEnv(cmd.Context()), os.Stdin, a.stdout, a.stderr)
			if code != 0 {
				return &exitError{code: code, err: fmt.Errorf("")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&printSettings, "print-settings", false, "print the agent's hook settings for this command (fail closed) and exit")
	f.BoolVar(&overTemporal, "temporal", false, "with --print-settings: print settings whose hook talks to Temporal with the workers' keyring (for operators), not to the HTTP API")
	f.BoolVar(&fast, "fast", false, "with --print-settings and --api URL: print settings that run toolgate-hook, the fast companion command")
	f.StringVar(&httpURL, "http", "", "with --print-settings: print the settings of HTTP hooks posting to toolgate at this URL (e.g. http://127.0.0.1:7700), for Claude Code")
	f.DurationVar(&cfg.Wait, "wait", hook.DefaultWait, "how long PreToolUse waits for a decision; keep it below the hook's timeout (Claude Code: 600s)")
	f.StringVar(&cfg.Requester, "requester", defaultRequester, "who asks, over Temporal (over --api the token's name)")
	f.StringVar(&cfg.ActingUser, "user", "", "the person running the agent, over Temporal: decides at the agent's prompt the calls whose rule says user: true (over --api: the token's owner)")
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
				return nil, nil, &hook.SetupError{Problem: "the agent token is missing: --api " + api.url + " needs --token TOKEN or the TOOLGATE_TOKEN environment variable"}
			}
			return apiclient.New(api.url, api.token), func() {}, nil
		}
		c, closeFn, err := a.client()
		var usage *exitError
		if errors.As(err, &usage) && usage.code == exitUsage {
			// A missing keyring or a bad flag: toolgate may well be up.
			return nil, nil, &hook.SetupError{Problem: usage.err.Error()}
		}
		if err != nil {
			return nil, nil, err
		}
		if a.conn.door.signer == nil {
			closeFn()
			return nil, nil, &hook.SetupError{Problem: noDoorKeyMessage()}
		}
		return c, closeFn, nil
	}
}

// defaultAPI is where toolgate dev and serve listen unless told otherwise.
const defaultAPI = "http://127.0.0.1:7700"

// printHookSettings prints the settings that run this hook for the agent
// over toolgate's HTTP API at base (default: toolgate dev's), set to block
// the tool whenever the hook cannot answer. Over the API the agent's
// machine needs only the agent token, in TOOLGATE_TOKEN where the agent
// runs: no keyring, from any project directory.
func (a *app) printHookSettings(agent, base string) error {
	if base == "" {
		base = defaultAPI
	}
	if err := checkSettingsURL("--api", base); err != nil {
		return err
	}
	if err := a.printCommandHookSettings(agent, "toolgate hook "+agent+" --api "+base); err != nil {
		return err
	}
	program := map[string]string{"claude-code": "claude", "gemini-cli": "gemini"}[agent]
	if program == "" {
		program = agent
	}
	fmt.Fprintf(a.stderr, "The hook reads the agent token from %s where %s runs (toolgate dev keeps its agent token in .toolgate/tokens.json in its directory: export %s=$(jq -r .agent .toolgate/tokens.json)). Put toolgate on the PATH of the shell that starts %s.\n",
		hook.TokenVariable, program, hook.TokenVariable, program)
	return nil
}

// printTemporalHookSettings prints the settings of a hook that talks to
// Temporal, naming the workers' keyring and the operator's door key by
// absolute path so that the hook works from any project directory.
func (a *app) printTemporalHookSettings(agent string) error {
	keys, err := settingsPath("--keys", a.conn.keys.file, devKeysFile, noKeysMessage)
	if err != nil {
		return err
	}
	door, err := settingsPath("--door-key", a.conn.door.file, devDoorKeyFile, func(string) string { return noDoorKeyMessage() })
	if err != nil {
		return err
	}
	if strings.ContainsAny(a.conn.address+a.conn.namespace, "'\"` \\$;&|<>") {
		return usageError("--temporal-address and --namespace go into a shell command line: give them without spaces, quotes or shell characters")
	}
	command := "toolgate hook " + agent + " --keys " + keys + " --door-key " + door
	if a.conn.address != "127.0.0.1:7233" {
		command += " --temporal-address " + a.conn.address
	}
	if a.conn.namespace != "default" {
		command += " --namespace " + a.conn.namespace
	}
	return a.printCommandHookSettings(agent, command)
}

// settingsPath is the absolute path of a file a printed hook names: the
// flag's, or toolgate dev's in .toolgate (missing says what is missing).
func settingsPath(flag, file, devFile string, missing func(looked string) string) (string, error) {
	if file == "" {
		file = filepath.Join(".toolgate", devFile)
		if _, err := os.Stat(file); err != nil {
			return "", usageError("%s", missing(file))
		}
	}
	abs, err := filepath.Abs(file)
	if err != nil || strings.ContainsAny(abs, "'\"` \\$") {
		return "", usageError("%s: give the file's path without spaces or quotes; it goes into a shell command line", flag)
	}
	return abs, nil
}

// checkSettingsURL refuses a base URL that is not one, or that could not
// stand in a shell command line inside the settings' quotes.
func checkSettingsURL(flag, base string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(base, "'\"` \\$") {
		return usageError("%s %q: give toolgate's base URL, such as %s", flag, base, defaultAPI)
	}
	return nil
}

// printFastHookSettings prints the settings that run toolgate-hook, which
// forwards each event to toolgate at base.
func (a *app) printFastHookSettings(agent, base string) error {
	if err := checkSettingsURL("--api", base); err != nil {
		return err
	}
	return a.printCommandHookSettings(agent, "toolgate-hook "+agent+" --api "+base)
}

// printCommandHookSettings prints the agent's settings for the hook
// command line command.
func (a *app) printCommandHookSettings(agent, command string) error {
	switch agent {
	case "codex":
		_, err := fmt.Fprint(a.stdout, hook.CodexConfig(command))
		return err
	case "gemini-cli":
		if strings.HasPrefix(command, "toolgate hook ") {
			// Gemini CLI shows what a hook that answers nothing wrote on
			// stderr to its user: only what went wrong.
			command += " --log-level warn"
		}
		_, err := a.stdout.Write(hook.GeminiCLISettings(command))
		return err
	}
	_, err := a.stdout.Write(hook.ClaudeCodeSettings(command))
	return err
}

// printHTTPHookSettings prints Claude Code's settings for HTTP hooks
// answered by toolgate at base.
func (a *app) printHTTPHookSettings(agent, base string) error {
	switch agent {
	case "codex":
		return usageError("--http: Codex 0.171.0 has no HTTP hooks (its hook types are command, prompt, agent and MCP tool); use the command hook that 'toolgate hook codex --print-settings' prints")
	case "gemini-cli":
		return usageError("--http: Gemini CLI 0.61.0 has no HTTP hooks (its hooks are commands); use the command hook that 'toolgate hook gemini-cli --print-settings' prints, or --fast for toolgate-hook")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError("--http %q: give toolgate's base URL, such as http://127.0.0.1:7700", base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + server.ClaudeCodeHookPath
	_, err = a.stdout.Write(hook.ClaudeCodeHTTPSettings(u.String()))
	return err
}

// isTerminal reports whether f is a terminal (a person typed the command).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
