package ledger

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppendConcurrent appends single entries from 64 goroutines, as
// calls' workflows do: the writer commits them in batches.
func BenchmarkAppendConcurrent(b *testing.B) {
	l, _ := openTest(b)
	var n atomic.Int64
	b.SetParallelism(32)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := l.Append(context.Background(), Entry{Kind: KindCallFinished, Event: fmt.Sprint("e", i), At: time.Now(), CallID: fmt.Sprint("c", i)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "entries/s")
}

// BenchmarkAppendOne appends one entry at a time: the latency a call's
// step waits for.
func BenchmarkAppendOne(b *testing.B) {
	l, _ := openTest(b)
	for i := range b.N {
		if _, err := l.Append(context.Background(), Entry{Kind: KindCallFinished, Event: fmt.Sprint("e", i), At: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
}
