package websession

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/sqldb"
)

// Sealer encrypts and decrypts the sessions a database store keeps (a
// keyring.Keyring).
type Sealer interface {
	Seal(purpose string, plaintext []byte) (keyID string, sealed []byte, err error)
	Open(purpose, keyID string, sealed []byte) ([]byte, error)
}

// SealPurpose is the keyring purpose of sealed sessions; each is also
// bound to its key (purpose "inbox-session/<hex key>").
const SealPurpose = "inbox-session"

// Options configure a database store.
type Options struct {
	// DSN is a postgres:// (or postgresql://) URL, or a SQLite file path,
	// optionally written "sqlite:PATH"; the table is created when missing.
	// Required.
	DSN string
	// Sealer seals every session's data. Required: a database store never
	// keeps sessions in plaintext.
	Sealer Sealer
	// Now is the clock sessions expire by. Default time.Now.
	Now func() time.Time
	// Logger is told when Open tightens the permissions of an existing
	// SQLite file that group or others could use. Optional.
	Logger *zap.Logger
}

// DB is a Store in a SQL database, table inbox_sessions: every process
// that opens the same database shares its sessions.
type DB struct {
	db     *sqldb.DB
	sealer Sealer
	now    func() time.Time
}

var _ Store = (*DB)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS inbox_sessions (
	id_sha256 BLOB PRIMARY KEY,
	key_id TEXT NOT NULL,
	sealed BLOB NOT NULL,
	expires_ms BIGINT NOT NULL,
	version BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_sessions_expires ON inbox_sessions (expires_ms);
`

// Open opens (and creates, if need be) the sessions table of the database
// o.DSN names.
func Open(ctx context.Context, o Options) (*DB, error) {
	if o.Sealer == nil {
		return nil, errors.New("websession: a database store needs a keyring to seal sessions with")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// A session lost to a power cut is a sign-in to make again, so commits
	// need not wait for the disk (the ledger's do).
	db, err := sqldb.Open(ctx, o.DSN, sqldb.Options{Synchronous: "NORMAL", Schema: schema, Logger: o.Logger})
	var dbErr *sqldb.Error
	switch {
	case errors.As(err, &dbErr) && dbErr.Schema:
		return nil, fmt.Errorf("sessions database %s: create the table: %w", dbErr.Where, dbErr.Err)
	case errors.As(err, &dbErr):
		return nil, fmt.Errorf("sessions database %s: %w", dbErr.Where, dbErr.Err)
	case err != nil:
		return nil, fmt.Errorf("websession: %w", err)
	}
	return &DB{db: db, sealer: o.Sealer, now: o.Now}, nil
}

// Where names the database, for messages (no password).
func (s *DB) Where() string { return s.db.Where() }

// Close implements Store.
func (s *DB) Close() error { return s.db.Close() }

// Create implements Store; it deletes the expired sessions first.
func (s *DB) Create(ctx context.Context, id string, data []byte, expires time.Time) error {
	now := s.now()
	if _, err := s.db.ExecContext(ctx, s.db.Q("DELETE FROM inbox_sessions WHERE expires_ms <= ?"), now.UnixMilli()); err != nil {
		return fmt.Errorf("sessions database %s: delete expired sessions: %w", s.db.Where(), err)
	}
	k := key(id)
	keyID, sealed, err := s.sealer.Seal(purpose(k[:]), data)
	if err != nil {
		return fmt.Errorf("seal a session: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, s.db.Q("INSERT INTO inbox_sessions (id_sha256, key_id, sealed, expires_ms, version) VALUES (?, ?, ?, ?, ?)"),
		k[:], keyID, sealed, expires.UnixMilli(), FirstVersion); err != nil {
		return fmt.Errorf("sessions database %s: store a session: %w", s.db.Where(), err)
	}
	return nil
}

// Get implements Store. A session that does not open (sealed with a key
// the keyring lacks, or altered in the database) is an error, not
// ErrNotFound: it is left where it is, and nobody is signed in by it.
func (s *DB) Get(ctx context.Context, id string) (Session, error) {
	k := key(id)
	var keyID string
	var sealed []byte
	var expiresMS, version int64
	err := s.db.QueryRowContext(ctx, s.db.Q("SELECT key_id, sealed, expires_ms, version FROM inbox_sessions WHERE id_sha256 = ?"), k[:]).
		Scan(&keyID, &sealed, &expiresMS, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("sessions database %s: read a session: %w", s.db.Where(), err)
	}
	if expiresMS <= s.now().UnixMilli() {
		if _, err := s.db.ExecContext(ctx, s.db.Q("DELETE FROM inbox_sessions WHERE id_sha256 = ? AND version = ?"), k[:], version); err != nil {
			return Session{}, fmt.Errorf("sessions database %s: delete an expired session: %w", s.db.Where(), err)
		}
		return Session{}, ErrNotFound
	}
	return s.open(k[:], keyID, sealed, expiresMS, version)
}

func (s *DB) open(k []byte, keyID string, sealed []byte, expiresMS, version int64) (Session, error) {
	data, err := s.sealer.Open(purpose(k), keyID, sealed)
	if err != nil {
		return Session{}, fmt.Errorf("open a stored session: %w", err)
	}
	return Session{Data: data, Expires: time.UnixMilli(expiresMS), Version: version}, nil
}

// Update implements Store.
func (s *DB) Update(ctx context.Context, id string, version int64, data []byte, expires time.Time) (int64, error) {
	k := key(id)
	keyID, sealed, err := s.sealer.Seal(purpose(k[:]), data)
	if err != nil {
		return 0, fmt.Errorf("seal a session: %w", err)
	}
	res, err := s.db.ExecContext(ctx, s.db.Q("UPDATE inbox_sessions SET key_id = ?, sealed = ?, expires_ms = ?, version = version + 1 WHERE id_sha256 = ? AND version = ? AND expires_ms > ?"),
		keyID, sealed, expires.UnixMilli(), k[:], version, s.now().UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("sessions database %s: update a session: %w", s.db.Where(), err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, ErrStale
	}
	return version + 1, nil
}

// Delete implements Store.
func (s *DB) Delete(ctx context.Context, id string) error {
	k := key(id)
	if _, err := s.db.ExecContext(ctx, s.db.Q("DELETE FROM inbox_sessions WHERE id_sha256 = ?"), k[:]); err != nil {
		return fmt.Errorf("sessions database %s: delete a session: %w", s.db.Where(), err)
	}
	return nil
}

// Take implements Store: one DELETE … RETURNING, so only one of two
// concurrent Takes gets the row.
func (s *DB) Take(ctx context.Context, id string) (Session, error) {
	k := key(id)
	var keyID string
	var sealed []byte
	var expiresMS, version int64
	err := s.db.QueryRowContext(ctx, s.db.Q("DELETE FROM inbox_sessions WHERE id_sha256 = ? RETURNING key_id, sealed, expires_ms, version"), k[:]).
		Scan(&keyID, &sealed, &expiresMS, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("sessions database %s: take a session: %w", s.db.Where(), err)
	}
	if expiresMS <= s.now().UnixMilli() {
		return Session{}, ErrNotFound
	}
	return s.open(k[:], keyID, sealed, expiresMS, version)
}

// purpose binds a sealed session to its key: a row copied under another
// key does not open.
func purpose(k []byte) string { return SealPurpose + "/" + hex.EncodeToString(k) }
