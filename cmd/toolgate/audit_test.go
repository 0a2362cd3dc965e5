package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
)

// auditLedger is a ledger of ten calls' entries, with a checkpoint
// written to a file held apart from it, as --ledger-checkpoints does.
type auditLedger struct {
	db, key, held string
}

func newAuditLedger(t *testing.T) auditLedger {
	dir := t.TempDir()
	al := auditLedger{db: filepath.Join(dir, "ledger.db"), key: filepath.Join(dir, "ledger.key"), held: filepath.Join(dir, "held")}
	keys, _, err := ledger.LoadOrCreateKey(al.key, "prod")
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: al.db, Keys: keys,
		Publish: []func(context.Context, ledger.Checkpoint) error{appendCheckpointTo(al.held)}})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for i := range 10 {
		id := fmt.Sprintf("w%d", i)
		_, err := l.Append(ctx,
			ledger.Entry{Kind: ledger.KindCallSubmitted, Event: id + "/r/call.submitted", At: at, CallID: id, Session: "demo",
				Requester: "ci-7", Tool: "shell", Args: []byte(`{"command":"rm -rf build"}`)},
			ledger.Entry{Kind: ledger.KindCallDecided, Event: id + "/r/call.decided", At: at, CallID: id, Session: "demo",
				Decision: &ledger.Decision{Kind: "approved", DecidedBy: "alice", Channel: "inbox"}})
		require.NoError(t, err)
		if i == 4 {
			_, err = l.SignCheckpoint(ctx)
			require.NoError(t, err)
		}
	}
	_, err = l.SignCheckpoint(ctx)
	require.NoError(t, err)
	return al
}

func audit(t *testing.T, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"audit"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func (al auditLedger) exec(t *testing.T, sqls ...string) {
	db, err := sql.Open("sqlite", "file:"+al.db)
	require.NoError(t, err)
	defer db.Close()
	for _, s := range sqls {
		_, err := db.Exec(s)
		require.NoError(t, err)
	}
}

func TestAuditShowPrintsACallsEntries(t *testing.T) {
	al := newAuditLedger(t)
	code, out, errs := audit(t, "show", "w3", "--ledger", al.db, "--ledger-key", al.key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "#6  2026-12-03T10:00:00Z  call.submitted")
	assert.Contains(t, out, `args:     {"command":"rm -rf build"}`)
	assert.Contains(t, out, "#7  2026-12-03T10:00:00Z  call.decided")
	assert.Contains(t, out, "decision: approved by alice via inbox")

	code, _, errs = audit(t, "show", "nope", "--ledger", al.db, "--ledger-key", al.key)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, `the ledger has no entries for call "nope"`)
}

func TestAuditVerifyNamesWhatWasTamperedWith(t *testing.T) {
	code, out, errs := audit(t, "verify", "--ledger", newAuditLedger(t).db, "--ledger-key", newAuditLedger(t).key)
	assert.Equal(t, exitFailure, code, "another deployment's key: %s", out)
	assert.Contains(t, errs, "not signed by the log's key")

	cases := map[string]struct {
		sql  []string
		want string
	}{
		"intact":    {nil, ""},
		"edited":    {[]string{`UPDATE ledger_entries SET entry = replace(entry, 'alice', 'mallory') WHERE idx = 7`}, "entry #7 (call.decided w3/r/call.decided) was changed"},
		"deleted":   {[]string{`DELETE FROM ledger_entries WHERE idx = 3`}, "entry #3 is missing"},
		"reordered": {[]string{`UPDATE ledger_entries SET entry = (SELECT e.entry FROM ledger_entries e WHERE e.idx = 9 - ledger_entries.idx) WHERE idx IN (4, 5)`}, "entry #4"},
		"truncated": {[]string{`DELETE FROM ledger_entries WHERE idx >= 12`, `DELETE FROM ledger_checkpoints WHERE size > 12`, `UPDATE ledger_head SET size = 12`}, "entries #12 to #19 were removed"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			al := newAuditLedger(t)
			al.exec(t, c.sql...)
			code, out, errs := audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--checkpoint", al.held)
			if c.want == "" {
				assert.Equal(t, 0, code, errs)
				assert.Contains(t, out, "intact: 20 entries, 2 checkpoints, signed up to size 20, consistent with the held checkpoint of size 20")
				return
			}
			assert.Equal(t, exitFailure, code, out)
			assert.Contains(t, errs, "is NOT intact")
			assert.Contains(t, errs, c.want)
		})
	}
}

