package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
)

// auditTokens are one token of each role, and a second agent.
func auditTokens(t *testing.T) *Tokens {
	t.Helper()
	tokens, err := NewTokens([]TokenEntry{
		{Name: "agent-1", Role: RoleAgent, SHA256: HashToken("agent-1-token")},
		{Name: "agent-2", Role: RoleAgent, SHA256: HashToken("agent-2-token")},
		{Name: "alice", Role: RoleApprover, Groups: []string{"ops"}, SHA256: HashToken("approver-token")},
		{Name: "root", Role: RoleAdmin, SHA256: HashToken("admin-token")},
		{Name: "audrey", Role: RoleAuditor, SHA256: HashToken("auditor-token")},
	})
	require.NoError(t, err)
	return tokens
}

// testLedger opens a real SQLite ledger in a temporary directory; keys
// are its signing keys.
func testLedger(t *testing.T) (*ledger.Ledger, ledger.Keys, string) {
	t.Helper()
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	dsn := filepath.Join(dir, "ledger.db")
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: dsn, Keys: keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, keys, dsn
}

var auditAt = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// callEntries are a call's three entries: submitted by requester,
// approved by bob in the inbox, finished ok. The arguments hold HTML
// characters, which the API must send as stored.
func callEntries(callID, requester string) []ledger.Entry {
	return []ledger.Entry{
		{Kind: ledger.KindCallSubmitted, Event: callID + "/submitted", At: auditAt, CallID: callID, Session: "s1", Requester: requester,
			Tool: "shell", Execution: "server", Args: json.RawMessage(`{"command":"echo <b>&</b>"}`), Rule: "shell-asks", PolicyVersion: "abc"},
		{Kind: ledger.KindCallDecided, Event: callID + "/decided", At: auditAt.Add(time.Minute), CallID: callID, Session: "s1",
			Decision: &ledger.Decision{Kind: "approved", DecidedBy: "bob", Channel: "inbox", At: auditAt.Add(time.Minute)}},
		{Kind: ledger.KindCallFinished, Event: callID + "/finished", At: auditAt.Add(2 * time.Minute), CallID: callID, Session: "s1",
			Status: "ok", Output: json.RawMessage(`{"stdout":"<b>&</b>\n"}`)},
	}
}

func appendEntries(t *testing.T, l *ledger.Ledger, entries ...ledger.Entry) {
	t.Helper()
	_, err := l.Append(context.Background(), entries...)
	require.NoError(t, err)
}

func TestAuditRoutesWithoutALedger(t *testing.T) {
	h := New(Config{Tokens: auditTokens(t)})
	for _, path := range []string{"/v1/audit/checkpoint", "/v1/audit/key", "/v1/audit/entries", "/v1/audit/calls/c1"} {
		rec := apiCall(h, "admin-token", "GET", path, "")
		assert.Equal(t, http.StatusNotFound, rec.Code, path)
		code, msg := apiErrorOf(t, rec)
		assert.Equal(t, "no_ledger", code, path)
		assert.Contains(t, msg, "runs without a decision ledger", path)
	}
}

func TestAuditCheckpointAndKey(t *testing.T) {
	l, keys, _ := testLedger(t)
	h := New(Config{Tokens: auditTokens(t), Ledger: l})

	rec := apiCall(h, "auditor-token", "GET", "/v1/audit/checkpoint", "")
	assert.Equal(t, http.StatusNotFound, rec.Code, "no checkpoint before the first")
	code, msg := apiErrorOf(t, rec)
	assert.Equal(t, "no_checkpoint", code)
	assert.Contains(t, msg, "no signed checkpoint yet")

	appendEntries(t, l, callEntries("c1", "agent-1")...)
	signed, err := l.SignCheckpoint(context.Background())
	require.NoError(t, err)

	for _, token := range []string{"agent-1-token", "approver-token", "admin-token", "auditor-token"} {
		key := apiCall(h, token, "GET", "/v1/audit/key", "")
		require.Equal(t, http.StatusOK, key.Code, "%s: %s", token, key.Body.String())
		assert.Equal(t, "text/plain; charset=utf-8", key.Header().Get("Content-Type"))
		assert.Equal(t, keys.VerifierKey+"\n", key.Body.String())

		rec := apiCall(h, token, "GET", "/v1/audit/checkpoint", "")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", token, rec.Body.String())
		assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
		assert.Equal(t, "3", rec.Header().Get("X-Log-Size"))
		assert.Equal(t, string(signed.Note), rec.Body.String())

		// What a reviewer does: the key from the server, the note checked with x/mod's note package.
		v, err := note.NewVerifier(strings.TrimSpace(key.Body.String()))
		require.NoError(t, err)
		n, err := note.Open(rec.Body.Bytes(), note.VerifierList(v))
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(n.Text, "toolgate/test\n3\n"), n.Text)
	}
}

