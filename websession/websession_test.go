package websession

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/integration/cluster"
	"github.com/toolgate/toolgate/keyring"
)

// postgresEnv names a PostgreSQL server the tests may create databases
// in; without it they start a throwaway one (Debian's PostgreSQL, which
// scripts/test installs).
const postgresEnv = "TOOLGATE_TEST_POSTGRES"

// postgres is the server of the PostgreSQL store's tests, started once
// for the package; each test gets a database of its own.
var postgres struct {
	once  sync.Once
	dsn   string
	err   error
	stop  func()
	count atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	if postgres.stop != nil {
		postgres.stop()
	}
	os.Exit(code)
}

// postgresDSN returns the DSN of a new, empty database on the tests'
// PostgreSQL server.
func postgresDSN(t *testing.T) string {
	t.Helper()
	postgres.once.Do(func() {
		if postgres.dsn = os.Getenv(postgresEnv); postgres.dsn != "" {
			return
		}
		dir, err := os.MkdirTemp("", "websession-postgres-")
		if err != nil {
			postgres.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var stop func()
		postgres.dsn, stop, postgres.err = cluster.StartPostgres(ctx, dir)
		postgres.stop = func() {
			if stop != nil {
				stop()
			}
			_ = os.RemoveAll(dir)
		}
	})
	require.NoError(t, postgres.err, "the PostgreSQL store's tests need a PostgreSQL server: install Debian's postgresql (scripts/test does), or set %s", postgresEnv)
	u, err := url.Parse(postgres.dsn)
	require.NoError(t, err)
	name := fmt.Sprintf("websession_%d_%d", os.Getpid(), postgres.count.Add(1))
	db, err := sql.Open("pgx", postgres.dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec("CREATE DATABASE " + name)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// clock is a settable time for the stores to expire sessions by.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newRing(t *testing.T) *keyring.Keyring {
	ring, _, err := keyring.LoadOrCreate(filepath.Join(t.TempDir(), "keys.json"))
	require.NoError(t, err)
	return ring
}

// stores runs test on each kind of store, each made fresh with the clock.
func stores(t *testing.T, test func(t *testing.T, s Store, c *clock)) {
	kinds := map[string]func(t *testing.T, c *clock) Store{
		"memory": func(_ *testing.T, c *clock) Store { return NewMemory(c.now) },
		"sqlite": func(t *testing.T, c *clock) Store {
			s, err := Open(context.Background(), Options{DSN: filepath.Join(t.TempDir(), "sessions.db"), Sealer: newRing(t), Now: c.now})
			require.NoError(t, err)
			return s
		},
		"postgres": func(t *testing.T, c *clock) Store {
			s, err := Open(context.Background(), Options{DSN: postgresDSN(t), Sealer: newRing(t), Now: c.now})
			require.NoError(t, err)
			return s
		},
	}
	for _, name := range []string{"memory", "sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
			s := kinds[name](t, c)
			t.Cleanup(func() { _ = s.Close() })
			test(t, s, c)
		})
	}
}

// rand IDs: each test's own, so PostgreSQL runs never meet old rows.
func newID(t *testing.T) string { return t.Name() + "/" + time.Now().Format(time.RFC3339Nano) }

func TestASessionLivesUntilItExpires(t *testing.T) {
	stores(t, func(t *testing.T, s Store, c *clock) {
		ctx := context.Background()
		id := newID(t)
		require.NoError(t, s.Create(ctx, id, []byte("alice"), c.now().Add(time.Hour)))
		got, err := s.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, []byte("alice"), got.Data)
		assert.True(t, got.Expires.Equal(c.now().Add(time.Hour)), "%v", got.Expires)

		_, err = s.Get(ctx, id+"x")
		assert.ErrorIs(t, err, ErrNotFound, "an unknown ID")
		_, err = s.Get(ctx, "")
		assert.ErrorIs(t, err, ErrNotFound, "no ID")

		c.add(time.Hour - time.Millisecond)
		_, err = s.Get(ctx, id)
		require.NoError(t, err, "a millisecond before it expires")
		c.add(time.Millisecond)
		_, err = s.Get(ctx, id)
		assert.ErrorIs(t, err, ErrNotFound, "at its expiry")
		_, err = s.Update(ctx, id, got.Version, []byte("x"), c.now().Add(time.Hour))
		assert.ErrorIs(t, err, ErrStale, "an expired session is not brought back")
		_, err = s.Take(ctx, id)
		assert.ErrorIs(t, err, ErrNotFound)
	})
}

