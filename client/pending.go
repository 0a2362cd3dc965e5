package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/workflows"
)

// Pending lists the calls waiting for a person a page at a time, oldest
// first: by requested-at time, then call ID. Every filter applies before
// paging, f.DecidableBy included, so Total counts what the pages hold.
// f.Status is ignored.
//
// Temporal's SQL visibility stores (SQLite, PostgreSQL, MySQL) list newest
// first and take no ORDER BY, so a page is found by time: counts narrow a
// window of requested-at times that holds the page, one listing reads it,
// and the window is sorted here. The page token is a cursor (the last
// call's time and ID), so a call never shows twice: calls that arrive
// while an approver pages show on a later page, and calls decided
// meanwhile drop out without moving the others.
func (c *Client) Pending(ctx context.Context, f ListFilter, p PageRequest) (Page, error) {
	size, err := p.size()
	if err != nil {
		return Page{}, err
	}
	f.Status = string(workflows.StatusPending)
	base, err := listQuery(f)
	if err != nil {
		return Page{}, err
	}
	var groups []string
	restricted := f.DecidableBy != nil && !slices.Contains(f.DecidableBy.Groups, "*")
	if restricted {
		if groups, err = groupValues(f.DecidableBy.Groups); err != nil {
			return Page{}, err
		}
	}
	key := filterKey(tokenPending, f)
	var after *cursor
	var span time.Duration
	if p.Token != "" {
		t, err := decodeToken(p.Token, tokenPending, key)
		if err != nil {
			return Page{}, err
		}
		after, span = &cursor{at: time.Unix(0, t.At).UTC(), callID: t.CallID}, time.Duration(t.Span)
	}

	// A restricted approver's calls are those whose groups attribute names
	// one of theirs or "*", plus the calls that waited from before the
	// attribute existed (none of it): those are read whole and filtered by
	// their memo's groups, as the workflows check them.
	main := &visibilityTimeline{c: c, query: base}
	if restricted {
		main.query = fmt.Sprintf("%s AND %s IN (%s)", base, workflows.AttrGroups.GetName(), strings.Join(groups, ", "))
	}
	w := &windowFinder{tl: main, now: time.Now()}
	var guess, floor time.Time
	if after != nil {
		if span > 0 {
			guess = after.from().Add(span)
		}
	} else if h, ok := c.firstPages.get(main.query); ok {
		guess, floor = h.end, h.oldest
	}

	var total int64
	countTotal := func(ctx context.Context) (err error) {
		total, err = main.count(ctx, time.Time{}, time.Time{})
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if guess.IsZero() {
		// Without a hint the total comes first: a listing that fits one
		// read needs no search.
		if err := countTotal(ctx); err != nil {
			return Page{}, err
		}
		w.total, w.knownTotal = total, true
	} else {
		g.Go(func() error { return countTotal(gctx) })
	}
	var legacy []CallSummary
	if restricted {
		g.Go(func() error {
			old := &visibilityTimeline{c: c, query: base + " AND " + workflows.AttrGroups.GetName() + " IS NULL"}
			all, err := old.list(gctx, time.Time{}, time.Time{})
			for _, s := range all {
				if f.DecidableBy.MayAct(s.Groups) == nil {
					legacy = append(legacy, s)
				}
			}
			return err
		})
	}
	var calls []CallSummary
	var end time.Time
	var nextSpan time.Duration
	g.Go(func() (err error) {
		calls, end, nextSpan, err = w.after(gctx, after, size+1, guess, floor)
		return err
	})
	if err := g.Wait(); err != nil {
		return Page{}, err
	}
	if after == nil && len(calls) > 0 && !end.IsZero() {
		c.firstPages.put(main.query, firstPage{oldest: calls[0].RequestedAt, end: end})
	}

	// A call that gained the attribute between the two queries is on both
	// lists: keep it once.
	listed := make(map[string]bool, len(calls))
	for _, s := range calls {
		listed[s.CallID] = true
	}
	for _, s := range legacy {
		if after.before(s) && !listed[s.CallID] {
			calls = append(calls, s)
		}
	}
	slices.SortFunc(calls, compareCalls)
	out := Page{Calls: calls, Total: total + int64(len(legacy))}
	if out.Calls == nil {
		out.Calls = []CallSummary{}
	}
	if len(calls) > size {
		out.Calls = calls[:size]
		last := out.Calls[size-1]
		out.NextPageToken = pageToken{Kind: tokenPending, Filter: key, At: last.RequestedAt.UnixNano(), CallID: last.CallID, Span: int64(nextSpan)}.encode()
	}
	return out, nil
}

// groupValues quotes approver groups for an IN list, with "*" (calls any
// approver may decide). A group that could not be quoted safely for every
// visibility store is refused.
func groupValues(groups []string) ([]string, error) {
	out := []string{"'*'"}
	for _, g := range groups {
		if g == "" || len(g) > 128 || strings.ContainsAny(g, "'\"\\\u2661") || strings.ContainsFunc(g, unicode.IsControl) {
			return nil, &InputError{Field: "groups", Problem: "must be names of up to 128 characters without quotes, backslashes or control characters"}
		}
		out = append(out, "'"+g+"'")
	}
	return out, nil
}

// cursor is where a page of Pending ended: its last call.
type cursor struct {
	at     time.Time
	callID string
}

// before reports whether s comes after the cursor in Pending's order; a
// nil cursor is before every call.
func (c *cursor) before(s CallSummary) bool {
	return c == nil || compareCalls(CallSummary{RequestedAt: c.at, CallID: c.callID}, s) < 0
}

// from is where the window after the cursor starts: a millisecond before
// the cursor's millisecond (see windowFinder); the zero time (the oldest
// call) for a nil cursor.
func (c *cursor) from() time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.at.Truncate(time.Millisecond).Add(-time.Millisecond)
}