func TestAuditExportAndReceiptAreCheckedOffline(t *testing.T) {
	al := newAuditLedger(t)
	dir := t.TempDir()
	export, receipt := filepath.Join(dir, "export.jsonl"), filepath.Join(dir, "w3.receipt")
	code, _, errs := audit(t, "export", "--ledger", al.db, "--ledger-key", al.key, "-o", export)
	require.Equal(t, 0, code, errs)
	code, _, errs = audit(t, "proof", "w3", "--ledger", al.db, "--ledger-key", al.key, "-o", receipt)
	require.Equal(t, 0, code, errs)
	code, vkey, errs := audit(t, "key", "--ledger-key", al.key)
	require.Equal(t, 0, code, errs)
	assert.True(t, strings.HasPrefix(vkey, "toolgate/prod+"), vkey)
	key := "--key=" + strings.TrimSpace(vkey)

	code, out, errs := audit(t, "verify", "--export", export, key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "intact: 20 entries")
	code, out, errs = audit(t, "verify", "--receipt", receipt, key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "call w3, 2 entries in checkpoint 20 of toolgate/prod")

	b, err := os.ReadFile(export)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(export, bytes.Replace(b, []byte("alice"), []byte("mallo"), 1), 0o644))
	code, _, errs = audit(t, "verify", "--export", export, key)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, `entry #1 was changed: its "entry" is not the JSON its "entry_bytes" hold`)

	r, err := os.ReadFile(receipt)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(receipt, bytes.Replace(r, []byte("alice"), []byte("mallo"), 1), 0o644))
	code, _, errs = audit(t, "verify", "--receipt", receipt, key)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "entry #7 was changed")

	for name, garbage := range map[string]string{"receipt": "{not json", "export": "garbage\n"} {
		path := filepath.Join(dir, name+".bad")
		require.NoError(t, os.WriteFile(path, []byte(garbage), 0o644))
		code, _, errs = audit(t, "verify", "--"+name, path, key)
		assert.Equal(t, exitFailure, code, name)
		assert.Contains(t, errs, "not", name)
	}
	held := filepath.Join(dir, "held.bad")
	require.NoError(t, os.WriteFile(held, []byte("toolgate/prod\n3\nnot-a-hash\n"), 0o644))
	code, _, errs = audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--checkpoint", held)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "holds no checkpoint")
}

func TestAuditKeyNewMakesAPrivateKeyAndNeverOverwrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prod.key")
	code, out, errs := audit(t, "key", "--new", path, "--deployment", "prod")
	require.Equal(t, 0, code, errs)
	assert.True(t, strings.HasPrefix(out, "toolgate/prod+"))
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	code, _, errs = audit(t, "key", "--new", path, "--deployment", "prod")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, "is never overwritten")
	code, _, errs = audit(t, "key", "--new", path+"2")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "--new needs --deployment NAME")
}

func TestAuditVerifySplitsAHeldFileOfCheckpoints(t *testing.T) {
	al := newAuditLedger(t)
	held, err := os.ReadFile(al.held)
	require.NoError(t, err)
	require.Equal(t, 2, bytes.Count(held, []byte("\n— ")), "two checkpoints, as --ledger-checkpoints wrote them")
	path := filepath.Join(t.TempDir(), "held")

	spaced := bytes.ReplaceAll(held, []byte("\n\ntoolgate/"), []byte("\n\n\n \n\ntoolgate/"))
	require.NotEqual(t, held, spaced, "more blank lines between the checkpoints")
	require.NoError(t, os.WriteFile(path, append([]byte("\n"), spaced...), 0o644))
	code, out, errs := audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--checkpoint", path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "consistent with the held checkpoint of size 20")

	// A checkpoint cut short at the end is named, not skipped.
	require.NoError(t, os.WriteFile(path, append(held, "toolgate/prod\n20\n"...), 0o644))
	code, _, errs = audit(t, "verify", "--ledger", al.db, "--ledger-key", al.key, "--checkpoint", path)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errs, path+": line 13 on is not a signed note")
}

