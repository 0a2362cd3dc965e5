// Command toolgate runs durable approval gates for AI-agent tool calls:
// `toolgate dev` starts everything in one process (embedded Temporal,
// worker, HTTP listener); the other verbs are for agents and approvers.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/logging"
	"github.com/toolgate/toolgate/sandbox"
	"github.com/toolgate/toolgate/server"
)

// Exit statuses, as documented in the README.
const (
	exitOK           = 0
	exitFailure      = 1 // anything else: Temporal unreachable, refused decision, ...
	exitUsage        = 2 // bad usage or bad arguments
	exitDenied       = 3 // denied by policy, person, sticky decision or timeout
	exitToolErr      = 4 // the tool or a hook failed
	exitStillWaiting = 5 // --wait ran out; the call goes on
	exitUnknown      = 6 // the tool's attempt was lost: it may or may not have run
)

func main() {
	sandbox.Enter() // started as a tool's sandbox: confine, then become the tool
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitError carries an exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// run is the whole program, testable without a process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &app{stdout: stdout, stderr: stderr}
	root := app.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if app.logger != nil {
		_ = app.logger.Sync()
	}
	if err == nil {
		return exitOK
	}
	if isNoDoorKey(err) {
		fmt.Fprintln(stderr, "toolgate:", noDoorKeyMessage())
		return exitUsage
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "toolgate:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "toolgate:", err)
	if isFlagError(err) {
		return exitUsage
	}
	return exitFailure
}

// app holds what the commands share: output streams, global flags and
// the logger built from them.
type app struct {
	stdout, stderr io.Writer
	logLevel       string
	logJSON        bool
	conn           connection
	logger         *zap.Logger
	tokens         *server.Tokens
	api            apiFlags
	// codecOrigins may read the codec endpoint's answers (CORS).
	codecOrigins []string
	// codecRate is the codec's decode requests per person per minute.
	codecRate int
	// metrics receives toolgate's own metrics in a process that runs.
	metrics client.MetricsHandler
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "toolgate",
		Short: "Durable approval gates for AI-agent tool calls, on Temporal",
		Long: `toolgate makes every tool call of an AI agent a Temporal workflow: a policy
approves, denies or asks a person; the person may answer hours later; the
tool runs once; the agent always gets a result that says what happened.

Start everything on one machine with 'toolgate dev', then use the other
verbs from a second terminal.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logging.New(a.logLevel, a.logJSON)
			if err != nil {
				return usageError("%v", err)
			}
			a.logger = logger
			return nil
		},
	}
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().BoolVar(&a.logJSON, "log-json", false, "write logs as JSON lines")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	root.AddCommand(
		a.devCommand(),
		a.workerCommand(),
		a.serveCommand(),
		a.callCommand(),
		a.statusCommand(),
		a.reportCommand(),
		a.pendingCommand(),
		a.approveCommand(),
		a.denyCommand(),
		a.cancelCommand(),
		a.sessionCommand(),
		a.tokenCommand(),
		a.doorsCommand(),
		a.benchCommand(),
		a.healthCommand(),
		a.policyCommand(),
		a.hookCommand(),
		a.toolsCommand(),
		a.mcpCommand(),
		a.namespaceCommand(),
		a.auditCommand(),
		a.statsCommand(),
		a.keysCommand(),
	)
	return root
}

// isFlagError recognises cobra's own usage errors, which it does not type.
func isFlagError(err error) bool {
	for _, prefix := range []string{"unknown command", "unknown shorthand flag", "required flag"} {
		if strings.HasPrefix(err.Error(), prefix) {
			return true
		}
	}
	return false
}

// exactArgs is cobra.ExactArgs with a usage exit status and the names of
// the arguments in the message.
func exactArgs(names ...string) cobra.PositionalArgs {
	return rangeArgs(len(names), names...)
}

// rangeArgs accepts at least min and at most len(names) arguments.
func rangeArgs(min int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > len(names) {
			return usageError("%s takes %s (got %s); see '%s --help'", cmd.Name(), argNames(names), gotArgs(args), cmd.CommandPath())
		}
		return nil
	}
}

// argNames says what a verb takes: "no arguments", or the names.
func argNames(names []string) string {
	if len(names) == 0 {
		return "no arguments"
	}
	return strings.Join(names, " ")
}

// gotArgs says what a verb was given: "none", or how many and the first
// few, quoted, so an argument the shell split or a stray word shows.
func gotArgs(args []string) string {
	const shown = 3
	if len(args) == 0 {
		return "none"
	}
	quoted := make([]string, 0, shown+1)
	for i, arg := range args {
		if i == shown {
			quoted = append(quoted, "…")
			break
		}
		quoted = append(quoted, strconv.Quote(arg))
	}
	return fmt.Sprintf("%d: %s", len(args), strings.Join(quoted, " "))
}
