package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
)

// ledgerQueue is the task queue of the bench's toolgate worker that keeps
// a decision ledger (embedded SQLite, as `toolgate dev` has it).
const ledgerQueue = "toolgate-bench-ledger"

// LedgerFigures are the decision ledger's costs.
type LedgerFigures struct {
	// AppendPerSec: entries a second through ledger.Append from many
	// goroutines at once (as many calls' workflows append), committed.
	AppendPerSec float64 `json:"append_per_sec"`
	Appenders    int     `json:"appenders"`
}

// startLedgerWorker starts a toolgate worker with a ledger in dir.
func startLedgerWorker(ctx context.Context, tc client.Client, tools *tool.Registry, dir string) (func(), error) {
	l, err := openBenchLedger(ctx, dir)
	if err != nil {
		return nil, err
	}
	w, err := worker.New(tc, worker.Options{TaskQueue: ledgerQueue, Policy: benchPolicy{}, Tools: tools, Ledger: l, Doors: benchDoors})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	if err := w.Start(); err != nil {
		_ = l.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	go l.Run(sctx) // checkpoints, as a worker signs them
	return func() { w.Stop(); cancel(); _ = l.Close() }, nil
}

func openBenchLedger(ctx context.Context, dir string) (*ledger.Ledger, error) {
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "bench")
	if err != nil {
		return nil, err
	}
	return ledger.Open(ctx, ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys})
}

func (b *runner) autoLedger(ctx context.Context) error {
	return callOn(ctx, b.ledgered, b.session("auto-ledger"), toolEcho)
}

// ledgerAppends measures the embedded ledger's sustained append rate: 64
// appenders, one entry each at a time, for a few seconds.
func (b *runner) ledgerAppends(ctx context.Context, r *Report) error {
	dir, err := os.MkdirTemp("", "toolgate-bench-ledger")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := openBenchLedger(ctx, dir)
	if err != nil {
		return err
	}
	defer l.Close()
	const appenders = 64
	duration := 3 * time.Second
	if b.o.Runs < 100 { // --quick
		duration = time.Second
	}
	start := time.Now()
	n, err := AppendLoad(ctx, l, appenders, duration, "bench")
	if err != nil {
		return err
	}
	r.Ledger = LedgerFigures{AppendPerSec: float64(n) / time.Since(start).Seconds(), Appenders: appenders}
	if _, err := l.SignCheckpoint(ctx); err != nil {
		return err
	}
	if _, err := l.VerifyStore(ctx, nil); err != nil {
		return fmt.Errorf("the bench's ledger does not verify: %w", err)
	}
	return nil
}

// AppendLoad appends entries to l from appenders goroutines, one entry
// each at a time, for duration, as many calls' workflows append; it
// returns how many were appended. Their events are named under prefix,
// so several processes may load one ledger at once.
func AppendLoad(ctx context.Context, l *ledger.Ledger, appenders int, duration time.Duration, prefix string) (int64, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	start := time.Now()
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < duration; i++ {
				e := ledger.Entry{Kind: ledger.KindCallFinished, Event: fmt.Sprintf("%s/%d/%d", prefix, g, i), At: time.Now(),
					CallID: fmt.Sprintf("%s-c%d-%d", prefix, g, i), Status: "ok"}
				if _, err := l.Append(ctx, e); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return n.Load(), <-errs
}