func TestAuditBackfillNeedsTheSigningKey(t *testing.T) {
	al := newAuditLedger(t)
	_, vkey, _ := audit(t, "key", "--ledger-key", al.key)
	code, _, errs := audit(t, "backfill", "--ledger", al.db, "--key", strings.TrimSpace(vkey))
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "give the ledger's signing key")
}

func TestAuditExportNamesABadTimeRange(t *testing.T) {
	al := newAuditLedger(t)
	for args, want := range map[[2]string]string{
		{"--since", "yesterday"}:  `--since "yesterday" is not an RFC 3339 time`,
		{"--until", "2026-13-01"}: `--until "2026-13-01" is not an RFC 3339 time`,
	} {
		code, _, errs := audit(t, "export", "--ledger", al.db, "--ledger-key", al.key, args[0], args[1])
		assert.Equal(t, exitUsage, code, args)
		assert.Contains(t, errs, want)
	}
	code, _, errs := audit(t, "export", "--ledger", al.db, "--ledger-key", al.key, "--since", "2026-12-03T11:00:00Z", "--until", "2026-12-03T10:00:00Z")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errs, "--until 2026-12-03T10:00:00Z is not after --since 2026-12-03T11:00:00Z")

	out := filepath.Join(t.TempDir(), "part.jsonl")
	code, _, errs = audit(t, "export", "--ledger", al.db, "--ledger-key", al.key, "--since", "2026-12-03T09:00:00Z", "--until", "2026-12-03T11:00:00Z", "-o", out)
	require.Equal(t, 0, code, errs)
	code, stdout, errs := audit(t, "verify", "--export", out, "--ledger-key", al.key)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, stdout, "intact: 20 entries (a part of the log, each entry proved against the latest checkpoint)")
}

func TestAuditShowSaysWhoDecidedAndWhereTheToolRan(t *testing.T) {
	dir := t.TempDir()
	db, keyFile := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "ledger.key")
	keys, _, err := ledger.LoadOrCreateKey(keyFile, "prod")
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: db, Keys: keys})
	require.NoError(t, err)
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	_, err = l.Append(context.Background(),
		ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "u1/r/call.submitted", At: at, CallID: "u1", Requester: "claude", ActingUser: "dana", Tool: "shell", Execution: "agent"},
		ledger.Entry{Kind: ledger.KindCallDecided, Event: "u1/r/call.decided", At: at, CallID: "u1",
			Decision: &ledger.Decision{Kind: "denied", DecidedBy: "dana", Channel: "hook", User: true, Reason: "not on main", Comment: "use a branch"}},
		ledger.Entry{Kind: ledger.KindCallFinished, Event: "u1/r/call.finished", At: at, CallID: "u1", Status: "denied", Reason: "not on main"})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	code, out, errs := audit(t, "show", "u1", "--ledger", db, "--ledger-key", keyFile)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "user:     dana")
	assert.Contains(t, out, "runs:     in the agent, which reports its outcome")
	assert.Contains(t, out, "decision: denied by dana via hook (the acting user, in the agent's client)")
	assert.Contains(t, out, "reason:   not on main")
	assert.Contains(t, out, "comment:  use a branch")
	assert.Contains(t, out, "status:   denied")
}

func TestAuditShowOpensSealedEntriesWithTheKeys(t *testing.T) {
	dir := t.TempDir()
	db, keyFile, keysFile := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "ledger.key"), filepath.Join(dir, "keys.json")
	keys, _, err := ledger.LoadOrCreateKey(keyFile, "prod")
	require.NoError(t, err)
	ring, _, err := keyring.LoadOrCreate(keysFile)
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: db, Keys: keys, Sealer: ring})
	require.NoError(t, err)
	_, err = l.Append(context.Background(), ledger.Entry{Kind: ledger.KindCallSubmitted, Event: "s1/submitted", At: time.Now(), CallID: "s1",
		Requester: "ci-7", Tool: "write_file", Args: []byte(`{"content":"AWS_SECRET=sk-live-show"}`)})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	code, out, errs := audit(t, "show", "s1", "--ledger", db, "--ledger-key", keyFile, "--keys", keysFile)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, `args:     {"content":"AWS_SECRET=sk-live-show"}`)
	assert.Contains(t, out, "requester: ci-7")

	t.Chdir(t.TempDir()) // no .toolgate/keys.json here
	code, out, errs = audit(t, "show", "s1", "--ledger", db, "--ledger-key", keyFile)
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, out, "sk-live")
	assert.Contains(t, out, "requester: ci-7", "who asked stays readable")
	assert.Contains(t, out, "sealed:   arguments and outputs encrypted with key "+ring.Current())
}

