package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/ledger"
)

// AuditKey returns the verifier key of the server's decision ledger (GET
// /v1/audit/key). It is the server's word: check the ledger against a key
// its operator gave you out of band.
func (c *Client) AuditKey(ctx context.Context) (string, error) {
	_, _, data, err := c.exchange(ctx, http.MethodGet, "/v1/audit/key", nil)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// AuditCheckpoint returns the ledger's latest signed checkpoint, the note
// as signed (GET /v1/audit/checkpoint). A ledger without one yet answers a
// *client.RefusedError of type "no_checkpoint".
func (c *Client) AuditCheckpoint(ctx context.Context) ([]byte, error) {
	_, _, data, err := c.exchange(ctx, http.MethodGet, "/v1/audit/checkpoint", nil)
	return data, err
}

// AuditEntries returns one page of the ledger's entries from index start
// on (GET /v1/audit/entries), each with its bytes as stored. next is where
// the following page starts, or -1 when this page reached the log's end.
func (c *Client) AuditEntries(ctx context.Context, start int64) (entries []ledger.Stored, next int64, err error) {
	q := url.Values{"start": {strconv.FormatInt(start, 10)}}
	_, h, data, err := c.exchange(ctx, http.MethodGet, "/v1/audit/entries?"+q.Encode(), nil)
	if err != nil {
		return nil, 0, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var s ledger.Stored
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, 0, fmt.Errorf("toolgate API: entries from #%d: not JSON lines of entries: %w", start, err)
		}
		entries = append(entries, s)
	}
	next = -1
	if v := h.Get("X-Next-Start"); v != "" {
		// A next page must start past this one, or reading never ends.
		if next, err = strconv.ParseInt(v, 10, 64); err != nil || next <= start {
			return nil, 0, fmt.Errorf("toolgate API: entries from #%d: X-Next-Start %q does not move on", start, v)
		}
	}
	return entries, next, nil
}

// ErrNoProofRoute: the server has no GET /v1/audit/proof (it answers a
// bare 404, not an API error); it is a toolgate from before the route.
var ErrNoProofRoute = errors.New("toolgate API: the server offers no consistency proofs (GET /v1/audit/proof): a toolgate from before them")

// AuditProof returns the ledger's latest signed checkpoint and the proof
// that it extends the log's tree of size old (GET /v1/audit/proof). It is
// the server's word: check it with the key you hold
// (ledger.ConsistencyProof.Check). An old past the latest checkpoint
// answers a *client.RefusedError of type "old_past_checkpoint"; a ledger
// without a checkpoint one of type "no_checkpoint"; a server without the
// route ErrNoProofRoute.
func (c *Client) AuditProof(ctx context.Context, old int64) (ledger.ConsistencyProof, error) {
	var p ledger.ConsistencyProof
	q := url.Values{"old": {strconv.FormatInt(old, 10)}}
	err := c.do(ctx, http.MethodGet, "/v1/audit/proof?"+q.Encode(), nil, &p)
	var bare *bareError
	if errors.As(err, &bare) && bare.status == http.StatusNotFound {
		return p, ErrNoProofRoute
	}
	return p, err
}

// AuditReceipt returns a call's receipt (GET /v1/audit/calls/{call_id}):
// its entries, as stored, with their inclusion proofs against a signed
// checkpoint. An unknown call answers client.ErrUnknownCall.
func (c *Client) AuditReceipt(ctx context.Context, callID string) (ledger.Receipt, error) {
	var r ledger.Receipt
	err := c.do(ctx, http.MethodGet, "/v1/audit/calls/"+url.PathEscape(callID), nil, &r)
	return r, err
}
