package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
)

const codecSecret = "AWS_SECRET=sk-live-codec"

const webUI = "http://localhost:8233"

// codecServer is a server with a codec over a fresh keyring, the web UI's
// origin allowed, and a ledger; body is a decode request for one payload
// encrypted with the ring.
func codecServer(t *testing.T) (h http.Handler, ring *keyring.Keyring, l *ledger.Ledger, body string) {
	t.Helper()
	ring, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	l, _, _ = testLedger(t)
	h = New(Config{Tokens: auditTokens(t), Codec: ring.EndpointCodec(), Namespace: "prod", CodecCORSOrigins: []string{webUI}, Ledger: l})
	p, err := keyring.DataConverter(ring).ToPayload(map[string]string{"content": codecSecret})
	require.NoError(t, err)
	return h, ring, l, payloadsJSON(t, p)
}

func payloadsJSON(t *testing.T, ps ...*commonpb.Payload) string {
	t.Helper()
	b, err := protojson.Marshal(&commonpb.Payloads{Payloads: ps})
	require.NoError(t, err)
	return string(b)
}

func decoded(t *testing.T, rec *httptest.ResponseRecorder) []*commonpb.Payload {
	t.Helper()
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	return out.Payloads
}

func TestTheCodecDecodesForApproversAdminsAndAuditors(t *testing.T) {
	h, _, l, body := codecServer(t)
	for _, token := range []string{"approver-token", "admin-token", "auditor-token"} {
		ps := decoded(t, apiCall(h, token, "POST", "/codec/prod/decode", body))
		require.Len(t, ps, 1)
		assert.Equal(t, "json/plain", string(ps[0].Metadata["encoding"]))
		assert.Contains(t, string(ps[0].Data), codecSecret)
	}

	// Each person's first decode of the minute is in the ledger: who,
	// through what, how many payloads.
	entries, err := l.Entries(context.Background(), 0, 3)
	require.NoError(t, err)
	require.Len(t, entries, 3)
	var e ledger.Entry
	require.NoError(t, json.Unmarshal(entries[2].Entry, &e))
	assert.Equal(t, ledger.KindCodecDecoded, e.Kind)
	assert.Equal(t, "audrey", e.By)
	assert.Equal(t, "auditor", e.Role)
	assert.Equal(t, map[string]int{"payloads": 1, "requests": 1}, e.Counts)
	assert.NotContains(t, string(entries[2].Entry), "sk-live", "the ledger says who read, never what")
}

func TestTheCodecRefusesAgentsAndStrangers(t *testing.T) {
	h, _, _, body := codecServer(t)
	for _, op := range []string{"decode", "encode"} {
		rec := apiCall(h, "agent-1-token", "POST", "/codec/prod/"+op, body)
		assert.Equal(t, http.StatusForbidden, rec.Code, op)
		assert.NotContains(t, rec.Body.String(), "sk-live")

		for _, token := range []string{"", "not-a-token"} {
			req := httptest.NewRequest("POST", "/codec/prod/"+op, strings.NewReader(body))
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			rec := serve(h, req)
			assert.Equal(t, http.StatusUnauthorized, rec.Code, op)
			assert.NotContains(t, rec.Body.String(), "sk-live")
		}
	}
}