func TestAuditKeyUnknownToTheServer(t *testing.T) {
	_, keys, dsn := testLedger(t)
	// A server given the verifier only, not its note-format text.
	reader, err := ledger.Open(context.Background(), ledger.Options{DSN: dsn, Verifier: keys.Verifier})
	require.NoError(t, err)
	defer reader.Close()
	rec := apiCall(New(Config{Tokens: auditTokens(t), Ledger: reader}), "auditor-token", "GET", "/v1/audit/key", "")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	code, msg := apiErrorOf(t, rec)
	assert.Equal(t, "no_key", code)
	assert.Contains(t, msg, "toolgate/test")
}

// readLines decodes a JSON-lines answer.
func readLines(t *testing.T, body []byte) []ledger.Stored {
	t.Helper()
	var out []ledger.Stored
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s ledger.Stored
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), sc.Text())
		out = append(out, s)
	}
	return out
}

func TestAuditEntriesPageThroughTheWholeLog(t *testing.T) {
	l, _, _ := testLedger(t)
	h := New(Config{Tokens: auditTokens(t), Ledger: l})
	const n = 2*MaxAuditPage + 500
	var all []ledger.Entry
	for i := range n {
		all = append(all, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: fmt.Sprintf("e%d", i), At: auditAt, CallID: fmt.Sprintf("c%d", i),
			Requester: "agent-1", Tool: "shell", Args: json.RawMessage(`{"q":"<a href='x'>&amp;</a>","n":` + strconv.Itoa(i) + `}`)})
	}
	appendEntries(t, l, all...)

	var got []ledger.Stored
	path, pages := "/v1/audit/entries", 0
	for path != "" {
		rec := apiCall(h, "auditor-token", "GET", path, "")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", path, rec.Body.String())
		assert.Equal(t, "application/x-ndjson", rec.Header().Get("Content-Type"))
		assert.Equal(t, strconv.Itoa(n), rec.Header().Get("X-Log-Size"))
		page := readLines(t, rec.Body.Bytes())
		got = append(got, page...)
		pages++
		path = ""
		if next := rec.Header().Get("X-Next-Start"); next != "" {
			assert.Len(t, page, MaxAuditPage, "a page that says where to go on is full")
			assert.Equal(t, strconv.Itoa(len(got)), next)
			link := rec.Header().Get("Link")
			require.True(t, strings.HasPrefix(link, "<") && strings.HasSuffix(link, `>; rel="next"`), link)
			path = strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
			u, err := url.Parse(path)
			require.NoError(t, err)
			assert.Equal(t, next, u.Query().Get("start"))
			assert.Equal(t, strconv.Itoa(n), u.Query().Get("end"), "the next page keeps the range's end")
		} else {
			assert.Empty(t, rec.Header().Get("Link"), "the last page links nowhere")
		}
	}
	assert.Equal(t, 3, pages)
	require.Len(t, got, n)
	for i, s := range got {
		assert.EqualValues(t, i, s.Index)
		want, err := all[i].Canonical()
		require.NoError(t, err)
		require.Equal(t, string(want), string(s.Entry), "entry #%d as stored: its bytes are what the leaf hash covers", i)
	}
	// The leaf hashes the log holds are those of the bytes the API sent.
	leaves, err := l.LeafHashes(context.Background(), 0, 3)
	require.NoError(t, err)
	for i := range 3 {
		assert.Equal(t, leaves[i], tlog.RecordHash(got[i].Entry))
	}

	for _, c := range []struct {
		query string
		want  []int64
	}{
		{"start=5&end=8", []int64{5, 6, 7}},
		{"start=7&end=7", nil},
		{fmt.Sprintf("start=%d", n-2), []int64{n - 2, n - 1}},
		{fmt.Sprintf("start=%d&end=%d", n-1, n+100), []int64{n - 1}}, // an end past the log reads to its end
		{fmt.Sprintf("start=%d", n), nil},
		{"end=2", []int64{0, 1}},
	} {
		rec := apiCall(h, "admin-token", "GET", "/v1/audit/entries?"+c.query, "")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", c.query, rec.Body.String())
		var idx []int64
		for _, s := range readLines(t, rec.Body.Bytes()) {
			idx = append(idx, s.Index)
		}
		assert.Equal(t, c.want, idx, c.query)
		assert.Empty(t, rec.Header().Get("X-Next-Start"), c.query)
	}
}

