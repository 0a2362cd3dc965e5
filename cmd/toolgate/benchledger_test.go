package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
)

// One appending process of a ledger load: it appends, says how many and
// how fast, and the ledger it loaded verifies.
func TestBenchLedgerAppendsAndSaysHowFast(t *testing.T) {
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "bench")
	require.NoError(t, err)
	db := filepath.Join(dir, "ledger.db")
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"bench", "ledger", "--ledger", db, "--ledger-key", filepath.Join(dir, "ledger.key"),
		"--appenders", "4", "--seconds", "0.3", "--name", "p1"}, &out, &errs)
	require.Equal(t, 0, code, errs.String())
	var r struct {
		Name     string  `json:"name"`
		Appended int64   `json:"appended"`
		PerSec   float64 `json:"per_sec"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
	assert.Equal(t, "p1", r.Name)
	assert.Positive(t, r.Appended)
	assert.Positive(t, r.PerSec)

	l, err := ledger.Open(context.Background(), ledger.Options{DSN: db, Keys: keys})
	require.NoError(t, err)
	defer l.Close()
	size, err := l.Size(context.Background())
	require.NoError(t, err)
	assert.Equal(t, r.Appended, size, "every append it counted is in the log")
	_, err = l.SignCheckpoint(context.Background())
	require.NoError(t, err)
	_, err = l.VerifyStore(context.Background(), nil)
	require.NoError(t, err)

	out.Reset()
	errs.Reset()
	code = run(context.Background(), []string{"bench", "ledger", "--ledger", db}, &out, &errs)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs.String(), "--ledger and --ledger-key are required")
}
