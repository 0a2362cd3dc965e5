// Package registry keeps the passkeys people registered: each
// registration and removal is a ledger entry (passkey.registered,
// passkey.removed), and a table in the ledger's database indexes them by
// credential ID with the sign counter their last assertion had.
//
// The ledger is written where it matters for safety: a registration is
// logged before its row makes the passkey usable, and a removal makes the
// row unusable before it is logged. A failure in between leaves a passkey
// logged but unusable, never usable without its entry.
package registry

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/sqldb"
	"github.com/toolgate/toolgate/statement"
)

// Refusals of the registry (errors.Is).
var (
	ErrTaken        = errors.New("this passkey is already registered (a credential ID is registered once)")
	ErrUnknown      = errors.New("not a passkey registered to this person")
	ErrRemoved      = errors.New("the passkey was removed")
	ErrCounterRaced = errors.New("the passkey was used again at the same time: a replay or a clone")
)

// Registration is a registered passkey: its credential, the person's
// label for it, who their identity provider says they are, when it was
// registered, the ledger index of its passkey.registered entry, and the
// sign counter of its last assertion.
type Registration struct {
	Credential passkey.Credential
	// Name is the person's label, e.g. "YubiKey 5".
	Name       string
	Identity   *statement.Identity
	Registered time.Time
	// Entry is the ledger index of its passkey.registered entry.
	Entry     int64
	SignCount uint32
}

// stored is what a row's entry column holds: a Registration without
// what other columns hold (index, counter).
type stored struct {
	Credential passkey.Credential  `json:"credential"`
	Name       string              `json:"name"`
	Identity   *statement.Identity `json:"identity,omitempty"`
	Registered time.Time           `json:"registered"`
}

// removed is an INTEGER (0 or 1), which both databases compare alike.
const schema = `
CREATE TABLE IF NOT EXISTS ledger_passkeys (
	credential_id TEXT PRIMARY KEY,
	person TEXT NOT NULL,
	registration BIGINT NOT NULL,
	removed INTEGER NOT NULL DEFAULT 0,
	sign_count BIGINT NOT NULL,
	entry BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_passkeys_person ON ledger_passkeys (person);
`

// Registry is the registry of passkeys in a ledger's database.
type Registry struct {
	db  *sqldb.DB
	l   *ledger.Ledger
	log *zap.Logger
	now func() time.Time
}

