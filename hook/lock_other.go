//go:build !unix

package hook

// lockFile does not lock where flock does not exist: parallel hook runs of
// one session may then lose a state change (a generation or a tool_use_id
// mapping), never a decision.
func lockFile(string) (func(), error) { return func() {}, nil }
