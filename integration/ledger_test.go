package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	_ "modernc.org/sqlite"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// openDevLedger opens toolgate dev's ledger beside it, as an auditor's
// tools would: its database and its key in the data dir.
func openDevLedger(t *testing.T, dataDir string) *ledger.Ledger {
	t.Helper()
	keys, err := ledger.LoadKey(filepath.Join(dataDir, "ledger.key"))
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dataDir, "ledger.db"), Keys: keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// callKinds returns the kinds of each call's entries, in log order.
func callKinds(t *testing.T, l *ledger.Ledger) map[string][]string {
	t.Helper()
	size, err := l.Size(context.Background())
	require.NoError(t, err)
	all, err := l.Entries(context.Background(), 0, size)
	require.NoError(t, err)
	require.Len(t, all, int(size), "no gaps")
	out := map[string][]string{}
	for i, e := range all {
		require.EqualValues(t, i, e.Index)
		h, err := ledger.ReadHeader(e.Entry)
		require.NoError(t, err)
		if h.CallID != "" && strings.HasPrefix(h.Kind, "call.") {
			out[h.CallID] = append(out[h.CallID], h.Kind)
		}
	}
	return out
}

var oneOfEach = []string{ledger.KindCallSubmitted, ledger.KindCallDecided, ledger.KindCallFinished}

// 200 decisions while a second worker and then toolgate dev itself are
// killed with SIGKILL: every call's submission, decision and outcome is in
// the ledger once, and the log verifies.
func TestTheLedgerHasEveryEventOnceThroughKills(t *testing.T) {
	d := newDev(t)
	c := d.client()
	ctx := context.Background()
	db, key := filepath.Join(d.dataDir, "ledger.db"), filepath.Join(d.dataDir, "ledger.key")
	second := start(t, "Worker running", "worker", "--temporal-address", d.address(), "--keys", d.keysFile(), "--doors", d.doorsFile(), "--workspace", d.workspace,
		"--ledger", db, "--ledger-key", key, "--metrics", "")

	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("k%03d", i)
		args := fmt.Sprintf(`{"path":"k/%03d.txt","content":"x"}`, i)
		_, err := c.Submit(ctx, tgclient.CallRequest{CallID: ids[i], Session: "s-kill", Tool: "write_file", Args: []byte(args), Requester: "agent"})
		require.NoError(t, err)
	}
	var decided atomic.Int32
	decide := func(id string) {
		d := policy.Decision{Kind: policy.Approved, DecidedBy: "alice", DeciderGroups: []string{"*"}, Channel: "cli"}
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.Decide(cctx, id, d)
			cancel()
			if err == nil || strings.Contains(err.Error(), "already decided") {
				decided.Add(1)
				return
			}
			time.Sleep(200 * time.Millisecond) // pending not yet, or the server is down
		}
		t.Errorf("call %s was never decided", id)
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				decide(id)
			}
		}()
	}
	go func() {
		for _, id := range ids {
			work <- id
		}
		close(work)
	}()
	require.Eventually(t, func() bool { return decided.Load() >= 60 }, 2*time.Minute, 10*time.Millisecond)
	second.kill()
	require.Eventually(t, func() bool { return decided.Load() >= 120 }, 2*time.Minute, 10*time.Millisecond)
	d.dev.kill()
	d.startDev()
	wg.Wait()

	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		r, err := c.Wait(wctx, id)
		cancel()
		require.NoError(t, err, id)
		require.Equal(t, workflows.StatusOK, r.Status, "%s: %s", id, r.Reason)
	}
	l := openDevLedger(t, d.dataDir)
	kinds := callKinds(t, l)
	for _, id := range ids {
		assert.Equal(t, oneOfEach, kinds[id], "call %s: each event once, in order", id)
	}
	_, err := l.SignCheckpoint(ctx)
	require.NoError(t, err)
	rep, err := l.VerifyStore(ctx, nil)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, rep.Entries, int64(3*n))
}

// A ledger that cannot be written (its database locked by another
// process) holds the calls: they wait, status says why, nothing runs; once
// it can be written again they finish, logged.
func TestALedgerThatIsDownHoldsCallsUntilItIsBack(t *testing.T) {
	d := newDev(t)
	c := d.client()
	ctx := context.Background()

	lock, err := sql.Open("sqlite", "file:"+filepath.Join(d.dataDir, "ledger.db")+"?_txlock=exclusive")
	require.NoError(t, err)
	defer lock.Close()
	tx, err := lock.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.Exec(`UPDATE ledger_head SET size = size WHERE id = 1`) // takes the write lock
	require.NoError(t, err)

	_, err = c.Submit(ctx, tgclient.CallRequest{CallID: "down-1", Session: "s-down", Tool: "echo", Args: []byte(`{"text":"held"}`), Requester: "agent"})
	require.NoError(t, err)
	var st tgclient.Status
	require.Eventually(t, func() bool {
		st, err = c.Status(ctx, "down-1")
		return err == nil && st.State != nil && st.State.LedgerWait != ""
	}, 2*time.Minute, 200*time.Millisecond, "status says the call waits for the ledger")
	assert.Contains(t, st.State.LedgerWait, "the ledger cannot be written")
	assert.Nil(t, st.Result)
	r := d.cli("status", "down-1")
	assert.Contains(t, r.stdout, "waiting for the ledger")

	require.NoError(t, tx.Rollback())
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	res, err := c.Wait(wctx, "down-1")
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusOK, res.Status)
	var out map[string]string
	require.NoError(t, json.Unmarshal(res.Output, &out))
	assert.Equal(t, "held", out["text"])
	assert.Equal(t, oneOfEach, callKinds(t, openDevLedger(t, d.dataDir))["down-1"])
}

