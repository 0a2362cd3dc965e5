package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/ledger"
)

// DefaultCodecRate is how many decode requests one person may make of the
// codec endpoint per minute (Config.CodecRate).
const DefaultCodecRate = 120

// codecMinute is the window decodes are counted and limited in.
const codecMinute = time.Minute

// codecReader is whom a window's decodes are counted for: a person, in a
// role, through a token or the inbox.
type codecReader struct {
	name, role, via string
}

// codecPerson is whom the rate applies to: a person in a role, whichever
// way they come in.
type codecPerson struct {
	name, role string
}

// codecReading is a reader's decodes in a window. The first is in the
// ledger before it is answered; the later ones are counted here and
// written as one entry when the window closes.
type codecReading struct {
	// settled is closed once the first decode's entry was appended or
	// refused; written says which.
	settled chan struct{}
	written bool
	// requests and payloads count the decodes after the first.
	requests, payloads int
}

// codecWindow is one minute of decodes, from start (a whole minute).
type codecWindow struct {
	start    time.Time
	asked    map[codecPerson]int
	readings map[codecReader]*codecReading
}

func (w *codecWindow) end() time.Time { return w.start.Add(codecMinute) }

// codecTally keeps the codec's decodes out of the ledger's way: one entry
// per reader per minute, not one per request (the Web UI decodes as
// people browse histories), and at most rate decode requests per
// person per minute. Only the open minute is held: a closed one is
// written and dropped, so nothing grows with time. Once closed (the
// server is stopping), every decode goes to the ledger on its own.
type codecTally struct {
	rate      int
	namespace string
	ledger    *ledger.Ledger // nil: decodes are limited, not recorded
	logger    *zap.Logger
	now       func() time.Time
	// after runs f in d unless stopped (time.AfterFunc); tests replace it.
	after func(d time.Duration, f func()) (stop func() bool)

	mu       sync.Mutex
	open     *codecWindow // nil until a decode opens one
	stopTick func() bool
	closed   bool
	// writing counts the closed windows being written, for close to wait.
	writing sync.WaitGroup
}

