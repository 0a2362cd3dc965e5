package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A door key is made, trusted, listed and revoked with `toolgate doors`;
// the file of a door key is private, the doors file public.
func TestDoorsNewListRevoke(t *testing.T) {
	dir := t.TempDir()
	key, doors := filepath.Join(dir, "door-key.json"), filepath.Join(dir, "doors.json")
	code, out, errs := toolgate(t, "doors", "new", "api-1", "--key", key, "--doors", doors)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "door api-1: key ")
	info, err := os.Stat(key)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	code, _, errs = toolgate(t, "doors", "new", "api-1", "--key", key, "--doors", doors)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "already exists")
	assert.NotContains(t, errs, dir, "errors never name key files")

	code, out, errs = toolgate(t, "doors", "new", "api-2", "--key", filepath.Join(dir, "door-key-2.json"), "--doors", doors)
	require.Equal(t, exitOK, code, errs)
	code, out, errs = toolgate(t, "doors", "list", doors)
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `(?m)^api-1\s+[0-9a-f]{16}\s*$`, out)
	assert.Regexp(t, `(?m)^api-2\s+[0-9a-f]{16}\s*$`, out)
	id := regexpFind(t, `(?m)^api-1\s+([0-9a-f]{16})`, out)

	code, out, errs = toolgate(t, "doors", "revoke", id, doors)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "revoked")
	_, out, _ = toolgate(t, "doors", "list", doors)
	assert.Regexp(t, `(?m)^api-1\s+`+id+`\s+yes$`, out)

	code, _, errs = toolgate(t, "doors", "revoke", "0000000000000000", doors)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "trusts no key 0000000000000000")
}

// serve is a door and a worker trusts doors: neither starts without its
// file, and each says which file and how to make it.
func TestServeNeedsADoorKeyAndAWorkerTheDoors(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("TOOLGATE_DOOR_KEY", "")
	t.Setenv("TOOLGATE_DOORS", "")
	keys := filepath.Join(t.TempDir(), "keys.json")
	code, _, errs := toolgate(t, "keys", "new", keys)
	require.Equal(t, exitOK, code, errs)

	code, _, errs = toolgate(t, "serve", "--keys", keys, "--temporal-address", "127.0.0.1:1", "--tokens", writeTestTokens(t))
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "serve needs its door key: --door-key FILE")

	code, _, errs = toolgate(t, "worker", "--keys", keys, "--temporal-address", "127.0.0.1:1")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "a worker needs the doors it trusts: pass --doors FILE")

	// A worker never takes a doors file from where its tools write.
	require.NoError(t, os.MkdirAll(".toolgate", 0o700))
	code, _, errs = toolgate(t, "doors", "new", "planted", "--key", filepath.Join(t.TempDir(), "k.json"), "--doors", filepath.Join(".toolgate", "doors.json"))
	require.Equal(t, exitOK, code, errs)
	code, _, errs = toolgate(t, "worker", "--keys", keys, "--temporal-address", "127.0.0.1:1")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "a worker needs the doors it trusts")
}

func regexpFind(t *testing.T, pattern, s string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(s)
	require.Len(t, m, 2, "%q in %q", pattern, s)
	return m[1]
}
