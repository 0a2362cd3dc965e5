package workflows

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The histories under testdata/ were recorded from the embedded server by
// `go run ./workflows/testdata/record` (run from the module root). A
// change to the workflows that makes one of them fail to replay would
// break every call or session running when the change is deployed: guard
// the change with workflow.GetVersion, move the histories it changes into
// testdata/<change ID>/ (recorded before it), and record the new ones.

// recordedScenarios must all be present: a deleted recording would
// otherwise silently shrink the check.
var recordedScenarios = []string{
	"auto-approve",
	"ask-approve",
	"ask-approve-notices",
	"sticky-fan-out-call",
	"sticky-fan-out-session",
	"timeout",
	"session-continue-as-new",
	"session-continue-as-new-next-run",
	"sticky-lookup",
}

// newReplayer returns a replayer with both workflows registered under
// their type names; callWorkflow stands in for ToolCallWorkflow.
func newReplayer(callWorkflow func(workflow.Context, CallInput) (Result, error)) worker.WorkflowReplayer {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(callWorkflow, workflow.RegisterOptions{Name: ToolCallWorkflowType})
	r.RegisterWorkflowWithOptions(ToolgateSession, workflow.RegisterOptions{Name: SessionWorkflowType})
	r.RegisterWorkflowWithOptions(LegacySessionWorkflow, workflow.RegisterOptions{Name: LegacySessionWorkflowType})
	r.RegisterWorkflowWithOptions(NoticesWorkflow, workflow.RegisterOptions{Name: NoticesWorkflowType})
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
	require.Subset(t, names, recordedScenarios, "a recorded history is missing; re-record with `go run ./workflows/testdata/record`")
	older, err := filepath.Glob(filepath.Join("testdata", "*", "*.json"))
	require.NoError(t, err)
	for _, f := range older {
		files = append(files, f)
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(f, "testdata"+string(filepath.Separator)), ".json"))
	}

	for i, f := range files {
		t.Run(names[i], func(t *testing.T) {
			t.Parallel()
			err := newReplayer(ToolCallWorkflow).ReplayWorkflowHistoryFromJSONFile(testLogger(t), f)
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
