package rules

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/toolgate/toolgate/policy"
)

const (
	goodPolicy   = "default: allow\n"
	brokenPolicy = "default: allow\nrules:\n  - name: r\n    tool: x\n    when: args.a +\n    action: deny\n"
	fixedPolicy  = "default: deny\n"
)

// writeFile replaces the file atomically, as the Reloader's doc asks.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func TestReloader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, goodPolicy)
	r, err := NewReloader(path, Options{}, nil)
	require.NoError(t, err)
	good := r.Version()
	assert.Equal(t, good, r.Current().Version())
	assert.Equal(t, good, policy.VersionOf(r))
	assert.NoError(t, r.Reload(), "unchanged file")

	writeFile(t, path, brokenPolicy)
	err = r.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "policy.yaml:5:")
	assert.Equal(t, good, r.Current().Version(), "the last good policy keeps serving")
	assert.Equal(t, ActionAllow, r.Evaluate(call("x", `{"a":1}`)).Action)
	assert.Error(t, r.Reload(), "still broken")

	writeFile(t, path, fixedPolicy)
	require.NoError(t, r.Reload())
	assert.NotEqual(t, good, r.Version())
	assert.Equal(t, r.Current().Version(), r.Version())
	_, err = r.EvaluateApproval(context.Background(), call("x", `{}`))
	_, denied := policy.AsDeny(err)
	assert.True(t, denied, "the fixed file is in force")
}

func TestReloaderSameSizeSameTick(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, "default: allow\n")
	r, err := NewReloader(path, Options{}, nil)
	require.NoError(t, err)
	// Same size, same modification time: only the hash tells them apart.
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte("default: deny \n"[:len("default: allow\n")]), 0o600))
	require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	require.NoError(t, r.Reload())
	assert.Equal(t, ActionDeny, r.Evaluate(call("x", `{}`)).Action)
}

func TestNewReloaderNeedsAGoodFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, brokenPolicy)
	_, err := NewReloader(path, Options{}, nil)
	assert.Error(t, err)
	_, err = NewReloader(path+".missing", Options{}, nil)
	assert.Error(t, err)
}

func TestReloaderRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, goodPolicy)
	core, logs := observer.New(zap.InfoLevel)
	r, err := NewReloader(path, Options{}, zap.New(core))
	require.NoError(t, err)
	good := r.Version()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, 5*time.Millisecond)
	}()

	writeFile(t, path, brokenPolicy)
	require.Eventually(t, func() bool {
		return logs.FilterMessage("policy file refused; keeping the last good version").Len() > 0
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, good, r.Version())

	writeFile(t, path, fixedPolicy)
	require.Eventually(t, func() bool { return r.Version() != good }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return logs.FilterMessage("policy reloaded").Len() == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1, logs.FilterMessage("policy file refused; keeping the last good version").Len(), "a bad file is logged once")

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
}
