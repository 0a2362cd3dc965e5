package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/torchwood"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/witness"
)

// fakeWitness is a witness as c2sp.org/tlog-witness says one behaves, as
// litewitness does: it knows one log's latest tree (size 0 at first),
// answers 409 with its size to a request from another old size, 422 to a
// proof that does not check, 403 to a note its log key did not sign, 503
// while down, and otherwise records the new tree and cosigns it.
type fakeWitness struct {
	mu     sync.Mutex
	log    note.Verifier
	signer *torchwood.CosignatureSigner
	size   int64
	hash   tlog.Hash
	down   bool
	srv    *httptest.Server
}

func newFakeWitness(t *testing.T, log note.Verifier, name string) *fakeWitness {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	s, err := torchwood.NewCosignatureSigner(name, priv)
	require.NoError(t, err)
	f := &fakeWitness{log: log, signer: s}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeWitness) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeWitness) knownSize() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

func (f *fakeWitness) witness(t *testing.T) *witness.Witness {
	w, err := witness.Parse(f.signer.Verifier().String() + "@" + f.srv.URL)
	require.NoError(t, err)
	return w
}

func (f *fakeWitness) serve(rw http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		http.Error(rw, "down", http.StatusServiceUnavailable)
		return
	}
	b, _ := io.ReadAll(r.Body)
	head, msg, _ := bytes.Cut(b, []byte("\n\n"))
	lines := strings.Split(string(head), "\n")
	old, _ := strconv.ParseInt(strings.TrimPrefix(lines[0], "old "), 10, 64)
	var proof tlog.TreeProof
	for _, l := range lines[1:] {
		h, err := tlog.ParseHash(l)
		if err != nil {
			http.Error(rw, "bad proof line", http.StatusBadRequest)
			return
		}
		proof = append(proof, h)
	}
	n, err := note.Open(msg, note.VerifierList(f.log))
	if err != nil {
		http.Error(rw, "unknown log", http.StatusForbidden)
		return
	}
	var size int64
	var hash tlog.Hash
	parts := strings.Split(n.Text, "\n")
	size, _ = strconv.ParseInt(parts[1], 10, 64)
	hash, _ = tlog.ParseHash(parts[2])
	if old != f.size {
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", f.size)
		return
	}
	if old > 0 && tlog.CheckTree(proof, size, hash, old, f.hash) != nil {
		http.Error(rw, "bad consistency proof", http.StatusUnprocessableEntity)
		return
	}
	f.size, f.hash = size, hash
	signed, _ := note.Sign(&note.Note{Text: n.Text}, f.signer)
	_, sigs, _ := bytes.Cut(signed, []byte("\n\n"))
	_, _ = rw.Write(sigs)
}

// witnessedDir is a ledger's directory with its key, and a witness that
// knows the log.
func witnessedDir(t *testing.T) (string, Keys, *fakeWitness) {
	t.Helper()
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	return dir, keys, newFakeWitness(t, keys.Verifier, "w.test/a")
}

