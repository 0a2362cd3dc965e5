package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/rules"
	"github.com/toolgate/toolgate/visible"
	"github.com/toolgate/toolgate/workflows"
)

func (a *app) policyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Check a policy file, try it on a call, or see what it would change"}
	var workspace string
	load := func(file string) (*rules.Policy, error) {
		p, err := rules.Load(file, rules.CheckOptions(workspace))
		if err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
		return p, nil
	}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate the file and run every rule's examples",
		Args:  exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: ok (version %s, checked with workspace %s)\n", args[0], p.Version(), p.Workspace())
			return nil
		},
	}
	var session string
	eval := &cobra.Command{
		Use:   "eval FILE TOOL [ARGS_JSON]",
		Short: "Print the verdict for one call and the rule that decided it",
		Args:  rangeArgs(2, "FILE", "TOOL", "[ARGS_JSON]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := load(args[0])
			if err != nil {
				return err
			}
			call := policy.Call{ID: "eval", Session: session, Tool: args[1], Args: json.RawMessage("{}"), Requester: "cli"}
			if len(args) == 3 {
				if !json.Valid([]byte(args[2])) {
					return usageError("ARGS_JSON is not valid JSON")
				}
				call.Args = json.RawMessage(args[2])
			}
			writeJSON(a.stdout, p.Evaluate(call))
			return nil
		},
	}
	eval.Flags().StringVar(&session, "session", "cli", "session of the call")
	var explainJSON bool
	explain := &cobra.Command{
		Use:   "explain FILE",
		Short: "List the rules in the order they are tried, with what each grants its calls' processes",
		Long: `List every rule of FILE in the order toolgate tries them (deny, then ask,
then allow, then the default): the tools it matches, its condition, what
it does, and how the processes of the calls it allows or asks about run
(the shell tool's sandbox: what they write and read beyond the system's
directories, and whether they reach the network). A worker started with
--unsandboxed-tools runs them unconfined whatever the rules say.`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := load(args[0])
			if err != nil {
				return err
			}
			if explainJSON {
				writeJSON(a.stdout, p.Explain())
				return nil
			}
			writeExplained(a.stdout, p.Explain())
			return nil
		},
	}
	explain.Flags().BoolVar(&explainJSON, "json", false, "print JSON")
	var since time.Duration
	whatif := &cobra.Command{
		Use:   "whatif FILE [--since 7d]",
		Short: "Replay recorded calls against the file and show which verdicts would change",
		Long: `Read the calls recorded on the Temporal server (each call's request from the
first event of its workflow history, and the verdict it got), evaluate them
against FILE, and print every call whose verdict would change and a summary
of the changes (allow -> ask, ask -> deny, ...). Nothing is changed.`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := load(args[0])
			if err != nil {
				return err
			}
			c, closeFn, err := a.client()
			if err != nil {
				return err
			}
			defer closeFn()
			return a.whatIf(cmd, c, p, since)
		},
	}
	whatif.Flags().DurationVar(&since, "since", 7*24*time.Hour, "how far back to look (e.g. 24h, 168h)")
	a.conn.addFlags(whatif)
	for _, sub := range []*cobra.Command{check, eval, explain, whatif} {
		sub.Flags().StringVar(&workspace, "workspace", "", "workspace directory the file's conditions and guards use, when the file sets none (default: the current directory)")
		cmd.AddCommand(sub)
	}
	return cmd
}

// whatIf compares each recorded call's verdict with the candidate file's.
func (a *app) whatIf(cmd *cobra.Command, c *tgclient.Client, p *rules.Policy, since time.Duration) error {
	ctx := cmd.Context()
	calls, err := c.List(ctx, tgclient.ListFilter{Since: time.Now().Add(-since), Limit: 10000})
	if err != nil {
		return err
	}
	changes := map[string]int{}
	evaluated := 0
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL_ID\tSESSION\tTOOL\tWAS\tWOULD BE\tRULE")
	for _, s := range calls {
		was := recordedVerdict(s)
		if was == "" {
			continue
		}
		req, err := c.Request(ctx, s.CallID)
		if err != nil {
			return err
		}
		evaluated++
		now := p.Evaluate(req)
		if string(now.Action) == was {
			continue
		}
		changes[was+" -> "+string(now.Action)]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.CallID, s.Session, s.Tool, was, now.Action, now.Rule)
	}
	_ = tw.Flush()
	keys := make([]string, 0, len(changes))
	for k := range changes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	total := 0
	for _, k := range keys {
		total += changes[k]
	}
	fmt.Fprintf(a.stdout, "\n%d of %d calls in the last %s would be decided differently by %s (version %s)\n", total, evaluated, since, p.Name(), p.Version())
	for _, k := range keys {
		fmt.Fprintf(a.stdout, "  %-14s %d\n", k, changes[k])
	}
	return nil
}

// recordedVerdict is what the policy said about a recorded call: allow or
// deny when the policy itself decided; ask when a person, a handler or a
// sticky decision did, or one is awaited; "" when the call never reached a
// verdict (unknown tool, bad arguments).
func recordedVerdict(s tgclient.CallSummary) string {
	switch {
	case s.Status == string(workflows.StatusPending) || (s.DecidedBy != "" && s.Channel != "policy"):
		return string(rules.ActionAsk)
	case s.Channel == "policy" && s.Status == string(workflows.StatusDenied):
		return string(rules.ActionDeny)
	case s.Channel == "policy":
		return string(rules.ActionAllow)
	}
	return ""
}

// writeExplained prints the rules of `policy explain`, one block each.
func writeExplained(w io.Writer, rs []rules.Explained) {
	for i, r := range rs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		where := ""
		if r.Line > 0 {
			where = fmt.Sprintf(" (line %d)", r.Line)
		}
		mode := ""
		if r.Shadow {
			mode = " (shadow: evaluated and recorded, not enforced)"
		}
		fmt.Fprintf(w, "%d. %s%s: %s%s\n", i+1, visible.Line(r.Name), where, r.Action, mode)
		if len(r.Tools) > 0 {
			fmt.Fprintf(w, "   tools:   %s\n", visible.Line(strings.Join(r.Tools, ", ")))
		}
		if r.When != "" {
			fmt.Fprintf(w, "   when:    %s\n", visible.Line(r.When))
		}
		if r.Reason != "" {
			fmt.Fprintf(w, "   reason:  %s\n", visible.Line(r.Reason))
		}
		if len(r.Groups) > 0 {
			fmt.Fprintf(w, "   groups:  %s\n", visible.Line(strings.Join(r.Groups, ", ")))
		}
		if r.Passkey {
			fmt.Fprintln(w, "   passkey: every approval needs the approver's own passkey (approve in the inbox)")
		}
		if r.Approvals > 1 {
			fmt.Fprintf(w, "   approvals: %d\n", r.Approvals)
		}
		if r.Sandbox != "" {
			fmt.Fprintf(w, "   process: %s\n", visible.Line(r.Sandbox))
		}
	}
	fmt.Fprintln(w, "\nprocess: how the process of a call the rule lets run is confined, for tools that start one (shell)")
}
