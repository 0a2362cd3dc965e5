package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/integration/cluster"
	"github.com/toolgate/toolgate/ledger"
)

// Two real witnesses (litewitness, its key in a Debian ssh-agent) cosign
// every checkpoint dev's ledger signs: audit verify requires both
// cosignatures of the database, an export and a receipt; the witnesses
// down, calls run and the checkpoints wait for them; and a signer that
// lost its memory, restarted on a rolled-back database, gets no
// cosignature: the witnesses saw the larger tree.
func TestWitnessesCosignTheLedgersCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	top := t // dev restarted in a subtest outlives it
	wa, err := cluster.StartWitness(ctx, t.TempDir(), "witness.test/a")
	require.NoError(t, err)
	defer wa.Stop()
	wb, err := cluster.StartWitness(ctx, t.TempDir(), "witness.test/b")
	require.NoError(t, err)
	defer wb.Stop()

	// dev's ledger key first, so the witnesses know the log (the
	// operator's witnessctl add-log and add-key).
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	keyFile, dbFile := filepath.Join(d.dataDir, "ledger.key"), filepath.Join(d.dataDir, "ledger.db")
	keys, _, err := ledger.LoadOrCreateKey(keyFile, "dev")
	require.NoError(t, err)
	for _, w := range []*cluster.Witness{wa, wb} {
		require.NoError(t, w.AddLog(ctx, "toolgate/dev", keys.VerifierKey))
	}
	devArgs := []string{"dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port), "--http", d.httpAddr,
		"--tokens", writeTokensFile(t, t.TempDir()), "--ledger-witness", wa.Spec(), "--ledger-witness", wb.Spec()}
	d.dev = startIn(t, "", nil, devReady, devArgs...)
	agent := apiClient{t: t, base: "http://" + d.httpAddr, token: "token-agent-1"}
	state := filepath.Join(t.TempDir(), "auditor.state")
	overAPI := func(extra ...string) result {
		return d.cli(append([]string{"audit", "verify", "--api", agent.base, "--token", "token-audrey", "--key", keys.VerifierKey, "--state", state}, extra...)...)
	}
	call := func(id string) {
		t.Helper()
		r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "witnessed", "call_id": id, "tool": "echo", "args": map[string]any{"id": id}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, "ok", r.body["status"], r.raw)
	}
	both := []string{"--witness", wa.VerifierKey, "--witness", wb.Spec(), "--witnesses-required", "2"}
	verify := func(extra ...string) result {
		return d.cli(append([]string{"audit", "verify", "--ledger", dbFile, "--ledger-key", keyFile}, extra...)...)
	}
	// cosignedUpTo waits until the latest checkpoint is as large as the
	// log and carries both cosignatures.
	cosignedUpTo := func(why string) {
		t.Helper()
		require.Eventually(t, func() bool {
			r := verify(both...)
			var entries, size int
			_, err := fmt.Sscanf(r.stdout[strings.Index(r.stdout, "intact: ")+len("intact: "):], "%d entries", &entries)
			if r.code != 0 || err != nil || !strings.Contains(r.stdout, "each with 2 witnesses' cosignatures") {
				return false
			}
			i := strings.Index(r.stdout, "signed up to size ")
			_, err = fmt.Sscanf(r.stdout[i+len("signed up to size "):], "%d", &size)
			return err == nil && size == entries
		}, 30*time.Second, 500*time.Millisecond, "%s\nwitness a:\n%s\nwitness b:\n%s\ndev:\n%s", why, wa.Output(), wb.Output(), d.dev.out.String())
	}

	for i := range 3 {
		call(fmt.Sprintf("witnessed-%d", i))
	}
	cosignedUpTo("both witnesses cosign the latest checkpoint")

	t.Run("a checkpoint counts only with the cosignatures required", func(t *testing.T) {
		stranger, err := cluster.StartWitness(ctx, t.TempDir(), "witness.test/stranger")
		require.NoError(t, err)
		stranger.Stop()
		r := verify("--witness", wa.VerifierKey, "--witness", stranger.VerifierKey, "--witnesses-required", "2")
		assert.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "no checkpoint carries the 2 witnesses' cosignatures required")
		r = verify("--witness", wa.VerifierKey, "--witnesses-required", "2")
		assert.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "2 cosignatures required of 1 witnesses' keys given")
	})

	t.Run("an auditor over the API counts the cosigned checkpoint", func(t *testing.T) {
		r := overAPI(both...)
		assert.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, "each with 2 witnesses' cosignatures")
	})

	t.Run("an export and a receipt verify offline with both cosignatures", func(t *testing.T) {
		export, receipt := filepath.Join(t.TempDir(), "export.jsonl"), filepath.Join(t.TempDir(), "receipt.json")
		r := d.cli("audit", "export", "--ledger", dbFile, "--ledger-key", keyFile, "-o", export)
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		r = d.cli("audit", "proof", "witnessed-0", "--ledger", dbFile, "--ledger-key", keyFile, "-o", receipt)
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		for _, what := range [][]string{{"--export", export}, {"--receipt", receipt}} {
			r = d.cli(append(append([]string{"audit", "verify", "--key", keys.VerifierKey}, what...), both...)...)
			assert.Equal(t, 0, r.code, "%v: stdout: %s\nstderr: %s", what, r.stdout, r.stderr)
		}
		assert.Contains(t, r.stdout, "cosigned by 2 of the 2 witnesses given")
	})

	t.Run("witnesses down: calls run, the checkpoint waits for them", func(t *testing.T) {
		wa.Pause()
		wb.Pause()
		for i := range 2 {
			call(fmt.Sprintf("unwitnessed-%d", i))
		}
		time.Sleep(2 * ledger.DefaultCheckpointEvery) // checkpoints signed meanwhile, not cosigned
		r := verify(both...)
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		assert.NotContains(t, r.stdout, "; 0 without them", "the checkpoints signed while the witnesses were down lack them: %s", r.stdout)
		require.NoError(t, wa.Resume(ctx))
		require.NoError(t, wb.Resume(ctx))
		cosignedUpTo("the latest checkpoint is cosigned once the witnesses are back")
	})

	t.Run("tools that wait for cosigned decisions wait while the witnesses are down", func(t *testing.T) {
		d.dev.stop()
		d.dev = startIn(top, "", nil, devReady, append(devArgs, "--ledger-witnesses-required", "2")...)
		call("witnessed-first") // the witnesses up: it runs
		wa.Pause()
		wb.Pause()
		r := agent.do("POST", "/v1/calls?wait=2s", map[string]any{"session": "witnessed", "call_id": "held", "tool": "echo", "args": map[string]any{"id": "held"}})
		require.Equal(t, http.StatusAccepted, r.status, "the call waits: %s", r.raw)
		require.Eventually(t, func() bool {
			r = agent.do("GET", "/v1/calls/held", nil)
			return strings.Contains(r.raw, "witnesses' cosignatures")
		}, time.Minute, 500*time.Millisecond, "the call says what it waits for: %s", r.raw)
		require.NoError(t, wa.Resume(ctx))
		require.NoError(t, wb.Resume(ctx))
		require.Eventually(t, func() bool {
			r = agent.do("GET", "/v1/calls/held?wait=5s", nil)
			return r.status == http.StatusOK && r.body["status"] == "ok"
		}, 90*time.Second, 500*time.Millisecond, "it runs once they cosign: %s", r.raw)
	})

	t.Run("the insider's rewrite under the running signer: refused, never cosigned, caught by every verifier", func(t *testing.T) {
		receipt := filepath.Join(t.TempDir(), "before.json")
		r := d.cli("audit", "proof", "witnessed-0", "--ledger", dbFile, "--ledger-key", keyFile, "-o", receipt)
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		cosignedUpTo("the log is quiet and cosigned before the rewrite")
		// witnessed-0 decided by "policy" becomes bob's; witnessed-1's
		// entries are deleted; every hash recomputed; no checkpoint left.
		rewrite(t, dbFile, "witnessed-1", []byte(`"decided_by":"policy"`), []byte(`"decided_by":"bob"`))

		require.Eventually(t, func() bool {
			return strings.Contains(d.dev.out.String(), "Refused to sign a ledger checkpoint")
		}, 30*time.Second, 200*time.Millisecond, d.dev.out.String())
		status, body := getJSON(t, "http://"+d.httpAddr+"/readyz", "")
		assert.Equal(t, http.StatusOK, status, "calls still run")
		assert.Equal(t, "degraded", body["status"], "%v", body)
		for name, r := range map[string]result{
			"the database, with the witnesses": verify(both...),
			"the database":                     verify(),
			"the receipt taken before":         verify("--checkpoint", receipt),
			"over the API, with its state":     overAPI(both...),
		} {
			assert.Equal(t, 1, r.code, "%s: stdout: %s\nstderr: %s", name, r.stdout, r.stderr)
			assert.Contains(t, r.stderr, "NOT intact", name)
		}
		assert.Contains(t, verify("--checkpoint", receipt).stderr, "entries were removed", "the receipt's checkpoint signed more than the rewritten log holds")
	})

	t.Run("a signer that forgot, on a rolled-back database, gets no cosignature", func(t *testing.T) {
		d.dev.stop()
		rollBack(t, dbFile, 2)
		require.NoError(t, os.Remove(filepath.Join(d.dataDir, "ledger-signed.json"))) // its memory lost with its disk
		d.dev = startIn(top, "", nil, devReady, devArgs...)
		require.Eventually(t, func() bool {
			return strings.Contains(d.dev.out.String(), "A witness saw a ledger this one does not extend")
		}, 30*time.Second, 200*time.Millisecond, d.dev.out.String())
		status, body := getJSON(t, "http://"+d.httpAddr+"/readyz", "")
		assert.Equal(t, http.StatusOK, status, "calls still run")
		assert.Equal(t, "degraded", body["status"], "%v", body)
		assert.Contains(t, body["ledger"], "witness witness.test/")
		r := verify(both...)
		assert.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "no checkpoint carries the 2 witnesses' cosignatures required")
		r = overAPI(both...)
		assert.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "rolled back", "the auditor's state remembers the larger tree")
		r = verify()
		assert.Equal(t, 0, r.code, "without witnesses the re-signed log looks intact: that is what they are for")
	})
}
