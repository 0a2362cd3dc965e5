package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAgeReadsDaysAndDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "1h30m": 90 * time.Minute, "0": 0, "0d": 0} {
		var a age
		require.NoError(t, a.Set(in), in)
		assert.Equal(t, want, time.Duration(a), in)
	}
	for _, bad := range []string{"30days", "-1d", "x", "-5m", "d"} {
		var a age
		assert.Error(t, a.Set(bad), bad)
	}
	var a age
	assert.Contains(t, a.Set("soon").Error(), `"soon" is not a span of time (say 30d, 12h or 90m)`)
	assert.Equal(t, "30d", (func() *age { x := age(30 * 24 * time.Hour); return &x })().String())
	assert.Equal(t, "0", a.String())
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	assert.True(t, age(0).since(now).IsZero(), "zero means no limit")
	assert.Equal(t, now.Add(-48*time.Hour), age(48*time.Hour).since(now))
}
