package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	sdkclient "go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/toolgate/toolgate/activities"
	toolgate "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/logging"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

// encryptedQueue is the task queue of the worker that encrypts.
const encryptedQueue = "toolgate-encrypted"

// encryptedSecret is in the encrypted scenario's arguments and error: the
// replay test checks it does not occur in the recorded JSON.
const encryptedSecret = "SECRET-replay-encrypted"

// testKeys is the keyring the encrypted recordings were made with. It
// protects nothing: it only lets the baseline replay them.
var testKeys = filepath.Join("workflows", "testdata", "keyring", "keys.json")

// startEncrypted starts a worker whose client encrypts every payload with
// the test keyring (copied to dataDir: git keeps it 0644, the keyring
// wants 0600), and returns the toolgate client of its calls.
func startEncrypted(address, namespace string, logger *zap.Logger, dataDir string, tools *tool.Registry, lg *ledger.Ledger) (*toolgate.Client, func(), error) {
	b, err := os.ReadFile(testKeys)
	if err != nil {
		return nil, nil, fmt.Errorf("test keyring (run from the module root): %w", err)
	}
	keys := filepath.Join(dataDir, "keys.json")
	if err := os.WriteFile(keys, b, 0o600); err != nil {
		return nil, nil, err
	}
	ring, err := keyring.Load(keys)
	if err != nil {
		return nil, nil, err
	}
	opts := sdkclient.Options{HostPort: address, Namespace: namespace, Identity: identity,
		Logger: logging.NewTemporal(logger.Named("sdk").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel)))}
	keyring.Configure(&opts, ring)
	tc, err := sdkclient.Dial(opts)
	if err != nil {
		return nil, nil, err
	}
	w, err := worker.New(tc, worker.Options{TaskQueue: encryptedQueue, Policy: recorderPolicy{}, Tools: tools,
		Channels: []activities.Channel{recordChannel{}}, Ledger: lg, DataConverter: keyring.DataConverter(ring), Doors: recordDoors})
	if err != nil {
		tc.Close()
		return nil, nil, err
	}
	if err := w.Start(); err != nil {
		tc.Close()
		return nil, nil, err
	}
	return toolgate.New(tc, encryptedQueue).WithDataConverter(keyring.DataConverter(ring)).WithDoor(recordDoor), func() { w.Stop(); tc.Close() }, nil
}

// encryptedCalls: a call that asks and is approved, and one whose tool
// fails, on the worker that encrypts; secrets in the arguments and the
// error.
func (r *recorder) encryptedCalls(ctx context.Context) error {
	const session = "replay-encrypted"
	if err := openSessionOn(ctx, r.encrypted.Temporal(), encryptedQueue, workflows.SessionInput{Session: session, Owner: agent, IdleTimeout: idle}); err != nil {
		return err
	}
	id, err := r.encrypted.Submit(ctx, toolgate.CallRequest{CallID: "encrypted-1", Session: session, Tool: "write",
		Args: []byte(`{"path":"e.txt","content":"` + encryptedSecret + `"}`), Requester: agent})
	if err != nil {
		return err
	}
	if err := eventually(ctx, "call "+id+" is pending", func(ctx context.Context) (bool, error) {
		st, err := r.encrypted.Status(ctx, id)
		return err == nil && st.State != nil && st.State.Status == workflows.StatusPending && len(st.State.Notices) > 0, err
	}); err != nil {
		return err
	}
	if _, err := r.encrypted.Decide(ctx, id, policy.Decision{Kind: policy.Approved, DecidedBy: approver, Channel: "cli"}); err != nil {
		return err
	}
	if res, err := r.encrypted.Wait(ctx, id); err != nil || res.Status != workflows.StatusOK {
		return fmt.Errorf("call %s: %v %v", id, res.Status, err)
	}
	failed, err := r.encrypted.Call(ctx, toolgate.CallRequest{CallID: "encrypted-2", Session: session, Tool: "fail",
		Args: []byte(`{"path":"` + encryptedSecret + `"}`), Requester: agent})
	if err != nil {
		return err
	}
	if failed.Status != workflows.StatusError {
		return fmt.Errorf("call encrypted-2 ended %s (%s), want error", failed.Status, failed.Reason)
	}
	if err := r.writeHistory(ctx, "encrypted-ask-approve", workflows.CallWorkflowID(id), ""); err != nil {
		return err
	}
	if err := r.writeHistory(ctx, "encrypted-failed", workflows.CallWorkflowID("encrypted-2"), ""); err != nil {
		return err
	}
	if _, err := r.encrypted.EndSession(ctx, session, policy.Approver{Name: approver, Groups: []string{"*"}}); err != nil {
		return fmt.Errorf("end session %s: %w", session, err)
	}
	// The session closes after its idle timeout.
	if err := r.encrypted.Temporal().GetWorkflow(ctx, workflows.SessionWorkflowID(session), "").Get(ctx, nil); err != nil {
		return fmt.Errorf("session %s: %w", session, err)
	}
	return r.writeHistory(ctx, "encrypted-session", workflows.SessionWorkflowID(session), "")
}
