package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/sqldb"
)

// store keeps the log in SQL: the entries by index, the tree's stored
// hashes (tlog.StoredHashes) by their index, the signed checkpoints by
// size, and the log's size in a single head row that every append locks,
// so that appends from any number of processes form one linear log.
type store struct {
	db *sqldb.DB
}

const schema = `
CREATE TABLE IF NOT EXISTS ledger_head (id INTEGER PRIMARY KEY CHECK (id = 1), size BIGINT NOT NULL);
INSERT INTO ledger_head (id, size) VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS ledger_entries (
	idx BIGINT PRIMARY KEY,
	event TEXT NOT NULL UNIQUE,
	kind TEXT NOT NULL,
	call_id TEXT NOT NULL,
	session TEXT NOT NULL,
	at TEXT NOT NULL,
	entry BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_entries_call ON ledger_entries (call_id);
CREATE TABLE IF NOT EXISTS ledger_hashes (idx BIGINT PRIMARY KEY, hash BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS ledger_checkpoints (size BIGINT PRIMARY KEY, note TEXT NOT NULL, created_at TEXT NOT NULL);
`

// openStore opens (and creates, if need be) the log's tables. dsn is a
// postgres:// URL or a SQLite file path (optionally "sqlite:PATH"); log
// is told when the file's permissions are tightened.
func openStore(ctx context.Context, dsn string, log *zap.Logger) (*store, error) {
	// synchronous(FULL): a commit is on disk before the call goes on,
	// power loss included (group commit keeps it cheap:
	// BenchmarkAppendOne/-Concurrent).
	db, err := sqldb.Open(ctx, dsn, sqldb.Options{Synchronous: "FULL", Schema: schema, Logger: log})
	var dbErr *sqldb.Error
	switch {
	case errors.As(err, &dbErr) && dbErr.Schema:
		return nil, fmt.Errorf("ledger %s: create tables: %w", dbErr.Where, dbErr.Err)
	case errors.As(err, &dbErr):
		return nil, fmt.Errorf("ledger %s: %w", dbErr.Where, dbErr.Err)
	case err != nil:
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &store{db: db}, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// pending is one entry to append.
type pending struct {
	data   []byte
	header Header
}

// append adds entries to the log in one transaction and returns the index
// of each: an entry whose event is already in the log is not added again,
// and gets the index it has. written holds the leaf hash of each entry it
// added, by index.
func (s *store) append(ctx context.Context, entries []pending) (indexes []int64, written map[int64]tlog.Hash, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback() }()
	lock := "SELECT size FROM ledger_head WHERE id = 1"
	if s.db.Postgres() {
		lock += " FOR UPDATE"
	}
	var size int64
	if err := tx.QueryRowContext(ctx, lock).Scan(&size); err != nil {
		return nil, nil, fmt.Errorf("read the log's size: %w", err)
	}
	known, err := s.knownEvents(ctx, tx, entries)
	if err != nil {
		return nil, nil, err
	}
	added := map[int64]tlog.Hash{} // stored hashes written in this transaction
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		return s.readHashes(ctx, tx, indexes, added)
	})
	indexes, written = make([]int64, len(entries)), map[int64]tlog.Hash{}
	var rows, hashRows []any // the new rows' values, column after column
	for i, e := range entries {
		if idx, ok := known[e.header.Event]; ok {
			indexes[i] = idx
			continue
		}
		hashes, err := tlog.StoredHashes(size, e.data, reader)
		if err != nil {
			return nil, nil, fmt.Errorf("hash entry %d: %w", size, err)
		}
		rows = append(rows, size, e.header.Event, e.header.Kind, e.header.CallID, e.header.Session, sortableTime(e.header.At), e.data)
		first := tlog.StoredHashIndex(0, size)
		for j, h := range hashes {
			added[first+int64(j)] = h
			hashRows = append(hashRows, first+int64(j), h[:])
		}
		known[e.header.Event] = size
		indexes[i], written[size] = size, hashes[0] // the first stored hash is the leaf's
		size++
	}
	// A few statements a batch, not a few an entry: the head row is held
	// for as few round trips as can be, whoever else waits for it.
	if err := insertRows(ctx, tx, s.db, "INSERT INTO ledger_entries (idx, event, kind, call_id, session, at, entry) VALUES ", 7, rows); err != nil {
		return nil, nil, fmt.Errorf("write entries: %w", err)
	}
	if err := insertRows(ctx, tx, s.db, "INSERT INTO ledger_hashes (idx, hash) VALUES ", 2, hashRows); err != nil {
		return nil, nil, fmt.Errorf("write the entries' hashes: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.db.Q("UPDATE ledger_head SET size = ? WHERE id = 1"), size); err != nil {
		return nil, nil, fmt.Errorf("write the log's size: %w", err)
	}
	return indexes, written, tx.Commit()
}

