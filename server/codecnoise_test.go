package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
)

// codecClock stands still for the codec's tally: its time moves, and the
// tally's end-of-minute timers fire, when the test says.
type codecClock struct {
	mu     sync.Mutex
	at     time.Time
	timers []*codecTimer
}

type codecTimer struct {
	f       func()
	stopped bool
}

func (c *codecClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *codecClock) after(_ time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &codecTimer{f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.stopped
		tm.stopped = true
		return was
	}
}

// move sets the clock to at.
func (c *codecClock) move(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = at
}

// fire runs the timers set and not stopped, as if their minute had ended.
func (c *codecClock) fire() {
	c.mu.Lock()
	timers := c.timers
	c.timers = nil
	c.mu.Unlock()
	for _, tm := range timers {
		c.mu.Lock()
		stopped := tm.stopped
		tm.stopped = true
		c.mu.Unlock()
		if !stopped {
			tm.f()
		}
	}
}

// minute is 10:00 of the day the tests run their codec at.
var minute = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// tallyServer is codecServer's server with the given rate (0: the
// default), its tally on a clock at 10:00:05 and its logs observed.
func tallyServer(t *testing.T, rate int) (h *Handler, l *ledger.Ledger, body string, clock *codecClock, logs *observer.ObservedLogs) {
	t.Helper()
	ring, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	l, _, _ = testLedger(t)
	core, logs := observer.New(zap.InfoLevel)
	h = New(Config{Tokens: auditTokens(t), Codec: ring.EndpointCodec(), Namespace: "prod", CodecCORSOrigins: []string{webUI},
		Ledger: l, CodecRate: rate, Logger: zap.New(core)})
	clock = &codecClock{at: minute.Add(5 * time.Second)}
	h.codec.tally.now, h.codec.tally.after = clock.now, clock.after
	p, err := keyring.DataConverter(ring).ToPayload(map[string]string{"content": codecSecret})
	require.NoError(t, err)
	return h, l, payloadsJSON(t, p), clock, logs
}

// codecEntries are the ledger's entries, decoded.
func codecEntries(t *testing.T, l *ledger.Ledger) []ledger.Entry {
	t.Helper()
	stored, err := l.Entries(context.Background(), 0, 1000)
	require.NoError(t, err)
	entries := make([]ledger.Entry, len(stored))
	for i, s := range stored {
		require.NoError(t, json.Unmarshal(s.Entry, &entries[i]))
		assert.NotContains(t, string(s.Entry), "sk-live", "the ledger says who read, never what")
	}
	return entries
}

// endMinute fires the tally's timers and waits for what they write.
func endMinute(h *Handler, clock *codecClock) {
	clock.fire()
	h.codec.tally.writing.Wait()
}

func windowOf(start time.Time) map[string]any {
	return map[string]any{"window_start": start.Format(time.RFC3339), "window_end": start.Add(time.Minute).Format(time.RFC3339)}
}

func details(via string, window map[string]any) map[string]any {
	d := map[string]any{"namespace": "prod", "via": via}
	for k, v := range window {
		d[k] = v
	}
	return d
}

