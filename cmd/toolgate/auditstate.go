package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/ledger"
)

// verifierState is `audit verify --state FILE`: the latest checkpoint
// this verifier verified, remembered between runs, which the log must
// extend next time. A missing file is trusted on first use.
type verifierState struct {
	file string
	// seen is the checkpoint remembered; its Note is nil on first use.
	seen ledger.Checkpoint
	// proved: the server's consistency proof from seen checked (--api);
	// noProof: the server offers none (a toolgate from before them).
	proved, noProof bool
}

// loadState reads --state, checked with verifier (the key the user
// holds); nil without --state.
func loadState(file string, verifier note.Verifier) (*verifierState, error) {
	if file == "" {
		return nil, nil
	}
	c, _, err := ledger.ReadVerifierState(file, verifier)
	if err != nil {
		return nil, usageError("--state: %v", err)
	}
	return &verifierState{file: file, seen: c}, nil
}

// remembered is the note the verification must extend (nil: none).
func (s *verifierState) remembered() []byte {
	if s == nil {
		return nil
	}
	return s.seen.Note
}

// save remembers the latest checkpoint of a log that verified.
func (s *verifierState) save(rep ledger.Report) error {
	if s == nil || rep.Latest.Note == nil || bytes.Equal(rep.Latest.Note, s.seen.Note) {
		return nil
	}
	if err := ledger.WriteVerifierState(s.file, rep.Latest); err != nil {
		return failed("--state: %v", err)
	}
	return nil
}

// summary says, on the summary line, what --state checked and remembers.
func (s *verifierState) summary(rep ledger.Report) string {
	switch {
	case s == nil:
		return ""
	case s.seen.Note == nil && rep.Latest.Note == nil:
		return ", trusted on first use: --state remembers nothing yet (no checkpoint)"
	case s.seen.Note == nil:
		return fmt.Sprintf(", trusted on first use: --state remembered nothing, and now remembers size %d", rep.Latest.Size)
	}
	how := ""
	switch {
	case s.proved:
		how = ", the server's consistency proof checked"
	case s.noProof:
		how = ", the server offers no consistency proof: checked on the recomputed tree"
	}
	now := ""
	if rep.Latest.Size > s.seen.Size {
		now = fmt.Sprintf(", now remembers size %d", rep.Latest.Size)
	}
	return fmt.Sprintf(", consistent from the remembered size %d (--state%s%s)", s.seen.Size, how, now)
}

// proveOverAPI asks the server for the consistency proof from the
// remembered tree to its latest checkpoint, and checks it with verifier,
// the key the user holds; the proof's checkpoint joins v. latest is the
// server's latest checkpoint, read before (nil: it has none). bad says
// the log is not intact; err that the server could not be asked.
func (s *verifierState) proveOverAPI(ctx context.Context, c *apiclient.Client, verifier note.Verifier, latest []byte, v *ledger.Verification) (bad, err error) {
	if s == nil || s.seen.Note == nil {
		return nil, nil
	}
	size := int64(0)
	if latest != nil {
		lc, err := ledger.ParseCheckpoint(latest, verifier)
		if err != nil {
			return nil, nil // v has it, and Finish names it
		}
		size = lc.Size
	}
	if size < s.seen.Size {
		return &ledger.RollbackError{Seen: s.seen.Size, Latest: size}, nil
	}
	if s.seen.Size == 0 {
		return nil, nil // every tree extends the empty one
	}
	p, err := c.AuditProof(ctx, s.seen.Size)
	var refused *tgclient.RefusedError
	switch {
	case errors.Is(err, apiclient.ErrNoProofRoute):
		s.noProof = true // the recomputed tree still checks it
		return nil, nil
	case errors.As(err, &refused) && (refused.Type == "old_past_checkpoint" || refused.Type == "no_checkpoint"):
		// The log went back since its latest checkpoint was read.
		return fmt.Errorf("the log was rolled back: this verifier saw size %d before, and the server now says: %s", s.seen.Size, refused.Message), nil
	case err != nil:
		return nil, err
	}
	if _, err := p.Check(verifier, s.seen); err != nil {
		return err, nil
	}
	if !bytes.Equal([]byte(p.Checkpoint), latest) {
		v.Checkpoint([]byte(p.Checkpoint))
	}
	s.proved = true
	return nil, nil
}