// Large entries make shorter pages: a page holds about 4 MiB at most,
// and says where to go on.
func TestAuditEntriesPagesOfLargeEntries(t *testing.T) {
	l, _, _ := testLedger(t)
	h := New(Config{Tokens: auditTokens(t), Ledger: l})
	big := strings.Repeat("x", 200<<10)
	var all []ledger.Entry
	for i := range 50 { // 10 MiB
		all = append(all, ledger.Entry{Kind: ledger.KindCallSubmitted, Event: fmt.Sprintf("e%d", i), At: auditAt, CallID: fmt.Sprintf("c%d", i),
			Args: json.RawMessage(`{"blob":"` + big + `"}`)})
	}
	appendEntries(t, l, all...)
	var got []ledger.Stored
	path, pages := "/v1/audit/entries", 0
	for path != "" {
		rec := apiCall(h, "auditor-token", "GET", path, "")
		require.Equal(t, http.StatusOK, rec.Code, path)
		assert.LessOrEqual(t, rec.Body.Len(), maxAuditPageBytes+64<<10, "a page of about 4 MiB at most")
		page := readLines(t, rec.Body.Bytes())
		require.NotEmpty(t, page)
		got, pages, path = append(got, page...), pages+1, ""
		if next := rec.Header().Get("X-Next-Start"); next != "" {
			assert.Equal(t, strconv.Itoa(len(got)), next)
			path = "/v1/audit/entries?start=" + next
		}
	}
	assert.GreaterOrEqual(t, pages, 3)
	require.Len(t, got, 50)
	for i, s := range got {
		assert.EqualValues(t, i, s.Index)
	}
}

func TestAuditEntriesRefuseBadRanges(t *testing.T) {
	l, _, _ := testLedger(t)
	h := New(Config{Tokens: auditTokens(t), Ledger: l})
	appendEntries(t, l, callEntries("c1", "agent-1")...) // 3 entries
	for _, c := range []struct{ query, field, want string }{
		{"start=-1", "start", "whole number from 0 up"},
		{"end=-3", "end", "whole number from 0 up"},
		{"start=abc", "start", `"abc"`},
		{"start=1e3", "start", "whole number"},
		{"start=%2B5", "start", "whole number"},
		{"start=%205", "start", "whole number"},
		{"start=0x10", "start", "whole number"},
		{"start=", "start", "empty value"},
		{"end=", "end", "empty value"},
		{"start=99999999999999999999", "start", "too large"},
		{"end=" + strings.Repeat("9", 5000), "end", "too large"},
		{"start=" + strings.Repeat("x", 5000), "start", "…"},
		{"start=2&end=1", "start", "after end 1"},
		{"start=4", "start", "past the log's end: it holds 3 entries"},
		{"start=4&end=10", "start", "past the log's end"},
		{"size=10", "size", "not a query parameter"},
	} {
		rec := apiCall(h, "auditor-token", "GET", "/v1/audit/entries?"+c.query, "")
		assert.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", c.query, rec.Body.String())
		code, msg := apiErrorOf(t, rec)
		assert.Equal(t, "invalid_request", code, c.query)
		assert.True(t, strings.HasPrefix(msg, c.field+" "), "%s: the message names %s: %s", c.query, c.field, msg)
		assert.Contains(t, msg, c.want, c.query)
		assert.Less(t, len(msg), 200, "%s: a value is not echoed whole", c.query)
	}
}

