package ledger

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// Every checkpoint a verification sees (the log's own, the held ones, the
// one a verifier remembers) is checked against the recomputed tree and
// against every other: two checkpoints of one log, both signed with its
// key, that are not consistent (one size, two trees; or a larger tree
// that does not extend a smaller one) are a fork, whatever the entries
// say. A log whose latest checkpoint is smaller than the remembered one
// went back.

// source is where a verification got a checkpoint.
type source int

const (
	fromLog source = iota + 1
	fromHeld
	fromRemembered
)

// name names a checkpoint of this source in a sentence.
func (s source) name() string {
	switch s {
	case fromHeld:
		return "the held checkpoint"
	case fromRemembered:
		return "the remembered checkpoint"
	}
	return "the log's checkpoint"
}

// what starts the sentence that says a checkpoint of this source does
// not match the entries.
func (s source) what() string {
	if s == fromLog {
		return "checkpoint"
	}
	return s.name()
}

// seenCheckpoint is a checkpoint a verification was given, where from, and
// whether the recomputed tree has its root at its size.
type seenCheckpoint struct {
	Checkpoint
	from    source
	matches bool
}

func (s seenCheckpoint) String() string { return fmt.Sprintf("%s of size %d", s.from.name(), s.Size) }

// seen lists the checkpoints given, the log's first, then the held, then
// the remembered, each compared with the recomputed tree where it covers
// no more than the entries.
func (v *Verification) seen() ([]seenCheckpoint, error) {
	var out []seenCheckpoint
	add := func(c Checkpoint, from source) error {
		s := seenCheckpoint{Checkpoint: c, from: from}
		if c.Size <= v.n {
			root, err := tlog.TreeHash(c.Size, v)
			if err != nil {
				return fmt.Errorf("%s of size %d: %v", from.what(), c.Size, err)
			}
			s.matches = root == c.Hash
		}
		out = append(out, s)
		return nil
	}
	for _, c := range v.cps {
		if err := add(c, fromLog); err != nil {
			return nil, err
		}
	}
	for _, c := range v.held {
		if err := add(c, fromHeld); err != nil {
			return nil, err
		}
	}
	if v.remembered != nil {
		if err := add(*v.remembered, fromRemembered); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkSeen checks the checkpoints seen of a log of n entries, naming
// the first problem: a fork between two of them, a log that went back
// from the remembered one, a checkpoint past the entries, one that does
// not match them.
func checkSeen(seen []seenCheckpoint, n int64) error {
	// By size: a busy log has a checkpoint every few seconds, millions.
	first := make(map[int64]seenCheckpoint, len(seen))
	for _, b := range seen {
		a, ok := first[b.Size]
		switch {
		case !ok:
			first[b.Size] = b
		case a.Hash != b.Hash:
			return forked(a, b, seen)
		}
	}
	var latest int64
	var remembered *seenCheckpoint
	for i, s := range seen {
		switch s.from {
		case fromLog:
			latest = max(latest, s.Size)
		case fromRemembered:
			remembered = &seen[i]
		}
	}
	if remembered != nil && latest < remembered.Size {
		return &RollbackError{Seen: remembered.Size, Latest: latest}
	}
	for _, s := range seen {
		if s.Size > n {
			return fmt.Errorf("%s of size %d, but the log has %d entries: %d entries were removed: entries #%d to #%d were removed if only its tail was cut; if entries before #%d were also changed or deleted, the log was rewritten (a checkpoint of a smaller size, held or remembered, tells which)",
				s.from.what(), s.Size, n, s.Size-n, n, s.Size-1, n)
		}
	}
	for _, a := range seen {
		if a.matches {
			continue
		}
		// A larger checkpoint that matches the entries signs a tree
		// whose first a.Size entries are not a's: a fork.
		for _, b := range seen {
			if b.matches && b.Size > a.Size {
				return forked(b, a, seen)
			}
		}
		return fmt.Errorf("%s of size %d does not match the entries: an entry between #%d and #%d was changed, removed or reordered", a.from.what(), a.Size, matchedBelow(seen, a), a.Size-1)
	}
	return nil
}

// forked says two signed checkpoints of the log are not consistent; b is
// not larger than a. When one of them matches the entries, it says where
// the other's entries differ.
func forked(a, b seenCheckpoint, seen []seenCheckpoint) error {
	how := fmt.Sprintf("%s does not extend %s", a, b)
	if a.Size == b.Size {
		how = fmt.Sprintf("%s and %s sign different trees", a, b)
	}
	detail := ""
	switch {
	case a.matches && !b.matches:
		detail = fmt.Sprintf(" (the entries are those %s signs; %s's differ between #%d and #%d)", a, b.from.name(), matchedBelow(seen, b), b.Size-1)
	case b.matches && !a.matches:
		detail = fmt.Sprintf(" (the entries are those %s signs; %s's differ between #%d and #%d)", b, a.from.name(), matchedBelow(seen, a), a.Size-1)
	}
	return fmt.Errorf("the log forked: %s, and both are signed with the log's key%s", how, detail)
}

// matchedBelow is where the entries a checkpoint does not match may
// start: after the largest smaller checkpoint of the same source that
// matches them (a stored one that matched proves nothing to the holder
// of another).
func matchedBelow(seen []seenCheckpoint, a seenCheckpoint) int64 {
	var sizes []int64
	for _, s := range seen {
		if s.from == a.from && s.matches {
			sizes = append(sizes, s.Size)
		}
	}
	return largestBelow(sizes, a.Size)
}
