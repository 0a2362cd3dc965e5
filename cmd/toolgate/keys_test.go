package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func toolgate(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestKeysNewAddsACurrentKeyAndKeepsTheOlder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.json")
	code, out, errs := toolgate(t, "keys", "new", file)
	require.Equal(t, exitOK, code, errs)
	first := regexp.MustCompile(`key (k\d{8}-[0-9a-f]{6}) is current`).FindStringSubmatch(out)
	require.NotNil(t, first, out)
	assert.Contains(t, out, "(0 older kept to decrypt)")
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	code, out, errs = toolgate(t, "keys", "new", file)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "(1 older kept to decrypt)")

	code, out, errs = toolgate(t, "keys", "list", file)
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `(?m)^ID\s+CREATED\s+CURRENT$`, out)
	assert.Regexp(t, `(?m)^`+first[1]+`\s+\S+\s*$`, out, "the first key stays, not current")
	assert.Len(t, regexp.MustCompile(`(?m)\syes$`).FindAllString(out, -1), 1, "one key is current")

	require.NoError(t, os.Chmod(file, 0o644))
	code, _, errs = toolgate(t, "keys", "list", file)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "chmod 600")
}

func TestVerbsThatReachTemporalRefuseToGoWithoutKeys(t *testing.T) {
	t.Chdir(t.TempDir()) // no .toolgate/keys.json
	t.Setenv("TOOLGATE_KEYS", "")
	t.Setenv("TOOLGATE_INSECURE_PLAINTEXT_PAYLOADS", "")
	for _, args := range [][]string{
		{"worker", "--temporal-address", "127.0.0.1:1"},
		{"serve", "--temporal-address", "127.0.0.1:1", "--tokens", writeTestTokens(t)},
		{"status", "c1", "--temporal-address", "127.0.0.1:1"},
	} {
		code, _, errs := toolgate(t, args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errs)
		assert.Contains(t, errs, "no payload keys", "%v", args)
		abs, err := filepath.Abs(filepath.Join(".toolgate", "keys.json"))
		require.NoError(t, err)
		assert.Contains(t, errs, "there is none at "+abs, "names where it looked, by absolute path: %v", args)
		assert.Contains(t, errs, "TOOLGATE_KEYS to the keyring the workers use", "%v", args)
		assert.Contains(t, errs, "--api URL", "%v", args)
		assert.Contains(t, errs, "--insecure-plaintext-payloads", "%v", args)
		assert.NotContains(t, errs, "keys new", "never suggests a keyring the workers lack: %v", args)
	}
	code, _, errs := toolgate(t, "status", "c1", "--keys", "k.json", "--insecure-plaintext-payloads")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "exclude each other")
	code, _, errs = toolgate(t, "status", "c1", "--keys", "missing.json")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "missing.json")
}

func writeTestTokens(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tokens:\n  - name: alice\n    role: approver\n    sha256: "+
		"2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90\n"), 0o600))
	return path
}
