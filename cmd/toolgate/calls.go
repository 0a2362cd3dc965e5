package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/visible"
	"github.com/toolgate/toolgate/workflows"
)

// calls wraps a Temporal client dialled with a.conn, decoding what it
// reads with the same keys and signing with its door key (none in a
// worker).
func (a *app) calls(tc client.Client) *tgclient.Client {
	return tgclient.New(tc, a.conn.taskQueue).WithNamespace(a.conn.namespace).WithDataConverter(keyring.DataConverter(a.conn.keys.ring)).
		WithDoor(a.conn.door.signer)
}

// client connects and wraps the Temporal client in toolgate's.
func (a *app) client() (*tgclient.Client, func(), error) {
	tc, err := a.conn.dial(a.logger, nil)
	if err != nil {
		return nil, nil, err
	}
	return a.calls(tc), tc.Close, nil
}

func (a *app) callCommand() *cobra.Command {
	var (
		session, callID, requester  string
		wait                        time.Duration
		asJSON, agentRuns, noReport bool
	)
	cmd := &cobra.Command{
		Use:   "call --session S [--id CALL_ID] [--wait DUR] [--agent-runs [--no-report]] [--json] TOOL [ARGS_JSON]",
		Short: "Ask toolgate to run a tool, and wait for the outcome",
		Long: `Submit a tool call and wait until it is decided and run (or for --wait).
ARGS_JSON is a JSON object, or @FILE to read it from a file (- for stdin).
Exit status: 0 the tool ran and succeeded; 3 denied (by policy, a person, a
sticky decision or a timeout); 4 the tool or a hook failed; 5 still waiting
when --wait ran out (the call goes on; see 'toolgate status'); 2 bad usage or
arguments; 1 anything else.

With --agent-runs the caller runs the tool itself: TOOL need not be one of
toolgate's, the command returns (exit 0) as soon as the call is approved and
prints the arguments to run (an approver's edit, if any), and the outcome is
then reported with 'toolgate report CALL_ID --output JSON' (or --error
TEXT); without a report within the rule's report_timeout (default 1h) the
call ends unknown. --no-report ends the call at its approval instead.`,
		Args: rangeArgs(1, "TOOL", "[ARGS_JSON]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := tgclient.CallRequest{CallID: callID, Session: session, Tool: args[0], Requester: requester, NoReport: noReport}
			if agentRuns {
				req.Execution = policy.ExecutionAgent
			}
			if len(args) == 2 {
				raw, err := readArgs(args[1])
				if err != nil {
					return usageError("%v", err)
				}
				req.Args = raw
			}
			if err := req.Validate(); err != nil {
				return usageError("%v", err)
			}
			c, closeFn, err := a.client()
			if err != nil {
				return err
			}
			defer closeFn()
			id, err := c.Submit(cmd.Context(), req)
			var inputErr *tgclient.InputError
			switch {
			case errors.As(err, &inputErr):
				return usageError("%v", err)
			case errors.Is(err, tgclient.ErrNotYourSession):
				return &exitError{code: exitDenied, err: fmt.Errorf("session %s: %w", req.Session, err)}
			case err != nil:
				return err
			}
			return a.awaitOutcome(cmd.Context(), c, id, wait, true, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&session, "session", "", "the agent session the call belongs to (required)")
	f.StringVar(&callID, "id", "", "call ID, for idempotency: the same ID is the same call (default: generated)")
	f.StringVar(&requester, "requester", "cli-agent", "who asks; a requester can never decide its own call")
	f.DurationVar(&wait, "wait", 0, "how long to wait for the outcome; 0 waits until the call is decided and run")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	f.BoolVar(&agentRuns, "agent-runs", false, "the caller runs the tool itself once approved, then reports with 'toolgate report'")
	f.BoolVar(&noReport, "no-report", false, "with --agent-runs: the call ends at its approval; nothing is reported")
	_ = cmd.MarkFlagRequired("session")
	a.conn.addFlags(cmd)
	return cmd
}

func (a *app) statusCommand() *cobra.Command {
	var (
		wait   time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status CALL_ID [--wait DUR] [--json]",
		Short: "Show a call's outcome, or that it still waits",
		Long:  "Show a call's outcome with the same exit status as 'toolgate call' (5: still waiting).",
		Args:  exactArgs("CALL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeFn, err := a.client()
			if err != nil {
				return err
			}
			defer closeFn()
			return a.awaitOutcome(cmd.Context(), c, args[0], wait, wait > 0, asJSON)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the outcome (default: do not wait)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	a.conn.addFlags(cmd)
	return cmd
}

// callWatcher is what awaitOutcome asks of the client (*tgclient.Client).
type callWatcher interface {
	WaitDecided(ctx context.Context, callID string) (tgclient.Status, error)
	Status(ctx context.Context, callID string) (tgclient.Status, error)
}

// awaitOutcome prints the call's Result (waiting up to wait, or without
// bound when wait is 0 and block is set) or its waiting state, and turns
// it into the exit status.
func (a *app) awaitOutcome(ctx context.Context, c callWatcher, callID string, wait time.Duration, block, asJSON bool) error {
	if block {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if wait > 0 {
			wctx, cancel = context.WithTimeout(ctx, wait)
		}
		st, err := c.WaitDecided(wctx, callID)
		cancel()
		switch {
		case err == nil && st.Result != nil:
			return a.printResult(*st.Result, asJSON)
		case err == nil && st.State.Result != nil: // final, the workflow is finishing up
			return a.printResult(*st.State.Result, asJSON)
		case err == nil:
			a.printWaiting(st, asJSON) // approved: the agent runs the tool
			return nil
		case !errors.Is(err, context.DeadlineExceeded):
			return a.callError(err)
		}
	}
	st, err := c.Status(ctx, callID)
	if err != nil {
		return a.callError(err)
	}
	if st.Result != nil {
		return a.printResult(*st.Result, asJSON)
	}
	if st.State.Result != nil { // final, the workflow is finishing up
		return a.printResult(*st.State.Result, asJSON)
	}
	a.printWaiting(st, asJSON)
	if st.State.Status == workflows.StatusApproved {
		return nil
	}
	return &exitError{code: exitStillWaiting, err: errors.New("")}
}

func (a *app) callError(err error) error {
	if errors.Is(err, tgclient.ErrUnknownCall) {
		return &exitError{code: exitFailure, err: err}
	}
	return err
}

// printResult prints the Result (--json: its fields as they are) and
// turns its status into the exit status.
func (a *app) printResult(r workflows.Result, asJSON bool) error {
	if asJSON {
		writeJSON(a.stdout, r)
	} else {
		printResultText(a.stdout, r)
	}
	switch r.Status {
	case workflows.StatusOK:
		return nil
	case workflows.StatusDenied, workflows.StatusTimedOut:
		return &exitError{code: exitDenied, err: errors.New("")}
	case workflows.StatusError:
		if r.InvalidRequest {
			return &exitError{code: exitUsage, err: errors.New("")}
		}
		return &exitError{code: exitToolErr, err: errors.New("")}
	case workflows.StatusUnknown:
		return &exitError{code: exitUnknown, err: errors.New("")}
	default:
		return &exitError{code: exitToolErr, err: errors.New("")}
	}
}

func printResultText(w io.Writer, r workflows.Result) {
	fmt.Fprintf(w, "call %s  session %s  tool %s\nstatus: %s\n", r.CallID, r.Session, r.Tool, r.Status)
	if r.DecidedBy != "" {
		fmt.Fprintf(w, "decision: %s by %s via %s\n", r.Decision, r.DecidedBy, r.Channel)
	}
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", visible.Text(r.Reason))
	}
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", visible.Text(r.Note))
	}
	if len(r.Output) > 0 {
		fmt.Fprintf(w, "output: %s\n", visible.JSON(string(r.Output)))
	}
	printRanAfterEnd(w, r.RanAfterEnd)
}

func (a *app) printWaiting(st tgclient.Status, asJSON bool) {
	w := tgclient.WaitingView(st)
	if asJSON {
		writeJSON(a.stdout, w)
		return
	}
	if w.KeysWait != "" { // the call's arguments are unread yet
		fmt.Fprintf(a.stdout, "call %s\nstatus: %s\nwaiting for keys: %s\n", w.CallID, w.Status, w.KeysWait)
		return
	}
	fmt.Fprintf(a.stdout, "call %s  session %s  tool %s\nstatus: %s\n", w.CallID, w.Session, w.Tool, w.Status)
	if w.LedgerWait != "" {
		fmt.Fprintf(a.stdout, "waiting for the ledger: %s\n", w.LedgerWait)
	}
	switch w.Status {
	case workflows.StatusPending:
		fmt.Fprintf(a.stdout, "waiting for a person: %s\ndeadline: %s\napprove: toolgate approve %s --by NAME\n",
			visible.Text(w.Message), w.Deadline.Local().Format(time.RFC1123), w.CallID)
		if ap := w.Approvals; ap != nil {
			var by []string
			for _, g := range ap.Given {
				by = append(by, g.By)
			}
			fmt.Fprintf(a.stdout, "approvals: %d of %d (%s)\n", len(ap.Given), ap.Needed, strings.Join(by, ", "))
		}
		if w.User != "" {
			fmt.Fprintf(a.stdout, "also asked of: %s, who runs the agent, in the agent's own client\n", w.User)
		}
		if p := w.Preview; p != nil {
			fmt.Fprintf(a.stdout, "%s:\n%s\n", previewHeading(*p), previewBody(*p))
		}
	case workflows.StatusApproved:
		fmt.Fprintf(a.stdout, "decision: %s by %s\nrun it with: %s\nthen report: toolgate report %s --output JSON (or --error TEXT)\n",
			w.Decision, w.DecidedBy, visible.JSON(string(w.Args)), w.CallID)
	case workflows.StatusDenied: // decided, its result not yet written
		fmt.Fprintf(a.stdout, "decision: %s by %s\n", w.Decision, visible.Text(w.DecidedBy))
		if w.Reason != "" {
			fmt.Fprintf(a.stdout, "reason: %s\n", visible.Text(w.Reason))
		}
	}
}

func (a *app) reportCommand() *cobra.Command {
	var (
		output, errText, requester string
		asJSON                     bool
	)
	cmd := &cobra.Command{
		Use:   "report CALL_ID (--output JSON | --error TEXT) [--requester NAME] [--json]",
		Short: "Report how an approved agent-executed call went",
		Long: `Report the outcome of a call submitted with 'toolgate call --agent-runs'
once it was approved and run: --output with the tool's output (JSON, or
@FILE, @- for stdin), or --error with why it failed. Only the requester may
report, once. The after-call checks run on the output, and the final
outcome is printed with the exit status of 'toolgate call'; 1 when the
report is refused (not approved yet, already reported, another requester).`,
		Args: exactArgs("CALL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep := tgclient.Report{Error: errText}
			if output != "" {
				raw, err := readArgs(output)
				if err != nil {
					return usageError("%v", err)
				}
				rep.Output = raw
			}
			if err := rep.Validate(); err != nil {
				return usageError("%v", err)
			}
			c, closeFn, err := a.client()
			if err != nil {
				return err
			}
			defer closeFn()
			if err := c.Report(cmd.Context(), args[0], requester, rep); err != nil {
				var inputErr *tgclient.InputError
				if errors.As(err, &inputErr) {
					return usageError("%v", err)
				}
				return a.callError(err)
			}
			// After the report the call is still "approved" until its
			// after-call checks ran: wait for the Result.
			wctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			r, err := c.Wait(wctx, args[0])
			if err != nil {
				return a.callError(err)
			}
			return a.printResult(r, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&output, "output", "", "the tool's output: JSON, or @FILE (@- for stdin)")
	f.StringVar(&errText, "error", "", "why the tool failed")
	f.StringVar(&requester, "requester", "cli-agent", "who reports: the call's requester")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	a.conn.addFlags(cmd)
	return cmd
}

func (a *app) pendingCommand() *cobra.Command {
	var (
		session, toolName         string
		asJSON, all, withPreviews bool
		pageSize                  int
	)
	cmd := &cobra.Command{
		Use:   "pending [--session S] [--tool T] [--all] [--page-size N] [--preview] [--json]",
		Short: "List calls waiting for a person, oldest first",
		Long: `List the calls waiting for a person, oldest first: the first page, or
every page with --all. The number of waiting calls follows the list (with
--json, which prints the calls as a JSON array, it goes to stderr when
more calls wait than are printed). Over --api only the calls the token may
decide are listed and counted. --preview shows what each call will change
(a diff, the command it runs), read from each call.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			size := pageSize
			switch {
			case size < 0 || size > tgclient.MaxPageSize:
				return usageError("--page-size must be between 1 and %d", tgclient.MaxPageSize)
			case size == 0 && all:
				size = tgclient.MaxPageSize // fewer round trips
			case size == 0:
				size = tgclient.DefaultPageSize
			}
			c, closeFn, err := a.approver()
			if err != nil {
				return err
			}
			defer closeFn()
			calls, total, more, err := pendingPages(cmd.Context(), c, tgclient.ListFilter{Session: session, Tool: toolName}, size, all)
			var inputErr *tgclient.InputError
			if errors.As(err, &inputErr) {
				return usageError("%v", err)
			}
			if err != nil {
				return err
			}
			var previews []*policy.Preview
			if withPreviews {
				for _, p := range calls {
					st, err := c.Status(cmd.Context(), p.CallID)
					var pv *policy.Preview
					if err == nil && st.State != nil && st.State.Request != nil {
						pv = st.State.Request.Preview
					}
					previews = append(previews, pv)
				}
			}
			if asJSON {
				if withPreviews {
					type withPreview struct {
						tgclient.CallSummary
						Preview *policy.Preview `json:"preview,omitempty"`
					}
					out := make([]withPreview, len(calls))
					for i, p := range calls {
						out[i] = withPreview{p, previews[i]}
					}
					writeJSON(a.stdout, out)
				} else {
					writeJSON(a.stdout, calls)
				}
				if more {
					fmt.Fprintf(a.stderr, "the oldest %d of %d waiting calls; --all lists them all\n", len(calls), total)
				}
				return nil
			}
			if len(calls) == 0 {
				fmt.Fprintln(a.stdout, "no calls are waiting")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CALL_ID\tSESSION\tTOOL\tAGE\tARGS\tMESSAGE")
			for _, p := range calls {
				msg := p.Message
				if p.Approvals != "" {
					msg = "[" + p.Approvals + "] " + msg
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.CallID, p.Session, p.Tool,
					time.Since(p.RequestedAt).Round(time.Second), abridge(p.Args, 60), abridge(msg, 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for i, p := range previews {
				if p != nil {
					fmt.Fprintf(a.stdout, "\n%s (%s) — %s:\n%s\n", calls[i].CallID, calls[i].Tool, previewHeading(*p), previewBody(*p))
				}
			}
			if more {
				fmt.Fprintf(a.stdout, "the oldest %d of %d waiting calls; --all lists them all\n", len(calls), total)
			} else {
				fmt.Fprintf(a.stdout, "%d waiting %s\n", total, plural(total, "call", "calls"))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&session, "session", "", "only calls of this session")
	f.StringVar(&toolName, "tool", "", "only calls of this tool")
	f.BoolVar(&all, "all", false, "follow the pages: list every waiting call")
	f.IntVar(&pageSize, "page-size", 0, fmt.Sprintf("calls per page, 1 to %d (default %d; %d with --all)", tgclient.MaxPageSize, tgclient.DefaultPageSize, tgclient.MaxPageSize))
	f.BoolVar(&asJSON, "json", false, "print the calls as a JSON array")
	f.BoolVar(&withPreviews, "preview", false, "show what each call will change (one status read per call)")
	a.conn.addFlags(cmd)
	a.api.add(cmd)
	return cmd
}

// previewBody is a preview's text for the terminal: what a terminal would
// obey (escape sequences, carriage returns, backspaces) or hide (bidi and
// zero-width characters) shown escaped; a long line wraps, as a
// terminal wraps it.
func previewBody(p policy.Preview) string {
	return visible.Text(strings.TrimRight(p.Text, "\n"))
}

// previewHeading names a preview for the terminal.
func previewHeading(p policy.Preview) string {
	h := p.Heading()
	if p.Truncated {
		h += " (cut short)"
	}
	return h
}

// pendingPages reads the first page of waiting calls, or every page when
// all is set. total is the count the last page gave; more says calls were
// left unread.
func pendingPages(ctx context.Context, c approverAPI, f tgclient.ListFilter, size int, all bool) (calls []tgclient.CallSummary, total int64, more bool, err error) {
	calls = []tgclient.CallSummary{}
	req := tgclient.PageRequest{Size: size}
	for {
		page, err := c.Pending(ctx, f, req)
		if err != nil {
			return nil, 0, false, err
		}
		calls, total = append(calls, page.Calls...), page.Total
		switch {
		case page.NextPageToken == "":
			return calls, total, false, nil
		case !all:
			return calls, total, true, nil
		}
		req.Token = page.NextPageToken
	}
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// abridge puts s on one line of at most about n characters for a table:
// its control and invisible characters escaped (before runs of spaces are
// squeezed, so none is lost among them), cut with a mark that says how
// much was left out.
func abridge(s string, n int) string {
	return visible.Cut(strings.Join(strings.Fields(visible.Line(s)), " "), n)
}

func writeJSON(w io.Writer, v any) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	// encoding/json leaves bidi and zero-width characters raw: escape
	// them the JSON way, which keeps the same JSON value.
	_, _ = io.WriteString(w, visible.JSON(b.String()))
}

// readArgs takes the arguments inline, or from @FILE (@- for stdin) when
// they are too large for a command line.
func readArgs(arg string) (json.RawMessage, error) {
	name, fromFile := strings.CutPrefix(arg, "@")
	if !fromFile {
		return json.RawMessage(arg), nil
	}
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, tgclient.MaxArgsBytes+1))
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("read arguments: %w", err)
	}
	return json.RawMessage(b), nil
}
