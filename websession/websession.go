// Package websession keeps the server-side state of toolgate's browser
// sign-ins (the inbox's sessions, and sign-ins through the identity
// provider still in progress) where every replica of `toolgate serve`
// finds it: in memory for one process, or in a SQL database (SQLite or
// PostgreSQL) for any number of processes and across restarts.
//
// A session is found by a random ID that only the browser holds (in its
// cookie). A store keeps the SHA-256 of the ID, never the ID, so whoever
// reads the database cannot present a session as their own; a database
// store also seals each session's data with the payload keyring (purpose
// "inbox-session", bound to the session's key), so the refresh tokens and
// CSRF tokens inside are not readable there either, nor can a sealed
// session be moved to another key. The data itself is opaque here: the
// server package says what is in it.
//
// Expired sessions are never returned and are deleted lazily (a Get of
// one, or any Create). Update is a compare-and-swap on the session's
// version, so two replicas that renew the same session at once cannot
// both win; Delete ends a session for every replica at once.
package websession

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"
)

// ErrNotFound is returned for an ID that has no live session: never
// created, ended (Delete, Take) or expired.
var ErrNotFound = errors.New("websession: no such session")

// ErrStale is returned by Update when the session changed (another Update
// won) or ended since the version the caller read: it should Get it
// again.
var ErrStale = errors.New("websession: the session changed or ended since it was read")

// Session is one stored session.
type Session struct {
	// Data is the caller's, opaque to the store.
	Data []byte
	// Expires is when the session ends; it is not returned after.
	Expires time.Time
	// Version changes with every Update; Update of an older one fails.
	Version int64
}

// FirstVersion is the version of a session Create made.
const FirstVersion int64 = 1

// Store keeps sessions by ID. Implementations are safe for concurrent use.
type Store interface {
	// Create stores a new session under id until expires, at version
	// FirstVersion (a new id: an existing live one is an error).
	Create(ctx context.Context, id string, data []byte, expires time.Time) error
	// Get returns the live session of id, or ErrNotFound.
	Get(ctx context.Context, id string) (Session, error)
	// Update replaces the data and expiry of the session of id if its
	// version is still version, and returns the new version; ErrStale when
	// it is not (or the session ended).
	Update(ctx context.Context, id string, version int64, data []byte, expires time.Time) (int64, error)
	// Delete ends the session of id; ending an unknown one is no error.
	Delete(ctx context.Context, id string) error
	// Take returns the live session of id and ends it, in one step: of
	// two concurrent Takes, one gets it and the other ErrNotFound.
	Take(ctx context.Context, id string) (Session, error)
	// Close releases the store's resources.
	Close() error
}

// key is what a store keeps in place of an ID: its SHA-256.
func key(id string) [sha256.Size]byte { return sha256.Sum256([]byte(id)) }

// Memory is a Store in this process's memory: its sessions end with the
// process and are not seen by other replicas.
type Memory struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]Session
	now  func() time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty memory store whose sessions expire by now
// (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{byID: map[[sha256.Size]byte]Session{}, now: now}
}

// Create implements Store; it forgets expired sessions on the way, so the
// map grows only with live ones.
func (m *Memory) Create(_ context.Context, id string, data []byte, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for k, s := range m.byID {
		if !now.Before(s.Expires) {
			delete(m.byID, k)
		}
	}
	k := key(id)
	if _, ok := m.byID[k]; ok {
		return errors.New("websession: a session with this ID exists")
	}
	m.byID[k] = Session{Data: clone(data), Expires: expires, Version: FirstVersion}
	return nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live(key(id))
}

// live returns the live session of k, deleting it if it expired. The
// caller holds mu.
func (m *Memory) live(k [sha256.Size]byte) (Session, error) {
	s, ok := m.byID[k]
	if !ok {
		return Session{}, ErrNotFound
	}
	if !m.now().Before(s.Expires) {
		delete(m.byID, k)
		return Session{}, ErrNotFound
	}
	s.Data = clone(s.Data)
	return s, nil
}

// Update implements Store.
func (m *Memory) Update(_ context.Context, id string, version int64, data []byte, expires time.Time) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(id)
	s, err := m.live(k)
	if err != nil || s.Version != version {
		return 0, ErrStale
	}
	m.byID[k] = Session{Data: clone(data), Expires: expires, Version: version + 1}
	return version + 1, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byID, key(id))
	return nil
}

// Take implements Store.
func (m *Memory) Take(_ context.Context, id string) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(id)
	s, err := m.live(k)
	delete(m.byID, k)
	return s, err
}

// Close implements Store; a memory store holds nothing to release.
func (m *Memory) Close() error { return nil }

func clone(b []byte) []byte { return append([]byte(nil), b...) }