// compareCalls orders calls oldest first, then by call ID.
func compareCalls(a, b CallSummary) int {
	if c := a.RequestedAt.Compare(b.RequestedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.CallID, b.CallID)
}

// timeline is a listing's calls by requested-at time, in windows [from,
// to); a zero bound is open.
type timeline interface {
	count(ctx context.Context, from, to time.Time) (int64, error)
	list(ctx context.Context, from, to time.Time) ([]CallSummary, error)
}

// visibilityTimeline reads a timeline from Temporal's visibility store.
type visibilityTimeline struct {
	c     *Client
	query string
}

// listBatch is the page size of the visibility listings behind a window.
const listBatch = 1000

// window adds the window's bounds to the query. Bounds are whole
// milliseconds, so that ">=" and "<" compare exactly with SQLite's
// millisecond column (see windowFinder).
func (v *visibilityTimeline) window(from, to time.Time) string {
	q := v.query
	if !from.IsZero() {
		q += fmt.Sprintf(" AND %s >= '%s'", workflows.AttrRequestedAt.GetName(), from.UTC().Format(time.RFC3339Nano))
	}
	if !to.IsZero() {
		q += fmt.Sprintf(" AND %s < '%s'", workflows.AttrRequestedAt.GetName(), to.UTC().Format(time.RFC3339Nano))
	}
	return q
}

func (v *visibilityTimeline) count(ctx context.Context, from, to time.Time) (int64, error) {
	return v.c.count(ctx, v.window(from, to))
}

func (v *visibilityTimeline) list(ctx context.Context, from, to time.Time) ([]CallSummary, error) {
	return v.c.summaries(ctx, v.window(from, to), listBatch, 0)
}

