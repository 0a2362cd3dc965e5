package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/bench"
)

func (a *app) benchCommand() *cobra.Command {
	var (
		o      bench.Options
		quick  bool
		repeat int
	)
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--cases C,...] [--repeat N] [--runs N] [--concurrency C] [--calls M] [--parked P] [--waiting W] [--json FILE] [--temporal-address HOST:PORT [--namespace NS]]",
		Short: "Measure toolgate against a bare Temporal workflow, side by side",
		Long: `Start an embedded Temporal server and both workers in this process, warm
up, then measure in one run: latency of a bare workflow (local activity +
activity) against an auto-approved call (also with a decision ledger,
with every payload encrypted, and with traces and metrics exported over
OTLP to an in-process receiver) and a call decided by a sticky decision; a decision's round trip against a bare signal; throughput at a
concurrency; the cost of calls parked waiting for a person; and the first
page of the pending list with W calls waiting against a bare visibility
listing of a page; and a coding agent's PreToolUse for an auto-allowed
tool over the HTTP hook and through a fresh toolgate-hook process; and the
built-in shell tool's call sandboxed (Landlock) against unsandboxed, with
the sandbox's start against a bare exec. Prints a table, writes every figure as JSON, and ends
with one line of ratios.

With --temporal-address the same cases run against that cluster instead
(both sides' workers still run in this process, on task queues of their
own, so a cluster's own toolgate workers are not involved).

--cases limits a run to some of the cases (` + "`--cases decide,one-session,hooks`" + `);
--repeat N runs it N times, each JSON file numbered, and ends with each
ratio's median and how far the farthest run lies from it.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quick {
				q := bench.Quick()
				o.Runs, o.Concurrency, o.Calls, o.Parked = pick(o.Runs, q.Runs), pick(o.Concurrency, q.Concurrency), pick(o.Calls, q.Calls), pick(o.Parked, q.Parked)
				o.OneSession = pick(o.OneSession, q.OneSession)
				o.Waiting = pick(o.Waiting, q.Waiting)
			}
			o.Logger = a.logger
			_, err := bench.RunRepeated(cmd.Context(), o, repeat, a.stdout)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "a smoke run that finishes in well under a minute")
	f.IntVar(&o.Runs, "runs", 0, "sequential runs per latency case (default 200)")
	f.IntVar(&o.Concurrency, "concurrency", 0, "concurrency of the throughput case (default 50)")
	f.IntVar(&o.Calls, "calls", 0, "calls per side in the throughput case (default 1000)")
	f.IntVar(&o.Parked, "parked", 0, "calls parked at once (default 2000; try 10000)")
	f.IntVar(&o.Waiting, "waiting", 0, "calls waiting when the pending list's first page is timed (default 10000)")
	f.IntVar(&o.OneSession, "one-session", 0, "calls parked in ONE session and released by one approve-for-session (default 1000; try 10000)")
	f.StringSliceVar(&o.Cases, "cases", nil, "run only these cases: "+strings.Join(bench.AllCases, ", ")+" (default: all)")
	f.IntVar(&repeat, "repeat", 1, "run the bench this many times and report each ratio's spread")
	f.StringVar(&o.JSONPath, "json", "bench.json", "file for every figure as JSON")
	f.BoolVar(&o.EagerStart, "eager-start", false, "start toolgate's calls and the baseline's workflows with eager workflow start")
	f.StringVar(&o.GRPCCompression, "grpc-compression", "gzip", "compress what the bench's client (both sides) sends to Temporal: gzip or none")
	f.StringVar(&o.TemporalAddress, "temporal-address", "", "run against this Temporal cluster (host:port) instead of an embedded server; its namespace needs toolgate's search attributes (toolgate namespace setup)")
	f.StringVar(&o.Namespace, "namespace", "default", "namespace, with --temporal-address")
	f.StringVar(&o.HookCommand, "hook-command", "", "the toolgate-hook binary the command hook case runs (default: next to toolgate, else on PATH)")
	cmd.AddCommand(a.benchLedgerCommand())
	return cmd
}

// pick returns the flag's value when set, else the fallback.
func pick(flag, fallback int) int {
	if flag > 0 {
		return flag
	}
	return fallback
}