func TestTwoHundredDecodesInAMinuteAreTwoLedgerEntries(t *testing.T) {
	h, l, body, clock, _ := tallyServer(t, 0)
	var one commonpb.Payloads
	require.NoError(t, protojson.Unmarshal([]byte(body), &one))
	three := payloadsJSON(t, one.Payloads[0], one.Payloads[0], one.Payloads[0])
	answered, refused, payloads := 0, 0, 0
	for i := range 200 {
		clock.move(minute.Add(5*time.Second + time.Duration(i)*250*time.Millisecond))
		b, n := body, 1
		if i%2 == 1 {
			b, n = three, 3
		}
		rec := apiCall(h, "approver-token", "POST", "/codec/prod/decode", b)
		switch rec.Code {
		case http.StatusOK:
			require.Len(t, decoded(t, rec), n)
			answered++
			if answered > 1 {
				payloads += n
			}
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("decode %d: %d %s", i, rec.Code, rec.Body.String())
		}
	}
	assert.Equal(t, DefaultCodecRate, answered)
	assert.Equal(t, 200-DefaultCodecRate, refused)

	// Until the minute ends, the ledger holds the first decode alone.
	entries := codecEntries(t, l)
	require.Len(t, entries, 1)
	first := entries[0]
	assert.Equal(t, ledger.KindCodecDecoded, first.Kind)
	assert.Equal(t, "alice", first.By)
	assert.Equal(t, "approver", first.Role)
	assert.Equal(t, map[string]int{"payloads": 1, "requests": 1}, first.Counts)
	assert.Equal(t, details("token", windowOf(minute)), first.Details)
	assert.Equal(t, minute.Add(5*time.Second), first.At)

	// At its end, the rest are one entry, with their counts.
	endMinute(h, clock)
	entries = codecEntries(t, l)
	require.Len(t, entries, 2)
	rest := entries[1]
	assert.Equal(t, ledger.KindCodecDecoded, rest.Kind)
	assert.Equal(t, "alice", rest.By)
	assert.Equal(t, "approver", rest.Role)
	assert.Equal(t, map[string]int{"payloads": payloads, "requests": DefaultCodecRate - 1}, rest.Counts)
	assert.Equal(t, details("token", windowOf(minute)), rest.Details)
	assert.NotEqual(t, first.Event, rest.Event)
	assert.True(t, strings.HasPrefix(rest.Event, "codec/"), rest.Event)
	assert.Nil(t, h.codec.tally.open, "a minute that ended is dropped")

	// The next minute starts anew: its first decode is in the ledger at
	// once, and a minute nobody's timer closed is written when the next
	// decode finds it over.
	clock.move(minute.Add(time.Minute + 10*time.Second))
	decoded(t, apiCall(h, "approver-token", "POST", "/codec/prod/decode", body))
	decoded(t, apiCall(h, "approver-token", "POST", "/codec/prod/decode", body))
	clock.move(minute.Add(2*time.Minute + time.Second))
	decoded(t, apiCall(h, "approver-token", "POST", "/codec/prod/decode", body))
	h.codec.tally.writing.Wait()
	entries = codecEntries(t, l)
	require.Len(t, entries, 5)
	assert.Equal(t, map[string]int{"payloads": 1, "requests": 1}, entries[2].Counts)
	assert.Equal(t, windowOf(minute.Add(time.Minute)), map[string]any{"window_start": entries[2].Details["window_start"], "window_end": entries[2].Details["window_end"]})
	var held, third ledger.Entry // written concurrently: either order
	for _, e := range entries[3:] {
		if e.Details["window_start"] == minute.Add(time.Minute).Format(time.RFC3339) {
			held = e
		} else {
			third = e
		}
	}
	assert.Equal(t, map[string]int{"payloads": 1, "requests": 1}, held.Counts)
	assert.Equal(t, details("token", windowOf(minute.Add(time.Minute))), held.Details)
	assert.Equal(t, details("token", windowOf(minute.Add(2*time.Minute))), third.Details)
}

// answerWatch notes how many entries the ledger holds when the answer
// begins.
type answerWatch struct {
	*httptest.ResponseRecorder
	ledger *ledger.Ledger
	once   sync.Once
	size   int64
}

func (a *answerWatch) note() {
	a.once.Do(func() { a.size, _ = a.ledger.Size(context.Background()) })
}

func (a *answerWatch) WriteHeader(status int) { a.note(); a.ResponseRecorder.WriteHeader(status) }

func (a *answerWatch) Write(b []byte) (int, error) { a.note(); return a.ResponseRecorder.Write(b) }

