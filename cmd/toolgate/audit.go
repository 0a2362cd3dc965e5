package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/visible"
	"github.com/toolgate/toolgate/workflows"
)

// auditFlags say where the ledger to read is (its database, or a server's
// API), and whose key checks it.
type auditFlags struct {
	dsn, keyFile, key string
	api               apiFlags
	// keys, for show and verify: the keyring that opens the entries'
	// sealed parts.
	keys string
	// doors, for show, verify and key: the doors' public keys, which
	// check the entries' statements.
	doors auditDoors
	// witnesses, for verify: whose cosignatures a checkpoint needs.
	witnesses witnessFlags
}

// devLedger is `toolgate dev`'s ledger, from the directory it runs in.
var devLedger = filepath.Join(".toolgate", "ledger.db")

func (f *auditFlags) add(cmd *cobra.Command, database bool) {
	fs := cmd.Flags()
	if database {
		fs.StringVar(&f.dsn, "ledger", os.Getenv("TOOLGATE_LEDGER"), "the ledger's database: a postgres:// URL or a SQLite file (env TOOLGATE_LEDGER; default "+devLedger+", toolgate dev's)")
	}
	fs.StringVar(&f.keyFile, "ledger-key", os.Getenv("TOOLGATE_LEDGER_KEY"), "the ledger's key file: its signing key or its verifier key (env TOOLGATE_LEDGER_KEY; default .toolgate/ledger.key)")
	fs.StringVar(&f.key, "key", "", "the ledger's verifier key (as 'toolgate audit key' prints it), or @FILE; wins over --ledger-key")
}

// addAPI adds --api and --token: read the ledger through a server.
func (f *auditFlags) addAPI(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.api.url, "api", os.Getenv("TOOLGATE_API"), "read the ledger through toolgate's HTTP API at this URL instead of its database (env TOOLGATE_API; TOOLGATE_LEDGER wins over it)")
	fs.StringVar(&f.api.token, "token", os.Getenv("TOOLGATE_TOKEN"), "bearer token for --api (env TOOLGATE_TOKEN); verify reads every entry, which takes an auditor's or an admin's")
}

// remote returns the API client when the ledger is to be read through a
// server: --api given, or TOOLGATE_API set and neither --ledger nor
// TOOLGATE_LEDGER. nil means the database.
func (f auditFlags) remote(cmd *cobra.Command) (*apiclient.Client, error) {
	ledgerSet, apiSet := cmd.Flags().Changed("ledger"), cmd.Flags().Changed("api")
	switch {
	case ledgerSet && apiSet:
		return nil, usageError("--ledger reads the ledger's database, --api reads it through a server: give one of them")
	case ledgerSet, f.api.url == "", !apiSet && f.dsn != "":
		return nil, nil
	case f.api.token == "":
		return nil, usageError("--api needs --token (or TOOLGATE_TOKEN): an auditor's or an admin's")
	}
	return apiclient.New(f.api.url, f.api.token), nil
}

// verifier is the key the flags name.
func (f auditFlags) verifier() (ledger.Keys, error) {
	if f.key != "" {
		vkey := f.key
		if strings.HasPrefix(vkey, "@") {
			b, err := os.ReadFile(vkey[1:])
			if err != nil {
				return ledger.Keys{}, usageError("--key: %v", err)
			}
			vkey = string(b)
		}
		v, err := ledger.ParseVerifierKey(vkey)
		if err != nil {
			return ledger.Keys{}, usageError("--key: %v", err)
		}
		return ledger.Keys{Verifier: v, VerifierKey: strings.TrimSpace(vkey)}, nil
	}
	path := f.keyFile
	if path == "" {
		path = filepath.Join(".toolgate", "ledger.key")
	}
	k, _, err := loadLedgerKey(path, false)
	if err != nil {
		return ledger.Keys{}, usageError("%v (give the ledger's key with --ledger-key FILE or --key VKEY)", err)
	}
	return k, nil
}

