package witness

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"filippo.io/torchwood"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A log key and a witness key, the witness's as torchwood (litewitness's
// library) makes its cosignatures.
type keys struct {
	log     note.Signer
	logV    note.Verifier
	witness *torchwood.CosignatureSigner
}

func newKeys(t *testing.T) keys {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "toolgate/test")
	require.NoError(t, err)
	s, err := note.NewSigner(skey)
	require.NoError(t, err)
	v, err := note.NewVerifier(vkey)
	require.NoError(t, err)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	w, err := torchwood.NewCosignatureSigner("witness.example/w1", priv)
	require.NoError(t, err)
	return keys{log: s, logV: v, witness: w}
}

func (k keys) checkpoint(t *testing.T, size int64) []byte {
	t.Helper()
	var h tlog.Hash
	h[0] = byte(size)
	msg, err := note.Sign(&note.Note{Text: fmt.Sprintf("toolgate/test\n%d\n%s\n", size, h)}, k.log)
	require.NoError(t, err)
	return msg
}

// cosignLines is what litewitness answers: its signature lines alone.
func (k keys) cosignLines(t *testing.T, checkpoint []byte) string {
	t.Helper()
	text, _, _ := strings.Cut(string(checkpoint), "\n\n")
	signed, err := note.Sign(&note.Note{Text: text + "\n"}, k.witness)
	require.NoError(t, err)
	_, sigs, _ := strings.Cut(string(signed), "\n\n")
	return sigs
}

// fakeWitness answers add-checkpoint as c2sp.org/tlog-witness says a
// witness does: 200 with its cosignature, 409 with the size it knows, 422
// for a bad proof, 403 for an unknown log.
func fakeWitness(t *testing.T, k keys, answer func(old int64, body string) (int, string)) *Witness {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/w/add-checkpoint" {
			http.NotFound(rw, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var old int64
		_, err := fmt.Sscanf(string(b), "old %d\n", &old)
		require.NoError(t, err)
		status, text := answer(old, string(b))
		if status == http.StatusConflict {
			rw.Header().Set("Content-Type", "text/x.tlog.size")
		}
		rw.WriteHeader(status)
		_, _ = io.WriteString(rw, text)
	}))
	t.Cleanup(srv.Close)
	w, err := Parse(k.witness.Verifier().String() + "@" + srv.URL + "/w/")
	require.NoError(t, err)
	return w
}

func TestAWitnessCosignatureIsCheckedAgainstItsKey(t *testing.T) {
	k := newKeys(t)
	cp := k.checkpoint(t, 5)
	var sent string
	w := fakeWitness(t, k, func(_ int64, body string) (int, string) {
		sent = body
		return http.StatusOK, k.cosignLines(t, cp)
	})
	proof := tlog.TreeProof{{1}, {2}}
	cosig, err := w.Add(context.Background(), 3, proof, cp)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("old 3\n%s\n%s\n\n%s", proof[0], proof[1], cp), sent, "the request is c2sp.org/tlog-witness's")

	n, err := Cosigned(append(append([]byte(nil), cp...), cosig...), k.logV, []note.Verifier{w.Verifier})
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the cosigned checkpoint carries the witness's cosignature")

	other := newKeys(t)
	n, err = Cosigned(cp, k.logV, []note.Verifier{w.Verifier, other.witness.Verifier()})
	require.NoError(t, err)
	assert.Zero(t, n, "the log's own signature is no cosignature")

	_, err = Cosigned(append(append([]byte(nil), cp...), cosig...), other.logV, []note.Verifier{w.Verifier})
	assert.Error(t, err, "a checkpoint another log's key did not sign is refused")
}

func TestAnAnswerThatIsNotTheWitnessCosignatureIsRefused(t *testing.T) {
	k, impostor := newKeys(t), newKeys(t)
	cp := k.checkpoint(t, 5)
	w := fakeWitness(t, k, func(int64, string) (int, string) {
		// another witness key under the same name
		return http.StatusOK, impostor.cosignLines(t, cp)
	})
	_, err := w.Add(context.Background(), 0, nil, cp)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no valid cosignature")
}

func TestAWitnessRefusalSaysWhatItSaw(t *testing.T) {
	k := newKeys(t)
	cp := k.checkpoint(t, 5)
	for _, c := range []struct {
		status int
		body   string
		check  func(t *testing.T, err error)
	}{
		{http.StatusConflict, "7\n", func(t *testing.T, err error) {
			var conflict *ConflictError
			require.True(t, errors.As(err, &conflict), "%v", err)
			assert.Equal(t, int64(7), conflict.Size)
		}},
		{http.StatusUnprocessableEntity, "bad consistency proof", func(t *testing.T, err error) {
			var refused *RefusedError
			require.True(t, errors.As(err, &refused), "%v", err)
			assert.Contains(t, err.Error(), "does not extend the one it cosigned")
		}},
		{http.StatusForbidden, "unknown log", func(t *testing.T, err error) {
			assert.Contains(t, err.Error(), "witnessctl add-log")
		}},
		{http.StatusServiceUnavailable, "", func(t *testing.T, err error) {
			assert.Contains(t, err.Error(), "HTTP 503")
		}},
	} {
		w := fakeWitness(t, k, func(int64, string) (int, string) { return c.status, c.body })
		_, err := w.Add(context.Background(), 0, nil, cp)
		require.Error(t, err, "HTTP %d", c.status)
		c.check(t, err)
	}
}

func TestWitnessSpecsAndKeysAreChecked(t *testing.T) {
	k := newKeys(t)
	vkey := k.witness.Verifier().String()
	for spec, want := range map[string]string{
		"https://w.example/":        "want VKEY@URL",
		vkey + "@":                  "want VKEY@URL",
		vkey + "@ftp://w.example/":  "is not an http(s) URL",
		"w+1234abcd+AAAA@http://x/": "malformed",
		strings.Replace(vkey, "+", "+0", 1) + "@http://x/": "want name+hash+key",
	} {
		_, err := Parse(spec)
		require.Error(t, err, spec)
		assert.Contains(t, err.Error(), want, spec)
	}
	name, _, _ := strings.Cut(vkey, "+")
	renamed := "other.example" + strings.TrimPrefix(vkey, name)
	_, err := NewVerifier(renamed)
	assert.ErrorContains(t, err, "hash does not match")
	w, err := Parse(vkey + "@http://127.0.0.1:7380")
	require.NoError(t, err)
	assert.Equal(t, "witness.example/w1", w.Name())
}
