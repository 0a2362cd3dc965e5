package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// provedLog is a log of three calls, signed, and the receipt of c1.
func provedLog(t *testing.T) (*Ledger, Receipt) {
	l, _ := openTest(t)
	ctx := context.Background()
	for i := range 3 {
		_, err := l.Append(ctx, entry(fmt.Sprintf("c%d", i), KindCallSubmitted), entry(fmt.Sprintf("c%d", i), KindCallDecided))
		require.NoError(t, err)
	}
	r, err := l.Prove(ctx, "c1")
	require.NoError(t, err)
	return l, r
}

func writeJSON(t *testing.T, v any) []byte {
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, v))
	return b.Bytes()
}

// indented lays out a JSON document, or a stream of them, anew as jq .
// does (sortKeys: and sorted, as jq -S . does, HTML escaped as well).
func indented(t *testing.T, data []byte, sortKeys bool) []byte {
	t.Helper()
	var out bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for dec.More() {
		var raw json.RawMessage
		require.NoError(t, dec.Decode(&raw))
		if sortKeys {
			var v any
			require.NoError(t, json.Unmarshal(raw, &v))
			b, err := json.MarshalIndent(v, "", "  ")
			require.NoError(t, err)
			out.Write(b)
		} else {
			require.NoError(t, json.Indent(&out, raw, "", "  "))
		}
		out.WriteString("\n")
	}
	return out.Bytes()
}

// olderReceipt is r as toolgate wrote receipts before entry_bytes: each
// entry an object whose exact bytes are hashed.
func olderReceipt(t *testing.T, r Receipt) []byte {
	type older struct {
		Index int64           `json:"index"`
		Entry json.RawMessage `json:"entry"`
		Proof []string        `json:"proof"`
	}
	out := struct {
		CallID     string  `json:"call_id"`
		Key        string  `json:"key,omitempty"`
		Checkpoint string  `json:"checkpoint"`
		Entries    []older `json:"entries"`
	}{CallID: r.CallID, Key: r.Key, Checkpoint: r.Checkpoint}
	for _, e := range r.Entries {
		out.Entries = append(out.Entries, older{e.Index, e.Bytes, e.Proof})
	}
	return writeJSON(t, out)
}

func verifyReceiptFile(t *testing.T, l *Ledger, data []byte) error {
	t.Helper()
	var r Receipt
	require.NoError(t, json.Unmarshal(data, &r))
	_, err := VerifyReceipt(r, l.Verifier())
	return err
}

func TestAReceiptVerifiesLaidOutAnewAndNamesAChangedEntry(t *testing.T) {
	l, r := provedLog(t)
	file := writeJSON(t, r)
	assert.Contains(t, string(file), `"entry":{"args":{"a":"<b>","z":1},`, "the object to read, as stored")
	assert.Contains(t, string(file), `"entry_bytes":"eyJhcmdzIjp7ImEiOiI8Yj4iLCJ6IjoxfSwi`)

	for name, data := range map[string][]byte{
		"as written": file, "jq .": indented(t, file, false), "jq -S .": indented(t, file, true),
	} {
		assert.NoError(t, verifyReceiptFile(t, l, data), name)
	}

	// A value of the object to read changed: the bytes still verify, the
	// object no longer says what they hold.
	changed := bytes.Replace(indented(t, file, true), []byte(`"session": "s"`), []byte(`"session": "t"`), 1)
	assert.ErrorContains(t, verifyReceiptFile(t, l, changed), `entry #2 was changed: its "entry" is not the JSON its "entry_bytes" hold`)
	// A key twice, which readers take differently, is refused too.
	twice := bytes.Replace(file, []byte(`"session":"s"`), []byte(`"session":"t","session":"s"`), 1)
	assert.ErrorContains(t, verifyReceiptFile(t, l, twice), `entry #2 was changed`)

	// The bytes changed (both copies, as a forger would): the proof fails.
	forged := r
	forged.Entries = append([]ProvenEntry(nil), r.Entries...)
	e := forged.Entries[1]
	e.Bytes = bytes.Replace(e.Bytes, []byte(`"call.decided"`), []byte(`"call.decidex"`), 1)
	e.Entry = e.Bytes
	forged.Entries[1] = e
	assert.ErrorContains(t, verifyReceiptFile(t, l, indented(t, writeJSON(t, forged), false)),
		"entry #3 (call.decidex c1/call.decided) was changed: it is not the log's entry #3 in the checkpoint of size 6")
}

func TestAReceiptOfTheOlderFormatVerifiesAsWrittenAndSaysWhenReformatted(t *testing.T) {
	l, r := provedLog(t)
	file := olderReceipt(t, r)
	require.NotContains(t, string(file), "entry_bytes")
	assert.NoError(t, verifyReceiptFile(t, l, file), "as written, it verifies")

	err := verifyReceiptFile(t, l, indented(t, file, false))
	assert.ErrorContains(t, err, "entry #2 (call.submitted c1/call.submitted) was reformatted, not changed")
	assert.ErrorContains(t, err, `the older format ("entry" without "entry_bytes")`)
	assert.ErrorContains(t, verifyReceiptFile(t, l, indented(t, file, true)), "entry #2 (call.submitted c1/call.submitted) was reformatted")

	changed := bytes.Replace(file, []byte(`"session":"s"`), []byte(`"session":"t"`), 1)
	assert.ErrorContains(t, verifyReceiptFile(t, l, changed), "entry #2 (call.submitted c1/call.submitted) was changed")
	changed = bytes.Replace(indented(t, file, false), []byte(`"session": "s"`), []byte(`"session": "t"`), 1)
	assert.ErrorContains(t, verifyReceiptFile(t, l, changed), "entry #2 (call.submitted c1/call.submitted) was changed", "changed, and laid out anew")
}

