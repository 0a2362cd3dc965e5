package rules

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/policy"
)

// DefaultReloadInterval is a sensible polling interval for Reloader.Run.
const DefaultReloadInterval = 2 * time.Second

// mtimeSlack is how close to a file's modification time a check must be
// for the file to be hashed again although its size and mtime did not
// change: a write within the same clock tick as the last check would
// otherwise go unnoticed.
const mtimeSlack = 2 * time.Second

// Reloader serves a policy file and reloads it when it changes. A file
// that fails to load is logged and refused; the last good policy keeps
// serving until the file is fixed. Write policy files by renaming a
// complete file into place: a reader may otherwise see a half-written
// file (which is refused if it is unchanged while being read... or, if it
// happens to be a valid prefix, taken).
//
// Reloader implements policy.ToolPolicy, policy.Versioned,
// policy.OutputMiddleware, policy.QuotaPolicy, policy.AgentToolPolicy and
// policy.OutrightDenier by delegating each call to the current policy.
type Reloader struct {
	path   string
	opts   Options
	logger *zap.Logger

	current atomic.Pointer[Policy]

	mu      sync.Mutex // serialises Reload
	seen    fileStamp  // the file as last read
	checked time.Time  // when it was last read
	badSum  [sha256.Size]byte
	badErr  error // the error of the content hashed to badSum, if any
	goodSum [sha256.Size]byte

	onNew func(version string)
}

// OnNewVersion has Run call f with each new version it takes (the
// decision ledger's policy.loaded). Set it before Run.
func (r *Reloader) OnNewVersion(f func(version string)) { r.onNew = f }

var (
	_ policy.ToolPolicy       = (*Reloader)(nil)
	_ policy.Versioned        = (*Reloader)(nil)
	_ policy.OutputMiddleware = (*Reloader)(nil)
	_ policy.QuotaPolicy      = (*Reloader)(nil)
	_ policy.AgentToolPolicy  = (*Reloader)(nil)
	_ policy.OutrightDenier   = (*Reloader)(nil)
)

type fileStamp struct {
	size  int64
	mtime time.Time
}

func stampOf(fi os.FileInfo) fileStamp { return fileStamp{size: fi.Size(), mtime: fi.ModTime()} }

// NewReloader loads the policy file at path; the initial load must
// succeed. logger may be nil.
func NewReloader(path string, opts Options, logger *zap.Logger) (*Reloader, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	r := &Reloader{path: path, opts: opts, logger: logger}
	data, stamp, err := r.read()
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	p, err := Parse(path, data, opts)
	if err != nil {
		return nil, err
	}
	r.current.Store(p)
	r.seen, r.checked, r.goodSum = stamp, time.Now(), sha256.Sum256(data)
	return r, nil
}

// Current returns the policy now in force.
func (r *Reloader) Current() *Policy { return r.current.Load() }

// Run checks the file every interval (DefaultReloadInterval if <= 0) until
// ctx ends. It logs each new version it takes and each bad file it refuses
// (once per distinct content).
func (r *Reloader) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := r.Current().Version()
		err := r.Reload()
		switch {
		case errors.Is(err, errFileChanging):
			// Caught mid-write; the next tick reads it whole.
		case err != nil:
			if err.Error() != lastErr {
				r.logger.Error("policy file refused; keeping the last good version",
					zap.String("path", r.path), zap.String("version", before), zap.Error(err))
			}
			lastErr = err.Error()
		default:
			lastErr = ""
			if after := r.Current().Version(); after != before {
				r.logger.Info("policy reloaded", zap.String("path", r.path),
					zap.String("version", after), zap.String("previous", before))
				if r.onNew != nil {
					r.onNew(after)
				}
			}
		}
	}
}

// Reload checks the file once and takes it if it changed and loads. It
// returns the load error while the file is bad (the current policy stays),
// and nil when the file is unchanged or was taken. The file is read only
// when its size or modification time changed, or when it was modified
// within a couple of seconds of the last read.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := os.Stat(r.path)
	if err != nil {
		return fmt.Errorf("check policy file: %w", err)
	}
	if stamp := stampOf(fi); stamp == r.seen && r.checked.Sub(stamp.mtime) > mtimeSlack {
		return r.badErr
	}
	data, stamp, err := r.read()
	if err != nil {
		return err
	}
	r.seen, r.checked = stamp, time.Now()
	sum := sha256.Sum256(data)
	switch {
	case sum == r.goodSum:
		r.badErr = nil
		return nil
	case r.badErr != nil && sum == r.badSum:
		return r.badErr
	}
	p, err := Parse(r.path, data, r.opts)
	if err != nil {
		r.badSum, r.badErr = sum, err
		return err
	}
	r.current.Store(p)
	r.goodSum, r.badErr = sum, nil
	return nil
}

