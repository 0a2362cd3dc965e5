package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/sandbox"
)

// TestBenchQuick runs `toolgate bench --quick` once as a smoke test: it
// must measure every case and report them. The numbers are not judged.
func TestBenchQuick(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, "bench", "--quick", "--log-level", "warn", "--json", jsonPath)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s\n%s", stdout.String(), stderr.String())

	// The report is on stdout; the worker's log lines go to stderr.
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	assert.Regexp(t, regexp.MustCompile(`^ratios: auto/base_p50=[0-9.]+ sticky/base_p50=[0-9.]+ decide/signal_p50=[0-9.]+ decide/signal_activity_p50=[0-9.]+ throughput/base=[0-9.]+ park_one_session/base_rate=[0-9.]+ fanout/base_time=[0-9.]+ parked_kib_per_call=[0-9.]+ encrypted/plain_p50=[0-9.]+ throughput_encrypted/plain=[0-9.]+ traced/plain_p50=[0-9.]+ sandbox/unsandboxed_p50=[0-9.]+ hook_http/base_p50=[0-9.]+ hook_command/base_p50=[0-9.]+ auto_api/base_api_p50=[0-9.]+$`), lines[len(lines)-1])

	data, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	type latency struct {
		N   int     `json:"n"`
		P50 float64 `json:"p50_ms"`
	}
	var r struct {
		Baseline   latency `json:"baseline"`
		Auto       latency `json:"auto"`
		AutoLedger latency `json:"auto_ledger"`
		// The auto-approved call with payload encryption, and its ratios.
		AutoEncrypted       latency `json:"auto_encrypted"`
		AutoNotIdempotent   latency `json:"auto_not_idempotent"`
		AutoEncryptedPerSec float64 `json:"auto_encrypted_per_sec"`
		// The auto-approved call with traces exported over OTLP, and what
		// reached the bench's receiver.
		AutoTraced latency `json:"auto_traced"`
		Traced     struct {
			Calls          int64 `json:"calls"`
			TraceRequests  int64 `json:"trace_requests"`
			TraceBytes     int64 `json:"trace_bytes"`
			MetricRequests int64 `json:"metric_requests"`
			CheckedSpans   int   `json:"checked_spans"`
		} `json:"traced"`
		Ratios struct {
			AutoEncryptedAutoP50     float64 `json:"auto_encrypted_auto_p50"`
			ThroughputEncryptedPlain float64 `json:"throughput_encrypted_plain"`
			AutoTracedAutoP50        float64 `json:"auto_traced_auto_p50"`
		} `json:"ratios"`
		Ledger struct {
			AppendPerSec float64 `json:"append_per_sec"`
		} `json:"ledger"`
		// The coding-agent hooks: TestMain builds toolgate-hook next to
		// toolgate, so the command case is measured too.
		Hooks struct {
			HTTP, Command, Baseline latency
			AutoAPI                 latency `json:"auto_api"`
			BaselineAPI             latency `json:"baseline_api"`
			CommandMissing          string  `json:"command_missing"`
		} `json:"hooks"`
		// The shell tool sandboxed and unsandboxed, and the sandbox's start.
		Sandbox struct {
			LandlockABI     int     `json:"landlock_abi"`
			Skipped         string  `json:"skipped"`
			Sandboxed       latency `json:"sandboxed"`
			Unsandboxed     latency `json:"unsandboxed"`
			SandboxedMean   float64 `json:"sandboxed_mean_ms"`
			UnsandboxedMean float64 `json:"unsandboxed_mean_ms"`
			Start, Exec     latency
		} `json:"sandbox"`
		Sticky         latency `json:"sticky"`
		Decide         latency `json:"decide"`
		SignalBaseline latency `json:"signal_baseline"`
		SignalActivity latency `json:"signal_activity_baseline"`
		BaselinePerSec float64 `json:"baseline_per_sec"`
		AutoPerSec     float64 `json:"auto_per_sec"`
		Parked         struct {
			Calls        int     `json:"calls"`
			DrainSeconds float64 `json:"drain_seconds"`
		}
		OneSession struct {
			Calls             int     `json:"calls"`
			FanoutSeconds     float64 `json:"fanout_seconds"`
			BaseFanoutSeconds float64 `json:"base_fanout_seconds"`
			SessionRuns       int     `json:"session_runs"`
			RoomRuns          int     `json:"room_runs"`
			SessionTerminated bool    `json:"session_terminated"`
		} `json:"one_session"`
		Pending struct {
			Waiting   int     `json:"waiting"`
			First     latency `json:"first_page"`
			FirstCold latency `json:"first_page_cold"`
			OneGroup  latency `json:"first_page_one_group"`
			Bare      latency `json:"bare_list"`
		} `json:"pending_list"`
	}
	require.NoError(t, json.Unmarshal(data, &r))
	assert.Empty(t, r.Hooks.CommandMissing, "toolgate-hook sits next to toolgate")
	for name, l := range map[string]latency{"baseline": r.Baseline, "auto": r.Auto, "auto with the ledger": r.AutoLedger, "auto encrypted": r.AutoEncrypted, "auto traced": r.AutoTraced, "auto, tool not idempotent": r.AutoNotIdempotent, "sticky": r.Sticky, "decide": r.Decide, "signal": r.SignalBaseline, "signal+activity": r.SignalActivity,
		"HTTP hook": r.Hooks.HTTP, "command hook": r.Hooks.Command, "hooks' baseline": r.Hooks.Baseline,
		"auto over the API": r.Hooks.AutoAPI, "baseline over the API": r.Hooks.BaselineAPI} {
		assert.Positive(t, l.N, name)
		assert.Positive(t, l.P50, name)
	}
	assert.Positive(t, r.BaselinePerSec)
	assert.Positive(t, r.Ledger.AppendPerSec, "the ledger's append rate")
	assert.Contains(t, stdout.String(), "toolgate: auto-approved call, ledger")
	assert.Contains(t, stdout.String(), "toolgate: auto-approved call, encrypted")
	assert.Contains(t, stdout.String(), "toolgate: auto, tool not idempotent")
	assert.Positive(t, r.AutoEncryptedPerSec, "the throughput encrypted")
	assert.Positive(t, r.Ratios.AutoEncryptedAutoP50)
	assert.Positive(t, r.Ratios.ThroughputEncryptedPlain)
	assert.Contains(t, stdout.String(), "toolgate: auto-approved call, traced")
	assert.Positive(t, r.Ratios.AutoTracedAutoP50)
	// The check's call: its execute_tool span and the SDK interceptor's
	// StartWorkflow, at the least, in one trace.
	assert.GreaterOrEqual(t, r.Traced.CheckedSpans, 2, "the checked call's trace reached the receiver")
	assert.Equal(t, int64(20+1+30), r.Traced.Calls, "warm-up, check and latency case")
	assert.Positive(t, r.Traced.TraceRequests, "the traced worker exported spans")
	assert.Greater(t, r.Traced.TraceBytes, r.Traced.Calls*100, "every traced call's spans went out")
	assert.Positive(t, r.Traced.MetricRequests, "and its metrics")
	assert.Positive(t, r.AutoPerSec)
	assert.Equal(t, 50, r.Parked.Calls)
	assert.Positive(t, r.Parked.DrainSeconds)
	assert.Equal(t, 100, r.OneSession.Calls, "one session held every call and released them")
	assert.Positive(t, r.OneSession.FanoutSeconds)
	assert.Positive(t, r.OneSession.BaseFanoutSeconds)
	assert.Positive(t, r.OneSession.SessionRuns)
	assert.Positive(t, r.OneSession.RoomRuns, "the calls waited in the session's rooms")
	assert.False(t, r.OneSession.SessionTerminated)
	assert.Equal(t, 200, r.Pending.Waiting, "the pending list's first page was timed with the calls waiting")
	for name, l := range map[string]latency{"first page": r.Pending.First, "first page, new client": r.Pending.FirstCold, "first page, one group": r.Pending.OneGroup, "bare list": r.Pending.Bare} {
		assert.Positive(t, l.N, name)
		assert.Positive(t, l.P50, name)
	}
	assert.Contains(t, stdout.String(), "pending list, 200 waiting")

	require.Positive(t, sandbox.ABI(), "the sandbox case needs a kernel with Landlock")
	assert.Equal(t, sandbox.ABI(), r.Sandbox.LandlockABI)
	assert.Empty(t, r.Sandbox.Skipped)
	for name, l := range map[string]latency{"shell sandboxed": r.Sandbox.Sandboxed, "shell unsandboxed": r.Sandbox.Unsandboxed, "the sandbox's start": r.Sandbox.Start, "/bin/true": r.Sandbox.Exec} {
		assert.Equal(t, 30, l.N, name)
		assert.Positive(t, l.P50, name)
	}
	assert.Positive(t, r.Sandbox.SandboxedMean)
	assert.Positive(t, r.Sandbox.UnsandboxedMean)
	assert.Contains(t, stdout.String(), "shell tool `echo hi`, auto-approved call")
}

