package ledger

import (
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/witness"
)

// WitnessRule is what a verifier requires of the witnesses: a checkpoint
// of the log counts only with Required valid cosignatures of Verifiers
// (distinct witnesses). The zero rule requires none.
type WitnessRule struct {
	Verifiers []note.Verifier
	Required  int
}

func (r WitnessRule) on() bool { return r.Required > 0 }

// Validate refuses a rule that cannot be met.
func (r WitnessRule) Validate() error {
	if r.Required > len(r.Verifiers) {
		return fmt.Errorf("%d cosignatures required of %d witnesses' keys given", r.Required, len(r.Verifiers))
	}
	return nil
}

// cosigned counts msg's valid cosignatures of the rule's witnesses and
// reports whether they are enough; a cosignature of one of them that does
// not verify is an error.
func (r WitnessRule) cosigned(msg []byte, log note.Verifier) (int, bool, error) {
	n, err := witness.Cosigned(msg, log, r.Verifiers)
	if err != nil {
		return 0, false, err
	}
	return n, n >= r.Required, nil
}

// RequireCosignatures makes the verification count only the log's
// checkpoints that carry r's cosignatures.
func (v *Verification) RequireCosignatures(r WitnessRule) { v.witnesses = r }

// counts reports whether the log's checkpoint c (its note msg) counts
// under the witness rule, failing the verification on a bad cosignature.
func (v *Verification) counts(c Checkpoint, msg []byte) bool {
	if !v.witnesses.on() {
		return true
	}
	_, ok, err := v.witnesses.cosigned(msg, v.verifier)
	if err != nil {
		v.fail("the checkpoint of size %d: %v", c.Size, err)
		return false
	}
	if !ok {
		v.uncosigned++
	}
	return ok
}

// checkCosigned checks a receipt's or a part's checkpoint under r.
func (r WitnessRule) checkCosigned(what string, c Checkpoint, log note.Verifier) error {
	if !r.on() {
		return nil
	}
	n, ok, err := r.cosigned(c.Note, log)
	switch {
	case err != nil:
		return fmt.Errorf("%s's checkpoint (size %d): %v", what, c.Size, err)
	case !ok:
		return fmt.Errorf("%s's checkpoint (size %d) carries %d of the %d witnesses' cosignatures required", what, c.Size, n, r.Required)
	}
	return nil
}
