//go:build unix

package hook

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// noFollow makes an open fail on a symbolic link.
const noFollow = syscall.O_NOFOLLOW

// lockFile takes an exclusive flock on path (created 0600 if absent, never
// through a symbolic link) and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|noFollow, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// checkOwn refuses a file or directory that another user owns or that
// others may write: whoever can change the hook's state could make it ask
// for a call it should not.
func checkOwn(what, path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s %s belongs to user %d, not to this user (%d): give the hook a state directory of its own (--state-dir)", what, path, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s %s may be written by others (mode %v): chmod go-w %s", what, path, fi.Mode().Perm(), path)
	}
	return nil
}
