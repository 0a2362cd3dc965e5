package sandbox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dropCapabilities leaves the calling thread, and every program it then
// executes, with no capabilities. Landlock's file rules bind root too,
// but a root toolgate's tool would keep root's other powers: reading any
// process's memory and environment, tracing, changing the system. Without
// capabilities, root in the sandbox is one more user Landlock confines.
//
// Capabilities are per thread: the caller holds its thread
// (runtime.LockOSThread) until it forks or executes the tool. A process
// that is not root and holds none needs nothing: no_new_privs, which
// Landlock sets, keeps an exec from granting any.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("read its capabilities: %w", err)
	}
	held := caps[0].Permitted|caps[1].Permitted != 0
	if !held && os.Geteuid() != 0 {
		return nil
	}
	// The bounding set first (that needs CAP_SETPCAP): root's exec would
	// otherwise be granted all of it again.
	for c := 0; ; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("read the capability bounding set: %w", err)
		}
		if in == 1 {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("toolgate runs as root without CAP_SETPCAP, so a tool would get root's capabilities back when it starts (capability %d: %w): run toolgate as a user of its own, or keep CAP_SETPCAP", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	caps = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("drop its capabilities: %w", err)
	}
	return nil
}
