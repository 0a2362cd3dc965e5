package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
)

// The cases a run can be limited to (Options.Cases); the warm-up always
// runs.
const (
	CaseLatency    = "latency"     // the auto-approved call (plain, ledger, encrypted, traced) and the sticky one against the bare workflow
	CaseDecide     = "decide"      // decide → result against signal → activity → result
	CaseThroughput = "throughput"  // calls at a concurrency against bare workflows
	CaseParked     = "parked"      // calls parked at once, and their memory
	CaseOneSession = "one-session" // calls parked in one session, released by one approve-for-session
	CasePending    = "pending"     // the pending list's first page against a bare listing
	CaseLedger     = "ledger"      // appends to an embedded ledger
	CaseHooks      = "hooks"       // coding-agent hooks, and the auto-approved call over the HTTP API
	CaseSandbox    = "sandbox"     // the shell tool sandboxed against unsandboxed
)

// AllCases are the cases in the order a run takes them.
var AllCases = []string{CaseLatency, CaseDecide, CaseThroughput, CaseParked, CaseOneSession, CasePending, CaseLedger, CaseHooks, CaseSandbox}

// checkCases refuses a case name the bench does not know, naming the ones
// it does.
func checkCases(cases []string) error {
	for _, c := range cases {
		if !slices.Contains(AllCases, c) {
			return fmt.Errorf("unknown bench case %q (the cases: %s)", c, strings.Join(AllCases, ", "))
		}
	}
	return nil
}

// runs reports whether the run measures case c: every case when Cases is
// empty.
func (o *Options) runs(c string) bool {
	return len(o.Cases) == 0 || slices.Contains(o.Cases, c)
}

// ratio is a/b, or 0 when either side was not measured.
func ratio(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

// Spread is one ratio over repeated runs: its median, and how far the
// farthest run lies from it, in percent of the median.
type Spread struct {
	Ratio  string // its name in the JSON report
	Runs   []float64
	Median float64
	MaxDev float64 // percent of the median
}

// RunRepeated runs the bench n times, each on a fresh embedded server
// (or the same cluster), and reports each ratio's spread: what a figure
// from one run is worth on this machine.
func RunRepeated(ctx context.Context, o Options, n int, out io.Writer) ([]Spread, error) {
	if n < 1 {
		return nil, fmt.Errorf("the bench must run at least once (asked to run it %d times)", n)
	}
	var ratios []Ratios
	base := o.JSONPath
	for i := range n {
		if n > 1 {
			o.JSONPath = numbered(base, i+1)
			fmt.Fprintf(out, "\n— run %d of %d —\n", i+1, n)
		}
		r, err := Run(ctx, o, out)
		if err != nil {
			if n > 1 {
				err = fmt.Errorf("run %d of %d: %w", i+1, n, err)
			}
			return nil, err
		}
		ratios = append(ratios, r.Ratios)
	}
	spreads := spreadsOf(ratios)
	if n > 1 {
		printSpreads(out, spreads)
	}
	return spreads, nil
}

// numbered puts run i's number before the JSON file's extension.
func numbered(path string, i int) string {
	if path == "" {
		path = "bench.json"
	}
	if ext := ".json"; strings.HasSuffix(path, ext) {
		return fmt.Sprintf("%s-%d%s", strings.TrimSuffix(path, ext), i, ext)
	}
	return fmt.Sprintf("%s-%d", path, i)
}

// spreadsOf is the spread of every ratio the runs measured, in the order
// of Ratios' fields.
func spreadsOf(runs []Ratios) []Spread {
	var out []Spread
	t := reflect.TypeFor[Ratios]()
	for f := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(f).Tag.Get("json"), ",")
		var vals []float64
		for _, r := range runs {
			if v := reflect.ValueOf(r).Field(f).Float(); v != 0 {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			continue
		}
		s := Spread{Ratio: name, Runs: vals, Median: median(vals)}
		for _, v := range vals {
			s.MaxDev = max(s.MaxDev, math.Abs(v-s.Median)/s.Median*100)
		}
		out = append(out, s)
	}
	return out
}

func median(vals []float64) float64 {
	s := slices.Clone(vals)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printSpreads(w io.Writer, spreads []Spread) {
	fmt.Fprintf(w, "\n%-30s %8s %12s  %s\n", "ratio over the runs", "median", "farthest", "runs")
	for _, s := range spreads {
		runs := make([]string, len(s.Runs))
		for i, v := range s.Runs {
			runs[i] = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(w, "%-30s %8.2f    ±%5.1f %%  %s\n", s.Ratio, s.Median, s.MaxDev, strings.Join(runs, " "))
	}
}
