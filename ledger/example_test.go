package ledger_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/toolgate/toolgate/ledger"
)

// checkReceipt checks a receipt (`toolgate audit proof CALL_ID`) with the
// formats' own packages alone: the checkpoint's signature with note, each
// entry's inclusion with tlog. vkey is the log's verifier key, obtained
// out of band (`toolgate audit key`), never from the receipt.
func checkReceipt(receipt []byte, vkey string) error {
	var r struct {
		CallID     string `json:"call_id"`
		Checkpoint string `json:"checkpoint"`
		Entries    []struct {
			Index int64           `json:"index"`
			Bytes []byte          `json:"entry_bytes"` // the bytes as stored, base64
			Entry json.RawMessage `json:"entry"`       // the same entry, to read
			Proof []string        `json:"proof"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(receipt, &r); err != nil {
		return err
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return err
	}
	n, err := note.Open([]byte(r.Checkpoint), note.VerifierList(verifier))
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// c2sp.org/tlog-checkpoint: origin, size, base64 root hash.
	lines := strings.Split(n.Text, "\n")
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return err
	}
	var root tlog.Hash
	b, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(b) != tlog.HashSize {
		return fmt.Errorf("root hash %q", lines[2])
	}
	copy(root[:], b)
	for _, e := range r.Entries {
		if e.Bytes == nil {
			e.Bytes = e.Entry // the older format: the object's exact bytes
		}
		var proof tlog.RecordProof
		for _, p := range e.Proof {
			var h tlog.Hash
			b, err := base64.StdEncoding.DecodeString(p)
			if err != nil || len(b) != tlog.HashSize {
				return fmt.Errorf("entry %d: proof hash %q", e.Index, p)
			}
			copy(h[:], b)
			proof = append(proof, h)
		}
		if err := tlog.CheckRecord(proof, size, root, e.Index, tlog.RecordHash(e.Bytes)); err != nil {
			return fmt.Errorf("entry %d: %w", e.Index, err)
		}
	}
	fmt.Printf("%s: %d entries of call %s in a tree of %d, signed by %s\n", lines[0], len(r.Entries), r.CallID, size, verifier.Name())
	return nil
}

// A receipt checked with golang.org/x/mod/sumdb/note and tlog, as
// docs/audit.md shows.
func Example_checkAReceipt() {
	dir, _ := os.MkdirTemp("", "ledger-example")
	defer os.RemoveAll(dir)
	keys, _, _ := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "prod")
	l, _ := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys})
	defer l.Close()
	ctx := context.Background()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, id := range []string{"w0", "w1", "w2"} {
		_, _ = l.Append(ctx,
			ledger.Entry{Kind: ledger.KindCallSubmitted, Event: id + "/run/call.submitted", At: at, CallID: id, Tool: "shell", Args: []byte(`{"command":"rm -rf build"}`)},
			ledger.Entry{Kind: ledger.KindCallDecided, Event: id + "/run/call.decided", At: at, CallID: id,
				Decision: &ledger.Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox"}})
	}
	r, _ := l.Prove(ctx, "w1")
	var buf bytes.Buffer
	_ = ledger.WriteJSON(&buf, r) // as `toolgate audit proof` writes it
	receipt := buf.Bytes()

	if err := checkReceipt(receipt, keys.VerifierKey); err != nil {
		fmt.Println("does not verify:", err)
	}
	var indented bytes.Buffer // laid out anew, as jq . does
	_ = json.Indent(&indented, receipt, "", "  ")
	if err := checkReceipt(indented.Bytes(), keys.VerifierKey); err != nil {
		fmt.Println("reformatted, does not verify:", err)
	}
	decided := r.Entries[1].Bytes
	forged := bytes.Replace(decided, []byte("alice"), []byte("mallory"), 1)
	tampered := strings.Replace(string(receipt), base64.StdEncoding.EncodeToString(decided), base64.StdEncoding.EncodeToString(forged), 1)
	if err := checkReceipt([]byte(tampered), keys.VerifierKey); err != nil {
		fmt.Println("tampered:", err)
	}
	// Output:
	// toolgate/prod: 2 entries of call w1 in a tree of 6, signed by toolgate/prod
	// toolgate/prod: 2 entries of call w1 in a tree of 6, signed by toolgate/prod
	// tampered: entry 3: invalid transparency proof
}
