package devserver

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/server/common/dynamicconfig"
)

// A forced search attribute refresh reads the database once per row a
// visibility listing returns: it must end, and only it.
func TestSearchAttributeRefreshIsForcedUntilStopped(t *testing.T) {
	dc, stopForcing := newDynamicConfig(0)
	forced := dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key()
	require.Len(t, dc.GetValue(forced), 1)
	assert.Equal(t, true, dc.GetValue(forced)[0].Value, "forced while Start registers attributes")

	stopForcing()
	stopForcing()
	assert.Empty(t, dc.GetValue(forced), "the server default (not forced) once stopped")
	for key, want := range dynamicConfig() {
		got := dc.GetValue(key)
		require.Len(t, got, 1, "%s", key)
		assert.Equal(t, want, got[0].Value, "%s is still set", key)
	}
}
