package bench

import (
	"context"
	"fmt"
	"path/filepath"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

// encryptedQueue is the task queue of the bench's toolgate worker whose
// client encrypts every payload (a keyring of the run's own).
const encryptedQueue = "toolgate-bench-encrypted"

// startEncryptedWorker dials a second client like opts, its payloads
// encrypted with a keyring made in dir, and starts a toolgate worker on
// it; it returns the toolgate client of that worker's calls.
func startEncryptedWorker(opts client.Options, tools *tool.Registry, dir string) (*tgclient.Client, func(), error) {
	ring, _, err := keyring.LoadOrCreate(filepath.Join(dir, "keys.json"))
	if err != nil {
		return nil, nil, err
	}
	keyring.Configure(&opts, ring)
	tc, err := client.Dial(opts)
	if err != nil {
		return nil, nil, err
	}
	w, err := worker.New(tc, worker.Options{TaskQueue: encryptedQueue, Policy: benchPolicy{}, Tools: tools, DataConverter: keyring.DataConverter(ring), Doors: benchDoors})
	if err != nil {
		tc.Close()
		return nil, nil, err
	}
	if err := w.Start(); err != nil {
		tc.Close()
		return nil, nil, err
	}
	calls := tgclient.New(tc, encryptedQueue).WithDataConverter(keyring.DataConverter(ring)).WithDoor(benchDoor)
	return calls, func() { w.Stop(); tc.Close() }, nil
}

func (b *runner) autoEncrypted(ctx context.Context) error {
	return callOn(ctx, b.encrypted, b.session("auto-encrypted"), toolEcho)
}

// checkEncrypted makes one call on the encrypted worker and reads its
// request back with the bench's plain client: it must be ciphertext, or
// the encrypted figures measure nothing.
func (b *runner) checkEncrypted(ctx context.Context, _ *Report) error {
	id := "bench-encrypted-" + b.run
	r, err := b.encrypted.Call(ctx, tgclient.CallRequest{Requester: benchAgent, CallID: id, Session: b.session("auto-encrypted"), Tool: toolEcho, Args: args})
	if err != nil {
		return err
	}
	if r.Status != workflows.StatusOK {
		return fmt.Errorf("call %s: %s: %s", id, r.Status, r.Reason)
	}
	it := b.tc.GetWorkflowHistory(ctx, workflows.CallWorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	ev, err := it.Next()
	if err != nil {
		return err
	}
	for _, p := range ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads() {
		if !keyring.Encrypted(p) {
			return fmt.Errorf("call %s: its request is stored unencrypted: the encrypted case measures nothing", id)
		}
	}
	return nil
}
