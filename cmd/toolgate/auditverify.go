package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
)

// toolgate audit verify: the ledger's database, a server's ledger, an
// export or a receipt, checked with the verifier key the auditor holds,
// and the door statements in them with the doors' public keys.

func (a *app) auditVerifyCommand() *cobra.Command {
	var (
		f                     auditFlags
		held                  []string
		exportFile, receiptFn string
		stateFile             string
	)
	cmd := &cobra.Command{
		Use:   "verify [--checkpoint FILE]... [--state FILE] | --export FILE | --receipt FILE",
		Short: "Check the ledger: every entry, every checkpoint, and consistency between all checkpoints it sees",
		Long: `Recompute the ledger's Merkle tree from its entries and check every signed
checkpoint against it, and every checkpoint it sees against every other:
two signed checkpoints that are not consistent (one size, two trees; or a
larger tree that does not extend a smaller one) are a fork. --checkpoint
FILE (repeatable; a file of checkpoints as --ledger-checkpoints writes
them, one note, or a receipt kept from before) proves the log consistent
with checkpoints kept outside its database: it catches a truncated tail
and a rewritten entry. --export
FILE checks an export offline, --receipt FILE a receipt: no database, no
server, only the verifier key (--key or --ledger-key; a key inside a
receipt or an export is not trusted).

--state FILE remembers the latest checkpoint verified (the signed note,
mode 0600) and, next time, refuses a log whose latest checkpoint is
smaller ("the log was rolled back") or that does not extend it ("the log
forked"), as Go's checksum database client refuses to go back. A missing
file is trusted on first use, and the summary says so; a state of another
log is refused.

With --api (an auditor's or an admin's token) it reads every entry and the
latest checkpoint through a server and recomputes the tree from them,
checked with the key you hold (--key or --ledger-key), never the server's;
with --state it also checks the server's consistency proof from the
remembered size (GET /v1/audit/proof).

Given the doors' public keys (--doors FILE; toolgate dev's by default),
it also checks the door statement each submission, decision, revoke and
session end carries: signed by a trusted, unrevoked door key, and saying
what its entry says (who, their groups and identity, the channel, the
call, the arguments' digest). Entries without one (recorded before
statements, or by toolgate itself) are counted, not failed.

Exit status 0 when intact; 1 naming the first bad entry or failed proof,
or every statement that does not verify.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var notes [][]byte
			for _, h := range held {
				b, err := os.ReadFile(h)
				if err != nil {
					return usageError("--checkpoint: %v", err)
				}
				if c, ok := receiptCheckpoint(b); ok { // a receipt kept from before
					notes = append(notes, c)
					continue
				}
				ns, err := splitNotes(b)
				switch {
				case len(ns) == 0 && err != nil:
					return failed("%s holds no checkpoint: %v", h, err)
				case len(ns) == 0:
					return failed("%s holds no checkpoint", h)
				case err != nil:
					return failed("%s: %v", h, err)
				}
				notes = append(notes, ns...)
			}
			switch {
			case cmd.Flags().Changed("api") && (exportFile != "" || receiptFn != ""):
				return usageError("--export and --receipt are checked offline, from the file alone: leave out --api")
			case exportFile != "" && receiptFn != "":
				return usageError("--export and --receipt are checked one at a time")
			case exportFile != "":
				return a.verifyExport(f, exportFile, notes, stateFile)
			case receiptFn != "":
				if len(notes) > 0 {
					return usageError("--checkpoint goes with a whole log, not a receipt")
				}
				if stateFile != "" {
					return usageError("--state goes with a whole log, not a receipt")
				}
				return a.verifyReceipt(f, receiptFn)
			}
			c, err := f.remote(cmd)
			if err != nil {
				return err
			}
			if c != nil {
				return a.verifyAPI(cmd.Context(), f, c, notes, stateFile)
			}
			l, err := f.open(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer l.Close()
			st, err := loadState(stateFile, l.Verifier())
			if err != nil {
				return err
			}
			sc, err := f.statementCheck()
			if err != nil {
				return err
			}
			rule, err := f.witnesses.rule()
			if err != nil {
				return err
			}
			pc, err := f.passkeyCheck()
			if err != nil {
				return err
			}
			rep, err := l.VerifyStoreWithOptions(cmd.Context(), ledger.VerifyOptions{Held: notes, Remembered: st.remembered(), Statements: sc, Passkeys: pc, Witnesses: rule})
			if err != nil {
				return failed("ledger %s is NOT intact: %v", l.Where(), err)
			}
			if err := st.save(rep); err != nil {
				return err
			}
			srep, err := finishStatements(fmt.Sprintf("ledger %s (%s)", l.Where(), rep.Origin), sc)
			if err != nil {
				return err
			}
			prep, err := finishPasskeys(fmt.Sprintf("ledger %s (%s)", l.Where(), rep.Origin), pc)
			if err != nil {
				return err
			}
			a.printReport(l.Where(), rep, st)
			printStatements(a.stdout, srep)
			printPasskeys(a.stdout, prep)
			return nil
		},
	}
	f.add(cmd, true)
	f.addAPI(cmd)
	f.doors.add(cmd)
	f.witnesses.add(cmd)
	cmd.Flags().StringVar(&f.keys, "keys", os.Getenv("TOOLGATE_KEYS"), "keyring that opens sealed arguments, so their digests are compared with the statements' (env TOOLGATE_KEYS; default .toolgate/keys.json when it exists)")
	cmd.Flags().StringArrayVar(&held, "checkpoint", nil, "a checkpoint (or a file of them, or a receipt, whose checkpoint is taken) kept outside the ledger's database; repeatable")
	cmd.Flags().StringVar(&exportFile, "export", "", "check an export ('toolgate audit export') offline")
	cmd.Flags().StringVar(&receiptFn, "receipt", "", "check a receipt ('toolgate audit proof') offline")
	cmd.Flags().StringVar(&stateFile, "state", "", "remember the latest checkpoint verified in this file, and refuse a log that does not extend the one remembered (trusted on first use)")
	return cmd
}

func (a *app) printReport(what string, rep ledger.Report, st *verifierState) {
	held := ""
	if rep.Held > 0 {
		held = fmt.Sprintf(", consistent with the held checkpoint of size %d", rep.Held)
	}
	part := ""
	if rep.Partial {
		part = " (a part of the log, each entry proved against the latest checkpoint)"
	}
	cosigned := ""
	if rep.WitnessesRequired > 0 {
		cosigned = fmt.Sprintf(" (each with %d witnesses' cosignatures; %d without them not counted)", rep.WitnessesRequired, rep.Uncosigned)
	}
	fmt.Fprintf(a.stdout, "ledger %s (%s) intact: %d entries%s, %d checkpoints%s, signed up to size %d%s%s\n",
		what, rep.Origin, rep.Entries, part, rep.Checkpoints, cosigned, rep.Size, held, st.summary(rep))
}

// cosignedBy says which cosignatures a receipt's checkpoint was found to
// carry.
func cosignedBy(r ledger.WitnessRule) string {
	if r.Required == 0 {
		return ""
	}
	return fmt.Sprintf(", cosigned by %d of the %d witnesses given", r.Required, len(r.Verifiers))
}

// verifyAPI checks the ledger a server reads: every entry through GET
// /v1/audit/entries, recomputed into the tree, against its latest
// checkpoint, the held ones and the remembered one (whose consistency
// proof the server gives too), with the key the flags name.
func (a *app) verifyAPI(ctx context.Context, f auditFlags, c *apiclient.Client, held [][]byte, stateFile string) error {
	keys, err := f.verifier()
	if err != nil {
		return err
	}
	st, err := loadState(stateFile, keys.Verifier)
	if err != nil {
		return err
	}
	sc, err := f.statementCheck()
	if err != nil {
		return err
	}
	rule, err := f.witnesses.rule()
	if err != nil {
		return err
	}
	pc, err := f.passkeyCheck()
	if err != nil {
		return err
	}
	v := ledger.NewVerification(keys.Verifier)
	v.RequireCosignatures(rule)
	// The checkpoint first: the entries read after it cover it, however
	// the log grows meanwhile.
	cp, err := c.AuditCheckpoint(ctx)
	var refused *tgclient.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Type == "no_checkpoint":
		// an empty log verifies; entries without a checkpoint do not (Finish)
	case err != nil:
		return err
	default:
		v.Checkpoint(cp)
	}
	for _, n := range held {
		v.Held(n)
	}
	if n := st.remembered(); n != nil {
		v.Remembered(n)
	}
	if bad, err := st.proveOverAPI(ctx, c, keys.Verifier, cp, v); err != nil {
		return err
	} else if bad != nil {
		return failed("ledger at %s is NOT intact: %v", f.api.url, bad)
	}
	for next := int64(0); next >= 0; {
		page, n, err := c.AuditEntries(ctx, next)
		if err != nil {
			return err
		}
		for _, e := range page {
			v.Entry(e.Index, e.Entry, nil)
			if sc != nil {
				sc.Entry(e.Index, e.Entry)
			}
			pc.Entry(e.Index, e.Entry)
		}
		next = n
	}
	rep, err := v.Finish()
	if err != nil {
		return failed("ledger at %s is NOT intact: %v", f.api.url, err)
	}
	if err := st.save(rep); err != nil {
		return err
	}
	srep, err := finishStatements(fmt.Sprintf("ledger at %s (%s)", f.api.url, rep.Origin), sc)
	if err != nil {
		return err
	}
	prep, err := finishPasskeys(fmt.Sprintf("ledger at %s (%s)", f.api.url, rep.Origin), pc)
	if err != nil {
		return err
	}
	a.printReport("at "+f.api.url, rep, st)
	printStatements(a.stdout, srep)
	printPasskeys(a.stdout, prep)
	return nil
}

func (a *app) verifyExport(f auditFlags, path string, held [][]byte, stateFile string) error {
	keys, err := f.verifier()
	if err != nil {
		return err
	}
	st, err := loadState(stateFile, keys.Verifier)
	if err != nil {
		return err
	}
	sc, err := f.statementCheck()
	if err != nil {
		return err
	}
	rule, err := f.witnesses.rule()
	if err != nil {
		return err
	}
	pc, err := f.passkeyCheck()
	if err != nil {
		return err
	}
	file, err := os.Open(path)
	if err != nil {
		return usageError("--export: %v", err)
	}
	defer file.Close()
	rep, err := ledger.VerifyExportWithOptions(file, keys.Verifier, ledger.VerifyOptions{Held: held, Remembered: st.remembered(), Statements: sc, Passkeys: pc, Witnesses: rule})
	if err != nil {
		return failed("export %s is NOT intact: %v", path, err)
	}
	if err := st.save(rep); err != nil {
		return err
	}
	srep, err := finishStatements("export "+path, sc)
	if err != nil {
		return err
	}
	prep, err := finishPasskeys("export "+path, pc)
	if err != nil {
		return err
	}
	a.printReport("export "+path, rep, st)
	printStatements(a.stdout, srep)
	printPasskeys(a.stdout, prep)
	return nil
}

func (a *app) verifyReceipt(f auditFlags, path string) error {
	keys, err := f.verifier()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return usageError("--receipt: %v", err)
	}
	var r ledger.Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		return failed("receipt %s is not a receipt: %v", path, err)
	}
	sc, err := f.statementCheck()
	if err != nil {
		return err
	}
	rule, err := f.witnesses.rule()
	if err != nil {
		return err
	}
	pc, err := f.passkeyCheck()
	if err != nil {
		return err
	}
	c, err := ledger.VerifyReceiptWithOptions(r, keys.Verifier, ledger.VerifyOptions{Statements: sc, Passkeys: pc, Witnesses: rule})
	if err != nil {
		return failed("receipt %s does NOT verify: %v", path, err)
	}
	srep, err := finishStatements("receipt "+path, sc)
	if err != nil {
		return err
	}
	prep, err := finishPasskeys("receipt "+path, pc)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "receipt %s verified: call %s, %d entries%s in checkpoint %d of %s, signed by %s%s\n",
		path, r.CallID, len(r.Entries), passkeyEntries(r), c.Size, c.Origin, keys.Verifier.Name(), cosignedBy(rule))
	printStatements(a.stdout, srep)
	printPasskeys(a.stdout, prep)
	return nil
}

// receiptCheckpoint is the checkpoint of a receipt ('toolgate audit
// proof'), when b is one: a log must still extend the checkpoint a
// receipt taken earlier carries.
func receiptCheckpoint(b []byte) ([]byte, bool) {
	var r ledger.Receipt
	if json.Unmarshal(b, &r) != nil || r.Checkpoint == "" {
		return nil, false
	}
	return []byte(r.Checkpoint), true
}

// splitNotes splits checkpoints written one after the other (as
// --ledger-checkpoints does). A note is its text, a blank line, then its
// signature lines ("— name sig"); what follows the last of those starts
// the next note. Text after the last note that no signature line ends (a
// note cut short, or something else) is an error, never skipped.
func splitNotes(b []byte) ([][]byte, error) {
	var notes [][]byte
	var cur []byte
	inSigs, lineNo, from := false, 0, 0
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		lineNo++
		isSig := bytes.HasPrefix(line, []byte("— "))
		switch {
		case inSigs && !isSig:
			notes, cur, inSigs = append(notes, cur), nil, false
		case isSig:
			inSigs = true
		}
		if !inSigs && len(cur) == 0 {
			if len(bytes.TrimSpace(line)) == 0 {
				continue // the blank line between notes
			}
			from = lineNo
		}
		cur = append(cur, line...)
	}
	if inSigs {
		notes = append(notes, cur)
	} else if len(cur) > 0 {
		return notes, fmt.Errorf("line %d on is not a signed note (its text, a blank line, then signature lines starting with \"— \"): a checkpoint cut short?", from)
	}
	return notes, nil
}
