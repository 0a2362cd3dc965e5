package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// preToolUseCommand is the PreToolUse command line of printed Claude Code
// settings.
func preToolUseCommand(t *testing.T, printed string) string {
	t.Helper()
	var settings struct {
		Hooks map[string][]struct {
			Hooks []struct {
				Command string `json:"command"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	require.NoError(t, json.Unmarshal([]byte(printed), &settings), printed)
	return settings.Hooks["PreToolUse"][0].Hooks[0].Command
}

// The printed settings reach toolgate over its HTTP API unless an
// operator asks for Temporal: a project directory needs no keyring.
func TestPrintedHookSettingsUseTheAPIByDefault(t *testing.T) {
	t.Setenv("TOOLGATE_API", "")
	t.Setenv("TOOLGATE_KEYS", "")
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Chdir(t.TempDir()) // a project directory: no .toolgate here

	code, out, errs := toolgate(t, "hook", "claude-code", "--print-settings")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "toolgate hook claude-code --api http://127.0.0.1:7700", preToolUseCommand(t, out))
	assert.Contains(t, errs, "TOOLGATE_TOKEN", "says where the token goes")

	code, out, errs = toolgate(t, "hook", "claude-code", "--print-settings", "--api", "https://toolgate.example.com")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "toolgate hook claude-code --api https://toolgate.example.com", preToolUseCommand(t, out))

	code, out, errs = toolgate(t, "hook", "codex", "--print-settings")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "command = 'toolgate hook codex --api http://127.0.0.1:7700 || {")

	code, out, errs = toolgate(t, "hook", "gemini-cli", "--print-settings")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, `"command": "toolgate hook gemini-cli --api http://127.0.0.1:7700 --log-level warn || { s=$?; echo \"toolgate hook failed (exit status $s), so the tool is blocked\" >&2; exit 2; }"`)
	assert.Contains(t, out, `"timeout": 600000`, "Gemini CLI's timeouts are in milliseconds")
	assert.Contains(t, errs, "where gemini runs")
	code, _, errs = toolgate(t, "hook", "gemini-cli", "--print-settings", "--http", "http://127.0.0.1:7700")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "Gemini CLI 0.61.0 has no HTTP hooks")

	for _, bad := range []string{"127.0.0.1:7700", "http://x/$(id)", "ftp://x"} {
		code, _, errs = toolgate(t, "hook", "claude-code", "--print-settings", "--api", bad)
		assert.Equal(t, exitUsage, code, bad)
		assert.Contains(t, errs, "give toolgate's base URL", bad)
	}

	// The operators' Temporal hook names the keyring by absolute path.
	code, _, errs = toolgate(t, "hook", "claude-code", "--print-settings", "--temporal")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "no payload keys")
	abs, err := filepath.Abs(filepath.Join(".toolgate", "keys.json"))
	require.NoError(t, err)
	assert.Contains(t, errs, abs)

	require.NoError(t, os.MkdirAll(".toolgate", 0o700))
	code, _, errs = toolgate(t, "keys", "new", filepath.Join(".toolgate", "keys.json"))
	require.Equal(t, 0, code, errs)
	// It signs as the operator's door: without a door key, it says so.
	code, _, errs = toolgate(t, "hook", "claude-code", "--print-settings", "--temporal")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "no door key")
	assert.Contains(t, errs, "--api URL")
	code, _, errs = toolgate(t, "doors", "new", "ops", "--key", filepath.Join(".toolgate", "door-key.json"), "--doors", filepath.Join(".toolgate", "doors.json"))
	require.Equal(t, 0, code, errs)
	door, err := filepath.Abs(filepath.Join(".toolgate", "door-key.json"))
	require.NoError(t, err)
	code, out, errs = toolgate(t, "hook", "claude-code", "--print-settings", "--temporal", "--temporal-address", "temporal.internal:7233")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "toolgate hook claude-code --keys "+abs+" --door-key "+door+" --temporal-address temporal.internal:7233", preToolUseCommand(t, out))

	code, _, errs = toolgate(t, "hook", "claude-code", "--temporal")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "--temporal goes with --print-settings")
}