func TestOnlyAuditorsAndAdminsReadTheWholeLog(t *testing.T) {
	l, _, _ := testLedger(t)
	h := New(Config{Tokens: auditTokens(t), Ledger: l})
	appendEntries(t, l, callEntries("c1", "agent-1")...)
	for token, want := range map[string]int{
		"agent-1-token": http.StatusForbidden, "approver-token": http.StatusForbidden,
		"auditor-token": http.StatusOK, "admin-token": http.StatusOK,
	} {
		rec := apiCall(h, token, "GET", "/v1/audit/entries", "")
		assert.Equal(t, want, rec.Code, "%s: %s", token, rec.Body.String())
		if want == http.StatusOK {
			assert.Len(t, readLines(t, rec.Body.Bytes()), 3, token)
		} else {
			code, _ := apiErrorOf(t, rec)
			assert.Equal(t, "forbidden", code, token)
		}
	}
}

// decodeReceipt reads a receipt answer and verifies it with the log's key.
func decodeReceipt(t *testing.T, body []byte, keys ledger.Keys) ledger.Receipt {
	t.Helper()
	var r ledger.Receipt
	require.NoError(t, json.Unmarshal(body, &r), string(body))
	_, err := ledger.VerifyReceipt(r, keys.Verifier)
	require.NoError(t, err, "the receipt verifies offline")
	return r
}

func TestAuditCallReceipts(t *testing.T) {
	l, keys, _ := testLedger(t)
	h := New(Config{Tokens: auditTokens(t), Ledger: l})
	appendEntries(t, l, callEntries("c1", "agent-1")...)
	appendEntries(t, l, callEntries("c2", "agent-2")...)
	appendEntries(t, l, ledger.Entry{Kind: ledger.KindSessionEnded, Event: "s1/ended", At: auditAt, Session: "s1", By: "alice"})

	// Every reader of calls reads c1's; agent-1 submitted it. No checkpoint
	// was signed: this server holds the key and signs one.
	for _, token := range []string{"agent-1-token", "approver-token", "auditor-token", "admin-token"} {
		rec := apiCall(h, token, "GET", "/v1/audit/calls/c1", "")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", token, rec.Body.String())
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		r := decodeReceipt(t, rec.Body.Bytes(), keys)
		assert.Equal(t, "c1", r.CallID)
		require.Len(t, r.Entries, 3)
		want, err := callEntries("c1", "agent-1")[0].Canonical()
		require.NoError(t, err)
		assert.Equal(t, string(want), string(r.Entries[0].Entry), "entries as stored, HTML characters unescaped")
		assert.Contains(t, rec.Body.String(), `"command":"echo <b>&</b>"`)

		// And with x/mod alone: the note-verified checkpoint, tlog.CheckRecord.
		n, err := note.Open([]byte(r.Checkpoint), note.VerifierList(keys.Verifier))
		require.NoError(t, err)
		lines := strings.Split(n.Text, "\n")
		size, err := strconv.ParseInt(lines[1], 10, 64)
		require.NoError(t, err)
		root := hashOf(t, lines[2])
		for _, e := range r.Entries {
			proof := make(tlog.RecordProof, len(e.Proof))
			for i, p := range e.Proof {
				proof[i] = hashOf(t, p)
			}
			assert.NoError(t, tlog.CheckRecord(proof, size, root, e.Index, tlog.RecordHash(e.Entry)), "entry #%d", e.Index)
		}
	}

	// Another agent's call is answered as a call that does not exist.
	others := apiCall(h, "agent-1-token", "GET", "/v1/audit/calls/c2", "")
	unknown := apiCall(h, "agent-1-token", "GET", "/v1/audit/calls/c9", "")
	assert.Equal(t, http.StatusNotFound, unknown.Code)
	assert.Equal(t, unknown.Code, others.Code)
	code, msg := apiErrorOf(t, others)
	assert.Equal(t, "unknown_call", code)
	assert.Equal(t, `unknown call "c2"`, msg)
	code, _ = apiErrorOf(t, unknown)
	assert.Equal(t, "unknown_call", code)
	assert.Equal(t, http.StatusOK, apiCall(h, "agent-2-token", "GET", "/v1/audit/calls/c2", "").Code, "its own agent reads it")

	// A bad call ID is refused at the edge.
	rec := apiCall(h, "auditor-token", "GET", "/v1/audit/calls/bad%20id", "")
	assert.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
}