// Window search settings.
const (
	// maxProbes bounds the counts spent narrowing the windows of a page;
	// past it the narrowest window found so far is read, however large.
	maxProbes = 24
	// firstAge is how far back the first page's search starts without a
	// hint: it moves to the present by quarters of the age.
	firstAge = 7 * 24 * time.Hour
	// firstSpan is the first span tried after a cursor without a hint.
	firstSpan = time.Minute
	// clockSkew: calls requested up to this far in the future (by their
	// client's clock) are still found by windows that end at "now".
	clockSkew = time.Minute
)

// windowFinder reads the calls of a timeline that come after a cursor,
// oldest first, at least need of them unless fewer are left.
//
// SQLite keeps requested-at times to the millisecond (rounded), so a
// window's bounds are whole milliseconds and compared with ">=" and "<"
// only, which are exact against such a column; the lower bound is a
// millisecond before the cursor's, and the calls up to the cursor are
// dropped here. Rounding keeps order, so a window is always a contiguous
// run of calls in Pending's order.
type windowFinder struct {
	tl  timeline
	now time.Time
	// total counts the whole timeline, when knownTotal: a timeline that
	// fits one listing needs no search.
	total      int64
	knownTotal bool
	probes     int
}

// after returns at least need calls that come after c, oldest first (all
// that are left if fewer), the end of the window that held them (zero:
// open), and its span: the next page's hint. guess is an end to try first
// and floor, for a first page, a time before the oldest call (zero: none
// known).
func (w *windowFinder) after(ctx context.Context, c *cursor, need int, guess, floor time.Time) ([]CallSummary, time.Time, time.Duration, error) {
	from := c.from()
	start := from
	var got []CallSummary
	for {
		to, err := w.end(ctx, from, int64(need-len(got)), guess, floor)
		if err != nil {
			return nil, time.Time{}, 0, err
		}
		rows, err := w.tl.list(ctx, from, to)
		if err != nil {
			return nil, time.Time{}, 0, err
		}
		for _, s := range rows {
			if c.before(s) {
				got = append(got, s)
			}
		}
		if len(got) >= need || to.IsZero() {
			slices.SortFunc(got, compareCalls)
			return got, to, spanOf(start, to, got), nil
		}
		// Fewer than counted: calls up to the cursor shared the window, or
		// calls were decided meanwhile. Go on after the window.
		guess, floor, from = to.Add(to.Sub(from)), time.Time{}, to
	}
}

// spanOf is the time from the window's start (or its first call) to its
// end (or its last call).
func spanOf(from, to time.Time, calls []CallSummary) time.Duration {
	if len(calls) == 0 {
		return 0
	}
	if from.IsZero() {
		from = calls[0].RequestedAt
	}
	if to.IsZero() {
		to = calls[len(calls)-1].RequestedAt
	}
	return max(to.Sub(from), time.Millisecond)
}

// targetFor and limitFor are the calls a window for need calls should
// hold, and the most it may hold: listing a call costs about as much as
// counting fifty, so a few counts are worth spending to keep the listing
// near the page.
func targetFor(need int64) int64 { return need + need/4 }

func limitFor(need int64) int64 { return need + need/2 + 10 }

