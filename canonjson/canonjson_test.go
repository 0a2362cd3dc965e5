package canonjson

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Canonical's output is what stored entries are checked against and
// what hook attempts and tool pins were hashed with: it never changes.
func TestCanonicalKeepsItsBytes(t *testing.T) {
	for in, want := range map[string]string{
		`{"z": 1, "a": {"y": [1.0, 1e2, -0], "b": null}}`:          `{"a":{"b":null,"y":[1.0,1e2,-0]},"z":1}`,
		`{"html": "<b>&</b>", "ctl": "\u0001\t", "sep": "\u2028"}`: `{"ctl":"\u0001\t","html":"<b>&</b>","sep":"\u2028"}`,
		`{"é": "ü", "e": "\ud83d\ude00", "bad": "\udc00"}`:         `{"bad":"�","e":"😀","é":"ü"}`,
		` ["x", true, false] `:                                     `["x",true,false]`,
		`{"n": 12345678901234567890} trailing`:                     `{"n":12345678901234567890}`,
	} {
		got, err := Canonical([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, string(got), in)
	}
	_, err := Canonical([]byte(`{"a":`))
	assert.Error(t, err)
}
