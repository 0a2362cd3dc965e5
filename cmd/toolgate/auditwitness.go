package main

import (
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/witness"
)

// witnessFlags: the witnesses whose cosignatures audit verify requires.
type witnessFlags struct {
	keys     []string
	required int
}

func (f *witnessFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringArrayVar(&f.keys, "witness", nil, "a witness's verifier key (or VKEY@URL, as --ledger-witness takes it); repeatable: the log's checkpoints count only with their cosignatures")
	fs.IntVar(&f.required, "witnesses-required", 0, "how many of the --witness keys must cosign a checkpoint for it to count (default: all of them)")
}

// rule is the witness rule the flags give; the zero rule without any.
func (f witnessFlags) rule() (ledger.WitnessRule, error) {
	var r ledger.WitnessRule
	for _, k := range f.keys {
		v, err := witnessVerifier(k)
		if err != nil {
			return r, usageError("--witness: %v", err)
		}
		r.Verifiers = append(r.Verifiers, v)
	}
	r.Required = f.required
	if r.Required == 0 {
		r.Required = len(r.Verifiers)
	}
	if r.Required < 0 {
		return r, usageError("--witnesses-required: %d is not a count", f.required)
	}
	if err := r.Validate(); err != nil {
		return r, usageError("--witnesses-required: %v; give more --witness keys", err)
	}
	return r, nil
}

func witnessVerifier(k string) (note.Verifier, error) {
	if strings.Contains(k, "@") {
		w, err := witness.Parse(k)
		if err != nil {
			return nil, err
		}
		return w.Verifier, nil
	}
	return witness.NewVerifier(k)
}
