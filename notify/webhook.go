package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
)

// Webhook headers.
const (
	// HeaderWebhookTimestamp carries the Unix time the event was sent at.
	HeaderWebhookTimestamp = "X-Toolgate-Timestamp"
	// HeaderWebhookSignature carries "sha256=" and the hex HMAC-SHA256 of
	// "<timestamp>.<body>" under the webhook secret.
	HeaderWebhookSignature = "X-Toolgate-Signature"
	// HeaderWebhookEvent repeats the event's kind, for routing.
	HeaderWebhookEvent = "X-Toolgate-Event"
)

// WebhookEvent is the JSON body of a webhook POST. Event is waiting,
// reminder or escalation for a notice, and decided, timed_out or executed
// for what became of the call.
type WebhookEvent struct {
	// ID is the same on every delivery of one event: receivers dedupe by it.
	ID      string `json:"id"`
	Event   string `json:"event"`
	CallID  string `json:"call_id"`
	Session string `json:"session"`
	Tool    string `json:"tool"`
	// Args are the call's arguments, compact and cut at MaxArgsShown bytes.
	Args      string   `json:"args"`
	Message   string   `json:"message,omitempty"`
	Groups    []string `json:"groups,omitempty"`
	Requester string   `json:"requester,omitempty"`
	// Deadline is when a waiting call times out (notices only).
	Deadline  time.Time `json:"deadline,omitzero"`
	Decision  string    `json:"decision,omitempty"`
	DecidedBy string    `json:"decided_by,omitempty"`
	Channel   string    `json:"channel,omitempty"`
	Status    string    `json:"status,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	InboxURL  string    `json:"inbox_url,omitempty"`
	NoticeSeq int       `json:"notice_seq,omitempty"`
}

// WebhookOptions configure the webhook channel.
type WebhookOptions struct {
	// URLs receive every event. Required.
	URLs []string
	// Secret signs the events. Required.
	Secret string
	// PublicURL, when set, adds the call's inbox page to events. Optional.
	PublicURL string
	// Client sends the requests; nil is a client with a 10 s timeout.
	Client *http.Client
	// Logger; nil means no logs.
	Logger *zap.Logger
	// Now is the clock of signatures; nil is time.Now.
	Now func() time.Time
}

// Webhook POSTs signed JSON events about calls that ask a person. A URL
// that answers anything but 2xx fails the send, so the activity retries;
// delivery is at least once, and every delivery of an event carries the
// same ID.
type Webhook struct {
	opts WebhookOptions
}

var _ activities.Channel = (*Webhook)(nil)

// NewWebhook returns the webhook channel.
func NewWebhook(opts WebhookOptions) *Webhook {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Webhook{opts: opts}
}

// Name returns ChannelWebhook.
func (w *Webhook) Name() string { return ChannelWebhook }

// Notify sends a waiting, reminder or escalation event.
func (w *Webhook) Notify(ctx context.Context, n activities.Notice) (activities.Receipt, error) {
	ev := WebhookEvent{
		ID:    fmt.Sprintf("%s/notice/%d", n.Call.ID, n.Seq),
		Event: string(n.Kind), CallID: n.Call.ID, Session: n.Call.Session, Tool: n.Call.Tool,
		Args: Abridge(n.Call.Args, MaxArgsShown), Message: n.Request.Message, Groups: n.Groups,
		Requester: n.Call.Requester, Deadline: n.Deadline, Status: "pending", At: w.opts.Now().UTC(),
		InboxURL: callPageURL(w.opts.PublicURL, n.Call.ID), NoticeSeq: n.Seq,
	}
	return activities.Receipt{Channel: ChannelWebhook}, w.post(ctx, ev)
}

// Resolve sends a decided, timed_out or executed event.
func (w *Webhook) Resolve(ctx context.Context, o activities.Outcome, _ []activities.Receipt) error {
	ev := WebhookEvent{
		ID:    o.Call.ID + "/" + string(o.Event),
		Event: string(o.Event), CallID: o.Call.ID, Session: o.Call.Session, Tool: o.Call.Tool,
		Args: Abridge(o.Call.Args, MaxArgsShown), Requester: o.Call.Requester,
		Decision: o.Decision, DecidedBy: o.DecidedBy, Channel: o.Channel, Status: o.Status, Reason: o.Reason,
		At: o.At.UTC(), InboxURL: callPageURL(w.opts.PublicURL, o.Call.ID),
	}
	return w.post(ctx, ev)
}

// post sends ev to every URL; it fails when any URL did not take it.
func (w *Webhook) post(ctx context.Context, ev WebhookEvent) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("webhook: encode event: %w", err)
	}
	var errs []error
	for _, u := range w.opts.URLs {
		if err := w.postOne(ctx, u, ev.Event, body); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	w.opts.Logger.Debug("Webhook event sent", zap.String("callID", ev.CallID), zap.String("event", ev.Event), zap.Int("urls", len(w.opts.URLs)))
	return nil
}

func (w *Webhook) postOne(ctx context.Context, u, event string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook %s: %w", u, err)
	}
	ts := strconv.FormatInt(w.opts.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolgate-webhook/1")
	req.Header.Set(HeaderWebhookEvent, event)
	req.Header.Set(HeaderWebhookTimestamp, ts)
	req.Header.Set(HeaderWebhookSignature, SignWebhook(w.opts.Secret, ts, body))
	resp, err := w.opts.Client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", u, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook %s answered %s: %s", u, resp.Status, strings.TrimSpace(string(snippet)))
	}
	return nil
}

// SignWebhook returns the X-Toolgate-Signature value of body sent at
// timestamp (Unix seconds, as in X-Toolgate-Timestamp).
func SignWebhook(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Webhook verification errors.
var (
	ErrWebhookUnsigned  = errors.New("webhook: missing X-Toolgate-Timestamp or X-Toolgate-Signature")
	ErrWebhookSignature = errors.New("webhook: signature does not match")
	ErrWebhookStale     = errors.New("webhook: timestamp too old or too far in the future")
)

// VerifyWebhook checks a received event: the signature over
// "<timestamp>.<body>" under secret, compared in constant time, and a
// timestamp within maxAge of now either way (replays of old deliveries are
// refused). Receivers call it with the raw body, before decoding it.
func VerifyWebhook(secret string, header http.Header, body []byte, now time.Time, maxAge time.Duration) error {
	ts, sig := header.Get(HeaderWebhookTimestamp), header.Get(HeaderWebhookSignature)
	if ts == "" || sig == "" {
		return ErrWebhookUnsigned
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrWebhookUnsigned
	}
	if !hmac.Equal([]byte(sig), []byte(SignWebhook(secret, ts, body))) {
		return ErrWebhookSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > maxAge || d < -maxAge {
		return ErrWebhookStale
	}
	return nil
}

// EventLedgerCheckpoint is the webhook event of a new signed checkpoint of
// the decision ledger: sent where the ledger's store cannot rewrite it.
const EventLedgerCheckpoint = "ledger.checkpoint"

// LedgerCheckpointEvent is the body of a ledger.checkpoint event.
type LedgerCheckpointEvent struct {
	ID     string `json:"id"`
	Event  string `json:"event"`
	Origin string `json:"origin"`
	Size   int64  `json:"size"`
	// Checkpoint is the signed note (c2sp.org/tlog-checkpoint).
	Checkpoint string    `json:"checkpoint"`
	At         time.Time `json:"at"`
}

// EventLedgerFork is the webhook event of the ledger's signer refusing a
// tree that does not extend what it signed: the database was rewritten or
// rolled back.
const EventLedgerFork = "ledger.fork"

// LedgerForkEvent is the body of a ledger.fork event.
type LedgerForkEvent struct {
	ID     string `json:"id"`
	Event  string `json:"event"`
	Origin string `json:"origin"`
	// Signed is the size of the tree signed before; Offered the size of
	// the tree the database holds (-1 when the refusal is of a stored
	// checkpoint the key did not sign).
	Signed  int64     `json:"signed"`
	Offered int64     `json:"offered"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Fork sends a ledger.fork event to every URL.
func (w *Webhook) Fork(ctx context.Context, origin string, signed, offered int64, reason string) error {
	return w.postLedgerEvent(ctx, EventLedgerFork, LedgerForkEvent{ID: fmt.Sprintf("%s/fork/%d/%d", origin, signed, offered),
		Event: EventLedgerFork, Origin: origin, Signed: signed, Offered: offered, Reason: reason, At: w.opts.Now().UTC()})
}

// Checkpoint sends a ledger.checkpoint event to every URL.
func (w *Webhook) Checkpoint(ctx context.Context, origin string, size int64, note []byte) error {
	return w.postLedgerEvent(ctx, EventLedgerCheckpoint, LedgerCheckpointEvent{ID: fmt.Sprintf("%s/checkpoint/%d", origin, size),
		Event: EventLedgerCheckpoint, Origin: origin, Size: size, Checkpoint: string(note), At: w.opts.Now().UTC()})
}

// postLedgerEvent sends a ledger event's body to every URL.
func (w *Webhook) postLedgerEvent(ctx context.Context, event string, ev any) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("webhook: encode %s: %w", event, err)
	}
	var errs []error
	for _, u := range w.opts.URLs {
		errs = append(errs, w.postOne(ctx, u, event, body))
	}
	return errors.Join(errs...)
}