// Open opens the registry in the database dsn names (the ledger l's: a
// postgres:// URL or a SQLite path), creating its table when missing.
// log is optional.
func Open(ctx context.Context, dsn string, l *ledger.Ledger, log *zap.Logger) (*Registry, error) {
	if l == nil {
		return nil, errors.New("passkey registry: no ledger")
	}
	if log == nil {
		log = zap.NewNop()
	}
	db, err := sqldb.Open(ctx, dsn, sqldb.Options{Synchronous: "FULL", Schema: schema, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("passkey registry: %w", err)
	}
	return &Registry{db: db, l: l, log: log, now: time.Now}, nil
}

// Close closes the registry's database (not the ledger).
func (r *Registry) Close() error { return r.db.Close() }

// Register logs reg as a passkey.registered entry, vouched for by st (the
// door's statement of the person who registered it), then makes it
// usable. Its Registered time is now when zero; Entry and SignCount are
// set from the log and the credential. A credential ID that is (or was)
// registered is refused with ErrTaken.
func (r *Registry) Register(ctx context.Context, reg Registration, st *statement.Signed) (Registration, error) {
	c := reg.Credential
	switch {
	case len(c.ID) == 0 || len(c.PublicKey) == 0:
		return Registration{}, errors.New("register passkey: no credential ID or public key")
	case c.Person == "":
		return Registration{}, errors.New("register passkey: no person")
	}
	id := passkey.IDString(c.ID)
	if _, err := r.row(ctx, c.ID); err == nil {
		return Registration{}, fmt.Errorf("%w: %s", ErrTaken, id)
	} else if !errors.Is(err, ErrUnknown) {
		return Registration{}, err
	}
	if reg.Registered.IsZero() {
		reg.Registered = r.now()
	}
	reg.Registered = reg.Registered.UTC().Truncate(time.Microsecond)
	details := map[string]any{"credential_id": id, "public_key": base64.StdEncoding.EncodeToString(c.PublicKey), "rp_id": c.RPID}
	if reg.Identity != nil {
		details["identity"] = map[string]any{"iss": reg.Identity.Issuer, "sub": reg.Identity.Subject}
	}
	e := ledger.Entry{Kind: ledger.KindPasskeyRegistered, Event: ledger.KindPasskeyRegistered + "/" + id, At: reg.Registered,
		By: c.Person, Name: reg.Name, Statement: st, Details: map[string]any{"passkey": details}}
	idx, err := r.l.Append(ctx, e)
	if err != nil {
		return Registration{}, fmt.Errorf("register passkey %s: log it: %w", id, err)
	}
	// An append of an event already logged returns that entry's index:
	// a retry of this registration (its row never written), or another
	// registration of the same ID that got there first.
	if err := r.sameRegistration(ctx, idx[0], c); err != nil {
		return Registration{}, err
	}
	reg.Entry, reg.SignCount = idx[0], 0
	raw, err := json.Marshal(stored{Credential: c, Name: reg.Name, Identity: reg.Identity, Registered: reg.Registered})
	if err != nil {
		return Registration{}, fmt.Errorf("register passkey %s: %w", id, err)
	}
	res, err := r.db.ExecContext(ctx, r.db.Q(`INSERT INTO ledger_passkeys (credential_id, person, registration, removed, sign_count, entry)
		VALUES (?, ?, ?, 0, 0, ?) ON CONFLICT DO NOTHING`), id, c.Person, reg.Entry, raw)
	if err != nil {
		return Registration{}, fmt.Errorf("register passkey %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Registration{}, fmt.Errorf("register passkey %s: %w", id, err)
	} else if n == 0 {
		return Registration{}, fmt.Errorf("%w: %s", ErrTaken, id)
	}
	r.log.Info("passkey registered", zap.String("person", c.Person), zap.String("credential", id), zap.Int64("entry", reg.Entry))
	return reg, nil
}

// sameRegistration checks that the ledger's entry idx registers c (same
// person, key and relying party), and refuses with ErrTaken when it
// registers another.
func (r *Registry) sameRegistration(ctx context.Context, idx int64, c passkey.Credential) error {
	id := passkey.IDString(c.ID)
	got, err := r.l.Entries(ctx, idx, idx+1)
	if err != nil || len(got) != 1 {
		return fmt.Errorf("register passkey %s: read its entry %d back: %v", id, idx, err)
	}
	var e struct {
		By      string `json:"by"`
		Details struct {
			Passkey struct {
				PublicKey string `json:"public_key"`
				RPID      string `json:"rp_id"`
			} `json:"passkey"`
		} `json:"details"`
	}
	if err := json.Unmarshal(got[0].Entry, &e); err != nil {
		return fmt.Errorf("register passkey %s: read its entry %d back: %w", id, idx, err)
	}
	key, err := base64.StdEncoding.DecodeString(e.Details.Passkey.PublicKey)
	if err != nil || e.By != c.Person || e.Details.Passkey.RPID != c.RPID || !bytes.Equal(key, c.PublicKey) {
		return fmt.Errorf("%w: %s (its entry %d registers another)", ErrTaken, id, idx)
	}
	return nil
}

// Remove makes person's passkey id unusable, then logs its removal as a
// passkey.removed entry vouched for by st. A passkey that is not person's
// is refused with ErrUnknown. Removing a removed passkey again logs the
// removal again (the same entry: a retry after a failed append).
func (r *Registry) Remove(ctx context.Context, person string, id []byte, st *statement.Signed) error {
	sid := passkey.IDString(id)
	res, err := r.db.ExecContext(ctx, r.db.Q("UPDATE ledger_passkeys SET removed = 1 WHERE credential_id = ? AND person = ?"), sid, person)
	if err != nil {
		return fmt.Errorf("remove passkey %s: %w", sid, err)
	}
	// Both databases count the rows matched, a row already removed too.
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("remove passkey %s: %w", sid, err)
	} else if n == 0 {
		return unknown(person)
	}
	e := ledger.Entry{Kind: ledger.KindPasskeyRemoved, Event: ledger.KindPasskeyRemoved + "/" + sid, At: r.now().UTC(),
		By: person, Statement: st, Details: map[string]any{"passkey": map[string]any{"credential_id": sid}}}
	if _, err := r.l.Append(ctx, e); err != nil {
		return fmt.Errorf("remove passkey %s: it is unusable, but its removal is not logged (remove it again): %w", sid, err)
	}
	r.log.Info("passkey removed", zap.String("person", person), zap.String("credential", sid))
	return nil
}

// List returns person's passkeys that are not removed, oldest first.
func (r *Registry) List(ctx context.Context, person string) ([]Registration, error) {
	rows, err := r.db.QueryContext(ctx, r.db.Q(`SELECT person, registration, removed, sign_count, entry FROM ledger_passkeys
		WHERE person = ? AND removed = 0 ORDER BY registration`), person)
	if err != nil {
		return nil, fmt.Errorf("list passkeys: %w", err)
	}
	defer rows.Close()
	var out []Registration
	for rows.Next() {
		row, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list passkeys: %w", err)
		}
		out = append(out, row.reg)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list passkeys: %w", err)
	}
	return out, nil
}

