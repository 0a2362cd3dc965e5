package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/integration/cluster"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/witness"
	"github.com/toolgate/toolgate/workflows"
)

// ledgerAtScale: the cluster's two workers and four more appending
// processes share one ledger in PostgreSQL while calls run; serve signs
// and the witness w cosigns. One linear log, no gaps, no event twice,
// every checkpoint signed meanwhile cosigned; the rate and the time to a
// cosigned checkpoint are logged (docs/benchmarks.md).
func ledgerAtScale(t *testing.T, e *clusterEnv, c *tgclient.Client, w *cluster.Witness) {
	n, seconds := clusterLedgerCalls, clusterAppendSeconds
	if v, err := strconv.Atoi(os.Getenv("TOOLGATE_CLUSTER_LEDGER_CALLS")); err == nil && v > 0 {
		n = v // the 2,000 of docs/benchmarks.md
	}
	if v, err := strconv.Atoi(os.Getenv("TOOLGATE_CLUSTER_APPEND_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	var reqs []tgclient.CallRequest
	var ids []string
	for i := range n {
		id := fmt.Sprintf("ledger-%04d", i)
		ids = append(ids, id)
		reqs = append(reqs, tgclient.CallRequest{CallID: id, Session: "cluster-ledger", Tool: "echo", Args: []byte(`{"n":1}`), Requester: "agent-1"})
	}
	keys, err := ledger.LoadKey(e.c.LedgerKey)
	require.NoError(t, err)
	wv, err := witness.NewVerifier(w.VerifierKey)
	require.NoError(t, err)
	cosigned := ledger.WitnessRule{Verifiers: []note.Verifier{wv}, Required: 1}
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: e.c.LedgerDSN, Keys: ledger.Keys{Verifier: keys.Verifier}})
	require.NoError(t, err)
	defer l.Close()
	// A checkpoint serve signed just before a kill -9 above may have
	// missed its cosignature; none signed from here on may.
	before, err := l.VerifyStoreWithOptions(context.Background(), ledger.VerifyOptions{Witnesses: cosigned})
	require.NoError(t, err)

	appended := appendAtOnce(t, e.c, 4, seconds) // four more processes append meanwhile
	require.NoError(t, submitEach(c, reqs, 32))  // both workers take them, appending at once
	for id, r := range waitAll(t, c, ids, 5*time.Minute) {
		require.Equal(t, workflows.StatusOK, r.Status, "%s: %s", id, r.Reason)
	}
	rate := <-appended
	size, err := l.Size(context.Background())
	require.NoError(t, err)
	began := time.Now()
	require.Eventually(t, func() bool {
		rep, err := l.VerifyStoreWithOptions(context.Background(), ledger.VerifyOptions{Witnesses: cosigned})
		return err == nil && rep.Size >= size
	}, time.Minute, 100*time.Millisecond, "serve signs and the witness cosigns the whole log")
	t.Logf("ledger: %d entries, %.0f entries/s appended by 4 processes of 64 appenders each beside %d calls; a cosigned checkpoint of all of them %.1fs after the last",
		size, rate, n, time.Since(began).Seconds())

	kinds := callKinds(t, l) // indices 0..size-1, no gaps
	for _, id := range ids {
		require.Equal(t, oneOfEach, kinds[id], "call %s", id)
	}
	for id, k := range kinds {
		assert.LessOrEqual(t, len(k), 3, "call %s: no event twice", id)
	}
	rep, err := l.VerifyStoreWithOptions(context.Background(), ledger.VerifyOptions{Witnesses: cosigned})
	require.NoError(t, err, "the log verifies, the checkpoints serve signed included")
	assert.Greater(t, rep.Checkpoints, 1, "serve, which holds the signing key, signed checkpoints while the workers appended")
	assert.Equal(t, before.Uncosigned, rep.Uncosigned, "the witness cosigned every checkpoint serve signed meanwhile (%d checkpoints)", rep.Checkpoints-before.Checkpoints)
	for _, w := range e.c.Workers {
		assert.Contains(t, w.Output(), `"signs": false`, "%s holds the verifier key alone", w.Name)
		assert.NotContains(t, w.Output(), "holds the ledger's signing key")
	}
}

// appendAtOnce runs procs `toolgate bench ledger` processes against the
// cluster's ledger for seconds, as more workers appending; it sends the
// entries a second they appended together.
func appendAtOnce(t *testing.T, c *cluster.Cluster, procs, seconds int) <-chan float64 {
	t.Helper()
	out := make(chan float64, 1)
	rates := make(chan float64, procs)
	for i := range procs {
		go func() {
			cmd := exec.Command(binary, "bench", "ledger", "--ledger", c.LedgerDSN, "--ledger-key", c.LedgerVerifierKey,
				"--seconds", strconv.Itoa(seconds), "--name", fmt.Sprintf("appender-%d", i))
			b, err := cmd.Output()
			var r struct {
				PerSec float64 `json:"per_sec"`
			}
			if err != nil || json.Unmarshal(b, &r) != nil {
				t.Errorf("appender %d: %v: %s", i, err, b)
			}
			rates <- r.PerSec
		}()
	}
	go func() {
		var sum float64
		for range procs {
			sum += <-rates
		}
		out <- sum
	}()
	return out
}

// clusterLedgerCalls is how many calls the cluster's ledger subtest makes:
// hundreds in the suite; docs/benchmarks.md has a run of 2,000
// (TOOLGATE_CLUSTER_LEDGER_CALLS=2000).
const clusterLedgerCalls = 400

// clusterAppendSeconds is how long the appenders beside those calls
// append (TOOLGATE_CLUSTER_APPEND_SECONDS for a longer run).
const clusterAppendSeconds = 5
