package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/apiclient"
	"github.com/toolgate/toolgate/tool"
)

// devTokens reads the agent and approver tokens `toolgate dev` created.
func (d *devEnv) devTokens() (agent, approver string) {
	d.t.Helper()
	raw, err := os.ReadFile(filepath.Join(d.dataDir, "tokens.json"))
	require.NoError(d.t, err)
	var tokens struct{ Agent, Approver string }
	require.NoError(d.t, json.Unmarshal(raw, &tokens))
	return tokens.Agent, tokens.Approver
}

// getJSON sends GET with a bearer token and decodes the JSON answer.
func getJSON(t *testing.T, url, token string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
	return resp.StatusCode, body
}

func descriptorNames(ds []tool.Descriptor) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

func TestToolsListsTheBuiltInToolsThroughTheAPIAndTheCLI(t *testing.T) {
	d := newDev(t)
	agent, approver := d.devTokens()
	base := "http://" + d.httpAddr
	builtins := []string{"echo", "list_dir", "read_file", "shell", "write_file"}

	t.Run("Go API client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ds, err := apiclient.New(base, agent).Tools(ctx)
		require.NoError(t, err)
		assert.Equal(t, builtins, descriptorNames(ds))
		for _, desc := range ds {
			assert.NotEmpty(t, desc.Description, desc.Name)
			var schema map[string]any
			require.NoError(t, json.Unmarshal(desc.Schema, &schema), "%s has a JSON schema", desc.Name)
			assert.Equal(t, "object", schema["type"], desc.Name)
		}
	})

	t.Run("HTTP in a model API's shape", func(t *testing.T) {
		status, body := getJSON(t, base+"/v1/tools?format=openai", agent)
		require.Equal(t, http.StatusOK, status, "%v", body)
		tools := body["tools"].([]any)
		require.Len(t, tools, len(builtins))
		first := tools[0].(map[string]any)
		assert.Equal(t, "function", first["type"])
		fn := first["function"].(map[string]any)
		assert.Equal(t, "echo", fn["name"])
		assert.Equal(t, "object", fn["parameters"].(map[string]any)["type"])

		status, body = getJSON(t, base+"/v1/tools?format=yaml", agent)
		assert.Equal(t, http.StatusBadRequest, status)
		assert.Contains(t, body["error"].(map[string]any)["message"], "format must be one of")

		status, _ = getJSON(t, base+"/v1/tools", approver)
		assert.Equal(t, http.StatusForbidden, status, "approver tokens do not list tools")
	})

	t.Run("CLI over Temporal", func(t *testing.T) {
		r := d.in(t).cli("tools")
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, len(builtins)+2, r.stdout)
		assert.Equal(t, []string{"NAME", "DESCRIPTION"}, strings.Fields(lines[0]))
		for i, name := range builtins {
			assert.Equal(t, name, strings.Fields(lines[i+1])[0])
		}
		assert.Equal(t, "5 tools", lines[len(lines)-1])
	})

	t.Run("CLI over the API", func(t *testing.T) {
		r := d.in(t).cliWith([]string{"TOOLGATE_TOKEN=" + agent}, "tools", "--api", base, "--format", "anthropic")
		require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		var out struct {
			Tools []struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				InputSchema json.RawMessage `json:"input_schema"`
			} `json:"tools"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.Len(t, out.Tools, len(builtins))
		assert.Equal(t, "write_file", out.Tools[4].Name)
		assert.Contains(t, string(out.Tools[4].InputSchema), `"path"`)

		r = d.in(t).cli("tools", "--format", "xml")
		assert.Equal(t, 2, r.code, "an unknown format is a usage error: %s", r.stderr)
		assert.Contains(t, r.stderr, "--format must be one of json, openai, anthropic")
	})
}