// TestBenchCasesAndRepeats runs two cases of `toolgate bench --quick`
// twice: only those cases are measured, each run writes its own JSON
// file, and the run ends with each measured ratio's spread.
func TestBenchCasesAndRepeats(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, "bench", "--quick", "--log-level", "warn", "--cases", "decide,hooks", "--repeat", "2",
		"--json", filepath.Join(dir, "bench.json"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s\n%s", stdout.String(), stderr.String())
	out := stdout.String()

	for i, name := range []string{"bench-1.json", "bench-2.json"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err, "run %d's figures", i+1)
		var r struct {
			Auto   struct{ N int } `json:"auto"`
			Decide struct{ N int } `json:"decide"`
			Ratios struct {
				DecideSignalActivityP50 float64 `json:"decide_signal_activity_p50"`
				AutoAPIBaseAPIP50       float64 `json:"auto_api_base_api_p50"`
				ParkOneSessionBaseRate  float64 `json:"park_one_session_base_rate"`
			} `json:"ratios"`
		}
		require.NoError(t, json.Unmarshal(data, &r))
		assert.Positive(t, r.Decide.N, "decide was measured in run %d", i+1)
		assert.Positive(t, r.Ratios.DecideSignalActivityP50)
		assert.Positive(t, r.Ratios.AutoAPIBaseAPIP50)
		assert.Zero(t, r.Auto.N, "the latency case did not run")
		assert.Zero(t, r.Ratios.ParkOneSessionBaseRate, "nor the one-session case")
	}
	assert.Contains(t, out, "— run 1 of 2 —")
	assert.Contains(t, out, "— run 2 of 2 —")
	assert.Contains(t, out, "toolgate: decide → result")
	assert.NotContains(t, out, "toolgate: auto-approved call ", "no row for a case that did not run")
	assert.NotContains(t, out, "one session,")
	assert.Regexp(t, regexp.MustCompile(`(?m)^decide_signal_activity_p50 +[0-9.]+ +± *[0-9.]+ % +[0-9.]+ [0-9.]+$`), out)
	assert.Regexp(t, regexp.MustCompile(`(?m)^auto_api_base_api_p50 +[0-9.]+ +± *[0-9.]+ %`), out)
	assert.NotRegexp(t, regexp.MustCompile(`(?m)^park_one_session_base_rate`), out)

	cmd = exec.Command(binary, "bench", "--quick", "--cases", "decide,onesession")
	msg, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(msg), `unknown bench case "onesession" (the cases: latency, decide, throughput, parked, one-session, pending, ledger, hooks, sandbox)`)
}
