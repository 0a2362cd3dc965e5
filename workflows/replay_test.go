package workflows

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/keyring"
)

// The histories under testdata/ are toolgate 1.0's baseline, recorded
// from the embedded server by `go run ./workflows/testdata/record` (run
// from the module root). Every change to the workflows after 1.0 must
// replay them: a change that would not is guarded with workflow.GetVersion
// (docs/production.md, "Changing the workflows"), as
// TestAVersionedChangeReplaysTheBaseline shows. They are recorded again
// only for a new baseline.

// recordedScenarios must all be present: a deleted recording would
// otherwise silently shrink the check.
var recordedScenarios = []string{
	"auto-approve",
	"ask-approve",
	"ask-approve-notices",
	"sticky-fan-out-call",
	"sticky-fan-out-room",
	"sticky-fan-out-session",
	"sticky-lookup",
	"timeout",
	"session-end",
	"session-end-call",
	"session-end-later-call",
	"session-continue-as-new",
	"session-continue-as-new-next-run",
	"agent-claim",
	"agent-claim-no-report",
	"agent-report-unknown",
	"pins",
	"four-eyes",
	"user-decision",
	"user-decision-sticky",
	"edit-into-four-eyes",
	"cancel-leaves-room",
	"cancel-leaves-room-room",
	"session-end-voids-approval",
	"ledger-auto",
	"ledger-sticky",
	"ledger-covered",
	"ledger-session",
	"encrypted-ask-approve",
	"encrypted-failed",
	"encrypted-session",
	"statements-signal",
	"statements-refused-start",
	"statements-sticky-call",
	"statements-sticky-session",
	"statements-sticky-room",
	"baseline-approve",
	"baseline-deny",
	"baseline-approve-room",
	"evaluated-baseline-approve",
	"evaluated-baseline-deny",
	"evaluated-baseline-approve-room",
	"checked-auto",
	"checked-approve",
	"joined-approve",
	"joined-deny",
	"joined-approve-room",
}

// newReplayer returns a replayer with every workflow registered under its
// type name; callWorkflow stands in for ToolCallWorkflow.
func newReplayer(callWorkflow func(workflow.Context, CallInput) (Result, error)) worker.WorkflowReplayer {
	return registered(worker.NewWorkflowReplayer(), callWorkflow)
}

// replayerFor is the replayer of a recorded history: the histories
// recorded encrypted (encrypted-*) replay with the test keyring.
func replayerFor(t *testing.T, file string, callWorkflow func(workflow.Context, CallInput) (Result, error)) worker.WorkflowReplayer {
	if !strings.HasPrefix(filepath.Base(file), "encrypted-") {
		return newReplayer(callWorkflow)
	}
	ring := testKeyring(t)
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		DataConverter: keyring.DataConverter(ring), FailureConverter: keyring.FailureConverter(ring)})
	require.NoError(t, err)
	return registered(r, callWorkflow)
}

// testKeyring is the keyring the encrypted-* histories were recorded with
// (it protects nothing), copied with the mode a keyring must have.
func testKeyring(t *testing.T) *keyring.Keyring {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "keyring", "keys.json"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "keys.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	ring, err := keyring.Load(path)
	require.NoError(t, err)
	return ring
}

func registered(r worker.WorkflowReplayer, callWorkflow func(workflow.Context, CallInput) (Result, error)) worker.WorkflowReplayer {
	r.RegisterWorkflowWithOptions(callWorkflow, workflow.RegisterOptions{Name: ToolCallWorkflowType})
	r.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	r.RegisterWorkflowWithOptions(WaitingRoom, workflow.RegisterOptions{Name: RoomWorkflowType})
	r.RegisterWorkflowWithOptions(NoticesWorkflow, workflow.RegisterOptions{Name: NoticesWorkflowType})
	r.RegisterWorkflowWithOptions(ToolPins, workflow.RegisterOptions{Name: PinsWorkflowType})
	r.RegisterWorkflowWithOptions(RanAfterEndWorkflow, workflow.RegisterOptions{Name: RanAfterEndWorkflowType})
	return r
}

// testLogger sends the replayer's logs to the test's output, shown only
// for failures or with -v.
func testLogger(t *testing.T) log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	require.ElementsMatch(t, recordedScenarios, names, "the recorded histories are the 1.0 baseline: none may go missing")

	for i, f := range files {
		t.Run(names[i], func(t *testing.T) {
			t.Parallel()
			err := replayerFor(t, f, ToolCallWorkflow).ReplayWorkflowHistoryFromJSONFile(testLogger(t), f)
			require.NoError(t, err, "the workflow code no longer replays %s", f)
		})
	}
}

