package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/workflows"
)

// The API answers a call with a workflows.Result (200) or a
// client.Waiting (202); openapi.json, and the TypeScript types generated
// from it, must name every field they send.
func TestOpenAPIShapesNameEveryFieldTheAPISends(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(openAPI, &doc))
	for schema, v := range map[string]any{"WaitingCall": tgclient.Waiting{}, "Result": workflows.Result{}} {
		props := doc.Components.Schemas[schema].Properties
		require.NotEmpty(t, props, schema)
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			_, documented := props[name]
			assert.True(t, documented, "openapi.json's %s lacks %q, which %s sends", schema, name, typ)
		}
	}
}