func TestTheFirstDecodeOfAMinuteIsInTheLedgerBeforeItsAnswer(t *testing.T) {
	h, l, body, _, _ := tallyServer(t, 0)
	watch := func() *answerWatch {
		req := httptest.NewRequest("POST", "/codec/prod/decode", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer auditor-token")
		w := &answerWatch{ResponseRecorder: httptest.NewRecorder(), ledger: l}
		h.ServeHTTP(w, req)
		require.Len(t, decoded(t, w.ResponseRecorder), 1)
		return w
	}
	assert.EqualValues(t, 1, watch().size, "the first decode's entry is in the ledger before a byte of the answer")
	assert.EqualValues(t, 1, watch().size, "a later one is counted for the minute's entry")

	// Concurrent first decodes (the Web UI decodes a history's events at
	// once) wait for the first entry, and add none of their own.
	var wg sync.WaitGroup
	h2, l2, body2, clock2, _ := tallyServer(t, 0)
	sizes := make([]int64, 20)
	for i := range sizes {
		wg.Go(func() {
			req := httptest.NewRequest("POST", "/codec/prod/decode", strings.NewReader(body2))
			req.Header.Set("Authorization", "Bearer approver-token")
			w := &answerWatch{ResponseRecorder: httptest.NewRecorder(), ledger: l2}
			h2.ServeHTTP(w, req)
			assert.Equal(t, http.StatusOK, w.Code, w.Body.String())
			sizes[i] = w.size
		})
	}
	wg.Wait()
	for i, size := range sizes {
		assert.EqualValues(t, 1, size, "decode %d was answered with the minute's first entry in the ledger, and it alone", i)
	}
	endMinute(h2, clock2)
	entries := codecEntries(t, l2)
	require.Len(t, entries, 2)
	assert.Equal(t, map[string]int{"payloads": 19, "requests": 19}, entries[1].Counts)
}

func TestEachPersonAndWayInHasTheirOwnEntry(t *testing.T) {
	h, l, body, clock, _ := tallyServer(t, 0)
	inbox := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/codec/prod/decode", strings.NewReader(body))
		req.Header.Set("Origin", webUI)
		req.AddCookie(signIn(t, h, "approver-token"))
		return serve(h, req)
	}
	for range 3 {
		decoded(t, apiCall(h, "approver-token", "POST", "/codec/prod/decode", body))
		decoded(t, apiCall(h, "auditor-token", "POST", "/codec/prod/decode", body))
		decoded(t, inbox())
	}
	entries := codecEntries(t, l)
	require.Len(t, entries, 3, "each one's first decode")
	endMinute(h, clock)
	entries = codecEntries(t, l)
	require.Len(t, entries, 6, "and one entry each for the rest")
	type who struct{ by, via string }
	var got []who
	for _, e := range entries[3:] {
		got = append(got, who{e.By, e.Details["via"].(string)})
		assert.Equal(t, map[string]int{"payloads": 2, "requests": 2}, e.Counts)
		assert.Equal(t, windowOf(minute)["window_start"], e.Details["window_start"])
	}
	assert.Equal(t, []who{{"alice", "inbox"}, {"alice", "token"}, {"audrey", "token"}}, got)
}

func TestTheDecodeAfterThePersonsRateInAMinuteIsRefused(t *testing.T) {
	h, l, body, clock, logs := tallyServer(t, 0)
	clock.move(minute.Add(15 * time.Second))
	for i := range DefaultCodecRate {
		rec := apiCall(h, "approver-token", "POST", "/codec/prod/decode", body)
		require.Equal(t, http.StatusOK, rec.Code, "decode %d: %s", i+1, rec.Body.String())
	}
	for range 30 {
		rec := apiCall(h, "approver-token", "POST", "/codec/prod/decode", body)
		require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
		assert.Equal(t, "45", rec.Header().Get("Retry-After"), "the minute ends in 45 s")
		code, message := apiErrorOf(t, rec)
		assert.Equal(t, "rate_limited", code)
		assert.Contains(t, message, "120 codec decode requests a minute")
		assert.NotContains(t, rec.Body.String(), "sk-live")
	}
	// The rate is the person's, whichever way they come in; another
	// person has their own.
	req := httptest.NewRequest("POST", "/codec/prod/decode", strings.NewReader(body))
	req.Header.Set("Origin", webUI)
	req.AddCookie(signIn(t, h, "approver-token"))
	assert.Equal(t, http.StatusTooManyRequests, serve(h, req).Code)
	decoded(t, apiCall(h, "auditor-token", "POST", "/codec/prod/decode", body))
	assert.Equal(t, 1, logs.FilterMessageSnippet("over the rate").Len(), "the refusals of a minute are logged once")

	// The next minute, they may again; the minute that ended is dropped.
	clock.move(minute.Add(time.Minute))
	decoded(t, apiCall(h, "approver-token", "POST", "/codec/prod/decode", body))
	h.codec.tally.writing.Wait()
	assert.Len(t, h.codec.tally.open.asked, 1)
	assert.Len(t, h.codec.tally.open.readings, 1)
	assert.Len(t, codecEntries(t, l), 4, "alice's and audrey's first of the first minute, alice's rest, alice's first of the next")

	// The rate is the server's to set; encodes have none.
	h, _, body, clock, _ = tallyServer(t, 2)
	clock.move(minute.Add(59*time.Second + 100*time.Millisecond))
	for range 2 {
		decoded(t, apiCall(h, "approver-token", "POST", "/codec/prod/decode", body))
	}
	rec := apiCall(h, "approver-token", "POST", "/codec/prod/decode", body)
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"), "whole seconds, rounded up")
	for range 3 {
		decoded(t, apiCall(h, "admin-token", "POST", "/codec/prod/encode", `{"payloads":[]}`))
	}
}

