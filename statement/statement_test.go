package statement

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestSigner(t *testing.T, door string) *Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	return NewSigner(door, priv)
}

func decideStatement() Statement {
	return Statement{Kind: Decide, Call: "c1", Run: "r1", Session: "s1", Tool: "shell",
		Args: Digest(json.RawMessage(`{"command":"ls"}`)), Decision: "approved", By: "alice",
		Groups: []string{"ops"}, Identity: &Identity{Issuer: "https://idp", Subject: "a-1"}, Channel: "inbox"}
}

func TestCheckAcceptsTheMessageItWasSignedFor(t *testing.T) {
	door := newTestSigner(t, "api")
	doors := NewDoors(door.Public())
	sd, err := door.Sign(decideStatement())
	require.NoError(t, err)

	st, err := doors.Check(sd, decideStatement(), time.Now())
	require.NoError(t, err)
	assert.Equal(t, "api", st.Door)
	assert.Equal(t, "alice", st.By)
	assert.WithinDuration(t, time.Now().Add(Lifetime), st.Expires, time.Minute)
}

func TestCheckRefusesWhatTheStatementDoesNotSay(t *testing.T) {
	door := newTestSigner(t, "api")
	doors := NewDoors(door.Public())
	sd, err := door.Sign(decideStatement())
	require.NoError(t, err)

	for field, change := range map[string]func(*Statement){
		"call":             func(s *Statement) { s.Call = "c2" },
		"run":              func(s *Statement) { s.Run = "r2" },
		"session":          func(s *Statement) { s.Session = "s2" },
		"arguments":        func(s *Statement) { s.Args = Digest(json.RawMessage(`{"command":"rm -rf /"}`)) },
		"edited arguments": func(s *Statement) { s.Edited = Digest(json.RawMessage(`{}`)) },
		"decision":         func(s *Statement) { s.Decision = "approved_for_session" },
		"by":               func(s *Statement) { s.By = "mallory" },
		"groups":           func(s *Statement) { s.Groups = []string{"*"} },
		"identity":         func(s *Statement) { s.Identity = &Identity{Issuer: "https://idp", Subject: "forged"} },
		"channel":          func(s *Statement) { s.Channel = "slack" },
	} {
		want := decideStatement()
		change(&want)
		_, err := doors.Check(sd, want, time.Now())
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field+" differs")
	}
}

func TestCheckRefusesExpiredForgedUnknownAndRevoked(t *testing.T) {
	door := newTestSigner(t, "api")
	doors := NewDoors(door.Public())
	sd, err := door.Sign(decideStatement())
	require.NoError(t, err)

	_, err = doors.Check(sd, decideStatement(), time.Now().Add(Lifetime+time.Second))
	assert.ErrorContains(t, err, "expired")
	_, err = doors.Check(sd, decideStatement(), time.Now().Add(-2*Skew))
	assert.ErrorContains(t, err, "in the future")

	_, err = doors.Check(nil, decideStatement(), time.Now())
	assert.ErrorIs(t, err, ErrMissing)

	forged := *sd
	forged.Statement = json.RawMessage(strings.Replace(string(sd.Statement), `"ops"`, `"*"`, 1))
	_, err = doors.Check(&forged, decideStatement(), time.Now())
	assert.ErrorIs(t, err, ErrBadSignature)

	other := newTestSigner(t, "api")
	osd, err := other.Sign(decideStatement())
	require.NoError(t, err)
	_, err = doors.Check(osd, decideStatement(), time.Now())
	assert.ErrorIs(t, err, ErrUnknownKey)

	revoked := door.Public()
	revoked.Revoked = true
	_, err = NewDoors(revoked).Check(sd, decideStatement(), time.Now())
	assert.ErrorIs(t, err, ErrRevokedKey)

	// A key trusted under another door's name proves nothing of that door.
	renamed := door.Public()
	renamed.Door = "slack"
	_, err = NewDoors(renamed).Check(sd, decideStatement(), time.Now())
	assert.ErrorContains(t, err, `says door "api"`)
}

func TestHandedOnStatementsSkipTheClock(t *testing.T) {
	door := newTestSigner(t, "api")
	sd, err := door.Sign(decideStatement())
	require.NoError(t, err)
	_, err = NewDoors(door.Public()).Check(sd, decideStatement(), time.Time{})
	assert.NoError(t, err)
}

func TestDigestIgnoresEncoding(t *testing.T) {
	assert.Equal(t, Digest(json.RawMessage(`{"b":1,"a":"x"}`)), Digest(json.RawMessage(`{ "a": "x", "b": 1 }`)))
	assert.NotEqual(t, Digest(json.RawMessage(`{"a":1}`)), Digest(json.RawMessage(`{"a":2}`)))
}

func TestKeyFilesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "door-key.json")
	s, err := NewKeyFile(keyPath, "inbox-1")
	require.NoError(t, err)
	info, err := os.Stat(keyPath)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	_, err = NewKeyFile(keyPath, "inbox-1")
	assert.ErrorContains(t, err, "already exists")

	loaded, err := LoadSigner(keyPath)
	require.NoError(t, err)
	assert.Equal(t, s.Public(), loaded.Public())

	doorsPath := filepath.Join(dir, "doors.json")
	require.NoError(t, WriteDoors(doorsPath, NewDoors().Trust(s.Public())))
	doors, err := LoadDoors(doorsPath)
	require.NoError(t, err)
	sd, err := loaded.Sign(decideStatement())
	require.NoError(t, err)
	_, err = doors.Check(sd, decideStatement(), time.Now())
	assert.NoError(t, err)
}

func TestLoadDoorsRefusesAMisnamedKey(t *testing.T) {
	s := newTestSigner(t, "api")
	k := s.Public()
	k.KeyID = "0000000000000000"
	b, err := json.Marshal(doorsFile{Doors: []DoorKey{k}})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "doors.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err = LoadDoors(path)
	assert.ErrorContains(t, err, "its public key's ID is")

	_, err = LoadDoors(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "missing.json", "errors never name paths")
}