// end finds the end of a window that starts at from (zero: the oldest
// call) and holds between need and limitFor(need) calls; the zero end
// leaves the window open, when every call after from fits. guess is tried
// first; floor (first page only) is taken to hold no call before it.
func (w *windowFinder) end(ctx context.Context, from time.Time, need int64, guess, floor time.Time) (time.Time, error) {
	limit, target := limitFor(need), targetFor(need)
	if w.knownTotal && w.total <= limit {
		return time.Time{}, nil
	}
	const ms = time.Millisecond
	horizon := w.now.Add(clockSkew).Truncate(ms)
	// lo holds fewer than need calls and hi more than limit; zero when not
	// known. A lo taken from the floor is assumed, not counted. startsAtLo:
	// the calls are thought to start right after lo (a cursor's, or the
	// floor), so counts can be interpolated from it.
	lo, hi := from, time.Time{}
	var flo, fhi int64
	assumed, startsAtLo := false, !from.IsZero()
	x := guess.Truncate(ms)
	switch {
	case !x.IsZero() && x.After(from):
		if from.IsZero() && !floor.IsZero() && floor.Before(x) {
			lo, assumed, startsAtLo = floor.Truncate(ms).Add(-ms), true, true
		}
	case from.IsZero():
		x = w.now.Add(-firstAge).Truncate(ms)
	default:
		x = from.Add(firstSpan)
	}
	for ; w.probes < maxProbes; w.probes++ {
		if x.After(horizon) {
			x = horizon
		}
		if !x.After(from) && !from.IsZero() {
			return time.Time{}, nil // the window starts at the present: it stays open
		}
		n, err := w.tl.count(ctx, from, x)
		if err != nil {
			return time.Time{}, err
		}
		switch {
		case n > limit:
			hi, fhi = x, n
		case n >= need:
			return x, nil
		case x.Equal(horizon):
			return time.Time{}, nil // all that is left fits
		default:
			lo, flo, assumed, startsAtLo = x, n, false, false
		}
		switch {
		case hi.IsZero() && from.IsZero():
			// First page, too few so far: a quarter of the age back to
			// the present.
			x = lo.Add(w.now.Sub(lo) * 3 / 4)
		case hi.IsZero():
			x = from.Add(growSpan(lo.Sub(from), flo, target))
		case lo.IsZero():
			// First page, too many so far: four times the age.
			x = w.now.Add(-4 * w.now.Sub(hi))
		case hi.Sub(lo) <= ms && assumed:
			// The floor was wrong (calls older than the hint's oldest
			// came): search back from hi instead.
			lo = time.Time{}
			x = w.now.Add(-4 * w.now.Sub(hi))
		case hi.Sub(lo) <= ms:
			return hi, nil // calls bunched in one millisecond: read them all
		case flo == 0 && !startsAtLo:
			x = lo.Add(hi.Sub(lo) / 2) // nothing known of where the calls start
		default:
			x = between(lo, flo, hi, fhi, target)
		}
		x = x.Truncate(ms)
		if !lo.IsZero() && !x.After(lo) {
			x = lo.Add(ms)
		}
	}
	if !hi.IsZero() {
		return hi, nil
	}
	return time.Time{}, nil
}

// growSpan is the next span to try after one that held n < need calls:
// scaled to the target if any were found, else four times longer, and
// never more than sixteen times.
func growSpan(span time.Duration, n, target int64) time.Duration {
	if n == 0 {
		return 4 * span
	}
	return min(span*time.Duration(target)/time.Duration(n), 16*span)
}

// between interpolates where target calls are reached between lo (flo
// calls) and hi (fhi calls), an eighth of the gap away from either end so
// that the bracket always shrinks.
func between(lo time.Time, flo int64, hi time.Time, fhi int64, target int64) time.Time {
	gap := hi.Sub(lo)
	at := time.Duration(float64(gap) * float64(target-flo) / float64(fhi-flo))
	return lo.Add(min(max(at, gap/8), gap-gap/8))
}

// firstPage is what a first page found: its oldest call and the end of
// its window.
type firstPage struct{ oldest, end time.Time }

// pageHints remembers, per listing, where its first page was found, so the
// next first page (an inbox polls every two seconds) usually needs one
// count to confirm its window. It is only ever a first guess. A nil
// *pageHints remembers nothing.
type pageHints struct {
	mu    sync.Mutex
	pages map[string]firstPage
}

// maxHints bounds the listings remembered; the map starts over when full.
const maxHints = 256

func (h *pageHints) get(key string) (firstPage, bool) {
	if h == nil {
		return firstPage{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.pages[key]
	return p, ok
}

func (h *pageHints) put(key string, p firstPage) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pages == nil || len(h.pages) >= maxHints {
		h.pages = map[string]firstPage{}
	}
	h.pages[key] = p
}
