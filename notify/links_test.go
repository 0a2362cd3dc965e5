package notify_test

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/notify"
)

func signer(t *testing.T, key string) *notify.LinkSigner {
	s, err := notify.NewLinkSigner([]byte(key))
	require.NoError(t, err)
	return s
}

func linkProblem(t *testing.T, err error) notify.LinkProblem {
	t.Helper()
	var le *notify.LinkError
	require.True(t, errors.As(err, &le), "want a *LinkError, got %v", err)
	return le.Problem
}

func TestLinkSigner(t *testing.T) {
	s := signer(t, "0123456789abcdef0123456789abcdef")
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	token, err := s.Sign("call-1", "Alice@Example.com", "approve_for_session", now.Add(time.Hour))
	require.NoError(t, err)
	assert.NotContains(t, token, "=", "URL-safe, unpadded")
	assert.NotContains(t, token, "+")
	assert.NotContains(t, token, "/")

	c, err := s.Verify(token, now)
	require.NoError(t, err)
	assert.Equal(t, "call-1", c.CallID)
	assert.Equal(t, "alice@example.com", c.Recipient)
	assert.Equal(t, "approve_for_session", c.Decision)
	assert.Equal(t, now.Add(time.Hour).Unix(), c.Expires.Unix())
	assert.NotEmpty(t, c.ID)

	other, err := s.Sign("call-1", "alice@example.com", "approve_for_session", now.Add(time.Hour))
	require.NoError(t, err)
	c2, err := s.Verify(other, now)
	require.NoError(t, err)
	assert.NotEqual(t, c.ID, c2.ID, "every link has its own ID")

	t.Run("expired", func(t *testing.T) {
		_, err := s.Verify(token, now.Add(time.Hour))
		assert.Equal(t, notify.LinkExpired, linkProblem(t, err))
		assert.Contains(t, err.Error(), "expired at 2026-05-01T13:00:00Z")
	})
	t.Run("tampered payload", func(t *testing.T) {
		// The same link for another call, or another decision, under the
		// original signature.
		payload, sig, _ := strings.Cut(token, ".")
		raw, err := base64.RawURLEncoding.DecodeString(payload)
		require.NoError(t, err)
		for _, change := range [][2]string{{`"call-1"`, `"call-2"`}, {`"approve_for_session"`, `"approve"`}, {`alice@`, `mallory@`}} {
			forged := strings.Replace(string(raw), change[0], change[1], 1)
			require.NotEqual(t, string(raw), forged)
			_, err := s.Verify(base64.RawURLEncoding.EncodeToString([]byte(forged))+"."+sig, now)
			assert.Equal(t, notify.LinkTampered, linkProblem(t, err), change[1])
		}
	})
	t.Run("tampered signature", func(t *testing.T) {
		i := len(token) - 10
		repl := byte('A')
		if token[i] == 'A' {
			repl = 'B'
		}
		_, err := s.Verify(token[:i]+string(repl)+token[i+1:], now)
		assert.Equal(t, notify.LinkTampered, linkProblem(t, err))
	})
	t.Run("another spelling of the same signature", func(t *testing.T) {
		// The last character of a 32-byte signature carries two unused
		// bits; a lax decoder would accept a second spelling.
		last := token[len(token)-1]
		_, err := s.Verify(token[:len(token)-1]+string(last^1), now)
		assert.Error(t, err)
	})
	t.Run("another secret", func(t *testing.T) {
		_, err := signer(t, "another secret, long enough......").Verify(token, now)
		assert.Equal(t, notify.LinkTampered, linkProblem(t, err))
	})
	t.Run("malformed", func(t *testing.T) {
		for _, bad := range []string{"", "nodot", ".", "abc.", ".abc", "a.b.c!", token[:len(token)/2] + "%%%"} {
			_, err := s.Verify(bad, now)
			p := linkProblem(t, err)
			assert.True(t, p == notify.LinkMalformed || p == notify.LinkTampered, "%q: %s", bad, p)
		}
		_, err := s.Verify("nodot", now)
		assert.Equal(t, notify.LinkMalformed, linkProblem(t, err))
	})
}

func TestLinkSignerRefusesBadInput(t *testing.T) {
	_, err := notify.NewLinkSigner([]byte("short"))
	assert.ErrorContains(t, err, "at least 16 bytes")
	s := signer(t, "0123456789abcdef0123456789abcdef")
	_, err = s.Sign("call-1", "a@example.com", "approve_with_edits", time.Now().Add(time.Hour))
	assert.ErrorContains(t, err, "not one of")
	_, err = s.Sign("", "a@example.com", "approve", time.Now().Add(time.Hour))
	assert.Error(t, err)
}

func TestLinkSecretIsKeptInTheDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := notify.LoadOrCreateLinkSecret(dir)
	require.NoError(t, err)
	assert.Len(t, first, 64)
	info, err := os.Stat(filepath.Join(dir, notify.LinkSecretFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	again, err := notify.LoadOrCreateLinkSecret(dir)
	require.NoError(t, err)
	assert.Equal(t, first, again, "a restart keeps the links valid")

	require.NoError(t, os.WriteFile(filepath.Join(dir, notify.LinkSecretFile), []byte("short\n"), 0o600))
	_, err = notify.LoadOrCreateLinkSecret(dir)
	assert.ErrorContains(t, err, "at least 16 bytes")
}
