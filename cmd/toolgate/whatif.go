package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger/callrecord"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/rules"
	"github.com/toolgate/toolgate/visible"
	"github.com/toolgate/toolgate/workflows"
)

// temporalRetention is how far back whatif looks on the Temporal server
// by default: a namespace's default retention.
const temporalRetention = 7 * 24 * time.Hour

// recordedCall is a call whatif replays: the call as the policy saw it
// and the verdict it got then.
type recordedCall struct {
	call policy.Call
	was  string
	at   time.Time
}

// whatIfSource is where the recorded calls came from, as the summary
// says it.
type whatIfSource struct {
	calls []recordedCall
	// sealed counts the calls whose arguments no key here opens: they
	// cannot be replayed.
	sealed int
	// where says what was read ("the ledger, calls of any age").
	where string
}

func (a *app) whatIfCommand(load func(string) (*rules.Policy, error)) *cobra.Command {
	var (
		f        auditFlags
		since    age
		from     string
		examples int
	)
	cmd := &cobra.Command{
		Use:   "whatif FILE [--since 30d] [--from ledger|temporal]",
		Short: "Replay recorded calls against the file and show which verdicts would change",
		Long: `Evaluate the calls toolgate recorded against FILE and print the calls whose
verdict would change (allow -> ask, ask -> deny, ...), with counts by change
and by rule. Nothing is changed and nothing is enforced.

By default the calls come from the decision ledger (--ledger; toolgate dev's
by default): every call it holds, of any age, including those Temporal has
already deleted. Their arguments are decrypted with the keyring (--keys;
toolgate dev's by default); a call whose arguments no key opens is counted,
not replayed. --from temporal reads the calls the Temporal server still has
instead (its retention: 7 days unless --since says otherwise).

To watch a rule on live traffic before enforcing it, give it mode: shadow
(docs/policy.md): it is evaluated and recorded on every call, never applied.`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := load(args[0])
			if err != nil {
				return err
			}
			var src whatIfSource
			switch from {
			case "ledger":
				f.keys = a.conn.keys.file // the keyring also opens the ledger's sealed arguments
				src, err = f.ledgerCalls(cmd, since)
			case "temporal":
				src, err = a.temporalCalls(cmd, since)
			default:
				return usageError("--from is ledger or temporal, not %q", from)
			}
			if err != nil {
				return err
			}
			writeWhatIf(a.stdout, p, src, examples)
			return nil
		},
	}
	f.add(cmd, true)
	cmd.Flags().Var(&since, "since", "replay only the calls submitted this recently (30d, 12h; default: every call the ledger holds, 7d from Temporal)")
	cmd.Flags().StringVar(&from, "from", "ledger", "where the recorded calls come from: ledger or temporal")
	cmd.Flags().IntVar(&examples, "examples", 10, "calls listed for each kind of change (0: all of them)")
	a.conn.addFlags(cmd)
	return cmd
}

// ledgerCalls reads the calls the ledger holds, their arguments opened
// with the keyring.
func (f auditFlags) ledgerCalls(cmd *cobra.Command, since age) (whatIfSource, error) {
	ring, err := f.showKeys()
	if err != nil {
		return whatIfSource{}, err
	}
	l, err := f.open(cmd.Context(), sealer(ring))
	if err != nil {
		return whatIfSource{}, err
	}
	defer l.Close()
	from := since.since(time.Now())
	records, err := callrecord.Read(cmd.Context(), l, from, time.Time{})
	if err != nil {
		return whatIfSource{}, err
	}
	src := whatIfSource{where: "the ledger, calls of any age"}
	if !from.IsZero() {
		src.where = "the ledger, calls submitted in the last " + since.String()
	}
	for _, r := range records {
		switch {
		case r.Verdict == "":
			continue // never judged: nothing to compare
		case r.Sealed:
			src.sealed++
			continue
		}
		src.calls = append(src.calls, recordedCall{call: r.Call(), was: r.Verdict, at: r.SubmittedAt})
	}
	return src, nil
}

// temporalCalls reads the calls the Temporal server still has: each
// call's request from its workflow's history.
func (a *app) temporalCalls(cmd *cobra.Command, since age) (whatIfSource, error) {
	c, closeFn, err := a.client()
	if err != nil {
		return whatIfSource{}, err
	}
	defer closeFn()
	if since == 0 {
		since = age(temporalRetention)
	}
	ctx := cmd.Context()
	summaries, err := c.List(ctx, tgclient.ListFilter{Since: since.since(time.Now()), Limit: 10000})
	if err != nil {
		return whatIfSource{}, err
	}
	src := whatIfSource{where: "Temporal, calls of the last " + since.String()}
	for _, s := range summaries {
		was := recordedVerdict(s)
		if was == "" {
			continue
		}
		call, err := c.Request(ctx, s.CallID)
		if err != nil {
			return whatIfSource{}, err
		}
		src.calls = append(src.calls, recordedCall{call: call, was: was, at: s.RequestedAt})
	}
	return src, nil
}

// writeWhatIf prints the changed verdicts, up to examples of each kind of
// change, then the counts.
func writeWhatIf(w io.Writer, p *rules.Policy, src whatIfSource, examples int) {
	byChange, byRule := map[string]int{}, map[string]int{}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL_ID\tSESSION\tTOOL\tWAS\tWOULD BE\tRULE\tSUBMITTED")
	for _, rc := range src.calls {
		now := p.Evaluate(rc.call)
		if string(now.Action) == rc.was {
			continue
		}
		change := rc.was + " -> " + string(now.Action)
		byChange[change]++
		byRule[now.Rule]++
		if examples > 0 && byChange[change] > examples {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", visible.Line(rc.call.ID), visible.Line(rc.call.Session), visible.Line(rc.call.Tool),
			rc.was, now.Action, visible.Line(now.Rule), rc.at.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
	total := 0
	for _, n := range byChange {
		total += n
	}
	fmt.Fprintf(w, "\n%d of %d calls (%s) would be decided differently by %s (version %s)\n", total, len(src.calls), src.where, p.Name(), p.Version())
	writeCounts(w, byChange, examples)
	if len(byRule) > 0 {
		fmt.Fprintln(w, "by the rule that would decide:")
		writeCounts(w, byRule, 0)
	}
	if src.sealed > 0 {
		fmt.Fprintf(w, "%d calls not replayed: their arguments are encrypted and no key given opens them (--keys)\n", src.sealed)
	}
}

// writeCounts prints counts sorted by key; with examples > 0 it says how
// many of a kind were not listed.
func writeCounts(w io.Writer, counts map[string]int, examples int) {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		more := ""
		if examples > 0 && counts[k] > examples {
			more = fmt.Sprintf(" (%d listed)", examples)
		}
		fmt.Fprintf(w, "  %-14s %d%s\n", visible.Line(k), counts[k], more)
	}
}

// recordedVerdict is what the policy said about a call Temporal recorded:
// allow or deny when the policy itself decided; ask when a person, a
// handler or a sticky decision did, or one is awaited; "" when the call
// never reached a verdict (unknown tool, bad arguments).
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