func openWitnessed(t *testing.T, dir string, ws ...*witness.Witness) *signerAt {
	t.Helper()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	s := &signerAt{}
	l, err := Open(context.Background(), Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys, Witnesses: ws,
		OnFork: func(_ context.Context, f ForkError) { s.mu.Lock(); s.forks = append(s.forks, f); s.mu.Unlock() }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	s.Ledger = l
	return s
}

// cosignedBy reports whether the latest stored checkpoint, of size, carries
// w's cosignature.
func cosignedBy(t *testing.T, l *Ledger, w *witness.Witness, size int64) bool {
	t.Helper()
	c, ok, err := l.LatestCheckpoint(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, size, c.Size)
	n, err := witness.Cosigned(c.Note, l.Verifier(), []note.Verifier{w.Verifier})
	require.NoError(t, err)
	return n == 1
}

func TestWitnessesCosignEachCheckpointWithAProofFromTheirLast(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys, _, err := LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	fa, fb := newFakeWitness(t, keys.Verifier, "w.test/a"), newFakeWitness(t, keys.Verifier, "w.test/b")
	wa, wb := fa.witness(t), fb.witness(t)
	s := openWitnessed(t, dir, wa, wb)

	for _, n := range []int{3, 4, 1} {
		appendN(t, s.Ledger, fmt.Sprintf("n%d-", n), n)
		c, err := s.SignCheckpoint(ctx)
		require.NoError(t, err)
		s.cosign(ctx)
		assert.True(t, cosignedBy(t, s.Ledger, wa, c.Size), "witness a cosigned size %d", c.Size)
		assert.True(t, cosignedBy(t, s.Ledger, wb, c.Size), "witness b cosigned size %d", c.Size)
		assert.Equal(t, c.Size, fa.knownSize(), "the witness checked a proof from its last tree to this one")
	}
	rep, err := s.VerifyStoreWithOptions(ctx, VerifyOptions{Witnesses: WitnessRule{Verifiers: []note.Verifier{wa.Verifier, wb.Verifier}, Required: 2}})
	require.NoError(t, err)
	assert.EqualValues(t, 8, rep.Size)
	assert.Empty(t, s.forks)

	t.Run("a witness down catches up with the latest checkpoint", func(t *testing.T) {
		fb.setDown(true)
		appendN(t, s.Ledger, "down-", 2)
		c, err := s.SignCheckpoint(ctx)
		require.NoError(t, err)
		s.cosign(ctx)
		assert.True(t, cosignedBy(t, s.Ledger, wa, c.Size))
		assert.False(t, cosignedBy(t, s.Ledger, wb, c.Size), "b was down")
		appendN(t, s.Ledger, "still-down-", 2)
		_, err = s.SignCheckpoint(ctx)
		require.NoError(t, err)
		fb.setDown(false)
		s.cosign(ctx)
		assert.True(t, cosignedBy(t, s.Ledger, wb, 12), "b cosigns the latest, proved from the tree it saw last")
		assert.True(t, cosignedBy(t, s.Ledger, wa, 12))
		assert.Empty(t, s.forks)
		assert.Nil(t, s.Refused())
	})
}

// A witness that cosigned a larger tree (the log was rolled back, and its
// signer forgot), or one the log does not extend (rewritten), is a fork:
// reported once, held by Refused, and no cosignature is stored.
func TestAWitnessThatSawAnotherTreeIsAFork(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		witnessSaw func(f *fakeWitness)
		reason     string
	}{
		{"rolled back", func(f *fakeWitness) { f.size = 50 }, "larger than the log's latest checkpoint"},
		{"rewritten", func(f *fakeWitness) { f.size, f.hash = 2, tlog.Hash{7} }, "refused the consistency proof"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _, f := witnessedDir(t)
			c.witnessSaw(f)
			w := f.witness(t)
			s := openWitnessed(t, dir, w)
			appendN(t, s.Ledger, "e-", 5)
			cp, err := s.SignCheckpoint(ctx)
			require.NoError(t, err)
			s.cosign(ctx)
			s.cosign(ctx)
			assert.False(t, cosignedBy(t, s.Ledger, w, cp.Size))
			require.Len(t, s.forks, 1, "reported once")
			assert.Equal(t, "w.test/a", s.forks[0].Witness)
			assert.Contains(t, s.forks[0].Reason, c.reason)
			require.NotNil(t, s.Refused())
			assert.Contains(t, s.Refused().Error(), "witness w.test/a refused the log at size 5")
		})
	}
}