func newCodecTally(rate int, namespace string, l *ledger.Ledger, logger *zap.Logger) *codecTally {
	if rate <= 0 {
		rate = DefaultCodecRate
	}
	return &codecTally{rate: rate, namespace: namespace, ledger: l, logger: logger, now: time.Now,
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// admit counts a decode request of p's; past the rate it refuses, and
// says how long until the minute ends. The first refusal of a minute is
// logged; the rest would only be noise.
func (t *codecTally) admit(p Principal, via string) (retryAfter time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, true
	}
	now := t.now()
	w := t.window(now)
	who := codecPerson{p.Name, string(p.Role)}
	n := w.asked[who]
	if n < t.rate {
		w.asked[who] = n + 1
		return 0, true
	}
	if n == t.rate {
		w.asked[who] = n + 1 // refused once: not logged again this minute
		t.logger.Warn("Codec decodes refused until the minute ends: over the rate",
			zap.String("by", p.Name), zap.String("role", string(p.Role)), zap.String("via", via), zap.Int("rate", t.rate))
	}
	return w.end().Sub(now), false
}

// record accounts for a decode of n payloads by p. The reader's first of
// the minute is appended now, and an error means it is not in the ledger,
// so the decode must not be answered; later ones are counted for the
// minute's entry. A decode of no payloads reads nothing and is not
// recorded.
func (t *codecTally) record(ctx context.Context, p Principal, via string, n int) error {
	if t.ledger == nil || n == 0 {
		return nil
	}
	who := codecReader{p.Name, string(p.Role), via}
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return t.append(ctx, t.entry(who, 1, n, nil))
		}
		w := t.window(t.now())
		r := w.readings[who]
		switch {
		case r == nil:
			r = &codecReading{settled: make(chan struct{})}
			w.readings[who] = r
			t.mu.Unlock()
			return t.first(ctx, w, who, r, n)
		case r.written:
			r.requests++
			r.payloads += n
			t.mu.Unlock()
			return nil
		}
		// The first is being appended: wait for it, so that nothing is
		// answered before the minute's first entry is in the ledger.
		t.mu.Unlock()
		select {
		case <-r.settled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// first appends the first decode of who's reading r in window w. If the
// ledger refuses it, r is dropped, and who's next decode is a first again.
func (t *codecTally) first(ctx context.Context, w *codecWindow, who codecReader, r *codecReading, n int) error {
	err := t.append(ctx, t.entry(who, 1, n, w))
	t.mu.Lock()
	if err == nil {
		r.written = true
	} else if w.readings[who] == r {
		delete(w.readings, who)
	}
	t.mu.Unlock()
	close(r.settled)
	return err
}

// window is the open window at now, opened (and the last one handed to
// be written) if now is past it. Called with mu held.
func (t *codecTally) window(now time.Time) *codecWindow {
	if w := t.open; w != nil && now.Before(w.end()) {
		return w
	}
	if last := t.open; last != nil {
		t.stopTick()
		t.writeLater(last)
	}
	w := &codecWindow{start: now.UTC().Truncate(codecMinute),
		asked: map[codecPerson]int{}, readings: map[codecReader]*codecReading{}}
	t.open = w
	t.stopTick = t.after(w.end().Sub(now), func() { t.tick(w) })
	return w
}

// tick closes w when its minute has ended, if no decode has since.
func (t *codecTally) tick(w *codecWindow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != w || t.closed {
		return
	}
	t.open = nil
	t.writeLater(w)
}

// writeLater writes w's counts in the background. Called with mu held,
// before closed is set, so close waits for it.
func (t *codecTally) writeLater(w *codecWindow) {
	t.writing.Add(1)
	go func() {
		defer t.writing.Done()
		t.write(w)
	}()
}

// close writes the open window's counts and waits for those being
// written; decodes after it go to the ledger one by one.
func (t *codecTally) close() {
	t.mu.Lock()
	w := t.open
	t.open, t.closed = nil, true
	if w != nil {
		t.stopTick()
	}
	t.mu.Unlock()
	if w != nil {
		t.write(w)
	}
	t.writing.Wait()
}

// write appends one entry per reader with decodes after their first, in
// one append. What the ledger does not take is logged, counts and all,
// for there is no request left to fail.
func (t *codecTally) write(w *codecWindow) {
	t.mu.Lock()
	readers := slices.SortedFunc(maps.Keys(w.readings), func(a, b codecReader) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.role, b.role), cmp.Compare(a.via, b.via))
	})
	var entries []ledger.Entry
	for _, who := range readers {
		if r := w.readings[who]; r.requests > 0 {
			entries = append(entries, t.entry(who, r.requests, r.payloads, w))
		}
	}
	t.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	if err := t.append(context.Background(), entries...); err != nil {
		for _, e := range entries {
			t.logger.Error("Codec decodes not in the ledger: it did not take the minute's count",
				zap.String("by", e.By), zap.String("role", e.Role), zap.Any("via", e.Details["via"]),
				zap.Int("requests", e.Counts["requests"]), zap.Int("payloads", e.Counts["payloads"]),
				zap.Any("from", e.Details["window_start"]), zap.Error(err))
		}
	}
}

// entry is a codec.decoded entry: who read how many payloads in how many
// requests, in window w (none once the tally is closed).
func (t *codecTally) entry(who codecReader, requests, payloads int, w *codecWindow) ledger.Entry {
	details := map[string]any{"namespace": t.namespace, "via": who.via}
	if w != nil {
		details["window_start"] = w.start.Format(time.RFC3339)
		details["window_end"] = w.end().Format(time.RFC3339)
	}
	return ledger.Entry{
		Kind: ledger.KindCodecDecoded, Event: "codec/" + rand.Text(), At: t.now().UTC(),
		By: who.name, Role: who.role, Counts: map[string]int{"payloads": payloads, "requests": requests},
		Details: details,
	}
}

func (t *codecTally) append(ctx context.Context, entries ...ledger.Entry) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := t.ledger.Append(ctx, entries...)
	return err
}