// insertRows inserts rows of width values each (flat in args) with
// multi-row INSERTs of at most maxInsertRows rows.
func insertRows(ctx context.Context, tx *sql.Tx, db *sqldb.DB, insert string, width int, args []any) error {
	one := "(" + placeholders(width) + ")"
	for len(args) > 0 {
		n := min(len(args)/width, maxInsertRows)
		values := strings.Repeat(one+", ", n-1) + one
		if _, err := tx.ExecContext(ctx, db.Q(insert+values), args[:n*width]...); err != nil {
			return err
		}
		args = args[n*width:]
	}
	return nil
}

// maxInsertRows keeps an INSERT's parameters under SQLite's and
// PostgreSQL's limits.
const maxInsertRows = 1000

func (s *store) knownEvents(ctx context.Context, tx *sql.Tx, entries []pending) (map[string]int64, error) {
	known := map[string]int64{}
	args := make([]any, len(entries))
	for i, e := range entries {
		args[i] = e.header.Event
	}
	rows, err := tx.QueryContext(ctx, s.db.Q("SELECT event, idx FROM ledger_entries WHERE event IN ("+placeholders(len(args))+")"), args...)
	if err != nil {
		return nil, fmt.Errorf("look up events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ev string
		var idx int64
		if err := rows.Scan(&ev, &idx); err != nil {
			return nil, err
		}
		known[ev] = idx
	}
	return known, rows.Err()
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readHashes reads stored hashes by index, those in added first.
func (s *store) readHashes(ctx context.Context, q querier, indexes []int64, added map[int64]tlog.Hash) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var missing []any
	pos := map[int64][]int{}
	for i, idx := range indexes {
		if h, ok := added[idx]; ok {
			out[i] = h
			continue
		}
		if _, seen := pos[idx]; !seen {
			missing = append(missing, idx)
		}
		pos[idx] = append(pos[idx], i)
	}
	for len(missing) > 0 {
		chunk := missing[:min(len(missing), 500)]
		missing = missing[len(chunk):]
		rows, err := q.QueryContext(ctx, s.db.Q("SELECT idx, hash FROM ledger_hashes WHERE idx IN ("+placeholders(len(chunk))+")"), chunk...)
		if err != nil {
			return nil, fmt.Errorf("read hashes: %w", err)
		}
		for rows.Next() {
			var idx int64
			var h []byte
			if err := rows.Scan(&idx, &h); err != nil {
				rows.Close()
				return nil, err
			}
			if len(h) != tlog.HashSize {
				rows.Close()
				return nil, fmt.Errorf("stored hash %d has %d bytes", idx, len(h))
			}
			for _, i := range pos[idx] {
				copy(out[i][:], h)
			}
			delete(pos, idx)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	for idx := range pos {
		return nil, fmt.Errorf("stored hash %d is missing", idx)
	}
	return out, nil
}

func (s *store) size(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, "SELECT size FROM ledger_head WHERE id = 1").Scan(&n)
	return n, err
}

// entries returns the entries with start <= index < end, in order.
func (s *store) entries(ctx context.Context, start, end int64) ([]Stored, error) {
	return s.queryEntries(ctx, "SELECT idx, entry FROM ledger_entries WHERE idx >= ? AND idx < ? ORDER BY idx", start, end)
}

// entriesBetween returns up to limit entries at or after index start
// whose time is in [since, until), in order.
func (s *store) entriesBetween(ctx context.Context, start int64, since, until time.Time, limit int) ([]Stored, error) {
	return s.queryEntries(ctx, "SELECT idx, entry FROM ledger_entries WHERE idx >= ? AND at >= ? AND at < ? ORDER BY idx LIMIT ?",
		start, sortableTime(since), sortableTime(until), limit)
}

// sortableTime formats t so that strings sort as times do.
func sortableTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z")
}

// leafHashes returns the stored leaf hashes of entries start <= i < end.
func (s *store) leafHashes(ctx context.Context, start, end int64) ([]tlog.Hash, error) {
	idx := make([]int64, 0, end-start)
	for i := start; i < end; i++ {
		idx = append(idx, tlog.StoredHashIndex(0, i))
	}
	return s.readHashes(ctx, s.db, idx, nil)
}

// leafHashesPresent returns the stored leaf hash of each entry, nil where
// none is stored.
func (s *store) leafHashesPresent(ctx context.Context, entries []Stored) ([]*tlog.Hash, error) {
	want := make([]any, len(entries))
	at := map[int64]int{}
	for i, e := range entries {
		idx := tlog.StoredHashIndex(0, e.Index)
		want[i], at[idx] = idx, i
	}
	out := make([]*tlog.Hash, len(entries))
	rows, err := s.db.QueryContext(ctx, s.db.Q("SELECT idx, hash FROM ledger_hashes WHERE idx IN ("+placeholders(len(want))+")"), want...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var idx int64
		var b []byte
		if err := rows.Scan(&idx, &b); err != nil {
			return nil, err
		}
		var h tlog.Hash
		copy(h[:], b)
		out[at[idx]] = &h
	}
	return out, rows.Err()
}

// hashReader reads the committed stored hashes.
func (s *store) hashReader(ctx context.Context) tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		return s.readHashes(ctx, s.db, indexes, nil)
	})
}