func TestADecisionAwaitsACosignedCheckpointThatHoldsIt(t *testing.T) {
	ctx := context.Background()
	dir, keys, f := witnessedDir(t)
	l, err := Open(ctx, Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys, Witnesses: []*witness.Witness{f.witness(t)}, WitnessesRequired: 1})
	require.NoError(t, err)
	defer l.Close()
	require.True(t, l.RequiresCosigned())
	idx, err := l.Append(ctx, entry("c1", KindCallDecided))
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var notYet *NotCosignedError
	require.ErrorAs(t, l.AwaitCosigned(short, idx[0]), &notYet, "no checkpoint holds it yet")
	assert.Contains(t, notYet.Error(), "entry #0 is in no checkpoint with 1 witnesses' cosignatures")

	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	short2, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	require.ErrorAs(t, l.AwaitCosigned(short2, idx[0]), &notYet, "signed, not yet cosigned")
	l.cosign(ctx)
	require.NoError(t, l.AwaitCosigned(ctx, idx[0]))

	_, err = Open(ctx, Options{DSN: filepath.Join(dir, "other.db"), Keys: keys, WitnessesRequired: 1})
	assert.ErrorContains(t, err, "1 witnesses' cosignatures required of 0 witnesses")
}

// Two signers of one database: a checkpoint one read before the other
// stored and had a larger one cosigned is stale, not a fork.
func TestAnotherSignersLargerCosignedCheckpointIsNoFork(t *testing.T) {
	ctx := context.Background()
	dir, _, f := witnessedDir(t)
	a := openWitnessed(t, dir, f.witness(t))
	b := openWitnessed(t, dir, f.witness(t))
	appendN(t, a.Ledger, "a-", 3)
	read, err := a.SignCheckpoint(ctx) // a reads its checkpoint of 3 …
	require.NoError(t, err)
	appendN(t, b.Ledger, "b-", 2)
	_, err = b.SignCheckpoint(ctx)
	require.NoError(t, err)
	b.cosign(ctx) // … b's of 5 is cosigned meanwhile
	require.EqualValues(t, 5, f.knownSize())

	_, err = a.askWitness(ctx, a.opts.Witnesses[0], read)
	require.Error(t, err, "nothing to cosign: the witness has a later one")
	assert.Empty(t, a.forks)
	assert.Nil(t, a.Refused())
	a.cosign(ctx)
	assert.True(t, cosignedBy(t, a.Ledger, a.opts.Witnesses[0], 5), "the latest is cosigned once")
	assert.Empty(t, a.forks)
}

// A witness that is down is logged once, not at every tick, and its
// return too.
func TestAWitnessDownIsLoggedOnceAndItsReturnToo(t *testing.T) {
	ctx := context.Background()
	dir, keys, f := witnessedDir(t)
	core, logs := observer.New(zap.DebugLevel)
	l, err := Open(ctx, Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys, Witnesses: []*witness.Witness{f.witness(t)}, Logger: zap.New(core)})
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, "e-", 2)
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	f.setDown(true)
	for range 3 {
		l.cosign(ctx)
	}
	f.setDown(false)
	l.cosign(ctx)
	l.cosign(ctx)
	assert.Equal(t, 1, logs.FilterMessageSnippet("did not cosign").FilterLevelExact(zap.WarnLevel).Len())
	assert.Equal(t, 2, logs.FilterMessageSnippet("still does not cosign").Len())
	assert.Equal(t, 1, logs.FilterMessageSnippet("cosigns the ledger's checkpoints again").Len())
}

// A receipt whose call is newer than every checkpoint gets a new one,
// cosigned at once by the witnesses that are up.
func TestAReceiptCarriesTheWitnessesCosignatures(t *testing.T) {
	ctx := context.Background()
	dir, keys, f := witnessedDir(t)
	w := f.witness(t)
	s := openWitnessed(t, dir, w)
	appendN(t, s.Ledger, "c", 3)
	r, err := s.Prove(ctx, "c1")
	require.NoError(t, err)
	_, err = VerifyReceiptWithOptions(r, keys.Verifier, VerifyOptions{Witnesses: WitnessRule{Verifiers: []note.Verifier{w.Verifier}, Required: 1}})
	require.NoError(t, err, "the receipt's checkpoint carries the witness's cosignature")
}
