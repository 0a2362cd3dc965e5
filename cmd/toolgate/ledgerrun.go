package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/fsmode"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/witness"
)

// ledgerFlags say where the decision ledger is, and what signs it.
type ledgerFlags struct {
	dsn, keyFile, checkpoints, signerState string
	// witnesses cosign the checkpoints: VKEY@URL each.
	witnesses []string
	// witnessesRequired: how many must cosign a decision before its
	// tool runs; 0, none.
	witnessesRequired int
}

// ledgerOff is the --ledger value that keeps no ledger.
const ledgerOff = "off"

// devDeployment names toolgate dev's log: its origin is toolgate/dev.
const devDeployment = "dev"

func (f *ledgerFlags) add(cmd *cobra.Command, dev bool) {
	dsnHelp, keyHelp := "", ""
	if dev {
		dsnHelp, keyHelp = "; default <data-dir>/ledger.db", "; default <data-dir>/ledger.key, made on first start"
	}
	fs := cmd.Flags()
	fs.StringVar(&f.dsn, "ledger", os.Getenv("TOOLGATE_LEDGER"), "decision ledger: a postgres:// URL or a SQLite file; \"off\" keeps none (env TOOLGATE_LEDGER"+dsnHelp+")")
	fs.StringVar(&f.keyFile, "ledger-key", os.Getenv("TOOLGATE_LEDGER_KEY"), "file of the ledger's signing key ('toolgate audit key --new FILE'), or of its verifier key where nothing is signed (env TOOLGATE_LEDGER_KEY"+keyHelp+")")
	fs.StringVar(&f.checkpoints, "ledger-checkpoints", os.Getenv("TOOLGATE_LEDGER_CHECKPOINTS"), "also append every signed checkpoint to this file: keep it where the ledger's database cannot rewrite it (env TOOLGATE_LEDGER_CHECKPOINTS)")
	fs.StringArrayVar(&f.witnesses, "ledger-witness", strings.Fields(os.Getenv("TOOLGATE_LEDGER_WITNESSES")), "a witness that cosigns every checkpoint (c2sp.org/tlog-witness), as VKEY@URL: its verifier key, then its base URL; repeatable (env TOOLGATE_LEDGER_WITNESSES, space-separated; docs/audit.md, \"Witnesses\")")
	fs.IntVar(&f.witnessesRequired, "ledger-witnesses-required", 0, "an approved call's tool runs only once its decision is in a checkpoint this many --ledger-witness witnesses cosigned; calls wait while they are down (default 0: tools do not wait)")
	fs.StringVar(&f.signerState, "ledger-signer-state", os.Getenv("TOOLGATE_LEDGER_SIGNER_STATE"), "file where the ledger's signer remembers the last tree it signed, so it never signs a rewritten or rolled-back database (env TOOLGATE_LEDGER_SIGNER_STATE; default ledger-signed.json beside the signing key, when that directory is writable)")
}