// olderExport is an export as toolgate wrote them before entry_bytes.
func olderExport(t *testing.T, export []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(export, []byte("\n")) {
		var l struct {
			Index *int64          `json:"index"`
			Bytes []byte          `json:"entry_bytes"`
			Proof []string        `json:"proof,omitempty"`
			Entry json.RawMessage `json:"entry"`
		}
		if json.Unmarshal(line, &l) != nil || l.Index == nil {
			out.Write(line)
			continue
		}
		out.Write(writeJSON(t, struct {
			Index int64           `json:"index"`
			Entry json.RawMessage `json:"entry"`
			Proof []string        `json:"proof,omitempty"`
		}{*l.Index, l.Bytes, l.Proof}))
	}
	return out.Bytes()
}

func TestAnExportVerifiesLaidOutAnewAndTheOlderFormatAsWritten(t *testing.T) {
	l, _ := provedLog(t)
	ctx := context.Background()
	var whole, part bytes.Buffer
	require.NoError(t, l.Export(ctx, &whole, time.Time{}, time.Time{}))
	require.NoError(t, l.Export(ctx, &part, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{}))
	verify := func(data []byte) error {
		_, err := VerifyExport(bytes.NewReader(data), l.Verifier(), nil)
		return err
	}
	for name, data := range map[string][]byte{"whole": whole.Bytes(), "part": part.Bytes()} {
		assert.NoError(t, verify(data), name)
		assert.NoError(t, verify(indented(t, data, false)), name+", jq .")
		assert.NoError(t, verify(indented(t, data, true)), name+", jq -S .")

		changed := bytes.Replace(indented(t, data, true), []byte(`"kind": "call.decided"`), []byte(`"kind": "call.decidex"`), 1)
		assert.ErrorContains(t, verify(changed), `entry #1 was changed: its "entry" is not the JSON its "entry_bytes" hold`, name)

		older := olderExport(t, data)
		require.NotContains(t, string(older), "entry_bytes")
		assert.NoError(t, verify(older), name+", the older format as written")
		changed = bytes.Replace(older, []byte(`"kind":"call.decided"`), []byte(`"kind":"call.decidex"`), 1)
		assert.Error(t, verify(changed), name+", the older format changed")
	}
	err := verify(indented(t, olderExport(t, whole.Bytes()), true))
	assert.ErrorContains(t, err, "the export was reformatted, not changed (entry #0 first)")
	assert.ErrorContains(t, err, `the older format ("entry" without "entry_bytes")`)
	assert.ErrorContains(t, verify(indented(t, olderExport(t, part.Bytes()), false)), "entry #0 (call.submitted c0/call.submitted) was reformatted, not changed")
	changed := bytes.Replace(olderExport(t, part.Bytes()), []byte(`"kind":"call.decided"`), []byte(`"kind":"call.decidex"`), 1)
	assert.ErrorContains(t, verify(changed), "entry #1 (call.decidex c0/call.decided) was changed")

	// What is not JSON is named by its line, laid out or not.
	bad := append(indented(t, whole.Bytes(), false), "{oops\n"...)
	assert.ErrorContains(t, verify(bad), fmt.Sprintf("export line %d is not JSON", bytes.Count(bad, []byte("\n"))))
	assert.ErrorContains(t, verify([]byte("{\"ledger\":{}}\n\n]\n")), "export line 3 is not JSON")
}

// A held checkpoint that the stored ones do not extend is a fork, and
// the message names the range of entries before it, in order.
func TestAMismatchNamesTheRangeInOrder(t *testing.T) {
	l, _ := openTest(t)
	ctx := context.Background()
	for i := range 10 {
		_, err := l.Append(ctx, entry(fmt.Sprintf("c%d", i), KindCallDecided))
		require.NoError(t, err)
		if i == 3 || i == 9 {
			_, err = l.SignCheckpoint(ctx)
			require.NoError(t, err)
		}
	}
	// The holder saw another log's first four entries, signed by the
	// same key: the log was rewritten before #4.
	other, err := Open(ctx, Options{DSN: t.TempDir() + "/other.db", Keys: l.opts.Keys})
	require.NoError(t, err)
	defer other.Close()
	for i := range 4 {
		_, err := other.Append(ctx, entry(fmt.Sprintf("d%d", i), KindCallDecided))
		require.NoError(t, err)
	}
	held, err := other.SignCheckpoint(ctx)
	require.NoError(t, err)

	_, err = l.VerifyStore(ctx, [][]byte{held.Note})
	assert.ErrorContains(t, err, "the log forked: the log's checkpoint of size 4 and the held checkpoint of size 4 sign different trees")
	assert.ErrorContains(t, err, "the held checkpoint's differ between #0 and #3")
	assert.NotContains(t, fmt.Sprint(err), "between #10", "never a reversed range")
}