// TestReplayDetectsChangedWorkflow proves the check above can fail: a
// ToolCallWorkflow that first sleeps schedules a timer where the recorded
// history has the policy's local activity.
func TestReplayDetectsChangedWorkflow(t *testing.T) {
	history := filepath.Join("testdata", "ask-approve.json")
	changed := func(ctx workflow.Context, in CallInput) (Result, error) {
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return Result{}, err
		}
		return ToolCallWorkflow(ctx, in)
	}

	err := newReplayer(changed).ReplayWorkflowHistoryFromJSONFile(testLogger(t), history)
	require.Error(t, err, "a changed workflow must not replay")
	// The SDK's code for non-determinism (its explanation depends on
	// where the commands and the history part).
	require.ErrorContains(t, err, "[TMPRL1100]")

	// The same history and set-up with the real workflow replays.
	require.NoError(t, newReplayer(ToolCallWorkflow).ReplayWorkflowHistoryFromJSONFile(testLogger(t), history))
}

// callHistory matches a recorded history of a ToolCallWorkflow.
var callHistory = regexp.MustCompile(`"workflowType":\s*\{\s*"name":\s*"` + ToolCallWorkflowType + `"`)

// TestAVersionedChangeReplaysTheBaseline is the documented way to change a
// workflow after 1.0 (docs/production.md): the new code runs behind
// workflow.GetVersion, so histories recorded before the change take the
// old path and replay, while new runs take the new one.
func TestAVersionedChangeReplaysTheBaseline(t *testing.T) {
	changed := func(ctx workflow.Context, in CallInput) (Result, error) {
		if workflow.GetVersion(ctx, "example-pause-first", workflow.DefaultVersion, 1) == 1 {
			if err := workflow.Sleep(ctx, time.Second); err != nil {
				return Result{}, err
			}
		}
		return ToolCallWorkflow(ctx, in)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	replayed := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		if !callHistory.Match(data) {
			continue // another workflow's history
		}
		require.NoError(t, replayerFor(t, f, changed).ReplayWorkflowHistoryFromJSONFile(testLogger(t), f), "%s must replay under the versioned change", f)
		replayed++
	}
	require.GreaterOrEqual(t, replayed, 6, "every call history of the baseline is replayed")
}

// encryptedSecret is in the arguments of encrypted-ask-approve and the
// tool's error of encrypted-failed (workflows/testdata/record/encrypted.go).
const encryptedSecret = "SECRET-replay-encrypted"

// TestTheEncryptedRecordingsAreEncrypted: every payload of the
// encrypted-* histories but their search attributes (which Temporal never
// encodes) is ciphertext under the test key; the secret is inside them,
// found only by decrypting; and they replay only with the keyring, so the
// keyed replay above is what makes them pass.
func TestTheEncryptedRecordingsAreEncrypted(t *testing.T) {
	ring := testKeyring(t)
	for _, c := range []struct {
		name       string
		holdSecret bool
	}{
		{"encrypted-ask-approve", true},
		{"encrypted-failed", true},
		{"encrypted-session", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join("testdata", c.name+".json")
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			hist, err := client.HistoryFromJSON(bytes.NewReader(raw), client.HistoryJSONOptions{})
			require.NoError(t, err)

			var sealed, indexed []*commonpb.Payload
			for _, ev := range hist.GetEvents() {
				eachPayload(ev.ProtoReflect(), false, func(p *commonpb.Payload, searchAttribute bool) {
					if searchAttribute {
						indexed = append(indexed, p)
					} else {
						sealed = append(sealed, p)
					}
				})
			}
			require.GreaterOrEqual(t, len(sealed), 10, "the history's inputs, results, memos and markers")
			// What a reader of the history sees: the JSON (failure
			// messages are plain strings there) and every payload's
			// data, decoded from base64.
			seen := string(raw)
			for _, p := range sealed {
				require.Equal(t, keyring.EncodingEncrypted, string(p.GetMetadata()[converter.MetadataEncoding]), "a payload of %s in plaintext: %s", f, p)
				require.Equal(t, ring.Current(), string(p.GetMetadata()[keyring.MetadataKeyID]))
				seen += string(p.GetData())
			}
			for _, p := range indexed {
				seen += string(p.GetData())
			}
			require.NotContains(t, seen, encryptedSecret)

			opened, err := ring.Codec().Decode(sealed)
			require.NoError(t, err)
			var plain string
			for _, p := range opened {
				require.False(t, keyring.Encrypted(p))
				plain += string(p.GetData())
			}
			if c.holdSecret {
				require.Contains(t, plain, encryptedSecret, "the secret is recorded, encrypted")
			}

			err = newReplayer(ToolCallWorkflow).ReplayWorkflowHistoryFromJSONFile(testLogger(t), f)
			require.Error(t, err, "%s replays without the keys", f)
			if c.holdSecret {
				// A call's first marker (its policy's local activity)
				// does not decode; the session's input does not either,
				// and it ends before the timer its history has.
				require.ErrorContains(t, err, keyring.EncodingEncrypted)
			}
		})
	}
}