// signerStateFile is where a signer keeps its state: the flag's file, or
// ledger-signed.json beside the key when that directory is writable; ""
// (memory only, with a warning) when it is not.
func (a *app) signerStateFile(f ledgerFlags) string {
	if f.signerState != "" {
		return f.signerState
	}
	dir := filepath.Dir(f.keyFile)
	probe, err := os.CreateTemp(dir, ".toolgate-probe-*")
	if err != nil {
		a.logger.Warn("The ledger's signer remembers what it signed only while it runs: the signing key's directory is not writable; give --ledger-signer-state FILE on a writable disk (docs/audit.md, \"A refused checkpoint\")")
		return ""
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	return filepath.Join(dir, "ledger-signed.json")
}

// devDefaults puts toolgate dev's ledger in its data dir, unless the flags
// say otherwise.
func (f *ledgerFlags) devDefaults(dataDir string) {
	if f.dsn == "" {
		f.dsn = filepath.Join(dataDir, "ledger.db")
	}
	if f.keyFile == "" {
		f.keyFile = filepath.Join(dataDir, "ledger.key")
	}
}

// check refuses a ledger without a key before anything starts.
func (f ledgerFlags) check() error {
	if f.dsn != "" && f.dsn != ledgerOff && f.keyFile == "" {
		return usageError("--ledger needs --ledger-key FILE (or TOOLGATE_LEDGER_KEY): the key that signs its checkpoints; make one with 'toolgate audit key --new FILE --deployment NAME'")
	}
	return nil
}

// loadLedgerKey reads a signing key file (or, for a reader, a verifier
// key file). create makes a signing key where there is no file.
func loadLedgerKey(path string, create bool) (ledger.Keys, bool, error) {
	if create {
		return ledger.LoadOrCreateKey(path, devDeployment)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ledger.Keys{}, false, fmt.Errorf("ledger key: %w", err)
	}
	if strings.HasPrefix(strings.TrimSpace(string(b)), "PRIVATE+KEY+") {
		k, err := ledger.LoadKey(path)
		return k, false, err
	}
	v, err := ledger.ParseVerifierKey(string(b))
	if err != nil {
		return ledger.Keys{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return ledger.Keys{Verifier: v, VerifierKey: strings.TrimSpace(string(b))}, false, nil
}

// openLedger opens the ledger the flags name; nil when they name none.
// dev makes the signing key on first start. webhook, when set, receives
// every checkpoint this process signs.
func (a *app) openLedger(ctx context.Context, f ledgerFlags, dev bool, webhook *notify.Webhook) (*ledger.Ledger, error) {
	switch {
	case f.dsn == ledgerOff:
		a.logger.Warn("No decision ledger (--ledger off): decisions are recorded only in Temporal, and forgotten with its retention")
		return nil, nil
	case f.dsn == "":
		a.logger.Warn("No decision ledger: decisions are recorded only in Temporal, and forgotten with its retention; give --ledger (docs/audit.md)")
		return nil, nil
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	keys, created, err := loadLedgerKey(f.keyFile, dev)
	if err != nil {
		return nil, usageError("%v", err)
	}
	if created {
		a.logger.Info("Ledger signing key created", zap.String("file", f.keyFile), zap.String("verifierKey", keys.VerifierKey))
	}
	// With payload keys, what may hold secrets is sealed in the ledger too.
	opts := ledger.Options{DSN: f.dsn, Keys: keys, Sealer: sealer(a.conn.keys.ring), Logger: a.logger.Named("ledger")}
	if keys.Signer != nil {
		opts.SignerState = a.signerStateFile(f)
		opts.OnFork = a.forkAlarm(keys.Verifier.Name(), webhook)
	}
	// A signer sends its checkpoints to the witnesses; any process checks
	// their cosignatures when its tools wait for them.
	for _, spec := range f.witnesses {
		w, err := witness.Parse(spec)
		if err != nil {
			return nil, usageError("--ledger-witness: %v", err)
		}
		opts.Witnesses = append(opts.Witnesses, w)
	}
	if f.witnessesRequired < 0 || f.witnessesRequired > len(opts.Witnesses) {
		return nil, usageError("--ledger-witnesses-required %d: give at least as many --ledger-witness (%d given)", f.witnessesRequired, len(opts.Witnesses))
	}
	opts.WitnessesRequired = f.witnessesRequired
	if webhook != nil {
		opts.Publish = append(opts.Publish, func(ctx context.Context, c ledger.Checkpoint) error {
			return webhook.Checkpoint(ctx, c.Origin, c.Size, c.Note)
		})
	}
	if f.checkpoints != "" {
		if _, err := fsmode.Tighten(a.logger, f.checkpoints, fsmode.File); err != nil {
			return nil, fmt.Errorf("--ledger-checkpoints: %w", err)
		}
		opts.Publish = append(opts.Publish, appendCheckpointTo(f.checkpoints))
	}
	l, err := ledger.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	a.logger.Info("Decision ledger", zap.String("at", l.Where()), zap.String("origin", l.Origin()), zap.Bool("signs", keys.Signer != nil))
	return l, nil
}

// MetricLedgerForks counts the signer's refusals of a tree that does not
// extend what it signed.
const MetricLedgerForks = "toolgate_ledger_forks"

// forkAlarm is what a signer's refusal sets off beside its error log (the
// ledger's) and /readyz (Ledger.Refused): a metric and a ledger.fork
// webhook event.
func (a *app) forkAlarm(origin string, webhook *notify.Webhook) func(context.Context, ledger.ForkError) {
	return func(ctx context.Context, f ledger.ForkError) {
		if a.metrics != nil {
			a.metrics.Counter(MetricLedgerForks).Inc(1)
		}
		if webhook == nil {
			return
		}
		reason := f.Reason
		if f.Witness != "" {
			reason = "witness " + f.Witness + ": " + reason
		}
		if err := webhook.Fork(ctx, origin, f.Signed, f.Offered, reason); err != nil {
			a.logger.Error("Could not send the ledger.fork webhook event", zap.Error(err))
		}
	}
}

// appendCheckpointTo appends each checkpoint to a file, a note after the
// other, each followed by a blank line. A new file is owner-only (an
// existing one is tightened when the ledger opens).
func appendCheckpointTo(path string) func(context.Context, ledger.Checkpoint) error {
	var mu sync.Mutex
	return func(_ context.Context, c ledger.Checkpoint) error {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, fsmode.File)
		if err != nil {
			return err
		}
		_, werr := f.Write(append(append([]byte{}, c.Note...), '\n'))
		return errors.Join(werr, f.Close())
	}
}

// webhookOf finds the webhook channel among a worker's channels.
func webhookOf(channels []activities.Channel) *notify.Webhook {
	for _, ch := range channels {
		if w, ok := ch.(*notify.Webhook); ok {
			return w
		}
	}
	return nil
}

// logPolicyLoaded writes a policy.loaded entry, once per policy version.
func (a *app) logPolicyLoaded(l *ledger.Ledger, file, version string) {
	if l == nil {
		return
	}
	if file == "" {
		file = "(built-in default policy)"
	}
	e := ledger.Entry{Kind: ledger.KindPolicyLoaded, Event: "policy/" + version, At: time.Now(), File: file, PolicyVersion: version}
	if version == "" {
		e.Event = "policy/builtin"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := l.Append(ctx, e); err != nil {
		a.logger.Error("Could not log the policy's version to the ledger", zap.String("version", version), zap.Error(err))
	}
}

// logTokensCreated writes a token.created entry for each token toolgate
// made (never the token itself).
func (a *app) logTokensCreated(ctx context.Context, l *ledger.Ledger, entries []server.TokenEntry) error {
	if l == nil {
		return nil
	}
	var out []ledger.Entry
	for _, t := range entries {
		out = append(out, ledger.Entry{Kind: ledger.KindTokenCreated, Event: "token/" + t.Name + "/" + t.SHA256[:16], At: time.Now(), Name: t.Name, Role: string(t.Role), By: "toolgate dev"})
	}
	_, err := l.Append(ctx, out...)
	return err
}