// open opens the ledger the flags name, to read it; sealer (optional)
// seals what is appended and opens what is read.
func (f auditFlags) open(ctx context.Context, sealer ledger.Sealer) (*ledger.Ledger, error) {
	dsn := f.dsn
	if dsn == "" {
		if _, err := os.Stat(devLedger); err != nil {
			return nil, usageError("no ledger: give --ledger DSN (or TOOLGATE_LEDGER); %s, toolgate dev's, is not here", devLedger)
		}
		dsn = devLedger
	}
	if !strings.Contains(dsn, "://") {
		if _, err := os.Stat(strings.TrimPrefix(dsn, "sqlite:")); err != nil {
			return nil, usageError("no ledger at %s: %v", dsn, err)
		}
	}
	keys, err := f.verifier()
	if err != nil {
		return nil, err
	}
	return ledger.Open(ctx, ledger.Options{DSN: dsn, Keys: keys, Sealer: sealer})
}

// sealer is the keyring as the ledger's Sealer; nil without one.
func sealer(ring *keyring.Keyring) ledger.Sealer {
	if ring == nil {
		return nil
	}
	return ring
}

// showKeys is the keyring show opens sealed entries with: --keys, or
// toolgate dev's when it is here; none is not an error (the sealed parts
// are said to be sealed).
func (f auditFlags) showKeys() (*keyring.Keyring, error) {
	file, ok := orDevFile(f.keys, devKeysFile)
	if !ok {
		return nil, nil
	}
	ring, err := keyring.Load(file)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return ring, nil
}

// failed is a check that did not pass: exit status 1, the reason.
func failed(format string, args ...any) error {
	return &exitError{code: exitFailure, err: fmt.Errorf(format, args...)}
}

func (a *app) auditCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read and check the decision ledger: who decided what, provably",
		Long: `The decision ledger keeps every call, decision and outcome in a signed,
append-only Merkle log apart from Temporal (docs/audit.md). These verbs read
it from its database (--ledger; toolgate dev's by default) or check what it
exported, offline, with its verifier key.`,
	}
	cmd.AddCommand(a.auditShowCommand(), a.auditVerifyCommand(), a.auditKeyCommand(), a.auditProofCommand(), a.auditExportCommand(), a.auditBackfillCommand())
	return cmd
}

