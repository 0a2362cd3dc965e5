package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
)

// MaxCodecRequestBytes caps a codec request's body: twice Temporal's
// largest payload (2 MiB), and far below what would tie the server up.
const MaxCodecRequestBytes = 4 << 20

// codecRoles may decode: whoever may read calls in full.
var codecRoles = []Role{RoleApprover, RoleAdmin, RoleAuditor}

// codecEncodeRoles may encode. Ciphertext under the current key is what
// the workers accept, so encoding is writing, not reading.
var codecEncodeRoles = []Role{RoleAdmin}

// codecEndpoint serves Temporal's codec-server protocol (POST
// /codec/{namespace}/encode and /decode) for the stock temporal CLI
// (--codec-endpoint) and the Temporal Web UI: it decrypts what toolgate
// encrypted, for people allowed to read it, and encrypts for admins.
// Every request is logged with who made it and how many payloads it
// carried. With a ledger, an encode that carries payloads goes into it
// before it is answered; decodes go in once per person per minute (tally),
// the first before it is answered. Its errors name keys by ID, never a
// file.
type codecEndpoint struct {
	codec     http.Handler
	namespace string
	origins   []string
	authn     *authenticator
	inbox     *inbox
	ledger    *ledger.Ledger
	tally     *codecTally
	logger    *zap.Logger
}

func newCodecEndpoint(cfg Config, in *inbox, authn *authenticator) *codecEndpoint {
	if cfg.Codec == nil {
		return nil
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	return &codecEndpoint{
		codec:     converter.NewPayloadCodecHTTPHandler(pathlessCodec{cfg.Codec}),
		namespace: ns,
		origins:   cfg.CodecCORSOrigins,
		authn:     authn,
		inbox:     in,
		ledger:    cfg.Ledger,
		tally:     newCodecTally(cfg.CodecRate, ns, cfg.Ledger, cfg.Logger),
		logger:    cfg.Logger,
	}
}

func (c *codecEndpoint) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /codec/{namespace}/{op}", c.serve)
	mux.HandleFunc("OPTIONS /codec/{namespace}/{op}", c.preflight)
}

// preflight answers a browser's CORS preflight: the Web UI sends its
// requests with the X-Namespace and Authorization headers.
func (c *codecEndpoint) preflight(w http.ResponseWriter, r *http.Request) {
	if !c.allowCORS(w, r) {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	w.Header().Set("Access-Control-Allow-Methods", "POST")
	w.Header().Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
	w.Header().Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// allowCORS sets the CORS headers for a configured origin; a request from
// any other origin gets none, so no other page reads the answer.
func (c *codecEndpoint) allowCORS(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !slices.Contains(c.origins, origin) {
		return false
	}
	w.Header().Set("Access-Control-Allow-Origin", origin)
	w.Header().Set("Access-Control-Allow-Credentials", "true")
	w.Header().Add("Vary", "Origin")
	return true
}

func (c *codecEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	corsOK := c.allowCORS(w, r)
	op := r.PathValue("op")
	if op != "encode" && op != "decode" {
		writeError(w, &apiError{http.StatusNotFound, "not_found", "the codec endpoint has /encode and /decode"})
		return
	}
	if ns := r.PathValue("namespace"); ns != c.namespace {
		writeError(w, &apiError{http.StatusNotFound, "unknown_namespace", fmt.Sprintf("this server's codec is for namespace %q, not %q", c.namespace, ns)})
		return
	}
	if ns := r.Header.Get("X-Namespace"); ns != "" && ns != c.namespace {
		writeError(w, &apiError{http.StatusNotFound, "unknown_namespace", fmt.Sprintf("this server's codec is for namespace %q, not %q (X-Namespace)", c.namespace, ns)})
		return
	}
	p, via, refused := c.principal(r, op, origin, corsOK)
	if refused != nil {
		writeError(w, refused)
		return
	}
	if op == "decode" {
		if wait, ok := c.tally.admit(p, via); !ok {
			writeRateLimited(w, c.tally.rate, wait)
			return
		}
	}
	if r.ContentLength > MaxCodecRequestBytes {
		writeError(w, tooLarge())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCodecRequestBytes))
	if err != nil {
		writeError(w, tooLarge())
		return
	}
	var payloads commonpb.Payloads
	if err := protojson.Unmarshal(body, &payloads); err != nil {
		writeError(w, badRequest("body", "is not Temporal's payloads JSON ({\"payloads\": [...]}): "+err.Error()))
		return
	}
	n := len(payloads.GetPayloads())
	if err := c.record(r.Context(), op, p, via, n); err != nil {
		c.logger.Error("Codec request refused: the ledger did not take it", zap.String("op", op), zap.String("by", p.Name), zap.Error(err))
		writeError(w, errLedgerUnavailable)
		return
	}
	c.logger.Info("Codec", zap.String("op", op), zap.String("by", p.Name), zap.String("role", string(p.Role)),
		zap.String("via", via), zap.Int("payloads", n))
	r.Body = io.NopCloser(bytes.NewReader(body))
	c.codec.ServeHTTP(&codecErrors{ResponseWriter: w}, r)
}

// principal is who asks: a bearer token, or a person signed in to the
// inbox (the Web UI's requests carry its cookie), from a configured
// origin or none, so that no other page can make a signed-in browser ask;
// refused unless their role may do op.
func (c *codecEndpoint) principal(r *http.Request, op, origin string, corsOK bool) (Principal, string, *apiError) {
	var p Principal
	via := "token"
	if r.Header.Get("Authorization") != "" {
		var refused *apiError
		if p, refused = c.authn.bearer(r); refused != nil {
			return p, via, refused
		}
	} else if s, ok := c.inbox.session(r); ok && (origin == "" || corsOK) {
		p, via = s.principal, "inbox"
	} else {
		return p, via, errUnauthorized
	}
	if !roleIn(p.Role, codecRoles) {
		return p, via, &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("%s holds a token with role %s; the codec endpoint needs role %s", p.Name, p.Role, joinRoles(codecRoles))}
	}
	if op == "encode" && !roleIn(p.Role, codecEncodeRoles) {
		return p, via, &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("encoding payloads is for admins: it makes ciphertext the workers would accept (%s has role %s, which may decode)", p.Name, p.Role)}
	}
	return p, via, nil
}

