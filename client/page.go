package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc/codes"
)

// Page sizes of the paged listings (Pending, ListPage).
const (
	// DefaultPageSize is the page size when none is asked for.
	DefaultPageSize = 100
	// MaxPageSize is the largest page that may be asked for.
	MaxPageSize = 1000
)

// PageRequest asks for one page of a listing.
type PageRequest struct {
	// Size is the most calls the page holds: 1 to MaxPageSize. Optional;
	// zero means DefaultPageSize.
	Size int
	// Token is the NextPageToken of the page before, with the same
	// filter. Optional; empty asks for the first page.
	Token string
}

// Page is one page of a listing.
type Page struct {
	Calls []CallSummary `json:"calls"`
	// NextPageToken asks for the next page (PageRequest.Token); empty on
	// the last page. It is opaque: a cursor, not a secret.
	NextPageToken string `json:"next_page_token,omitempty"`
	// Total counts the calls the filter matches at the time of this page,
	// on every page.
	Total int64 `json:"total"`
}

// size is the page size asked for, checked.
func (p PageRequest) size() (int, error) {
	switch {
	case p.Size == 0:
		return DefaultPageSize, nil
	case p.Size < 0 || p.Size > MaxPageSize:
		return 0, &InputError{Field: "page_size", Problem: fmt.Sprintf("must be between 1 and %d", MaxPageSize)}
	}
	return p.Size, nil
}

// Page token kinds: which listing a token continues.
const (
	tokenPending = "pending"
	tokenCalls   = "calls"
)

// pageToken is what a NextPageToken holds, as base64url JSON. Filter binds
// it to the listing and filter that issued it; Check is a digest of the
// rest, so an edited token is refused here instead of reaching Temporal
// (which answers an undecodable token of its own only when the request
// times out). A token is a cursor, not a capability: every page is
// filtered again, for its caller.
type pageToken struct {
	Version int    `json:"v"`
	Kind    string `json:"k"`
	Filter  string `json:"f"`
	// Pending: the last call of the page (its requested-at time in Unix
	// nanoseconds and its ID) and the span of time that held the page, a
	// hint for the next one (nanoseconds).
	At     int64  `json:"t,omitempty"`
	CallID string `json:"c,omitempty"`
	Span   int64  `json:"s,omitempty"`
	// Calls: Temporal's own page token.
	Next  []byte `json:"n,omitempty"`
	Check string `json:"x"`
}

// digest is the Check of a token: the first 12 bytes of the SHA-256 of
// its other fields.
func (t pageToken) digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00%d\x00%s\x00%d\x00", t.Version, t.Kind, t.Filter, t.At, t.CallID, t.Span)
	h.Write(t.Next)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

const tokenVersion = 1

// errBadToken is the refusal of a page token this listing did not issue.
func errBadToken() error {
	return &InputError{Field: "page_token", Problem: "is not a page token of this listing: pass the next_page_token of the page before with the same filters, or none for the first page"}
}

func (t pageToken) encode() string {
	t.Version = tokenVersion
	t.Check = t.digest()
	data, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(data)
}

// decodeToken reads a token of kind for the filter key; anything else is
// refused with errBadToken.
func decodeToken(s, kind, filter string) (pageToken, error) {
	var t pageToken
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 4096 {
		return t, errBadToken()
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil || t.Version != tokenVersion || t.Kind != kind || t.Filter != filter || t.Check != t.digest() {
		return t, errBadToken()
	}
	switch kind {
	case tokenPending:
		if t.At <= 0 || t.Span < 0 || ValidateID("call_id", t.CallID) != nil || t.Next != nil {
			return t, errBadToken()
		}
	case tokenCalls:
		if len(t.Next) == 0 || t.At != 0 || t.CallID != "" || t.Span != 0 {
			return t, errBadToken()
		}
	}
	return t, nil
}

// filterKey identifies a listing and the parts of its filter that do not
// move with time (Since and Before do), for binding page tokens.
func filterKey(kind string, f ListFilter) string {
	groups := "all"
	if f.DecidableBy != nil {
		g := slices.Clone(f.DecidableBy.Groups)
		slices.Sort(g)
		groups = "groups:" + strings.Join(g, ",")
	}
	h := sha256.Sum256([]byte(strings.Join([]string{kind, f.Session, f.Tool, f.Requester, f.Status, groups}, "\x00")))
	return hex.EncodeToString(h[:8])
}

// ListPage lists calls a page at a time, newest first (calls still running
// before finished ones, each by start, then finished calls by finish),
// in visibility's own order. Total counts every call the filter matches. A
// call that changes between pages (it finishes) may show on two pages or
// on none; Pending's pages never repeat a call.
func (c *Client) ListPage(ctx context.Context, f ListFilter, p PageRequest) (Page, error) {
	size, err := p.size()
	if err != nil {
		return Page{}, err
	}
	q, err := listQuery(f)
	if err != nil {
		return Page{}, err
	}
	key := filterKey(tokenCalls, f)
	var next []byte
	if p.Token != "" {
		t, err := decodeToken(p.Token, tokenCalls, key)
		if err != nil {
			return Page{}, err
		}
		next = t.Next
	}
	resp, err := c.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: next, PageSize: int32(size)})
	if err != nil {
		if next != nil && refusedToken(err) {
			return Page{}, errBadToken()
		}
		return Page{}, fmt.Errorf("list calls: %w", err)
	}
	out := Page{Calls: make([]CallSummary, 0, len(resp.GetExecutions()))}
	for _, e := range resp.GetExecutions() {
		s, err := summaryFrom(c.dc, e)
		if err != nil {
			return Page{}, err
		}
		out.Calls = append(out.Calls, s)
	}
	if t := resp.GetNextPageToken(); len(t) > 0 {
		out.NextPageToken = pageToken{Kind: tokenCalls, Filter: key, Next: t}.encode()
	}
	if out.Total, err = c.count(ctx, q); err != nil {
		return Page{}, err
	}
	return out, nil
}

// refusedToken reports whether Temporal refused a request for its page
// token (a token it did not issue: invalid, or not even decodable, which
// its SQL stores answer with an unclassified error) rather than failing
// for a reason that may pass.
func refusedToken(err error) bool {
	switch serviceerror.ToStatus(err).Code() {
	case codes.InvalidArgument, codes.Unknown:
		return true
	}
	return false
}

// count counts the executions a visibility query matches.
func (c *Client) count(ctx context.Context, q string) (int64, error) {
	resp, err := c.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
	if err != nil {
		return 0, fmt.Errorf("count calls: %w", err)
	}
	return resp.GetCount(), nil
}
