package mcpgate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	tgclient "github.com/toolgate/toolgate/client"
)

// waitingKept is how long the gateway remembers a call no request saw end
// (the client gave up on it): past any approval deadline in practice.
const waitingKept = 24 * time.Hour

// waitingCalls remembers, per identical request (requester, session,
// tool, arguments), the toolgate call its requests wait on. A client that
// gave up and asks again, or asks twice at once, joins the call instead of
// asking a person again: one call, run at most once. The call is
// forgotten once a request saw its Result (the next identical request is
// a new call) or was cancelled by its client.
type waitingCalls struct {
	mu    sync.Mutex
	calls map[string]*waitingCall
}

type waitingCall struct {
	callID  string
	waiters int
	since   time.Time
}

// join returns the call that identical requests wait on, counting this
// request as a waiter, or "" when there is none: then the request submits
// callID and is its first waiter.
func (w *waitingCalls) join(key, callID string) (joined string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.calls == nil {
		w.calls = map[string]*waitingCall{}
	}
	if c, ok := w.calls[key]; ok {
		c.waiters++
		return c.callID
	}
	for k, c := range w.calls {
		if time.Since(c.since) > waitingKept {
			delete(w.calls, k)
		}
	}
	w.calls[key] = &waitingCall{callID: callID, waiters: 1, since: time.Now()}
	return ""
}

// leave counts a waiter out; ended says it saw the call end (or cancelled
// it), so the call is forgotten.
func (w *waitingCalls) leave(key, callID string, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.calls[key]
	if !ok || c.callID != callID {
		return
	}
	c.waiters--
	if ended {
		delete(w.calls, key)
	}
}

// leaveAlone forgets callID if this request is the only one waiting on it,
// so that a request that comes later asks anew rather than joining a call
// about to be cancelled; it reports whether it did.
func (w *waitingCalls) leaveAlone(key, callID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.calls[key]
	if !ok || c.callID != callID || c.waiters != 1 {
		return false
	}
	delete(w.calls, key)
	return true
}

// ended forgets callID, whose Result a request saw (toolgate_wait).
func (w *waitingCalls) ended(callID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.calls {
		if c.callID == callID {
			delete(w.calls, k)
		}
	}
}

// forget drops the call of key, if it is callID (its submission failed).
func (w *waitingCalls) forget(key, callID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.calls[key]; ok && c.callID == callID {
		delete(w.calls, key)
	}
}

// requestKey identifies a request by what it asks; arguments compare as
// JSON values (key order and spacing aside).
func requestKey(requester, session, tool string, args json.RawMessage) string {
	h := sha256.New()
	canonical, err := tgclient.CanonicalJSON(args)
	if err != nil {
		canonical = args // compared as sent: at worst an identical call is not joined
	}
	for _, part := range [][]byte{[]byte(requester), []byte(session), []byte(tool), canonical} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