func (a *app) auditShowCommand() *cobra.Command {
	var (
		f      auditFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show CALL_ID",
		Short: "Print a call's entries in the ledger, each with its index",
		Long: `Print what the ledger holds of one call: its submission, its decision and
its outcome (and the sticky decision taken on it), each with its index in
the log. It reads the ledger alone: it works after Temporal has forgotten
the call. With --api it reads them through a server (the call's receipt,
GET /v1/audit/calls/{id}); there a call's newest entries show once a
checkpoint covers them, within seconds.

A decision made at a door shows the door and its key ("approved by alice
via inbox at door dev (key …)"), and whether its statement verifies
against the doors' public keys (--doors FILE; toolgate dev's by default);
a person's identity shows as verified only when it does.`,
		Args: exactArgs("CALL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			entries, err := f.callEntries(cmd, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				for _, e := range entries {
					if err := ledger.WriteJSON(a.stdout, e); err != nil {
						return err
					}
				}
				return nil
			}
			ring, err := f.showKeys()
			if err != nil {
				return err
			}
			doors, err := f.doors.load()
			if err != nil {
				return err
			}
			sc := ledger.NewStatementCheck(doors, sealer(ring))
			for _, e := range entries {
				printEntry(a.stdout, e, sealer(ring), sc)
			}
			return nil
		},
	}
	f.add(cmd, true)
	f.addAPI(cmd)
	cmd.Flags().StringVar(&f.keys, "keys", os.Getenv("TOOLGATE_KEYS"), "keyring that opens the entries' encrypted arguments and outputs (env TOOLGATE_KEYS; default .toolgate/keys.json when it exists)")
	f.doors.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print each entry as a JSON line, {"index":N,"entry":{…},"entry_bytes":"<base64>"}, its bytes as stored (docs/audit.md)`)
	return cmd
}

// unknownCall is the failure for a call the ledger does not hold.
func unknownCall(callID string) error {
	return failed("the ledger has no entries for call %q", callID)
}

// callEntries reads a call's entries from the ledger's database or through
// the API; a call without any fails.
func (f auditFlags) callEntries(cmd *cobra.Command, callID string) ([]ledger.Stored, error) {
	c, err := f.remote(cmd)
	if err != nil {
		return nil, err
	}
	if c != nil {
		r, err := c.AuditReceipt(cmd.Context(), callID)
		if errors.Is(err, tgclient.ErrUnknownCall) {
			return nil, unknownCall(callID)
		} else if err != nil {
			return nil, err
		}
		entries := make([]ledger.Stored, len(r.Entries))
		for i, e := range r.Entries {
			if entries[i], err = e.Carried.Stored(); err != nil {
				return nil, failed("the server's receipt of call %s: %v", callID, err)
			}
		}
		return entries, nil
	}
	l, err := f.open(cmd.Context(), nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	entries, err := l.CallEntries(cmd.Context(), callID)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, unknownCall(callID)
	}
	return entries, nil
}

// printEntry prints an entry on a few lines for a person, its sealed part
// opened with sealer when it holds the key, and who asked or decided
// marked with the door that vouched for them, as sc finds it.
func printEntry(w io.Writer, s ledger.Stored, sealer ledger.Sealer, sc *ledger.StatementCheck) {
	e, openErr := ledger.Decode(s.Entry, sealer)
	if openErr != nil && e.Kind == "" {
		fmt.Fprintf(w, "#%d  (%v)\n", s.Index, openErr)
		return
	}
	vouched := sc.Entry(s.Index, s.Entry)
	fmt.Fprintf(w, "#%d  %s  %s\n", s.Index, e.At.UTC().Format(time.RFC3339), e.Kind)
	line := func(label, value string) {
		if value != "" {
			fmt.Fprintf(w, "    %-9s %s\n", label+":", visible.Text(value))
		}
	}
	line("session", e.Session)
	if e.Requester != "" {
		sub := vouchedFor(vouched, "submission")
		line("requester", e.Requester+atDoor(sub))
		line("statement", statementVerdict(sub))
	}
	line("user", e.ActingUser)
	line("tool", e.Tool)
	if e.Execution == "agent" {
		line("runs", "in the agent, which reports its outcome")
	}
	if len(e.Args) > 0 {
		line("args", string(e.Args))
	}
	line("rule", e.Rule)
	line("policy", e.PolicyVersion)
	if d := e.Decision; d != nil {
		by := d.Kind + " by " + d.DecidedBy
		if d.Channel != "" {
			by += " via " + d.Channel
		}
		if len(d.Groups) > 0 {
			by += " for " + strings.Join(d.Groups, ",")
		}
		if d.User {
			by += " (the acting user, in the agent's client)"
		}
		v := vouchedFor(vouched, "decision")
		line("decision", by+atDoor(v))
		line("statement", statementVerdict(v))
		if id := d.Identity; id != nil {
			line("identity", id.Subject+" at "+id.Issuer+" ("+identityVerdict(v)+")")
		}
		line("reason", d.Reason)
		line("comment", d.Comment)
		line("sticky", d.Sticky)
		for _, ap := range d.Approvals {
			line("approval", ap.By+" via "+ap.Channel)
		}
		if len(d.EditedArgs) > 0 {
			line("edited", string(d.EditedArgs))
		}
	}
	line("status", e.Status)
	if e.Decision == nil {
		line("reason", e.Reason)
	}
	if len(e.Output) > 0 {
		line("output", string(e.Output))
	}
	if e.By != "" {
		var v *ledger.Vouched
		if e.Kind == ledger.KindSessionRevoked || e.Kind == ledger.KindSessionEnded {
			v = vouchedFor(vouched, strings.TrimPrefix(e.Kind, "session."))
		}
		line("by", e.By+atDoor(v))
		line("statement", statementVerdict(v))
	}
	if v := vouchedFor(vouched, "statement"); v != nil {
		line("statement", "of door "+v.Statement.Door+" (key "+v.KeyID+"): "+statementVerdict(v))
	}
	switch {
	case openErr != nil:
		line("sealed", openErr.Error())
	case e.Sealed != nil:
		line("sealed", "arguments and outputs encrypted with key "+e.Sealed.Key+"; --keys FILE reads them")
	}
	if e.Backfilled {
		line("note", "backfilled from Temporal after the fact")
	}
}

func (a *app) auditKeyCommand() *cobra.Command {
	var (
		f               auditFlags
		newFile, deploy string
	)
	cmd := &cobra.Command{
		Use:   "key [--new FILE --deployment NAME]",
		Short: "Print the ledger's verifier key, or make a signing key",
		Long: `Print the verifier key of the ledger's signing key (note format:
