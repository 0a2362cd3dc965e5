package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
)

// Carried is an entry as receipts, exports and the API's audit routes
// carry it (docs/audit.md, "The formats"): its index, its bytes as stored
// in a base64 string, which no reformatting of the file changes and which
// its leaf hash covers, and the same entry as a JSON object, for people.
//
// Receipts and exports of the older format carry the object alone, and
// its exact bytes are hashed: they verify as they were written, and no
// longer once a tool reformats them (jq ., an editor). Stored reads both.
type Carried struct {
	Index int64 `json:"index"`
	// Entry is the entry as a JSON object, to read; in the older format
	// the only copy, whose bytes are the entry's.
	Entry json.RawMessage `json:"entry,omitempty"`
	// Bytes are the entry's bytes as stored (base64 in JSON).
	Bytes []byte `json:"entry_bytes,omitempty"`
}

// Carry is s as receipts, exports and the API carry it. An entry that is
// not JSON (a damaged database) is carried by its bytes alone.
func (s Stored) Carry() Carried {
	c := Carried{Index: s.Index, Bytes: s.Entry}
	if json.Valid(s.Entry) {
		c.Entry = s.Entry
	}
	return c
}

// Older reports whether c is in the older format: the object alone.
func (c Carried) Older() bool { return c.Bytes == nil }

// Stored returns the entry's bytes as stored: entry_bytes, or in the
// older format the bytes of entry. Beside entry_bytes, entry must hold the
// same JSON as them (however laid out), or a person would read one entry
// while another is verified: that is an error naming the entry.
func (c Carried) Stored() (Stored, error) {
	switch {
	case c.Older() && len(c.Entry) == 0:
		return Stored{}, fmt.Errorf("entry #%d carries neither entry_bytes nor entry", c.Index)
	case c.Older():
		return Stored{Index: c.Index, Entry: c.Entry}, nil
	case len(c.Entry) > 0:
		held, err := jsonValue(c.Bytes)
		if err != nil {
			break // not JSON: the entry's own check names it
		}
		shown, err := jsonValue(c.Entry)
		if err != nil || !sameValue(shown, held) {
			return Stored{}, fmt.Errorf("entry #%d was changed: its \"entry\" is not the JSON its \"entry_bytes\" hold (the bytes are what is verified; the object is there to read)", c.Index)
		}
	}
	return Stored{Index: c.Index, Entry: c.Bytes}, nil
}

// MarshalJSON writes s as a Carried entry.
func (s Stored) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := WriteJSON(&b, s.Carry()); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads a Carried entry, of either format (Carried.Stored).
func (s *Stored) UnmarshalJSON(b []byte) error {
	var c Carried
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	st, err := c.Stored()
	if err != nil {
		return err
	}
	*s = st
	return nil
}

// reformatted reports whether an entry of the older format that did not
// verify was only laid out anew: its canonical JSON, the form toolgate
// stores, is other bytes than it, and those verify (verifies says).
func reformatted(c Carried, data []byte, verifies func([]byte) bool) bool {
	if !c.Older() {
		return false // entry_bytes: a reformatting does not touch them
	}
	canon, err := CanonicalJSON(data)
	return err == nil && !bytes.Equal(canon, data) && verifies(canon)
}

// errReformatted says an entry of the older format was reformatted.
func errReformatted(what string, index int64) error {
	return fmt.Errorf("%s was reformatted, not changed: it holds the same JSON as the log's entry #%d, laid out anew, and the leaf hash covers the bytes as written. %s", what, index, olderFormat)
}

// olderFormat says what to do with a reformatted file of the older format.
const olderFormat = "It is in the older format (\"entry\" without \"entry_bytes\"), which does not survive reformatting: " +
	"check the file as it was written, or make it again with this toolgate, whose receipts and exports do"

// maxDepth bounds the nesting jsonValue reads, as encoding/json does.
const maxDepth = 10000

// jsonValue decodes one JSON document to compare it as a value: numbers
// as written (sameValue compares them exactly), an object with a key
// twice refused (readers disagree on which one counts).
func jsonValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

func readValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deep")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		m := map[string]any{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			if _, twice := m[key]; twice {
				return nil, fmt.Errorf("key %q is there twice", key)
			}
			if m[key], err = readValue(dec, depth+1); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // }
		return m, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := readValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token() // ]
		return a, err
	}
	return t, nil // a string, a json.Number, a bool or nil
}

// sameValue reports whether two decoded JSON values are equal: numbers
// by their exact value (1.0 is 1, 1e2 is 100), all else as decoded.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := exactNumber(x)
		ry, oky := exactNumber(y)
		if !okx || !oky {
			return x == y
		}
		return rx.Cmp(ry) == 0
	}
	return a == b
}

// exactNumber is a JSON number's exact value; not for one of more than
// 400 characters or an exponent past ±1000, whose value would take long
// to compute (those compare as text).
func exactNumber(n json.Number) (*big.Rat, bool) {
	s := string(n)
	if len(s) > 400 {
		return nil, false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, err := strconv.Atoi(s[i+1:])
		if err != nil || exp > 1000 || exp < -1000 {
			return nil, false
		}
	}
	return new(big.Rat).SetString(s)
}
