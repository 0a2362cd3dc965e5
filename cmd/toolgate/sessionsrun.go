package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/websession"
)

// sessionFlags say where the inbox keeps its sign-ins.
type sessionFlags struct {
	dsn string
}

// sessionsMemory is the --sessions-db value that keeps sign-ins in this
// process's memory.
const sessionsMemory = "memory"

func (f *sessionFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dsn, "sessions-db", os.Getenv("TOOLGATE_SESSIONS_DB"),
		"where the inbox keeps its sign-ins, so that they outlive a restart and every replica sees them: a postgres:// URL or a SQLite file; "+
			"sealed with the payload keyring. \"memory\" keeps them in this process: they end with it and no other replica sees them "+
			"(env TOOLGATE_SESSIONS_DB; default the --ledger database, else memory)")
}

// openSessions opens the store of the inbox's sign-ins: the database the
// flags name, else the ledger's (ledgerDSN), else none (nil: the server
// keeps them in memory). A database store seals the sessions with the
// payload keyring: without one (--insecure-plaintext-payloads) a database
// named by --sessions-db is refused, and the ledger's is not used.
func (a *app) openSessions(ctx context.Context, f sessionFlags, ledgerDSN string) (websession.Store, error) {
	dsn, named := f.dsn, f.dsn != ""
	if !named && ledgerDSN != ledgerOff {
		dsn = ledgerDSN
	}
	ring := a.conn.keys.ring
	switch {
	case dsn == "" || dsn == sessionsMemory:
		a.logger.Warn("Inbox sign-ins are kept in this process's memory: a restart signs everyone out, and other replicas do not see them; give --sessions-db or --ledger (docs/production.md)")
		return nil, nil
	case ring == nil && named:
		return nil, usageError("--sessions-db keeps the inbox's sign-ins sealed with the payload keyring, which --insecure-plaintext-payloads turns off: give --keys FILE, or --sessions-db %s to keep them in this process's memory", sessionsMemory)
	case ring == nil:
		a.logger.Warn("Inbox sign-ins are kept in this process's memory, not in the ledger's database: they are sealed there with the payload keyring, which --insecure-plaintext-payloads turns off; a restart signs everyone out, and other replicas do not see them")
		return nil, nil
	}
	s, err := websession.Open(ctx, websession.Options{DSN: dsn, Sealer: ring, Logger: a.logger.Named("sessions")})
	if err != nil {
		return nil, err
	}
	a.logger.Info("Inbox sign-ins", zap.String("at", s.Where()), zap.Bool("ledgerDatabase", !named))
	return s, nil
}