// errFileChanging says the file changed while it was read: a writer is at
// work, and the next check reads it again. Run does not log it as a refusal.
var errFileChanging = errors.New("read policy: the file changed while being read; will retry")

// read reads the file and refuses it if it changed while being read.
func (r *Reloader) read() ([]byte, fileStamp, error) {
	before, err := os.Stat(r.path)
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("read policy: %w", err)
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("read policy: %w", err)
	}
	after, err := os.Stat(r.path)
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("read policy: %w", err)
	}
	stamp := stampOf(after)
	if stamp != stampOf(before) || stamp.size != int64(len(data)) {
		return nil, fileStamp{}, errFileChanging
	}
	return data, stamp, nil
}

// Version implements policy.Versioned with the current policy's version.
func (r *Reloader) Version() string { return r.Current().Version() }

// CheckPath is Policy.CheckPath of the current policy; give it to the
// built-in tools as builtin.Workspace's Guard.
func (r *Reloader) CheckPath(realPath string) error { return r.Current().CheckPath(realPath) }

// Evaluate decides a call with the current policy (see Policy.Evaluate).
func (r *Reloader) Evaluate(call policy.Call) Verdict { return r.Current().Evaluate(call) }

// EvaluateApproval implements policy.ToolPolicy with the current policy.
func (r *Reloader) EvaluateApproval(ctx context.Context, call policy.Call) (*policy.ApprovalRequest, error) {
	return r.Current().EvaluateApproval(ctx, call)
}

// BeforeCall implements policy.ToolPolicy with the current policy.
func (r *Reloader) BeforeCall(ctx context.Context, call policy.Call) error {
	return r.Current().BeforeCall(ctx, call)
}

// AfterCall implements policy.ToolPolicy with the current policy.
func (r *Reloader) AfterCall(ctx context.Context, call policy.Call, output json.RawMessage) error {
	return r.Current().AfterCall(ctx, call, output)
}

// TransformOutput implements policy.OutputMiddleware with the current
// policy.
func (r *Reloader) TransformOutput(ctx context.Context, call policy.Call, output json.RawMessage) (json.RawMessage, int, error) {
	return r.Current().TransformOutput(ctx, call, output)
}

// SessionQuota implements policy.QuotaPolicy with the current policy.
func (r *Reloader) SessionQuota(tool string) (policy.Quota, bool) {
	return r.Current().SessionQuota(tool)
}

// CheckAgentArgs implements policy.AgentToolPolicy with the current policy.
func (r *Reloader) CheckAgentArgs(tool string, args json.RawMessage) error {
	return r.Current().CheckAgentArgs(tool, args)
}

// ReportTimeout implements policy.AgentToolPolicy with the current policy.
func (r *Reloader) ReportTimeout(call policy.Call) time.Duration {
	return r.Current().ReportTimeout(call)
}

// DeniesOutright implements policy.OutrightDenier with the current policy.
func (r *Reloader) DeniesOutright(call policy.Call) bool { return r.Current().DeniesOutright(call) }

// AgentTools returns the current policy's tools section (see
// Policy.AgentTools).
func (r *Reloader) AgentTools() []AgentTool { return r.Current().AgentTools() }

// SandboxFor implements policy.SandboxPolicy with the current policy.
func (r *Reloader) SandboxFor(call policy.Call) *policy.SandboxGrant {
	return r.Current().SandboxFor(call)
}

// ShadowFor implements policy.ShadowPolicy with the current policy.
func (r *Reloader) ShadowFor(call policy.Call) *policy.Shadow {
	return r.Current().ShadowFor(call)
}

// AllowRule implements policy.AllowRuler with the current policy.
func (r *Reloader) AllowRule(call policy.Call) string { return r.Current().AllowRule(call) }
