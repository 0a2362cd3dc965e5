package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/analytics"
	"github.com/toolgate/toolgate/ledger/callrecord"
	"github.com/toolgate/toolgate/visible"
)

func (a *app) statsCommand() *cobra.Command {
	var (
		f          auditFlags
		since      = age(30 * 24 * time.Hour)
		rule       string
		policyFile string
		asJSON     bool
		minAsks    int
		threshold  float64
	)
	cmd := &cobra.Command{
		Use:   "stats [--since 30d] [--rule R] [--json] [--policy FILE] [--min-asks N] [--threshold F]",
		Short: "Count each rule's asks in the decision ledger and suggest allowing the ones people always approve",
		Long: `Read the calls the decision ledger holds (--ledger; toolgate dev's by default)
and count them rule by rule and tool by tool: how many calls; how many the
policy allowed or denied by itself and how many it asked about; of those,
how many were approved and denied (by a person, a coded handler or a sticky
decision of the session), the approval rate, the median and 95th percentile
time to a person's decision, how many timed out or were approved with edits,
the denials' reasons, and the decisions by channel and by approver group.
Shadow rules (mode: shadow) are counted apart: how many calls each would
have decided, and how many of those differently from the enforced verdict.

A rule that asked at least --min-asks times and whose asked calls were
approved at least --threshold of the time is suggested for allow: for the
paths under one directory when the approved calls' path argument mostly
starts there and no denied call's does, otherwise the whole rule. With
--policy FILE each suggestion comes with the change to FILE as a unified
diff, checked before it is shown: the changed file loads, and replayed on
the recorded calls it allows the ones suggested and gives every other call
the verdict it gets now. Nothing is applied: review the diff, then apply it
with patch -p1 (or git apply) where FILE is.

Arguments and reasons the ledger stores encrypted are read with the keyring
(--keys; toolgate dev's by default); without it they count as sealed, and a
sealed call's path cannot be placed under a directory.`,
		Example: `  toolgate stats
  toolgate stats --since 7d --rule writes
  toolgate stats --policy policy.yaml
  toolgate stats --since 0 --json | jq -r '.suggestions[].text'`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if threshold <= 0 || threshold > 1 {
				return usageError("--threshold is an approval rate above 0 and at most 1 (0.98 is 98 %%), not %v", threshold)
			}
			if minAsks < 1 {
				return usageError("--min-asks is at least 1, not %d", minAsks)
			}
			var pf *analytics.PolicyFile
			if policyFile != "" {
				data, err := os.ReadFile(policyFile)
				if err != nil {
					return usageError("--policy: %v", fileProblem(err))
				}
				pf = &analytics.PolicyFile{Name: policyFile, Data: data}
			}
			ring, err := f.showKeys()
			if err != nil {
				return err
			}
			l, err := f.open(cmd.Context(), sealer(ring))
			if err != nil {
				return err
			}
			defer l.Close()
			now := time.Now()
			from := since.since(now)
			records, err := callrecord.Read(cmd.Context(), l, from, time.Time{})
			if err != nil {
				return err
			}
			rep, err := analytics.Compute(records, analytics.Options{Since: from, Until: now, Rule: rule, MinAsks: minAsks, Threshold: threshold, Policy: pf})
			if err != nil {
				return usageError("--policy: %v", err)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetEscapeHTML(false)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			writeStats(a.stdout, rep, policyFile != "")
			return nil
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVar(&f.keys, "keys", os.Getenv("TOOLGATE_KEYS"), "keyring that opens the ledger's encrypted arguments and reasons (env TOOLGATE_KEYS; default .toolgate/keys.json when it exists)")
	cmd.Flags().Var(&since, "since", "count the calls submitted this recently: 30d, 12h, 90m; 0 for every call the ledger holds")
	cmd.Flags().StringVar(&rule, "rule", "", "count only the calls this rule decided (and the shadow rule of that name)")
	cmd.Flags().StringVar(&policyFile, "policy", "", "the policy file to write each suggestion's change against, as a unified diff (never applied)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().IntVar(&minAsks, "min-asks", analytics.DefaultMinAsks, "suggest only rules that asked at least this many times")
	cmd.Flags().Float64Var(&threshold, "threshold", analytics.DefaultThreshold, "suggest only rules whose asked calls were approved at least this often (0.98: 98 %)")
	return cmd
}

// fileProblem is why a file could not be read, without its path.
func fileProblem(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeStats prints the report for a person: a table of the rules and
// tools, each rule's channels, groups and denial reasons, the shadow
// rules, and the suggestions with their diffs.
func writeStats(w io.Writer, rep analytics.Report, withPolicy bool) {
	in := "in the last " + rep.Window
	if strings.HasPrefix(rep.Window, "since ") || rep.Since.IsZero() {
		in = "in the whole ledger (" + rep.Window + ")"
	}
	filter := ""
	if rep.Rule != "" {
		filter = " of rule " + visible.Line(rep.Rule)
	}
	if rep.Calls == 0 && len(rep.Shadow) == 0 {
		fmt.Fprintf(w, "No calls%s %s.\n", filter, in)
		return
	}
	fmt.Fprintf(w, "%d calls%s %s, from the decision ledger.\n\n", rep.Calls, filter, in)
	if len(rep.Rules) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RULE\tTOOL\tCALLS\tALLOWED\tDENIED\tASKED\tAPPROVED\tREFUSED\tRATE\tMEDIAN\tP95\tTIMEOUTS\tEDITS\tSTICKY\tHANDLER\tWAITING")
		for _, rr := range rep.Rules {
			for _, tr := range rr.Tools {
				statsRow(tw, rr.Rule, tr.Tool, tr.Counts)
			}
			if len(rr.Tools) > 1 {
				statsRow(tw, rr.Rule, "(all)", rr.Counts)
			}
		}
		_ = tw.Flush()
		fmt.Fprintln(w, "\nALLOWED and DENIED: by the policy itself. APPROVED and REFUSED: asked calls, by a person, a handler or a sticky")
		fmt.Fprintln(w, "decision. RATE: approved of those. MEDIAN, P95: time to a person's decision.")
		for _, rr := range rep.Rules {
			if details := statsDetails(rr.Counts); details != "" {
				fmt.Fprintf(w, "\n%s\n%s", ruleName(rr.Rule), details)
			}
		}
	}
	if len(rep.Shadow) > 0 {
		fmt.Fprintln(w, "\nShadow rules (evaluated and recorded, never enforced):")
		for _, s := range rep.Shadow {
			fmt.Fprintf(w, "  %s would have decided %d calls, %d of them differently%s\n", visible.Line(s.Rule), s.Calls, s.Differ, countList(" (", s.Changes, ")"))
		}
	}
	fmt.Fprintf(w, "\nSuggestions (rules that asked at least %d times, approved at least %s of the time):\n", rep.MinAsks, analytics.Percent(rep.Threshold))
	if len(rep.Suggestions) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, s := range rep.Suggestions {
		fmt.Fprintf(w, "\n  %s\n", visible.Line(s.Text))
		switch {
		case s.Diff != "":
			fmt.Fprintf(w, "  Checked on %d recorded calls: the change allows %d of them and no other verdict changes.\n\n", s.Checked, s.Allowed)
			for _, line := range strings.SplitAfter(strings.TrimSuffix(s.Diff, "\n"), "\n") {
				fmt.Fprint(w, "    ", visible.Line(strings.TrimSuffix(line, "\n")), "\n")
			}
		case s.NoDiff != "":
			fmt.Fprintf(w, "  No diff: %s.\n", visible.Line(s.NoDiff))
		}
	}
	if len(rep.Suggestions) > 0 && !withPolicy {
		fmt.Fprintln(w, "\nGive --policy FILE for each suggestion's change to the file, as a diff.")
	}
}

func ruleName(rule string) string {
	if rule == "" {
		return "(no rule: never judged)"
	}
	return "rule " + visible.Line(rule)
}

func statsRow(w io.Writer, rule, tool string, c analytics.Counts) {
	if rule == "" {
		rule = "(none)"
	}
	rate, median, p95 := "-", "-", "-"
	if c.Approved+c.Denied > 0 {
		rate = analytics.Percent(c.ApprovalRate)
	}
	if c.TimedDecisions > 0 {
		median, p95 = analytics.Human(time.Duration(c.MedianDecision)), analytics.Human(time.Duration(c.P95Decision))
	}
	fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", visible.Line(rule), visible.Line(tool),
		c.Calls, c.AutoApproved, c.PolicyDenied, c.Asked, c.Approved, c.Denied, rate, median, p95, c.Timeouts, c.Edits, c.BySticky, c.ByHandler, c.Waiting)
}

// statsDetails lists a rule's channels, groups and denial reasons.
func statsDetails(c analytics.Counts) string {
	var b strings.Builder
	for _, part := range []struct {
		label  string
		counts []analytics.Count
		quote  bool
	}{{"decided via", c.Channels, false}, {"for groups", c.Groups, false}, {"denied because", c.DenialReasons, true}} {
		if len(part.counts) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %-15s", part.label)
		for i, n := range part.counts {
			if i > 0 {
				b.WriteString(", ")
			}
			key := visible.Line(n.Key)
			if part.quote && !strings.HasPrefix(n.Key, "(") {
				key = fmt.Sprintf("%q", n.Key)
			}
			fmt.Fprintf(&b, "%s %d", key, n.N)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// countList writes counts as "a 1, b 2" between before and after; ""
// for none.
func countList(before string, cs []analytics.Count, after string) string {
	if len(cs) == 0 {
		return ""
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d", visible.Line(c.Key), c.N)
	}
	return before + strings.Join(parts, ", ") + after
}