// hashOf decodes a base64 SHA-256.
func hashOf(t *testing.T, b64 string) tlog.Hash {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	require.Len(t, b, tlog.HashSize)
	var h tlog.Hash
	copy(h[:], b)
	return h
}

// An agent never reads a call whose ledger has no submission naming it,
// whatever else the call's entries say.
func TestAnAgentReadsOnlyCallsItsSubmissionNames(t *testing.T) {
	entries := func(kinds ...ledger.Entry) []ledger.Stored {
		var out []ledger.Stored
		for i, e := range kinds {
			b, err := e.Canonical()
			require.NoError(t, err)
			out = append(out, ledger.Stored{Index: int64(i), Entry: b})
		}
		return out
	}
	agent := Principal{Name: "agent-1", Role: RoleAgent}
	c1 := callEntries("c1", "agent-1")
	assert.True(t, mayReadEntries(agent, entries(c1...)))
	assert.False(t, mayReadEntries(agent, entries(callEntries("c2", "agent-2")...)))
	assert.False(t, mayReadEntries(agent, entries(c1[1], c1[2])), "no submission: not the agent's")
	decidedByName := c1[1]
	decidedByName.Decision = &ledger.Decision{Kind: "approved", DecidedBy: "agent-1"}
	assert.False(t, mayReadEntries(agent, entries(decidedByName)), "a name elsewhere in an entry is not the requester")
	for _, p := range []Principal{{Name: "alice", Role: RoleApprover}, {Name: "root", Role: RoleAdmin}, {Name: "audrey", Role: RoleAuditor}} {
		assert.True(t, mayReadEntries(p, entries(callEntries("c2", "agent-2")...)), p.Role)
	}
}