func TestADecodeOfNoPayloadsWritesNothing(t *testing.T) {
	h, l, _, clock, _ := tallyServer(t, 0)
	for _, token := range []string{"approver-token", "approver-token", "auditor-token"} {
		rec := apiCall(h, token, "POST", "/codec/prod/decode", `{"payloads":[]}`)
		assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	endMinute(h, clock)
	h.Close()
	assert.Empty(t, codecEntries(t, l))
}

func TestEncodesStayOneEntryEach(t *testing.T) {
	h, l, _, clock, _ := tallyServer(t, 0)
	plain := `{"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "IngiCg=="}]}`
	for range 3 {
		decoded(t, apiCall(h, "admin-token", "POST", "/codec/prod/encode", plain))
	}
	entries := codecEntries(t, l)
	require.Len(t, entries, 3, "before the minute ends")
	endMinute(h, clock)
	h.Close()
	entries = codecEntries(t, l)
	require.Len(t, entries, 3)
	for _, e := range entries {
		assert.Equal(t, ledger.KindCodecEncoded, e.Kind)
		assert.Equal(t, "root", e.By)
		assert.Equal(t, map[string]int{"payloads": 1}, e.Counts)
		assert.Equal(t, map[string]any{"namespace": "prod", "via": "token"}, e.Details)
	}
}

func TestShutdownWritesTheMinutesCounts(t *testing.T) {
	h, l, body, _, _ := tallyServer(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := NewHTTPServer(h)
	go func() { _ = hs.Serve(ln) }()
	for range 5 {
		req, err := http.NewRequest("POST", "http://"+ln.Addr().String()+"/codec/prod/decode", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer approver-token")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	require.Len(t, codecEntries(t, l), 1)

	require.NoError(t, hs.Shutdown(context.Background()))
	h.Close()
	entries := codecEntries(t, l)
	require.Len(t, entries, 2, "the minute's count is written when the server stops, not lost")
	assert.Equal(t, map[string]int{"payloads": 4, "requests": 4}, entries[1].Counts)
	assert.Equal(t, details("token", windowOf(minute)), entries[1].Details)

	// A decode still in flight after that is in the ledger on its own.
	decoded(t, apiCall(h, "approver-token", "POST", "/codec/prod/decode", body))
	entries = codecEntries(t, l)
	require.Len(t, entries, 3)
	assert.Equal(t, map[string]int{"payloads": 1, "requests": 1}, entries[2].Counts)
	assert.Equal(t, map[string]any{"namespace": "prod", "via": "token"}, entries[2].Details)
}

func TestADecodeTheLedgerDoesNotTakeIsNotAnswered(t *testing.T) {
	h, _, body, _, _ := tallyServer(t, 0)
	// A ledger of its own, closed: testLedger's would be closed twice.
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	closed, err := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys})
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	h.codec.tally.ledger = closed
	for range 2 {
		rec := apiCall(h, "approver-token", "POST", "/codec/prod/decode", body)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		code, _ := apiErrorOf(t, rec)
		assert.Equal(t, "ledger_unavailable", code)
		assert.NotContains(t, rec.Body.String(), "sk-live")
	}
	assert.Empty(t, h.codec.tally.open.readings, "nothing is counted on a first entry the ledger refused")
}