// Once Temporal has forgotten a call (its workflow deleted, as `temporal
// workflow delete` or the namespace's retention does), an auditor still
// reads its entries and a receipt that proves them, and changes nothing.
func TestAnAuditorProvesACallTemporalDeleted(t *testing.T) {
	d, as := newAPIDev(t)
	ctx := context.Background()
	r := as("agent-1").do("POST", "/v1/calls?wait=30s", map[string]any{"session": "s-audit", "tool": "echo", "args": map[string]any{"x": 1}, "call_id": "w1"})
	require.Equal(t, 200, r.status, r.raw)

	tc := d.temporal()
	defer tc.Close()
	_, err := tc.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: workflows.CallWorkflowID("w1")}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := tc.DescribeWorkflowExecution(ctx, workflows.CallWorkflowID("w1"), "")
		var nf *serviceerror.NotFound
		return errors.As(err, &nf)
	}, 90*time.Second, 200*time.Millisecond, "Temporal forgot the call")
	require.Equal(t, 404, as("agent-1").do("GET", "/v1/calls/w1", nil).status)

	// The CLI reads the ledger alone: Temporal has nothing of the call.
	db, keyFile := filepath.Join(d.dataDir, "ledger.db"), filepath.Join(d.dataDir, "ledger.key")
	show := d.cli("audit", "show", "w1", "--ledger", db, "--ledger-key", keyFile)
	require.Equal(t, 0, show.code, show.stderr)
	assert.Contains(t, show.stdout, "call.submitted")
	assert.Contains(t, show.stdout, "requester: agent-1")
	assert.Contains(t, show.stdout, "decision: approved by policy via policy")
	assert.Contains(t, show.stdout, "status:   ok")
	verify := d.cli("audit", "verify", "--ledger", db, "--ledger-key", keyFile)
	require.Equal(t, 0, verify.code, verify.stderr)
	assert.Contains(t, verify.stdout, "(toolgate/dev) intact")

	auditor := as("audrey")
	key := auditor.do("GET", "/v1/audit/key", nil)
	require.Equal(t, 200, key.status, key.raw)
	verifier, err := ledger.ParseVerifierKey(key.raw)
	require.NoError(t, err)
	rec := auditor.do("GET", "/v1/audit/calls/w1", nil)
	require.Equal(t, 200, rec.status, rec.raw)
	var receipt ledger.Receipt
	require.NoError(t, json.Unmarshal([]byte(rec.raw), &receipt))
	c, err := ledger.VerifyReceipt(receipt, verifier)
	require.NoError(t, err)
	require.Len(t, receipt.Entries, 3)
	assert.Greater(t, c.Size, receipt.Entries[2].Index)
	assert.Contains(t, string(receipt.Entries[1].Entry), `"decided_by":"policy"`)

	assert.Equal(t, 404, as("agent-2").do("GET", "/v1/audit/calls/w1", nil).status, "another agent's call")
	for _, path := range []string{"/v1/calls", "/v1/calls/w1/decision"} {
		r := auditor.do("POST", path, map[string]any{"session": "s-audit", "tool": "echo", "args": map[string]any{}, "decision": "approved"})
		assert.Equal(t, 403, r.status, path)
		assert.Equal(t, "read_only", r.errorCode(), path)
	}
}

// Calls that closed before the ledger existed are logged once by
// `toolgate audit backfill`, marked so; a second backfill, and a call that
// logged itself, add nothing.
func TestBackfillLogsClosedCallsOnce(t *testing.T) {
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: "127.0.0.1:" + fmt.Sprint(freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port), "--http", d.httpAddr, "--ledger", "off")
	d.callJSON(0, "--session", "s-old", "--id", "old-1", "echo", `{"n":1}`)
	d.callJSON(3, "--session", "s-old", "--id", "old-2", "write_file", `{"path":"/etc/passwd","content":"x"}`)
	d.dev.stop()
	d.startDev() // now with the dev ledger
	d.callJSON(0, "--session", "s-new", "--id", "new-1", "echo", `{"n":2}`)

	db, keyFile := filepath.Join(d.dataDir, "ledger.db"), filepath.Join(d.dataDir, "ledger.key")
	r := d.cli("audit", "backfill", "--ledger", db, "--ledger-key", keyFile)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "backfilled 3 closed calls: 6 new entries")
	again := d.cli("audit", "backfill", "--ledger", db, "--ledger-key", keyFile)
	require.Equal(t, 0, again.code, again.stderr)
	assert.Contains(t, again.stdout, "backfilled 3 closed calls: 0 new entries")

	l := openDevLedger(t, d.dataDir)
	kinds := callKinds(t, l)
	assert.Equal(t, oneOfEach, kinds["old-1"])
	assert.Equal(t, oneOfEach, kinds["old-2"], "denied by the policy: decided and finished")
	assert.Equal(t, oneOfEach, kinds["new-1"], "logged by itself, once")
	old, err := l.CallEntries(context.Background(), "old-1")
	require.NoError(t, err)
	assert.Contains(t, string(old[0].Entry), `"backfilled":true`)
	show := d.cli("audit", "show", "old-2", "--ledger", db, "--ledger-key", keyFile)
	assert.Contains(t, show.stdout, "backfilled from Temporal after the fact")
	verify := d.cli("audit", "verify", "--ledger", db, "--ledger-key", keyFile)
	assert.Equal(t, 0, verify.code, verify.stderr)
}
