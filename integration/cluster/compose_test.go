package cluster

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// docker-compose.yml runs what the harness's documented mode runs: the
// server release go.mod pins, its dynamic config file, the schema script,
// the history shards, and `toolgate namespace setup`. A change to one
// that the other does not follow fails here.
func TestComposeRunsWhatTheHarnessRuns(t *testing.T) {
	ctx := context.Background()
	moduleDir, err := ModuleDir(ctx)
	require.NoError(t, err)
	version, err := goOutput(ctx, moduleDir, "list", "-m", "-f", "{{.Version}}", "go.temporal.io/server")
	require.NoError(t, err)

	raw, err := os.ReadFile(filepath.Join(moduleDir, "docker-compose.yml"))
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Entrypoint  []string          `yaml:"entrypoint"`
			Command     []string          `yaml:"command"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &compose))

	serverTag := "${TEMPORAL_VERSION:-" + strings.TrimPrefix(version, "v") + "}"
	for _, name := range []string{"temporal", "temporal-schema"} {
		assert.True(t, strings.HasSuffix(compose.Services[name].Image, ":"+serverTag),
			"%s runs image %s; the harness runs server %s (go.mod)", name, compose.Services[name].Image, version)
	}

	temporal := compose.Services["temporal"]
	dcPath := temporal.Environment["DYNAMIC_CONFIG_FILE_PATH"]
	assert.Contains(t, temporal.Volumes, "./deploy/temporal/dynamicconfig.yaml:"+dcPath+":ro",
		"the server reads deploy/temporal/dynamicconfig.yaml, the harness's documented mode")
	assert.Equal(t, DocumentedDynamicConfig(moduleDir), filepath.Join(moduleDir, "deploy", "temporal", "dynamicconfig.yaml"))
	assert.Equal(t, "${TEMPORAL_HISTORY_SHARDS:-4}", temporal.Environment["NUM_HISTORY_SHARDS"], "4 history shards, as the harness")
	assert.Equal(t, "postgres12", temporal.Environment["DB"])

	schema := compose.Services["temporal-schema"]
	assert.Contains(t, schema.Volumes, "./deploy/temporal/setup-schema.sh:/setup-schema.sh:ro")
	assert.Equal(t, []string{"/bin/sh", "/setup-schema.sh"}, schema.Entrypoint, "the schema script the harness runs")

	ns := compose.Services["temporal-namespace"]
	require.GreaterOrEqual(t, len(ns.Command), 2)
	assert.Equal(t, []string{"namespace", "setup"}, ns.Command[:2], "the namespace is set up as the harness does it")
	assert.Equal(t, "${TOOLGATE_IMAGE:-toolgate:local}", ns.Image)

	// docs/production.md names the same release.
	docs, err := os.ReadFile(filepath.Join(moduleDir, "docs", "production.md"))
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile("`TEMPORAL_VERSION` \\| `"+regexp.QuoteMeta(strings.TrimPrefix(version, "v"))+"`"), string(docs))
}
