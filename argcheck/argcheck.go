// Package argcheck words JSON Schema refusals of a call's arguments the one
// way toolgate says them, for tools toolgate runs (package tool) and for
// the agent's own tools a policy file describes (package policy/rules).
package argcheck

import (
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Problem turns a schema validation error into one line that names each
// offending field: "at /path: got number, want string; at /mode: ...".
func Problem(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var lines []string
	for _, leaf := range Leaves(ve) {
		lines = append(lines, Line(leaf))
	}
	return strings.Join(lines, "; ")
}

// Line words one leaf of a refusal: "at /field: what is wrong".
func Line(leaf *jsonschema.ValidationError) string {
	return fmt.Sprintf("at /%s: %s", strings.Join(leaf.InstanceLocation, "/"), leaf.ErrorKind.LocalizedString(english))
}

var english = message.NewPrinter(language.English)

// Leaves are the innermost causes of a refusal: the fields themselves.
func Leaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, Leaves(c)...)
	}
	return out
}