toolgate/<deployment>+<hash>+<key>): give it to whoever checks the ledger,
out of band. --new FILE --deployment NAME makes a signing key for a
deployment (mode 0600; an existing file is never overwritten) and prints its
verifier key: the log's origin is toolgate/NAME. With --api it prints the
key a server states: that is the server's word, to compare with the key
its operator gave you, not to check the server's ledger with.

With a doors file (--doors FILE; toolgate dev's by default) it also lists
the doors' public keys, which check the statements in the ledger (door,
key ID, revoked), on stderr: stdout stays the verifier key alone.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if newFile != "" {
				if deploy == "" {
					return usageError("--new needs --deployment NAME (the log's origin is toolgate/NAME)")
				}
				if _, err := os.Stat(newFile); err == nil {
					return failed("%s exists: a signing key is never overwritten (the ledger's checkpoints were signed with it)", newFile)
				}
				k, _, err := ledger.LoadOrCreateKey(newFile, deploy)
				if err != nil {
					return failed("%v", err)
				}
				fmt.Fprintln(a.stdout, k.VerifierKey)
				return nil
			}
			doors, err := f.doors.load()
			if err != nil {
				return err
			}
			if doors != nil {
				defer printDoors(a.stderr, doors)
			}
			c, err := f.remote(cmd)
			if err != nil {
				return err
			}
			local := cmd.Flags().Changed("ledger-key") || cmd.Flags().Changed("key")
			if c != nil && local && !cmd.Flags().Changed("api") {
				c = nil // a key named on the command line wins over TOOLGATE_API
			}
			if c != nil {
				key, err := c.AuditKey(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, key)
				return nil
			}
			k, err := f.verifier()
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, k.VerifierKey)
			return nil
		},
	}
	f.add(cmd, false)
	f.addAPI(cmd)
	f.doors.add(cmd)
	cmd.Flags().StringVar(&newFile, "new", "", "make a signing key in this file")
	cmd.Flags().StringVar(&deploy, "deployment", "", "the deployment the new key signs for")
	return cmd
}

