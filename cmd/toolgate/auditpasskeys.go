package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/toolgate/toolgate/ledger"
)

// The decisions of rules with passkey: true carry the deciding person's
// passkey assertion, and the ledger the passkeys people registered. The
// audit verbs check each assertion offline, with the public key its
// registration recorded (ledger.PasskeyCheck): no key is needed but, for
// sealed arguments, the keyring that opens them.

// passkeyCheck is the check of the passkey assertions verify reads. The
// keyring (--keys), when there is one, opens sealed arguments, whose
// digest the assertions' challenges name.
func (f auditFlags) passkeyCheck() (*ledger.PasskeyCheck, error) {
	ring, err := f.showKeys()
	if err != nil {
		return nil, err
	}
	return ledger.NewPasskeyCheck(sealer(ring)), nil
}

// finishPasskeys ends the passkey check of what: a failure naming every
// assertion that does not verify, or its report.
func finishPasskeys(what string, pc *ledger.PasskeyCheck) (ledger.PasskeyReport, error) {
	rep, err := pc.Finish()
	if err == nil {
		return rep, nil
	}
	if rep.FailureCount == 1 {
		return rep, failed("%s is intact, but a passkey approval in it does NOT verify: %s", what, rep.Failures[0])
	}
	msg := fmt.Sprintf("%s is intact, but %d passkey approvals in it do NOT verify:\n  %s", what, rep.FailureCount, strings.Join(rep.Failures, "\n  "))
	if more := rep.FailureCount - len(rep.Failures); more > 0 {
		msg += fmt.Sprintf("\n  … and %d more", more)
	}
	return rep, failed("%s", msg)
}

// printPasskeys says how many passkey approvals were checked.
func printPasskeys(w io.Writer, rep ledger.PasskeyReport) {
	fmt.Fprintf(w, "passkeys: %d approvals verified (each its approver's authenticator's signature, with user verification, over the call, run, tool, arguments and decision); %d passkeys registered, %d removed\n",
		rep.Verified, rep.Registered, rep.Removed)
	if rep.ByDigest > 0 {
		fmt.Fprintf(w, "  %d of them over arguments sealed or redacted in the log: checked against the digest the decision's door statement names (--keys FILE opens sealed ones)\n", rep.ByDigest)
	}
	for _, u := range rep.Unchecked {
		fmt.Fprintln(w, "  not checked:", u)
	}
	if more := rep.UncheckedCount - len(rep.Unchecked); more > 0 {
		fmt.Fprintf(w, "  … and %d more not checked\n", more)
	}
}

// passkeyEntries says how many passkeys' entries a receipt carries
// beside its call's.
func passkeyEntries(r ledger.Receipt) string {
	if len(r.Passkeys) == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d of the passkeys its decision was signed with)", len(r.Passkeys))
}
