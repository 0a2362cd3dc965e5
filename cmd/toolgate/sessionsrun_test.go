package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/websession"
)

func TestInboxSessionsGoToTheLedgerDatabaseOrTheNamedOne(t *testing.T) {
	ctx := context.Background()
	ring, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	core, logs := observer.New(zap.InfoLevel)
	a := &app{logger: zap.New(core)}
	a.conn.keys.ring = ring
	ledgerDB, named := filepath.Join(t.TempDir(), "ledger.db"), filepath.Join(t.TempDir(), "sessions.db")

	for _, c := range []struct {
		flag, ledger, at string
	}{
		{"", ledgerDB, ledgerDB},
		{named, ledgerDB, named},
		{named, ledgerOff, named},
		{"sqlite:" + named, "", named},
	} {
		s, err := a.openSessions(ctx, sessionFlags{dsn: c.flag}, c.ledger)
		require.NoError(t, err)
		require.IsType(t, &websession.DB{}, s)
		assert.Equal(t, c.at, s.(*websession.DB).Where(), "%+v", c)
		require.NoError(t, s.Close())
	}

	for _, c := range []struct{ flag, ledger string }{{"", ""}, {"", ledgerOff}, {sessionsMemory, ledgerDB}} {
		logs.TakeAll()
		s, err := a.openSessions(ctx, sessionFlags{dsn: c.flag}, c.ledger)
		require.NoError(t, err)
		assert.Nil(t, s, "memory: %+v", c)
		warned := logs.FilterMessageSnippet("a restart signs everyone out, and other replicas do not see them").Len()
		assert.Equal(t, 1, warned, "%+v says what memory costs", c)
	}
}

func TestInboxSessionsInADatabaseNeedTheKeyring(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zap.InfoLevel)
	a := &app{logger: zap.New(core)} // --insecure-plaintext-payloads: no keyring
	_, err := a.openSessions(ctx, sessionFlags{dsn: filepath.Join(t.TempDir(), "sessions.db")}, ledgerOff)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--insecure-plaintext-payloads turns off: give --keys FILE, or --sessions-db memory")

	s, err := a.openSessions(ctx, sessionFlags{}, filepath.Join(t.TempDir(), "ledger.db"))
	require.NoError(t, err, "the ledger's database is a default, not a demand: without keys, memory")
	assert.Nil(t, s)
	assert.Equal(t, 1, logs.FilterMessageSnippet("not in the ledger's database").Len())
}