func TestTheCodecServesItsNamespaceAlone(t *testing.T) {
	h, _, _, body := codecServer(t)
	rec := apiCall(h, "admin-token", "POST", "/codec/other/decode", body)
	assert.Equal(t, http.StatusNotFound, rec.Code)
	code, _ := apiErrorOf(t, rec)
	assert.Equal(t, "unknown_namespace", code)

	req := httptest.NewRequest("POST", "/codec/prod/decode", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer admin-token")
	req.Header.Set("X-Namespace", "other")
	assert.Equal(t, http.StatusNotFound, serve(h, req).Code)
}

func TestTheCodecEncodesForAdminsAlone(t *testing.T) {
	h, ring, l, _ := codecServer(t)
	plain := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"` + codecSecret + `"`)}
	body := payloadsJSON(t, plain, plain)
	ps := decoded(t, apiCall(h, "admin-token", "POST", "/codec/prod/encode", body))
	require.Len(t, ps, 2)
	assert.True(t, keyring.Encrypted(ps[0]))
	assert.Equal(t, ring.Current(), string(ps[0].Metadata[keyring.MetadataKeyID]))
	assert.NotContains(t, string(ps[0].Data), "sk-live")

	// The encode is in the ledger: who, through what, how many payloads.
	entries, err := l.Entries(context.Background(), 0, 10)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	var e ledger.Entry
	require.NoError(t, json.Unmarshal(entries[0].Entry, &e))
	assert.Equal(t, ledger.KindCodecEncoded, e.Kind)
	assert.Equal(t, "root", e.By)
	assert.Equal(t, "admin", e.Role)
	assert.Equal(t, map[string]int{"payloads": 2}, e.Counts)
	assert.Equal(t, map[string]any{"namespace": "prod", "via": "token"}, e.Details)
	assert.NotContains(t, string(entries[0].Entry), "sk-live", "the ledger says who encoded, never what")

	// Ciphertext under the current key is what the workers accept: those
	// who may only read get none, by token or signed in to the inbox.
	refused := func(rec *httptest.ResponseRecorder) {
		t.Helper()
		assert.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
		code, message := apiErrorOf(t, rec)
		assert.Equal(t, "forbidden", code)
		assert.Contains(t, message, "encoding payloads is for admins: it makes ciphertext the workers would accept")
		assert.NotContains(t, rec.Body.String(), keyring.EncodingEncrypted)
	}
	for _, token := range []string{"approver-token", "auditor-token"} {
		refused(apiCall(h, token, "POST", "/codec/prod/encode", body))
	}
	for _, token := range []string{"approver-token", "auditor-token"} {
		req := httptest.NewRequest("POST", "/codec/prod/encode", strings.NewReader(body))
		req.Header.Set("Origin", webUI)
		req.AddCookie(signIn(t, h, token))
		refused(serve(h, req))
	}
	entries, err = l.Entries(context.Background(), 0, 10)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "a refused encode adds nothing to the ledger")
}

func TestBadCodecRequestsGetClearErrors(t *testing.T) {
	h, ring, _, body := codecServer(t)
	other, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	foreign, err := keyring.DataConverter(other).ToPayload("x")
	require.NoError(t, err)

	var good commonpb.Payloads
	require.NoError(t, protojson.Unmarshal([]byte(body), &good))
	altered := good.Payloads[0]
	altered.Data[len(altered.Data)-1] ^= 1

	for name, tc := range map[string]struct {
		body, code, says string
		status           int
	}{
		"malformed body":   {body: `{"payloads": [`, status: 400, code: "invalid_request", says: "payloads JSON"},
		"not payloads":     {body: `[1, 2]`, status: 400, code: "invalid_request", says: "payloads JSON"},
		"key not held":     {body: payloadsJSON(t, foreign), status: 400, code: "codec_failed", says: "payload encrypted with key " + other.Current() + ", which this server's keyring does not hold"},
		"altered":          {body: payloadsJSON(t, altered), status: 400, code: "codec_failed", says: "does not decrypt"},
		"10 MB of payload": {body: `{"payloads": [{"data": "` + strings.Repeat("A", 10<<20) + `"}]}`, status: 413, code: "too_large", says: "at most"},
	} {
		t.Run(name, func(t *testing.T) {
			rec := apiCall(h, "admin-token", "POST", "/codec/prod/decode", tc.body)
			assert.Equal(t, tc.status, rec.Code, rec.Body.String())
			code, message := apiErrorOf(t, rec)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, message, tc.says)
			assert.NotContains(t, rec.Body.String(), filepath.Dir(ring.Path()), "a codec error names no file")
		})
	}
}

func TestOnlyConfiguredOriginsMayReadTheCodec(t *testing.T) {
	h, _, _, body := codecServer(t)
	preflight := func(origin string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("OPTIONS", "/codec/prod/decode", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		return serve(h, req)
	}
	rec := preflight(webUI)
	assert.Equal(t, http.StatusNoContent, rec.Code)
	assert.Equal(t, webUI, rec.Header().Get("Access-Control-Allow-Origin"))
	assert.Contains(t, rec.Header().Get("Access-Control-Allow-Headers"), "X-Namespace")

	rec = preflight("https://evil.example")
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Empty(t, rec.Header().Get("Access-Control-Allow-Origin"))

	// A signed-in person's browser decodes for the web UI; another page
	// cannot make it.
	cookie := signIn(t, h, "approver-token")
	post := func(origin string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/codec/prod/decode", strings.NewReader(body))
		req.Header.Set("Origin", origin)
		req.AddCookie(cookie)
		return serve(h, req)
	}
	rec = post(webUI)
	decoded(t, rec)
	assert.Equal(t, webUI, rec.Header().Get("Access-Control-Allow-Origin"))
	rec = post("https://evil.example")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Empty(t, rec.Header().Get("Access-Control-Allow-Origin"))
}

func TestWithoutKeysThereIsNoCodec(t *testing.T) {
	h := New(Config{Tokens: auditTokens(t)})
	rec := apiCall(h, "admin-token", "POST", "/codec/default/decode", `{"payloads": []}`)
	assert.Equal(t, http.StatusNotFound, rec.Code)
}

// TestTheCodecTokenCheckOfTheDocsAnswers: docs/production.md has people
// check a token with an empty decode request (an admin's Web UI token
// with an empty encode) before they hand it to the temporal CLI, which
// shows a refused token only as a timeout.
func TestTheCodecTokenCheckOfTheDocsAnswers(t *testing.T) {
	h, _, l, _ := codecServer(t)
	for _, token := range []string{"approver-token", "auditor-token", "admin-token"} {
		rec := apiCall(h, token, "POST", "/codec/prod/decode", `{"payloads":[]}`)
		assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	rec := apiCall(h, "admin-token", "POST", "/codec/prod/encode", `{"payloads":[]}`)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = apiCall(h, "auditor-token", "POST", "/codec/prod/encode", `{"payloads":[]}`)
	assert.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	rec = apiCall(h, "not-a-token", "POST", "/codec/prod/decode", `{"payloads":[]}`)
	assert.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())
	rec = apiCall(h, "agent-1-token", "POST", "/codec/prod/decode", `{"payloads":[]}`)
	assert.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	entries, err := l.Entries(context.Background(), 0, 10)
	require.NoError(t, err)
	assert.Empty(t, entries, "the check reads and makes nothing, so the ledger records nothing")
}