// Lookup returns person's passkey id. One never registered and another
// person's are both ErrUnknown; a removed one is ErrRemoved.
func (r *Registry) Lookup(ctx context.Context, person string, id []byte) (Registration, error) {
	row, err := r.row(ctx, id)
	switch {
	case errors.Is(err, ErrUnknown) || err == nil && row.person != person:
		return Registration{}, unknown(person)
	case err != nil:
		return Registration{}, err
	case row.removed:
		return Registration{}, fmt.Errorf("%w: %s", ErrRemoved, passkey.IDString(id))
	}
	return row.reg, nil
}

// Used moves passkey id's sign counter from before to after, as one
// assertion checked against before does; a second use checked against
// the same counter finds it moved and is ErrCounterRaced. Authenticators
// that keep no counter say 0 each time: 0 to 0 always succeeds. A counter
// that does not move forward is passkey.ErrClone; a removed passkey is
// ErrRemoved, an unknown one ErrUnknown.
func (r *Registry) Used(ctx context.Context, id []byte, before, after uint32) error {
	sid := passkey.IDString(id)
	if (before != 0 || after != 0) && after <= before {
		return fmt.Errorf("passkey %s: %w (%d after %d)", sid, passkey.ErrClone, after, before)
	}
	res, err := r.db.ExecContext(ctx, r.db.Q("UPDATE ledger_passkeys SET sign_count = ? WHERE credential_id = ? AND sign_count = ? AND removed = 0"),
		int64(after), sid, int64(before))
	if err != nil {
		return fmt.Errorf("passkey %s: store its sign counter: %w", sid, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("passkey %s: store its sign counter: %w", sid, err)
	}
	if n == 1 {
		return nil
	}
	row, err := r.row(ctx, id)
	switch {
	case errors.Is(err, ErrUnknown):
		return fmt.Errorf("passkey %s: %w", sid, ErrUnknown)
	case err != nil:
		return err
	case row.removed:
		return fmt.Errorf("%w: %s", ErrRemoved, sid)
	}
	return fmt.Errorf("passkey %s: %w (its counter is %d, not %d)", sid, ErrCounterRaced, row.reg.SignCount, before)
}

// unknown is ErrUnknown naming the person.
func unknown(person string) error {
	return fmt.Errorf("%w: not a passkey registered to %s", ErrUnknown, person)
}

// record is a row of ledger_passkeys.
type record struct {
	person  string
	removed bool
	reg     Registration
}

// row reads passkey id's row, removed or not; ErrUnknown when none.
func (r *Registry) row(ctx context.Context, id []byte) (record, error) {
	rec, err := scan(r.db.QueryRowContext(ctx, r.db.Q(`SELECT person, registration, removed, sign_count, entry FROM ledger_passkeys
		WHERE credential_id = ?`), passkey.IDString(id)))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return record{}, ErrUnknown
	case err != nil:
		return record{}, fmt.Errorf("passkey %s: %w", passkey.IDString(id), err)
	}
	return rec, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scan(s scanner) (record, error) {
	var (
		rec          record
		removed      int64
		count, entry int64
		raw          []byte
	)
	if err := s.Scan(&rec.person, &entry, &removed, &count, &raw); err != nil {
		return record{}, err
	}
	var st stored
	if err := json.Unmarshal(raw, &st); err != nil {
		return record{}, fmt.Errorf("read passkey row: %w", err)
	}
	rec.removed = removed != 0
	rec.reg = Registration{Credential: st.Credential, Name: st.Name, Identity: st.Identity, Registered: st.Registered,
		Entry: entry, SignCount: uint32(count)}
	return rec, nil
}