// reformat lays out each JSON value of a file anew: indented as jq .
// does, or (sorted) with its keys sorted and HTML escaped, as jq -S .
// does, through map[string]any.
func reformat(t *testing.T, path string, sorted bool) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var raw json.RawMessage
		require.NoError(t, dec.Decode(&raw))
		if sorted {
			var v any
			require.NoError(t, json.Unmarshal(raw, &v))
			raw, err = json.MarshalIndent(v, "", "    ")
			require.NoError(t, err)
			out.Write(raw)
		} else {
			require.NoError(t, json.Indent(&out, raw, "", "  "))
		}
		out.WriteString("\n")
	}
	dst := path + map[bool]string{false: ".indented", true: ".sorted"}[sorted]
	require.NoError(t, os.WriteFile(dst, out.Bytes(), 0o644))
	return dst
}

// Receipts and exports carry each entry's bytes in a string: laid out
// anew, by Go or by the real jq when it is installed, they still verify;
// an entry whose bytes changed fails, named.
func TestAuditReceiptsAndExportsVerifyAfterReformatting(t *testing.T) {
	al := newAuditLedger(t)
	dir := t.TempDir()
	export, part, receipt := filepath.Join(dir, "export.jsonl"), filepath.Join(dir, "part.jsonl"), filepath.Join(dir, "w3.receipt")
	for _, args := range [][]string{{"export", "-o", export}, {"export", "--since", "2026-12-03T09:00:00Z", "-o", part}, {"proof", "w3", "-o", receipt}} {
		code, _, errs := audit(t, append(args, "--ledger", al.db, "--ledger-key", al.key)...)
		require.Equal(t, 0, code, errs)
	}
	verify := func(kind, path string) (int, string) {
		code, out, errs := audit(t, "verify", "--"+kind, path, "--ledger-key", al.key)
		return code, out + errs
	}
	type file struct{ kind, path string } // kind: --export or --receipt
	written := map[string]file{"export": {"export", export}, "part": {"export", part}, "receipt": {"receipt", receipt}}
	files := map[string]file{}
	for name, f := range written {
		files[name+" as written"] = f
		files[name+", indented"] = file{f.kind, reformat(t, f.path, false)}
		files[name+", sorted"] = file{f.kind, reformat(t, f.path, true)}
	}
	if jq, err := exec.LookPath("jq"); err == nil {
		for name, f := range written {
			for n, filter := range [][]string{{"."}, {"-S", "."}} {
				out, err := exec.Command(jq, append(filter, f.path)...).Output()
				require.NoError(t, err)
				dst := fmt.Sprintf("%s.jq%d", f.path, n)
				require.NoError(t, os.WriteFile(dst, out, 0o644))
				files[name+", jq "+strings.Join(filter, " ")] = file{f.kind, dst}
			}
		}
	} else {
		t.Log("jq is not installed: reformatted by Go alone")
	}
	for name, f := range files {
		code, out := verify(f.kind, f.path)
		assert.Equal(t, 0, code, "%s: %s", name, out)
	}

	// A byte of entry #7's bytes changed, the object beside them alike (as
	// whoever forges an entry would): the receipt fails and names it.
	var r map[string]any
	data, err := os.ReadFile(files["receipt, sorted"].path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &r))
	e := r["entries"].([]any)[1].(map[string]any)
	require.EqualValues(t, 7, e["index"])
	b, err := base64.StdEncoding.DecodeString(e["entry_bytes"].(string))
	require.NoError(t, err)
	b = bytes.Replace(b, []byte("alice"), []byte("alicf"), 1)
	e["entry_bytes"], e["entry"] = base64.StdEncoding.EncodeToString(b), json.RawMessage(b)
	forged, err := json.MarshalIndent(r, "", " ")
	require.NoError(t, err)
	path := filepath.Join(dir, "forged.receipt")
	require.NoError(t, os.WriteFile(path, forged, 0o644))
	code, out := verify("receipt", path)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, out, "entry #7 (call.decided w3/r/call.decided) was changed: it is not the log's entry #7 in the checkpoint of size 20")
}