func TestAuditCallBeforeItsCheckpoint(t *testing.T) {
	_, keys, dsn := testLedger(t)
	// serve without the signing key: it reads and cannot sign.
	reader, err := ledger.Open(context.Background(), ledger.Options{DSN: dsn, Keys: ledger.Keys{Verifier: keys.Verifier, VerifierKey: keys.VerifierKey}})
	require.NoError(t, err)
	defer reader.Close()
	h := New(Config{Tokens: auditTokens(t), Ledger: reader})
	appendEntries(t, reader, callEntries("c1", "agent-1")...)

	rec := apiCall(h, "auditor-token", "GET", "/v1/audit/calls/c1", "")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
	code, msg := apiErrorOf(t, rec)
	assert.Equal(t, "no_checkpoint_yet", code)
	assert.Contains(t, msg, "not in a signed checkpoint yet")

	// The worker's ledger signs one; the reader then proves the call.
	signer, err := ledger.Open(context.Background(), ledger.Options{DSN: dsn, Keys: keys})
	require.NoError(t, err)
	defer signer.Close()
	_, err = signer.SignCheckpoint(context.Background())
	require.NoError(t, err)
	rec = apiCall(h, "auditor-token", "GET", "/v1/audit/calls/c1", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	decodeReceipt(t, rec.Body.Bytes(), keys)
}

// An auditor reads, and every route that is not a read refuses it before
// anything else: derived from the route table, so a new route is walked
// too. Calls is nil: a handler that reached Temporal would panic.
func TestAnAuditorIsRefusedEveryRouteThatChangesSomething(t *testing.T) {
	h := New(Config{Tokens: auditTokens(t)})
	walked := 0
	for _, r := range (&api{}).table() {
		path := strings.NewReplacer("{call_id}", "c1", "{session}", "s1", "{tool}", "shell").Replace(r.pattern)
		if readOnly(r.method) {
			continue
		}
		walked++
		assert.False(t, roleIn(RoleAuditor, r.roles), "%s %s lists the auditor role", r.method, r.pattern)
		for _, body := range []string{`{}`, `{"decision":"approve"}`, `{"decisions":[{"call_id":"c1","decision":"approve"}]}`, `not json`} {
			rec := apiCall(h, "auditor-token", r.method, path, body)
			assert.Equal(t, http.StatusForbidden, rec.Code, "%s %s: %s", r.method, path, rec.Body.String())
			code, msg := apiErrorOf(t, rec)
			assert.Equal(t, "read_only", code, "%s %s", r.method, path)
			assert.Contains(t, msg, "audrey holds an auditor token")
		}
	}
	assert.GreaterOrEqual(t, walked, 10, "the walk found the table's submit, decide, cancel, claim, report, revoke, end… routes")

	// What it reads.
	reads := map[string]bool{}
	for _, r := range (&api{}).table() {
		if roleIn(RoleAuditor, r.roles) {
			reads[r.method+" "+r.pattern] = true
		}
	}
	for _, want := range []string{"GET /v1/calls", "GET /v1/calls/{call_id}", "GET /v1/pending", "GET /v1/sessions/{session}",
		"GET /v1/audit/checkpoint", "GET /v1/audit/key", "GET /v1/audit/entries", "GET /v1/audit/calls/{call_id}"} {
		assert.True(t, reads[want], "an auditor reads %s", want)
	}

	// Every channel decides through Decide, which refuses it too, and the
	// MCP gateway takes no auditor as an agent.
	_, err := Decide(context.Background(), nil, Principal{Name: "audrey", Role: RoleAuditor}, "c1", decisionRequest{Decision: "approve"}, "api")
	assert.ErrorContains(t, err, "auditor token")
	name, _, known, agent := auditTokens(t).Agent("auditor-token")
	assert.Equal(t, "audrey", name)
	assert.True(t, known)
	assert.False(t, agent, "an auditor submits nothing through MCP")
	assert.False(t, Principal{Name: "audrey", Role: RoleAuditor}.mayDecide(nil), "an auditor decides no call, even one asked of no group")
}

func TestAuditorTokens(t *testing.T) {
	tokens, err := NewTokens([]TokenEntry{{Name: "audrey", Role: RoleAuditor, SHA256: HashToken("a")}})
	require.NoError(t, err)
	p, ok := tokens.Lookup("a")
	require.True(t, ok)
	assert.Equal(t, RoleAuditor, p.Role)
	assert.Equal(t, policy.Approver{Name: "audrey", Groups: []string{"*"}}, p.viewer(), "an auditor sees every group's waiting calls")
	assert.Equal(t, policy.Approver{Name: "audrey"}, p.approver(), "and acts for none")

	_, err = NewTokens([]TokenEntry{{Name: "audrey", Role: RoleAuditor, Groups: []string{"ops"}, SHA256: HashToken("a")}})
	assert.ErrorContains(t, err, "groups are for approvers")
	_, err = NewTokens([]TokenEntry{{Name: "audrey", Role: RoleAuditor, Owner: "dana", SHA256: HashToken("a")}})
	assert.ErrorContains(t, err, "owner is for agent tokens")
}