// record puts a request that carries payloads into the ledger: who read
// (decode, counted per minute by the tally) or had encrypted (encode, one
// entry each: rare, and each makes ciphertext) how many. One without
// payloads (the token check of docs/production.md) reads and makes
// nothing, and stays out.
func (c *codecEndpoint) record(ctx context.Context, op string, p Principal, via string, n int) error {
	if op == "decode" {
		return c.tally.record(ctx, p, via, n)
	}
	if c.ledger == nil || n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := c.ledger.Append(ctx, ledger.Entry{
		Kind: ledger.KindCodecEncoded, Event: "codec/" + rand.Text(), At: time.Now().UTC(),
		By: p.Name, Role: string(p.Role), Counts: map[string]int{"payloads": n},
		Details: map[string]any{"namespace": c.namespace, "via": via},
	})
	return err
}

// writeRateLimited answers a decode over the rate: 429 rate_limited, and
// Retry-After when the minute ends. writeError would send the fixed
// Retry-After of Temporal's own 429.
func writeRateLimited(w http.ResponseWriter, rate int, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(wait, time.Second).Seconds()))))
	e := &apiError{http.StatusTooManyRequests, errTemporalBusy.code,
		fmt.Sprintf("a person may make %d codec decode requests a minute; try again when the minute ends", rate)}
	writeJSON(w, e.status, map[string]any{"error": map[string]string{"code": e.code, "message": e.message}})
}

func tooLarge() *apiError {
	return &apiError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("a codec request carries at most %d bytes of payloads", MaxCodecRequestBytes)}
}

// pathlessCodec is the served codec with errors fit for whoever asks: a
// payload under a key the server lacks is named by the key's ID, not by
// the keyring file the key is missing from. The keyring's other errors
// name a key ID and what failed, no file.
type pathlessCodec struct{ converter.PayloadCodec }

var _ converter.PayloadCodec = pathlessCodec{}

func (c pathlessCodec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out, err := c.PayloadCodec.Encode(payloads)
	return out, pathless(err)
}

func (c pathlessCodec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out, err := c.PayloadCodec.Decode(payloads)
	return out, pathless(err)
}

func pathless(err error) error {
	if id, ok := keyring.UnknownKeyID(err); ok {
		return fmt.Errorf("payload encrypted with key %s, which this server's keyring does not hold", id)
	}
	return err
}

// codecErrors turns the SDK handler's plain-text errors (a payload that
// does not decrypt: its key is missing, it was altered) into toolgate's
// JSON error, status kept.
type codecErrors struct {
	http.ResponseWriter
	failed bool
	status int
}

func (e *codecErrors) WriteHeader(status int) {
	if status >= 400 {
		e.failed, e.status = true, status
		return
	}
	e.ResponseWriter.WriteHeader(status)
}

func (e *codecErrors) Write(b []byte) (int, error) {
	if e.failed {
		writeError(e.ResponseWriter, &apiError{e.status, "codec_failed", strings.TrimSpace(string(b))})
		e.failed = false
		return len(b), nil
	}
	return e.ResponseWriter.Write(b)
}
