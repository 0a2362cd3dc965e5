package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/bench"
	"github.com/toolgate/toolgate/ledger"
)

// toolgate bench ledger: one appending process of a ledger load test, as
// many of them as workers share one ledger (docs/benchmarks.md).
func (a *app) benchLedgerCommand() *cobra.Command {
	var (
		dsn, keyFile, name string
		appenders          int
		seconds            float64
	)
	cmd := &cobra.Command{
		Use:   "ledger --ledger DSN --ledger-key FILE [--appenders N] [--seconds S] [--name NAME]",
		Short: "Append to a decision ledger as fast as it takes, and print the rate as JSON",
		Long: `Append entries (call.finished events named bench/NAME/…) to the ledger
from --appenders goroutines, one entry each at a time, for --seconds, then
print {"name","appended","seconds","per_sec"} as one JSON line. Run several
at once against one PostgreSQL ledger to measure what workers that share
it append together. It writes to the ledger: give it one of its own, never
a production ledger.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" || keyFile == "" {
				return usageError("--ledger and --ledger-key are required: the ledger to load, and its key (the verifier key is enough)")
			}
			if appenders < 1 || seconds <= 0 {
				return usageError("--appenders and --seconds must be positive")
			}
			if name == "" {
				host, _ := os.Hostname()
				name = fmt.Sprintf("%s-%d", host, os.Getpid())
			}
			keys, _, err := loadLedgerKey(keyFile, false)
			if err != nil {
				return usageError("%v", err)
			}
			l, err := ledger.Open(cmd.Context(), ledger.Options{DSN: dsn, Keys: ledger.Keys{Verifier: keys.Verifier, VerifierKey: keys.VerifierKey}, Logger: a.logger.Named("ledger")})
			if err != nil {
				return err
			}
			defer l.Close()
			start := time.Now()
			n, err := bench.AppendLoad(cmd.Context(), l, appenders, time.Duration(seconds*float64(time.Second)), "bench/"+name)
			took := time.Since(start).Seconds()
			if err != nil {
				return fmt.Errorf("appended %d, then: %w", n, err)
			}
			return json.NewEncoder(a.stdout).Encode(map[string]any{"name": name, "appended": n, "seconds": took, "per_sec": float64(n) / took})
		},
	}
	f := cmd.Flags()
	f.StringVar(&dsn, "ledger", "", "the ledger's database: a postgres:// URL or a SQLite file")
	f.StringVar(&keyFile, "ledger-key", "", "the ledger's key file (its verifier key is enough: this process signs nothing)")
	f.IntVar(&appenders, "appenders", 64, "goroutines appending at once")
	f.Float64Var(&seconds, "seconds", 10, "how long to append")
	f.StringVar(&name, "name", "", "names this process's events (default host-pid)")
	return cmd
}