func TestDeleteEndsASessionAndUpdateIsACompareAndSwap(t *testing.T) {
	stores(t, func(t *testing.T, s Store, c *clock) {
		ctx := context.Background()
		id := newID(t)
		require.NoError(t, s.Create(ctx, id, []byte("v1"), c.now().Add(time.Hour)))
		assert.Error(t, s.Create(ctx, id, []byte("again"), c.now().Add(time.Hour)), "an ID is made once")
		first, err := s.Get(ctx, id)
		require.NoError(t, err)

		v2, err := s.Update(ctx, id, first.Version, []byte("v2"), c.now().Add(2*time.Hour))
		require.NoError(t, err)
		assert.NotEqual(t, first.Version, v2)
		_, err = s.Update(ctx, id, first.Version, []byte("lost"), c.now().Add(2*time.Hour))
		assert.ErrorIs(t, err, ErrStale, "a renewal from the version before loses")
		got, err := s.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, []byte("v2"), got.Data)
		assert.Equal(t, v2, got.Version)
		assert.True(t, got.Expires.Equal(c.now().Add(2*time.Hour)), "renewal moves the expiry")

		// Of many replicas renewing at once from the same version, one wins.
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := s.Update(ctx, id, v2, []byte("race"), c.now().Add(time.Hour)); err == nil {
					wins.Add(1)
				} else {
					assert.ErrorIs(t, err, ErrStale)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), wins.Load())

		require.NoError(t, s.Delete(ctx, id))
		_, err = s.Get(ctx, id)
		assert.ErrorIs(t, err, ErrNotFound, "signed out")
		_, err = s.Update(ctx, id, v2+1, []byte("back"), c.now().Add(time.Hour))
		assert.ErrorIs(t, err, ErrStale, "a renewal that finishes after the sign-out does not bring the session back")
		_, err = s.Get(ctx, id)
		assert.ErrorIs(t, err, ErrNotFound)
		assert.NoError(t, s.Delete(ctx, id), "deleting twice is no error")
	})
}

func TestTakeGivesASessionOnce(t *testing.T) {
	stores(t, func(t *testing.T, s Store, c *clock) {
		ctx := context.Background()
		id := newID(t)
		require.NoError(t, s.Create(ctx, id, []byte("flow"), c.now().Add(10*time.Minute)))
		var got atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				sess, err := s.Take(ctx, id)
				if err == nil {
					assert.Equal(t, []byte("flow"), sess.Data)
					got.Add(1)
				} else {
					assert.ErrorIs(t, err, ErrNotFound)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), got.Load())

		late := newID(t) + "late"
		require.NoError(t, s.Create(ctx, late, []byte("flow"), c.now().Add(10*time.Minute)))
		c.add(10 * time.Minute)
		_, err := s.Take(ctx, late)
		assert.ErrorIs(t, err, ErrNotFound, "an expired one is not taken")
	})
}

func TestExpiredSessionsAreDeletedLazily(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	ctx := context.Background()
	m := NewMemory(c.now)
	require.NoError(t, m.Create(ctx, "old", nil, c.now().Add(time.Minute)))
	c.add(time.Minute)
	require.NoError(t, m.Create(ctx, "new", nil, c.now().Add(time.Minute)))
	assert.Len(t, m.byID, 1, "a create forgets the expired")

	db := openSQLite(t, filepath.Join(t.TempDir(), "s.db"), newRing(t), c)
	require.NoError(t, db.Create(ctx, "old", nil, c.now().Add(time.Minute)))
	require.NoError(t, db.Create(ctx, "read", nil, c.now().Add(time.Minute)))
	c.add(time.Minute)
	assert.Equal(t, 2, rows(t, db))
	_, err := db.Get(ctx, "read")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Equal(t, 1, rows(t, db), "a read of an expired session deletes it")
	require.NoError(t, db.Create(ctx, "new", nil, c.now().Add(time.Minute)))
	assert.Equal(t, 1, rows(t, db), "a create deletes the expired")
}

