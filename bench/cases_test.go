package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnUnknownCaseIsRefusedNamingTheCases(t *testing.T) {
	require.NoError(t, checkCases([]string{CaseDecide, CaseOneSession}))
	err := checkCases([]string{"decide", "one_session"})
	require.Error(t, err)
	assert.Equal(t, `unknown bench case "one_session" (the cases: latency, decide, throughput, parked, one-session, pending, ledger, hooks, sandbox)`, err.Error())
}

func TestOptionsRunEveryCaseUnlessLimited(t *testing.T) {
	all := Options{}
	limited := Options{Cases: []string{CaseDecide}}
	for _, c := range AllCases {
		assert.True(t, all.runs(c), c)
		assert.Equal(t, c == CaseDecide, limited.runs(c), c)
	}
}

// A ratio of a case that did not run is 0, never a division by zero.
func TestRatioOfAnUnmeasuredSideIsZero(t *testing.T) {
	assert.Equal(t, 0.0, ratio(0, 25))
	assert.Equal(t, 0.0, ratio(30, 0))
	assert.InDelta(t, 1.2, ratio(30, 25), 1e-9)
}

// The spread of each measured ratio over the runs: its median and the
// farthest run's distance from it, in percent; ratios no run measured
// are left out.
func TestSpreadsOfRepeatedRuns(t *testing.T) {
	runs := []Ratios{
		{DecideSignalActivityP50: 1.2, ParkOneSessionBaseRate: 0.8},
		{DecideSignalActivityP50: 1.5, ParkOneSessionBaseRate: 0.9},
		{DecideSignalActivityP50: 1.0, ParkOneSessionBaseRate: 0.85},
		{DecideSignalActivityP50: 1.3, ParkOneSessionBaseRate: 0.85},
	}
	spreads := spreadsOf(runs)
	require.Len(t, spreads, 2)
	assert.Equal(t, "decide_signal_activity_p50", spreads[0].Ratio)
	assert.InDelta(t, 1.25, spreads[0].Median, 1e-9)
	assert.InDelta(t, 20.0, spreads[0].MaxDev, 1e-9) // 1.0 and 1.5 both lie 0.25 from 1.25
	assert.Equal(t, []float64{1.2, 1.5, 1.0, 1.3}, spreads[0].Runs)
	assert.Equal(t, "park_one_session_base_rate", spreads[1].Ratio)
	assert.InDelta(t, 0.85, spreads[1].Median, 1e-9)
	assert.InDelta(t, 5.0/0.85, spreads[1].MaxDev, 1e-9)
}

func TestRepeatedRunsWriteNumberedJSONFiles(t *testing.T) {
	assert.Equal(t, "out/bench-2.json", numbered("out/bench.json", 2))
	assert.Equal(t, "bench-1.json", numbered("", 1))
	assert.Equal(t, "figures-3", numbered("figures", 3))
}