// callEntries returns a call's entries, in order.
func (s *store) callEntries(ctx context.Context, callID string) ([]Stored, error) {
	return s.queryEntries(ctx, "SELECT idx, entry FROM ledger_entries WHERE call_id = ? ORDER BY idx", callID)
}

// latest returns up to limit entries of the kinds given before index
// before, newest first; session, when not empty, keeps that session's only.
func (s *store) latest(ctx context.Context, kinds []string, session string, before int64, limit int) ([]Stored, error) {
	args := []any{before}
	for _, k := range kinds {
		args = append(args, k)
	}
	query := "SELECT idx, entry FROM ledger_entries WHERE idx < ? AND kind IN (" + placeholders(len(kinds)) + ")"
	if session != "" {
		query, args = query+" AND session = ?", append(args, session)
	}
	return s.queryEntries(ctx, query+" ORDER BY idx DESC LIMIT ?", append(args, limit)...)
}

// callsEntries returns the entries of the calls named, in order.
func (s *store) callsEntries(ctx context.Context, callIDs []string) ([]Stored, error) {
	if len(callIDs) == 0 {
		return nil, nil
	}
	args := make([]any, len(callIDs))
	for i, id := range callIDs {
		args[i] = id
	}
	return s.queryEntries(ctx, "SELECT idx, entry FROM ledger_entries WHERE call_id IN ("+placeholders(len(args))+") ORDER BY idx", args...)
}

func (s *store) queryEntries(ctx context.Context, query string, args ...any) ([]Stored, error) {
	rows, err := s.db.QueryContext(ctx, s.db.Q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Stored
	for rows.Next() {
		var e Stored
		var data []byte
		if err := rows.Scan(&e.Index, &data); err != nil {
			return nil, err
		}
		e.Entry = data
		out = append(out, e)
	}
	return out, rows.Err()
}

// putCheckpoint stores a signed checkpoint; it reports whether it was new.
func (s *store) putCheckpoint(ctx context.Context, size int64, note []byte, at time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.db.Q("INSERT INTO ledger_checkpoints (size, note, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"),
		size, string(note), at.UTC().Format(time.RFC3339Nano))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// addSignatures replaces the checkpoint of size, as read (old), by the
// same with more signatures (a witness's cosignature); one changed since
// it was read is left as it is, and asked again.
func (s *store) addSignatures(ctx context.Context, size int64, old, signed []byte) error {
	_, err := s.db.ExecContext(ctx, s.db.Q("UPDATE ledger_checkpoints SET note = ? WHERE size = ? AND note = ?"), string(signed), size, string(old))
	return err
}

// checkpoints returns the stored checkpoints, smallest first; latest
// only the largest.
func (s *store) checkpoints(ctx context.Context, latest bool) ([][]byte, error) {
	query := "SELECT note FROM ledger_checkpoints ORDER BY size"
	if latest {
		query = "SELECT note FROM ledger_checkpoints ORDER BY size DESC LIMIT 1"
	}
	rows, err := s.db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, []byte(n))
	}
	return out, rows.Err()
}
