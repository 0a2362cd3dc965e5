// Package canonjson is the project's one canonical JSON: one encoding of
// a JSON value, so that two encodings of the same value compare, hash and
// key alike. Ledger entries are stored in it; a call request is keyed by
// it; hook attempts and MCP tool definitions recorded in histories were
// hashed with it. Its output must never change.
//
// It is not RFC 8785: numbers are kept as written, not re-serialised, and
// object keys sort by their UTF-8 bytes. Nothing depends on a verifier
// re-deriving it: receipts and exports carry each ledger entry's bytes.
package canonjson

import (
	"bytes"
	"encoding/json"
)

// Canonical rewrites a JSON document with its object keys sorted and no
// insignificant space, numbers kept as written, HTML characters
// unescaped.
func Canonical(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps are written with sorted keys
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
