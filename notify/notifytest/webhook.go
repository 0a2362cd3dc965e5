package notifytest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/notify"
)

// WebhookDelivery is one request the receiver got.
type WebhookDelivery struct {
	Event notify.WebhookEvent
	// Verified: the signature checked out with the receiver's secret.
	Verified bool
	// Err is why verification failed.
	Err error
	// Body is the request's body, as sent.
	Body []byte
}

// WebhookReceiver checks every delivery with notify.VerifyWebhook, as a
// real receiver would, and keeps it. It answers 401 to a bad signature.
type WebhookReceiver struct {
	URL    string
	secret string
	srv    *httptest.Server
	mu     sync.Mutex
	got    []WebhookDelivery
	status int
}

// NewWebhookReceiver starts a receiver that verifies with secret; it stops
// with the test.
func NewWebhookReceiver(t testing.TB, secret string) *WebhookReceiver {
	w := &WebhookReceiver{secret: secret}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.srv.Close)
	w.URL = w.srv.URL + "/hooks/toolgate"
	return w
}

// AnswerWith makes the receiver answer status to the deliveries that
// verify (0 restores 204).
func (w *WebhookReceiver) AnswerWith(status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status = status
}

func (w *WebhookReceiver) serve(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	d := WebhookDelivery{Body: body}
	d.Err = notify.VerifyWebhook(w.secret, r.Header, body, time.Now(), 5*time.Minute)
	d.Verified = d.Err == nil
	_ = json.Unmarshal(body, &d.Event)
	w.mu.Lock()
	w.got = append(w.got, d)
	status := w.status
	w.mu.Unlock()
	switch {
	case !d.Verified:
		http.Error(rw, d.Err.Error(), http.StatusUnauthorized)
	case status != 0:
		rw.WriteHeader(status)
	default:
		rw.WriteHeader(http.StatusNoContent)
	}
}

// Deliveries returns what arrived so far.
func (w *WebhookReceiver) Deliveries() []WebhookDelivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WebhookDelivery(nil), w.got...)
}

// Events returns the kinds of the verified deliveries for callID, in
// order.
func (w *WebhookReceiver) Events(callID string) []string {
	var out []string
	for _, d := range w.Deliveries() {
		if d.Verified && d.Event.CallID == callID {
			out = append(out, d.Event.Event)
		}
	}
	return out
}