// eachPayload calls visit with every payload in m, saying whether it is a
// search attribute's.
func eachPayload(m protoreflect.Message, searchAttribute bool, visit func(p *commonpb.Payload, searchAttribute bool)) {
	switch x := m.Interface().(type) {
	case *commonpb.Payload:
		visit(x, searchAttribute)
		return
	case *commonpb.SearchAttributes:
		searchAttribute = true
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					eachPayload(mv.Message(), searchAttribute, visit)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := 0; i < v.List().Len(); i++ {
					eachPayload(v.List().Get(i).Message(), searchAttribute, visit)
				}
			}
		case fd.Message() != nil:
			eachPayload(v.Message(), searchAttribute, visit)
		}
		return true
	})
}

// TestTheJoinedRecordingsTookTheNewPath: joined-approve's join names the
// room the worker picked, and its room (joined-approve-room) was started at
// this release's revision and took the registration as register-all.
func TestTheJoinedRecordingsTookTheNewPath(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	var joined []activities.Joined
	for _, ev := range recordedEvents(t, "joined-approve") {
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "LocalActivity" {
			var la struct{ ActivityType string }
			require.NoError(t, dc.FromPayloads(m.GetDetails()["data"], &la))
			if la.ActivityType == "JoinWaitingRoom" {
				var j activities.Joined
				require.NoError(t, dc.FromPayloads(m.GetDetails()["result"], &j))
				joined = append(joined, j)
			}
		}
	}
	require.Len(t, joined, 1)
	require.NotNil(t, joined[0].Room, "the join names its room")
	require.Equal(t, RoomOf("joined-approve"), *joined[0].Room, "a lone call's batch goes to the room of its ID, which the recorder reads")

	var in RoomInput
	var signals []string
	for _, ev := range recordedEvents(t, "joined-approve-room") {
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			require.NoError(t, dc.FromPayloads(a.GetInput(), &in))
		}
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
			signals = append(signals, a.GetSignalName())
		}
	}
	require.Equal(t, RoomRevision, in.Revision)
	require.Equal(t, []string{SignalRegisterAll, SignalDone}, signals)
}

// recordedEvents are the events of a recorded history.
func recordedEvents(t *testing.T, name string) []*historypb.HistoryEvent {
	raw, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)
	hist, err := client.HistoryFromJSON(bytes.NewReader(raw), client.HistoryJSONOptions{})
	require.NoError(t, err)
	return hist.GetEvents()
}

// TestTheCheckedRecordingsTookTheNewPath: checked-auto and checked-approve
// (workflows/testdata/record/checked.go) ran their tool as RunToolChecked
// with no BeforeCall before it and no AfterCall after it (the auto-approved
// call's evaluation ran its before-call checks, the approved call's tool
// activity its): their replay above is the replay of that path, not of
// the one before it.
func TestTheCheckedRecordingsTookTheNewPath(t *testing.T) {
	for name, want := range map[string][]string{
		"checked-auto":    {"LA Evaluate", "LA AppendLedger", "RunToolChecked", "LA AppendLedger"},
		"checked-approve": {"LA Evaluate", "LA AppendLedger", "LA JoinWaitingRoom", "LA AppendLedger", "RunToolChecked", "LA AppendLedger"},
	} {
		t.Run(name, func(t *testing.T) {
			var steps []string
			for _, ev := range recordedEvents(t, name) {
				if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
					steps = append(steps, a.GetActivityType().GetName())
				}
				if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "LocalActivity" {
					var la struct{ ActivityType string }
					require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["data"], &la))
					steps = append(steps, "LA "+la.ActivityType)
				}
			}
			require.Equal(t, want, steps)
		})
	}
}
