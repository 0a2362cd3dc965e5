package registry_test

import (
	"context"
	"encoding/base64"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/passkeytest"
	"github.com/toolgate/toolgate/passkey/registry"
	"github.com/toolgate/toolgate/statement"
)

func open(t *testing.T) (*registry.Registry, *ledger.Ledger) {
	t.Helper()
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	dsn := filepath.Join(dir, "ledger.db")
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: dsn, Keys: keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	r, err := registry.Open(context.Background(), dsn, l, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, l
}

func register(t *testing.T, r *registry.Registry, person, name string) registry.Registration {
	t.Helper()
	cred := passkeytest.New().Credential(person, "localhost")
	reg, err := r.Register(context.Background(), registry.Registration{Credential: cred, Name: name,
		Identity: &statement.Identity{Issuer: "https://idp.example", Subject: person + "-sub"}}, nil)
	require.NoError(t, err)
	return reg
}

// entries reads the whole ledger.
func entries(t *testing.T, l *ledger.Ledger) []ledger.Entry {
	t.Helper()
	ctx := context.Background()
	size, err := l.Size(ctx)
	require.NoError(t, err)
	stored, err := l.Entries(ctx, 0, size)
	require.NoError(t, err)
	out := make([]ledger.Entry, len(stored))
	for i, s := range stored {
		out[i], err = l.Read(s)
		require.NoError(t, err)
	}
	return out
}

func TestRegisterListLookupRemove(t *testing.T) {
	r, l := open(t)
	ctx := context.Background()
	yubi := register(t, r, "alice", "YubiKey 5")
	laptop := register(t, r, "alice", "laptop")
	register(t, r, "bob", "phone")

	list, err := r.List(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, []string{"YubiKey 5", "laptop"}, []string{list[0].Name, list[1].Name}, "oldest first")
	assert.Equal(t, yubi.Credential, list[0].Credential)
	assert.Equal(t, "alice-sub", list[0].Identity.Subject)
	assert.Equal(t, yubi.Entry, list[0].Entry)

	got, err := r.Lookup(ctx, "alice", laptop.Credential.ID)
	require.NoError(t, err)
	assert.Equal(t, laptop.Credential.PublicKey, got.Credential.PublicKey)
	assert.WithinDuration(t, time.Now(), got.Registered, time.Minute)

	_, err = r.Lookup(ctx, "bob", laptop.Credential.ID)
	require.ErrorIs(t, err, registry.ErrUnknown, "another person's passkey")
	assert.Contains(t, err.Error(), "not a passkey registered to bob")
	_, err = r.Lookup(ctx, "alice", []byte("never registered"))
	require.ErrorIs(t, err, registry.ErrUnknown)
	require.ErrorIs(t, r.Remove(ctx, "bob", laptop.Credential.ID, nil), registry.ErrUnknown, "bob cannot remove alice's")

	require.NoError(t, r.Remove(ctx, "alice", laptop.Credential.ID, nil))
	_, err = r.Lookup(ctx, "alice", laptop.Credential.ID)
	require.ErrorIs(t, err, registry.ErrRemoved)
	list, err = r.List(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, r.Remove(ctx, "alice", laptop.Credential.ID, nil), "a second removal logs nothing new")

	var ofLaptop []ledger.Entry
	for _, e := range entries(t, l) {
		if strings.HasSuffix(e.Event, "/"+passkey.IDString(laptop.Credential.ID)) {
			ofLaptop = append(ofLaptop, e)
		}
	}
	require.Len(t, ofLaptop, 2)
	assert.Equal(t, ledger.KindPasskeyRegistered, ofLaptop[0].Kind)
	assert.Equal(t, "alice", ofLaptop[0].By)
	assert.Equal(t, "laptop", ofLaptop[0].Name)
	details := ofLaptop[0].Details["passkey"].(map[string]any)
	assert.Equal(t, base64.StdEncoding.EncodeToString(laptop.Credential.PublicKey), details["public_key"])
	assert.Equal(t, "localhost", details["rp_id"])
	assert.Equal(t, map[string]any{"iss": "https://idp.example", "sub": "alice-sub"}, details["identity"])
	assert.Equal(t, ledger.KindPasskeyRemoved, ofLaptop[1].Kind)
	assert.Equal(t, "alice", ofLaptop[1].By)
}

func TestACredentialIsRegisteredOnce(t *testing.T) {
	r, l := open(t)
	ctx := context.Background()
	reg := register(t, r, "alice", "laptop")
	_, err := r.Register(ctx, registry.Registration{Credential: reg.Credential, Name: "again"}, nil)
	require.ErrorIs(t, err, registry.ErrTaken)

	// Another person's claim of the same ID, even with their own key.
	other := passkeytest.New().Credential("mallory", "localhost")
	other.ID = reg.Credential.ID
	_, err = r.Register(ctx, registry.Registration{Credential: other, Name: "mine"}, nil)
	require.ErrorIs(t, err, registry.ErrTaken)

	// Nor after its removal.
	require.NoError(t, r.Remove(ctx, "alice", reg.Credential.ID, nil))
	_, err = r.Register(ctx, registry.Registration{Credential: reg.Credential, Name: "again"}, nil)
	require.ErrorIs(t, err, registry.ErrTaken)
	assert.Len(t, entries(t, l), 2, "one registration and one removal")
}

func TestConcurrentRegistrationsOfOneIDOneWins(t *testing.T) {
	r, _ := open(t)
	ctx := context.Background()
	cred := passkeytest.New().Credential("alice", "localhost")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cred
			if i%2 == 1 {
				c = passkeytest.New().Credential("mallory", "localhost")
				c.ID = cred.ID
			}
			_, errs[i] = r.Register(ctx, registry.Registration{Credential: c, Name: "k"}, nil)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, registry.ErrTaken)
	}
	assert.Equal(t, 1, won)
}

func TestUsedMovesTheCounterOnce(t *testing.T) {
	r, _ := open(t)
	ctx := context.Background()
	reg := register(t, r, "alice", "laptop")
	id := reg.Credential.ID

	require.NoError(t, r.Used(ctx, id, 0, 3))
	require.ErrorIs(t, r.Used(ctx, id, 0, 4), registry.ErrCounterRaced, "a second use checked against the same counter")
	got, err := r.Lookup(ctx, "alice", id)
	require.NoError(t, err)
	assert.EqualValues(t, 3, got.SignCount)
	require.ErrorIs(t, r.Used(ctx, id, 3, 3), passkey.ErrClone)
	require.NoError(t, r.Used(ctx, id, 3, 7))

	zero := register(t, r, "alice", "synced").Credential.ID
	require.NoError(t, r.Used(ctx, zero, 0, 0), "no counter")
	require.NoError(t, r.Used(ctx, zero, 0, 0), "no counter, again")

	require.ErrorIs(t, r.Used(ctx, []byte("nope"), 0, 0), registry.ErrUnknown)
	require.NoError(t, r.Remove(ctx, "alice", id, nil))
	require.ErrorIs(t, r.Used(ctx, id, 7, 8), registry.ErrRemoved)
}
