// Package sqldb opens the SQL database that one DSN names, PostgreSQL or
// a SQLite file, and hides what the two write differently: BLOB columns
// and ? placeholders.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"go.uber.org/zap"
	_ "modernc.org/sqlite" // driver "sqlite", pure Go

	"github.com/toolgate/toolgate/fsmode"
)

// ErrNoDatabase is Open's error for a DSN that names no database.
var ErrNoDatabase = errors.New("no database given")

// Options configure Open.
type Options struct {
	// Synchronous is SQLite's synchronous setting, "FULL" (a commit is on
	// disk before it returns) or "NORMAL" (a power cut may lose the last
	// commits); PostgreSQL ignores it. Optional: empty leaves SQLite's
	// default.
	Synchronous string
	// Schema is run once the database is open: statements separated by
	// ";", written for SQLite; on PostgreSQL every BLOB is read as BYTEA.
	// Make them idempotent (CREATE TABLE IF NOT EXISTS …), as every Open
	// runs them. Optional.
	Schema string
	// Logger is told when Open tightens the permissions of an existing
	// SQLite file (and its -wal, -shm) that group or others could use.
	// Optional.
	Logger *zap.Logger
}

// DB is an open database: a *sql.DB, and whether it is PostgreSQL.
type DB struct {
	*sql.DB
	postgres bool
	where    string
}

// Error is an error of Open once it knows which database the DSN names:
// the database did not open, or a statement of the schema failed.
type Error struct {
	// Where names the database, as DB.Where does.
	Where string
	// Schema is true when a statement of Options.Schema failed.
	Schema bool
	// Err is the driver's error.
	Err error
}

func (e *Error) Error() string {
	if e.Schema {
		return e.Where + ": create tables: " + e.Err.Error()
	}
	return e.Where + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Open opens the database dsn names, and runs o.Schema in it. dsn is a
// postgres:// (or postgresql://) URL, opened with pgx, or else a SQLite
// file path, optionally written "sqlite:PATH"; the file (mode 0600) and
// its directory (0700) are created when missing, and an existing file and
// its side files are made owner-only (fsmode.SQLite). Its errors are
// ErrNoDatabase, the error of creating the directory, or an *Error.
func Open(ctx context.Context, dsn string, o Options) (*DB, error) {
	db := &DB{}
	var err error
	switch {
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		db.postgres = true
		db.where = redactURL(dsn)
		db.DB, err = sql.Open("pgx", dsn)
	default:
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" {
			return nil, ErrNoDatabase
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		db.where = path
		if err := fsmode.SQLite(o.Logger, path); err != nil {
			return nil, &Error{Where: db.where, Err: err}
		}
		// One writer at a time (immediate transactions), readers alongside
		// it (WAL); a second process waits for the lock instead of failing.
		source := "file:" + path + "?_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=busy_timeout(30000)"
		if o.Synchronous != "" {
			source += "&_pragma=synchronous(" + o.Synchronous + ")"
		}
		db.DB, err = sql.Open("sqlite", source)
	}
	if err != nil {
		return nil, &Error{Where: db.where, Err: err}
	}
	ddl := o.Schema
	if db.postgres {
		ddl = strings.ReplaceAll(ddl, "BLOB", "BYTEA")
	}
	for _, stmt := range strings.Split(ddl, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			_ = db.Close()
			return nil, &Error{Where: db.where, Schema: true, Err: err}
		}
	}
	if !db.postgres {
		// The schema opened the database: its side files are there now.
		if err := fsmode.SQLite(o.Logger, db.where); err != nil {
			_ = db.Close()
			return nil, &Error{Where: db.where, Err: err}
		}
	}
	return db, nil
}

// Postgres reports whether the database is PostgreSQL (else SQLite).
func (db *DB) Postgres() bool { return db.postgres }

// Where names the database, for messages: the SQLite file's path, or the
// PostgreSQL URL without its password.
func (db *DB) Where() string { return db.where }

// Q returns query, written with ? placeholders, as the database reads it:
// unchanged for SQLite, with $1, $2, … for PostgreSQL. Every ? is a
// placeholder: a query with a ? inside a string literal is not for Q.
func (db *DB) Q(query string) string {
	if !db.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func redactURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres"
	}
	return u.Redacted()
}
