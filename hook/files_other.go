//go:build !unix

package hook

import "io/fs"

// noFollow: symbolic links are refused by the Lstat checks alone here.
const noFollow = 0

// lockFile does not lock where flock does not exist: parallel hook runs of
// one session may then lose a state change (a generation or a tool_use_id
// mapping), never a decision.
func lockFile(string) (func(), error) { return func() {}, nil }

// checkOwn has no owner or mode to check here.
func checkOwn(string, string, fs.FileInfo) error { return nil }
