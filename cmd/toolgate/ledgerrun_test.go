package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
)

func TestAWorkerWithALedgerButNoKeyIsRefusedBeforeItStarts(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"worker", "--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--temporal-address", "127.0.0.1:1"}, &stdout, &stderr)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr.String(), "--ledger needs --ledger-key FILE")
}

func TestALedgerKeyFileOthersMayReadIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.key")
	skey, _, err := ledger.NewKey("prod")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(skey+"\n"), 0o644))
	_, _, err = loadLedgerKey(path, false)
	assert.ErrorContains(t, err, "lets others read the signing key; chmod 600 it")
}

func TestCheckpointsAreAppendedToTheFileOneAfterTheOther(t *testing.T) {
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "prod")
	require.NoError(t, err)
	file := filepath.Join(dir, "checkpoints")
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys,
		Publish: []func(context.Context, ledger.Checkpoint) error{appendCheckpointTo(file)}})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	var notes [][]byte
	for _, ev := range []string{"a", "b"} {
		_, err := l.Append(ctx, ledger.Entry{Kind: ledger.KindPolicyLoaded, Event: ev})
		require.NoError(t, err)
		c, err := l.SignCheckpoint(ctx)
		require.NoError(t, err)
		notes = append(notes, c.Note)
	}
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, string(notes[0])+"\n"+string(notes[1])+"\n", string(b))
}
