package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/statement"
)

// The ledger's entries carry the statements of the doors that
// authenticated who asked and who decided (package statement). The audit
// verbs check them offline against the doors' public keys: a doors file,
// as 'toolgate doors' keeps it.

// auditDoors names the doors file the audit verbs check statements with.
type auditDoors struct {
	file string
}

func (d *auditDoors) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&d.file, "doors", os.Getenv("TOOLGATE_DOORS"), "the doors file: the doors' public keys, which check the statements the entries carry (env TOOLGATE_DOORS; default .toolgate/doors.json when it exists, toolgate dev's)")
}

// load reads the doors file: the one named, or toolgate dev's when it is
// here; nil without one (the statements are then not checked).
func (d auditDoors) load() (*statement.Doors, error) {
	file, ok := orDevFile(d.file, devDoorsFile)
	if !ok {
		return nil, nil
	}
	doors, err := statement.LoadDoors(file)
	if err != nil {
		return nil, usageError("--doors: %v", err)
	}
	return doors, nil
}

// noDoorsMessage says how to have the statements checked.
const noDoorsMessage = "no doors file: give the doors' public keys with --doors FILE (env TOOLGATE_DOORS; toolgate dev keeps them in .toolgate/doors.json, 'toolgate doors' lists them)"

// statementCheck is the check of the statements verify reads: nil without
// a doors file. The keyring (--keys), when there is one, opens sealed
// arguments, so their digests are compared with the statements' too.
func (f auditFlags) statementCheck() (*ledger.StatementCheck, error) {
	doors, err := f.doors.load()
	if err != nil || doors == nil {
		return nil, err
	}
	ring, err := f.showKeys()
	if err != nil {
		return nil, err
	}
	return ledger.NewStatementCheck(doors, sealer(ring)), nil
}

// finishStatements ends the statement check of what (sc nil: none ran):
// a failure naming every statement that does not verify, or its report.
func finishStatements(what string, sc *ledger.StatementCheck) (*ledger.StatementReport, error) {
	if sc == nil {
		return nil, nil
	}
	rep, err := sc.Finish()
	if err == nil {
		return &rep, nil
	}
	if rep.FailureCount == 1 {
		return nil, failed("%s is intact, but a statement in it does NOT verify: %s", what, rep.Failures[0])
	}
	msg := fmt.Sprintf("%s is intact, but %d statements in it do NOT verify:\n  %s", what, rep.FailureCount, strings.Join(rep.Failures, "\n  "))
	if more := rep.FailureCount - len(rep.Failures); more > 0 {
		msg += fmt.Sprintf("\n  … and %d more", more)
	}
	return nil, failed("%s", msg)
}

// maxNoStatement bounds the entries without a statement verify names: an
// older log has many.
const maxNoStatement = 5

// printStatements says what the statement check found (nil: that none
// ran, and how to run it).
func printStatements(w io.Writer, rep *ledger.StatementReport) {
	if rep == nil {
		fmt.Fprintln(w, "statements: not checked:", noDoorsMessage)
		return
	}
	var keys []string
	for _, k := range rep.Keys {
		keys = append(keys, fmt.Sprintf("%d by door %s (key %s)", k.Count, k.Door, k.KeyID))
	}
	verified := fmt.Sprintf("%d verified", rep.Verified)
	if len(keys) > 0 {
		verified += ": " + strings.Join(keys, ", ")
	}
	fmt.Fprintf(w, "statements: %s; %d entries unsigned (recorded before statements, or by toolgate itself)\n", verified, rep.Unsigned)
	named := rep.NoStatement[:min(len(rep.NoStatement), maxNoStatement)]
	for _, n := range named {
		fmt.Fprintln(w, "  no statement:", n)
	}
	if more := rep.NoStatementCount - len(named); more > 0 {
		fmt.Fprintf(w, "  … and %d more with no statement\n", more)
	}
	if rep.Sealed > 0 {
		fmt.Fprintf(w, "  %d arguments sealed: their digests were not compared with the statements' (--keys FILE opens them)\n", rep.Sealed)
	}
	if rep.Redacted > 0 {
		fmt.Fprintf(w, "  %d arguments redacted before they were logged: their digests cannot be compared with the statements'\n", rep.Redacted)
	}
}

// printDoors lists the doors' public keys, for `audit key`.
func printDoors(w io.Writer, doors *statement.Doors) {
	fmt.Fprintln(w, "doors (their public keys check the statements in the ledger: hand out the doors file with the verifier key):")
	for _, k := range doors.Keys() {
		revoked := ""
		if k.Revoked {
			revoked = "  revoked"
		}
		fmt.Fprintf(w, "  door %-12s key %s%s\n", k.Door, k.KeyID, revoked)
	}
}

// vouchedFor finds the statement of an entry that vouches for of.
func vouchedFor(vs []ledger.Vouched, of string) *ledger.Vouched {
	for i := range vs {
		if vs[i].Of == of {
			return &vs[i]
		}
	}
	return nil
}

// atDoor marks who asked or decided with the door whose statement says
// so: "at door dev (key K)", unverified unless it verified.
func atDoor(v *ledger.Vouched) string {
	if v == nil {
		return ""
	}
	s := fmt.Sprintf(" at door %s (key %s)", v.Statement.Door, v.KeyID)
	if v.Err != nil {
		s += ", unverified"
	}
	return s
}

// statementVerdict says whether a statement verified, and why not.
func statementVerdict(v *ledger.Vouched) string {
	switch {
	case v == nil:
		return ""
	case errors.Is(v.Err, ledger.ErrNoDoors):
		return "not checked: " + noDoorsMessage
	case v.Err != nil:
		return "NOT verified: " + v.Err.Error()
	}
	return "verified against the doors given, issued " + v.Statement.Issued.UTC().Format(time.RFC3339)
}

// identityVerdict says whether a decision's identity is the one its
// statement vouches for.
func identityVerdict(v *ledger.Vouched) string {
	switch {
	case v == nil:
		return "unverified: no statement"
	case errors.Is(v.Err, ledger.ErrNoDoors):
		return "unverified: no doors file given"
	case v.Err != nil:
		return "unverified: its statement does not verify"
	}
	return "verified: door " + v.Statement.Door + "'s statement"
}