func (a *app) auditProofCommand() *cobra.Command {
	var (
		f   auditFlags
		out string
	)
	cmd := &cobra.Command{
		Use:   "proof CALL_ID [-o FILE]",
		Short: "Write a call's receipt: its entries, their inclusion proofs and the signed checkpoint",
		Long: `Write a receipt anyone can check offline, with 'toolgate audit verify
--receipt FILE' or the formats' own packages (golang.org/x/mod/sumdb/note
and tlog; docs/audit.md has the program). With --api the server writes it
(GET /v1/audit/calls/{id}).`,
		Args: exactArgs("CALL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := f.prove(cmd, args[0])
			switch {
			case errors.Is(err, ledger.ErrNotFound), errors.Is(err, tgclient.ErrUnknownCall):
				return unknownCall(args[0])
			case errors.As(err, new(*exitError)):
				return err
			case err != nil:
				return failed("%v", err)
			}
			return writeOut(a.stdout, out, func(w io.Writer) error { return ledger.WriteJSON(w, r) })
		},
	}
	f.add(cmd, true)
	f.addAPI(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

// prove returns a call's receipt, from the database or through the API.
func (f auditFlags) prove(cmd *cobra.Command, callID string) (ledger.Receipt, error) {
	c, err := f.remote(cmd)
	if err != nil {
		return ledger.Receipt{}, err
	}
	if c != nil {
		return c.AuditReceipt(cmd.Context(), callID)
	}
	l, err := f.open(cmd.Context(), nil)
	if err != nil {
		return ledger.Receipt{}, err
	}
	defer l.Close()
	return l.Prove(cmd.Context(), callID)
}

func (a *app) auditExportCommand() *cobra.Command {
	var (
		f            auditFlags
		out          string
		since, until string
	)
	cmd := &cobra.Command{
		Use:   "export [--since T] [--until T] [-o FILE]",
		Short: "Export the ledger's signed entries and checkpoints as JSON lines",
		Long: `Export the entries up to the latest checkpoint, and every checkpoint, as
JSON lines, for 'toolgate audit verify --export FILE' on any machine.
--since and --until (RFC 3339) export a part of the log; each entry then
carries its inclusion proof against the latest checkpoint.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var from, to time.Time
			var err error
			if since != "" {
				if from, err = time.Parse(time.RFC3339, since); err != nil {
					return usageError("--since %q is not an RFC 3339 time (2026-12-01T00:00:00Z)", since)
				}
			}
			if until != "" {
				if to, err = time.Parse(time.RFC3339, until); err != nil {
					return usageError("--until %q is not an RFC 3339 time (2026-12-01T00:00:00Z)", until)
				}
			}
			if !from.IsZero() && !to.IsZero() && !to.After(from) {
				return usageError("--until %s is not after --since %s: the export would be empty", until, since)
			}
			l, err := f.open(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer l.Close()
			return writeOut(a.stdout, out, func(w io.Writer) error { return l.Export(cmd.Context(), w, from, to) })
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	cmd.Flags().StringVar(&since, "since", "", "only entries at or after this time (RFC 3339)")
	cmd.Flags().StringVar(&until, "until", "", "only entries before this time (RFC 3339)")
	return cmd
}

// writeOut writes to path, or to stdout when path is empty; a file is
// written whole or not at all, and is owner-only (os.CreateTemp makes it
// 0600): exports and receipts hold what calls did.
func writeOut(stdout io.Writer, path string, write func(io.Writer) error) error {
	if path == "" {
		return write(stdout)
	}
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(b.Bytes())
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (a *app) auditBackfillCommand() *cobra.Command {
	var f auditFlags
	cmd := &cobra.Command{
		Use:   "backfill",
		Short: "Log the calls still in Temporal that closed before the ledger existed",
		Long: `Write ledger entries (call.submitted, call.decided, call.finished, marked
backfilled) for every closed call Temporal still has, from its Result. A call
the ledger already has, and a second backfill, add nothing: the entries
carry the event IDs the call would have written itself. Needs the Temporal
connection flags and the ledger's database with its signing key.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if keys, err := f.verifier(); err != nil {
				return err
			} else if keys.Signer == nil {
				return usageError("backfill signs a checkpoint of what it adds: give the ledger's signing key (--ledger-key FILE), not its verifier key")
			}
			ring, err := a.conn.keys.load(a.logger) // seals what is added, as the workers do
			if err != nil {
				return err
			}
			l, err := f.open(ctx, sealer(ring))
			if err != nil {
				return err
			}
			defer l.Close()
			tc, err := a.conn.dial(a.logger, nil)
			if err != nil {
				return err
			}
			defer tc.Close()
			before, err := l.Size(ctx)
			if err != nil {
				return err
			}
			calls, skipped := 0, 0
			query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus != 'Running'", workflows.ToolCallWorkflowType)
			var token []byte
			for {
				page, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: a.conn.namespace, Query: query, PageSize: 500, NextPageToken: token})
				if err != nil {
					return fmt.Errorf("list closed calls: %w", err)
				}
				for _, e := range page.GetExecutions() {
					run := e.GetExecution()
					var r workflows.Result
					if err := tc.GetWorkflow(ctx, run.GetWorkflowId(), run.GetRunId()).Get(ctx, &r); err != nil || r.CallID == "" {
						skipped++ // failed, terminated: no Result to log
						continue
					}
					if _, err := l.Append(ctx, workflows.BackfillEntries(r, run.GetRunId())...); err != nil {
						return err
					}
					calls++
				}
				if token = page.GetNextPageToken(); len(token) == 0 {
					break
				}
			}
			after, err := l.Size(ctx)
			if err != nil {
				return err
			}
			if after > before {
				if _, err := l.SignCheckpoint(ctx); err != nil {
					return err
				}
			}
			fmt.Fprintf(a.stdout, "backfilled %d closed calls: %d new entries (%d calls had no Result to log)\n", calls, after-before, skipped)
			return nil
		},
	}
	f.add(cmd, true)
	a.conn.addFlags(cmd)
	return cmd
}
