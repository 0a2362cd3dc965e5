package activities

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/tool"
)

func TestAToolsLatestProgressGoesOutWithTheStartMark(t *testing.T) {
	var mu sync.Mutex
	var sent []ToolHeartbeat
	hb := newStepHeartbeat(ToolHeartbeat{Started: true})
	ctx := tool.WithProgress(context.Background(), hb.report)
	stop := hb.run(ctx, 0, func(d ToolHeartbeat) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, d)
	})
	defer stop()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(sent)
	}

	tool.ReportProgress(ctx, tool.Progress{Progress: 1, Total: 3, Message: "step 1"})
	require.Eventually(t, func() bool { return count() == 1 }, time.Second, time.Millisecond, "the first progress goes out at once")
	for i := 2; i <= 3; i++ {
		tool.ReportProgress(ctx, tool.Progress{Progress: float64(i), Total: 3, Message: fmt.Sprintf("step %d", i)})
	}
	require.Eventually(t, func() bool { return count() == 2 }, progressEvery+time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, sent, 2, "reports in between are spaced: the server hears the latest")
	for _, d := range sent {
		assert.True(t, d.Started, "progress never erases the start mark")
	}
	assert.Equal(t, "step 1", sent[0].Progress.Message)
	assert.Equal(t, tool.Progress{Progress: 3, Total: 3, Message: "step 3"}, *sent[1].Progress)
}