func openSQLite(t *testing.T, path string, s Sealer, c *clock) *DB {
	db, err := Open(context.Background(), Options{DSN: "sqlite:" + path, Sealer: s, Now: c.now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func rows(t *testing.T, db *DB) int {
	var n int
	require.NoError(t, db.db.QueryRow("SELECT count(*) FROM inbox_sessions").Scan(&n))
	return n
}

// The database holds neither the ID a browser presents nor the data in
// plaintext, and a row changed or moved in it signs nobody in.
func TestTheDatabaseHoldsNoIDAndNoSecret(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	ctx := context.Background()
	ring := newRing(t)
	path := filepath.Join(t.TempDir(), "s.db")
	db := openSQLite(t, path, ring, c)
	id, other := "the-random-session-id-0123", "another-session-id-456789"
	secret := []byte(`{"refresh_token":"rt-very-secret-refresh-token"}`)
	require.NoError(t, db.Create(ctx, id, secret, c.now().Add(time.Hour)))
	require.NoError(t, db.Create(ctx, other, []byte(`{"name":"mallory"}`), c.now().Add(time.Hour)))
	require.NoError(t, db.Close())

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	wal, _ := os.ReadFile(path + "-wal")
	for _, b := range [][]byte{raw, wal} {
		assert.False(t, bytes.Contains(b, []byte(id)), "the ID is not stored")
		assert.False(t, bytes.Contains(b, []byte("rt-very-secret")), "the data is sealed")
	}

	db = openSQLite(t, path, ring, c)
	got, err := db.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, secret, got.Data, "another process with the keyring reads it")

	// mallory, who writes to the database, copies her sealed session under
	// the victim's key: it does not open there.
	k, ko := key(id), key(other)
	_, err = db.db.Exec("UPDATE inbox_sessions SET sealed = (SELECT sealed FROM inbox_sessions WHERE id_sha256 = ?), key_id = (SELECT key_id FROM inbox_sessions WHERE id_sha256 = ?) WHERE id_sha256 = ?", ko[:], ko[:], k[:])
	require.NoError(t, err)
	_, err = db.Get(ctx, id)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotFound, "a row that does not open is an error to log, not a quiet sign-out")
	assert.Contains(t, err.Error(), "does not decrypt")

	// A flipped byte does not open either.
	_, err = db.db.Exec("UPDATE inbox_sessions SET sealed = X'00' || substr(sealed, 2) WHERE id_sha256 = ?", ko[:])
	require.NoError(t, err)
	_, err = db.Get(ctx, other)
	assert.ErrorContains(t, err, "does not decrypt")

	// Without the keyring, the sessions do not open.
	stranger := openSQLite(t, path, newRing(t), c)
	require.NoError(t, stranger.Create(ctx, "s3", []byte("x"), c.now().Add(time.Hour)))
	_, err = db.Get(ctx, "s3")
	assert.ErrorIs(t, err, keyring.ErrUnknownKey)
}

func TestTwoProcessesShareTheSessionsOfOneDatabase(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	ctx := context.Background()
	ring := newRing(t)
	path := filepath.Join(t.TempDir(), "s.db")
	a, b := openSQLite(t, path, ring, c), openSQLite(t, path, ring, c)
	require.NoError(t, a.Create(ctx, "s1", []byte("alice"), c.now().Add(time.Hour)))
	got, err := b.Get(ctx, "s1")
	require.NoError(t, err)
	assert.Equal(t, []byte("alice"), got.Data)
	_, err = b.Update(ctx, "s1", got.Version, []byte("alice, renewed"), c.now().Add(time.Hour))
	require.NoError(t, err)
	got, err = a.Get(ctx, "s1")
	require.NoError(t, err)
	assert.Equal(t, []byte("alice, renewed"), got.Data)
	require.NoError(t, b.Delete(ctx, "s1"))
	_, err = a.Get(ctx, "s1")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestADatabaseStoreNeedsAKeyring(t *testing.T) {
	_, err := Open(context.Background(), Options{DSN: filepath.Join(t.TempDir(), "s.db")})
	assert.ErrorContains(t, err, "needs a keyring")
	_, err = Open(context.Background(), Options{DSN: "sqlite:", Sealer: newRing(t)})
	assert.ErrorContains(t, err, "no database")
}
