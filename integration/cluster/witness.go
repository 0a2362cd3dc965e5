package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// TorchwoodVersion is the release of filippo.io/torchwood whose litewitness
// (a c2sp.org/tlog-witness witness on SQLite, its key in an ssh-agent) and
// witnessctl the tests run.
const TorchwoodVersion = "v0.6.1"

// Witness is a running litewitness with an ssh-agent of its own holding
// its key, as its README runs one.
type Witness struct {
	// Name is the witness's name; URL its base URL.
	Name, URL string
	// VerifierKey checks its cosignatures.
	VerifierKey string

	db, ctl string
	agent   *Process
	proc    *Process
}

// Spec is the witness as --ledger-witness takes it: VKEY@URL.
func (w *Witness) Spec() string { return w.VerifierKey + "@" + w.URL }

// StartWitness builds litewitness once into the cache and starts one named
// name under dir: a new Ed25519 key (ssh-keygen), an ssh-agent holding
// it, and the witness on a free loopback port.
func StartWitness(ctx context.Context, dir, name string) (*Witness, error) {
	bin, err := goInstall(ctx, "torchwood-"+TorchwoodVersion,
		"filippo.io/torchwood/cmd/litewitness@"+TorchwoodVersion, "filippo.io/torchwood/cmd/witnessctl@"+TorchwoodVersion)
	if err != nil {
		return nil, err
	}
	key, sock := filepath.Join(dir, "witness-key"), filepath.Join(dir, "agent.sock")
	if out, err := exec.CommandContext(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", key).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ssh-keygen: %w: %s", err, out)
	}
	agent := &Process{Name: "ssh-agent " + name, path: "ssh-agent", args: []string{"-D", "-a", sock}, env: baseEnv(), dir: dir,
		ready: func(ctx context.Context, _ func() string) error {
			return poll(ctx, pollInterval, func() error {
				if fileExists(sock) {
					return nil
				}
				return errNotYet
			})
		}}
	if err := agent.Start(ctx); err != nil {
		return nil, err
	}
	add := exec.CommandContext(ctx, "ssh-add", key)
	add.Env = baseEnv("SSH_AUTH_SOCK=" + sock)
	if out, err := add.CombinedOutput(); err != nil {
		agent.Kill()
		return nil, fmt.Errorf("ssh-add: %w: %s", err, out)
	}
	fp, err := exec.CommandContext(ctx, "ssh-keygen", "-l", "-E", "sha256", "-f", key+".pub").Output()
	fields := strings.Fields(string(fp))
	if err != nil || len(fields) < 2 {
		agent.Kill()
		return nil, fmt.Errorf("ssh-keygen -l: %v: %s", err, fp)
	}
	ports, err := freePorts(1)
	if err != nil {
		agent.Kill()
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	w := &Witness{Name: name, URL: "http://" + addr + "/", db: filepath.Join(dir, "litewitness.db"), ctl: filepath.Join(bin, "witnessctl"), agent: agent}
	w.proc = &Process{Name: "litewitness " + name, path: filepath.Join(bin, "litewitness"), dir: dir, env: baseEnv(),
		args:  []string{"-db", w.db, "-name", name, "-key", fields[1], "-ssh-agent", sock, "-listen", addr},
		ready: printed("listening")}
	if err := w.proc.Start(ctx); err != nil {
		agent.Kill()
		return nil, err
	}
	m := vkeyLine.FindStringSubmatch(w.proc.Output())
	if m == nil {
		w.Stop()
		return nil, fmt.Errorf("litewitness %s printed no verifier key:\n%s", name, w.proc.Output())
	}
	w.VerifierKey = m[1]
	return w, nil
}

// vkeyLine is litewitness's log line of its verifier key.
var vkeyLine = regexp.MustCompile(`vkey=(\S+)`)

// AddLog makes the witness know a log (witnessctl add-log) and its
// checkpoints' verifier key (add-key), while it runs.
func (w *Witness) AddLog(ctx context.Context, origin, vkey string) error {
	for _, args := range [][]string{
		{"add-log", "-db", w.db, "-origin", origin},
		{"add-key", "-db", w.db, "-origin", origin, "-key", vkey},
	} {
		if out, err := exec.CommandContext(ctx, w.ctl, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("witnessctl %s: %w: %s", args[0], err, out)
		}
	}
	return nil
}

// Pause stops the witness (its database and key stay); Resume starts it
// again on the same port.
func (w *Witness) Pause() { w.proc.Kill() }

// Resume starts a paused witness again.
func (w *Witness) Resume(ctx context.Context) error { return w.proc.Start(ctx) }

// Stop stops the witness and its agent.
func (w *Witness) Stop() {
	w.proc.Kill()
	w.agent.Kill()
}

// Output is what the witness printed, for a failing test.
func (w *Witness) Output() string { return w.proc.Output() }
