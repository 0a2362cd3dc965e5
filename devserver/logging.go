package devserver

import (
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logGate decides which server log entries reach the caller's logger:
// all of them (subject to the caller's level) while the server runs, only
// panics and fatals while it stops, none once it has stopped.
//
// Stopping is noisy by design: services stop one by one and the others log
// warnings and "context canceled" errors about the ones already gone (many
// of them when matching is still loading task queues, e.g. just after a
// restart from a crash). Stop's result is what tells the caller whether
// stopping failed. And a few gRPC connections of a stopped server keep
// redialling in the background until the process exits; without the gate
// they would write to the caller's logger indefinitely, which a zaptest
// logger turns into a panic once its test has ended.
type logGate struct {
	min atomic.Int32 // lowest zapcore.Level let through
}

func newLogGate() *logGate {
	g := &logGate{}
	g.set(zapcore.DebugLevel)
	return g
}

func (g *logGate) set(l zapcore.Level) { g.min.Store(int32(l)) }

// raise never lowers the gate: a Stop after stopped() stays silent. Only
// Start and Stop call it, one at a time, so load-then-store is enough.
func (g *logGate) raise(l zapcore.Level) {
	if int32(l) > g.min.Load() {
		g.set(l)
	}
}

// stopping keeps only DPanic and above; stopped drops everything
// (InvalidLevel is above every real level).
func (g *logGate) stopping() { g.raise(zapcore.DPanicLevel) }
func (g *logGate) stopped()  { g.raise(zapcore.InvalidLevel) }

func (g *logGate) allows(l zapcore.Level) bool { return l >= zapcore.Level(g.min.Load()) }

// wrap returns logger with its core behind the gate.
func (g *logGate) wrap(logger *zap.Logger) *zap.Logger {
	return logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return gatedCore{Core: c, gate: g}
	}))
}

// gatedCore is a zapcore.Core that consults a logGate before its inner core.
type gatedCore struct {
	zapcore.Core
	gate *logGate
}

func (c gatedCore) Enabled(l zapcore.Level) bool {
	return c.gate.allows(l) && c.Core.Enabled(l)
}

func (c gatedCore) With(fields []zapcore.Field) zapcore.Core {
	return gatedCore{Core: c.Core.With(fields), gate: c.gate}
}

func (c gatedCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.gate.allows(e.Level) {
		return ce
	}
	return c.Core.Check(e, ce)
}
