package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// webUIName is the companion program that serves the Temporal Web UI
// (cmd/toolgate-ui), installed beside toolgate.
const webUIName = "toolgate-ui"

// defaultUIAddr is where toolgate dev serves the Web UI: the port the
// temporal CLI's dev server uses.
const defaultUIAddr = "127.0.0.1:8233"

// webUI is the Web UI toolgate dev runs beside itself.
type webUI struct {
	// url is where people open it; note is the banner's line.
	url, note string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// findWebUI returns the companion beside this process's binary, never one
// found on PATH (which could be anyone's).
func findWebUI() (string, bool) {
	self, err := os.Executable()
	if err != nil {
		return "", false
	}
	path := filepath.Join(filepath.Dir(self), webUIName)
	info, err := os.Stat(path)
	return path, err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0
}

// uiAddr is addr, or when addr is the default and taken, a free port on
// the same host: a second dev on the machine still gets a UI.
func uiAddr(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil && addr == defaultUIAddr {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return "", fmt.Errorf("--ui %s: %w", addr, err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// uiOrigins are the origins the UI's pages come from at addr, which the
// codec endpoint answers (CORS with credentials).
func uiOrigins(addr string) []string {
	_, port, _ := net.SplitHostPort(addr)
	return []string{"http://" + addr, "http://localhost:" + port}
}

// planWebUI decides dev's Web UI: off, not installed (the banner says how
// to install it), or at an address, whose origins the codec endpoint then
// trusts. asked says --ui was given on the command line: then a missing
// companion is an error, not a note.
func (a *app) planWebUI(addr string, asked bool, httpAddr string) (*webUI, error) {
	switch {
	case addr == "" || addr == "off":
		return nil, nil
	case httpAddr == "":
		if asked {
			return nil, usageError("--ui needs --http: the UI decodes payloads through toolgate's codec endpoint")
		}
		return nil, nil
	}
	if _, ok := findWebUI(); !ok {
		note := "  Web UI     not installed: go install ./cmd/" + webUIName + " (beside toolgate; --ui off hides this line)\n"
		if asked {
			return nil, usageError("--ui: %s is not installed beside toolgate (go install ./cmd/%s, or go install github.com/toolgate/toolgate/cmd/...@latest)", webUIName, webUIName)
		}
		return &webUI{note: note}, nil
	}
	at, err := uiAddr(addr)
	if err != nil {
		return nil, err
	}
	a.codecOrigins = append(a.codecOrigins, uiOrigins(at)...)
	return &webUI{url: "http://" + at}, nil
}

// start runs the UI against dev's Temporal and codec endpoint; it stops
// with ctx (dev's end).
func (u *webUI) start(ctx context.Context, logger *zap.Logger, temporal, httpURL, namespace string) {
	if u == nil || u.url == "" {
		return
	}
	path, _ := findWebUI()
	u.cmd = exec.Command(path, "--listen", u.url[len("http://"):], "--temporal-address", temporal,
		"--codec-endpoint", httpURL+"/codec/"+namespace, "--namespace", namespace, "--sign-in-url", httpURL+"/login")
	u.cmd.Stdout, u.cmd.Stderr = os.Stderr, os.Stderr
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // never outlives dev
	if err := u.cmd.Start(); err != nil {
		logger.Warn("The Web UI did not start", zap.Error(err))
		u.note = "  Web UI     did not start (see the log)\n"
		return
	}
	u.note = fmt.Sprintf("  Web UI     %s  (read-only; sign in to the inbox to read decrypted payloads)\n", u.url)
	u.exited = make(chan struct{})
	go func() {
		err := u.cmd.Wait()
		close(u.exited)
		if ctx.Err() == nil {
			logger.Warn("The Web UI stopped", zap.Error(err))
		}
	}()
	go func() {
		<-ctx.Done()
		u.stop()
	}()
}

// stop ends the UI, waiting a moment for it to go.
func (u *webUI) stop() {
	if u == nil || u.cmd == nil || u.cmd.Process == nil {
		return
	}
	_ = u.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-u.exited:
	case <-time.After(5 * time.Second):
		_ = u.cmd.Process.Kill() // already gone is as good
	}
}

// banner is the UI's line in dev's banner ("" when off).
func (u *webUI) banner() string {
	if u == nil {
		return ""
	}
	return u.note
}
