package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/rules"
	"github.com/toolgate/toolgate/visible"
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
	whatif := a.whatIfCommand(load)
	for _, sub := range []*cobra.Command{check, eval, explain, whatif} {
		sub.Flags().StringVar(&workspace, "workspace", "", "workspace directory the file's conditions and guards use, when the file sets none (default: the current directory)")
		cmd.AddCommand(sub)
	}
	return cmd
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
