package passkey_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/passkeytest"
)

const (
	rpID   = "toolgate.example.com"
	origin = "https://toolgate.example.com"
)

var rp = passkey.RelyingParty{ID: rpID, Origins: []string{origin}}

func decision(now time.Time) passkey.Decision {
	return passkey.Decision{Call: "pay-1", Run: "run-1", Tool: "send_money", Args: "sha256:aa", Kind: "approved",
		By: "alice", Expires: now.Add(2 * time.Minute)}
}

func TestAPersonsPasskeyApprovesExactlyTheDecisionItSigned(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	auth := passkeytest.New()
	cred := auth.Credential("alice", rpID)
	d := decision(now)

	count, err := passkey.Verify(cred, auth.Assert(d, rpID, origin), d, rp, 0, now)
	require.NoError(t, err)
	assert.Equal(t, uint32(1), count)

	// Every field of the decision is in the challenge.
	for name, change := range map[string]func(*passkey.Decision){
		"another call":    func(d *passkey.Decision) { d.Call = "pay-2" },
		"another run":     func(d *passkey.Decision) { d.Run = "run-2" },
		"another tool":    func(d *passkey.Decision) { d.Tool = "delete_db" },
		"other arguments": func(d *passkey.Decision) { d.Args = "sha256:bb" },
		"another kind":    func(d *passkey.Decision) { d.Kind = "approved_for_session" },
		"a later expiry":  func(d *passkey.Decision) { d.Expires = d.Expires.Add(time.Minute) },
	} {
		t.Run(name, func(t *testing.T) {
			a := auth.Assert(d, rpID, origin)
			other := d
			change(&other)
			_, err := passkey.Verify(cred, a, other, rp, 0, now)
			assert.ErrorIs(t, err, passkey.ErrChallenge)
		})
	}
}

func TestAPasskeyAssertionIsRefusedForWhatIsWrongWithIt(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	d := decision(now)
	auth := passkeytest.New()
	cred := auth.Credential("alice", rpID)

	t.Run("none", func(t *testing.T) {
		_, err := passkey.Verify(cred, nil, d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrNoAssertion)
	})
	t.Run("expired", func(t *testing.T) {
		_, err := passkey.Verify(cred, auth.Assert(d, rpID, origin), d, rp, 0, d.Expires)
		assert.ErrorIs(t, err, passkey.ErrExpired)
	})
	t.Run("an expiry beyond a ceremony", func(t *testing.T) {
		long := d
		long.Expires = now.Add(time.Hour)
		_, err := passkey.Verify(cred, auth.Assert(long, rpID, origin), long, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrInvalid)
	})
	t.Run("without user verification", func(t *testing.T) {
		noUV := passkeytest.New()
		noUV.NoUV = true
		_, err := passkey.Verify(noUV.Credential("alice", rpID), noUV.Assert(d, rpID, origin), d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrNotVerified)
	})
	t.Run("another person's credential", func(t *testing.T) {
		bob := passkeytest.New()
		_, err := passkey.Verify(bob.Credential("bob", rpID), bob.Assert(d, rpID, origin), d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrNotTheirs)
	})
	t.Run("signed by another key than the credential's", func(t *testing.T) {
		forger := passkeytest.New()
		forger.ID = auth.ID
		_, err := passkey.Verify(cred, forger.Assert(d, rpID, origin), d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrInvalid)
	})
	t.Run("named for another credential", func(t *testing.T) {
		other := passkeytest.New()
		_, err := passkey.Verify(cred, other.Assert(d, rpID, origin), d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrOtherCredential)
	})
	t.Run("from another origin", func(t *testing.T) {
		_, err := passkey.Verify(cred, auth.Assert(d, rpID, "https://evil.example"), d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrInvalid)
	})
	t.Run("for another relying party", func(t *testing.T) {
		_, err := passkey.Verify(cred, auth.Assert(d, "evil.example", origin), d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrInvalid)
	})
	t.Run("one byte of the signature changed", func(t *testing.T) {
		a := auth.Assert(d, rpID, origin)
		a.Signature[len(a.Signature)-1] ^= 1
		_, err := passkey.Verify(cred, a, d, rp, 0, now)
		assert.ErrorIs(t, err, passkey.ErrInvalid)
	})
	t.Run("a counter that went back (a clone)", func(t *testing.T) {
		a := auth.Assert(d, rpID, origin)
		count, err := passkey.Verify(cred, a, d, rp, 0, now) // the counter it carries
		require.NoError(t, err)
		_, err = passkey.Verify(cred, a, d, rp, count, now)
		assert.ErrorIs(t, err, passkey.ErrClone, "the same counter again is a replay or a clone")
		_, err = passkey.Verify(cred, a, d, rp, count+5, now)
		assert.ErrorIs(t, err, passkey.ErrClone)
	})
	t.Run("an authenticator that keeps no counter", func(t *testing.T) {
		synced := passkeytest.New()
		synced.NoCounter = true
		c := synced.Credential("alice", rpID)
		for range 2 {
			count, err := passkey.Verify(c, synced.Assert(d, rpID, origin), d, rp, 0, now)
			require.NoError(t, err)
			assert.Zero(t, count)
		}
	})
}

func TestAnAssertionsDigestCoversEveryByte(t *testing.T) {
	now := time.Now()
	a := passkeytest.New().Assert(decision(now), rpID, origin)
	before := a.Digest()
	a.AuthenticatorData[36] ^= 1
	assert.NotEqual(t, before, a.Digest())
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, before)
}

func TestAnAssertionReadFromABrowsersJSONVerifies(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	auth := passkeytest.New()
	d := decision(now)
	a := auth.Assert(d, rpID, origin)

	read, err := passkey.FromBrowser(passkeytest.BrowserJSON(a), d.Expires)
	require.NoError(t, err)
	assert.Equal(t, a.Digest(), read.Digest())
	_, err = passkey.Verify(auth.Credential("alice", rpID), read, d, rp, 0, now)
	require.NoError(t, err)

	_, err = passkey.FromBrowser([]byte(`{"id":"x"}`), d.Expires)
	assert.ErrorIs(t, err, passkey.ErrInvalid)
}
