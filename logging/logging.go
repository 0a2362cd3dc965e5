// Package logging builds toolgate's zap loggers and adapts them to
// Temporal's log.Logger, so the SDK logs through the same sink.
package logging

import (
	"fmt"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a logger at level ("debug", "info", "warn", "error"),
// human-readable unless json.
func New(level string, json bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	cfg := zap.NewDevelopmentConfig()
	if json {
		cfg = zap.NewProductionConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = lvl > zapcore.DebugLevel
	return cfg.Build()
}

// Temporal adapts a zap logger to Temporal's log.Logger.
type Temporal struct{ z *zap.Logger }

var (
	_ log.Logger     = Temporal{}
	_ log.WithLogger = Temporal{}
)

// NewTemporal wraps z for the Temporal SDK.
func NewTemporal(z *zap.Logger) Temporal { return Temporal{z: z.WithOptions(zap.AddCallerSkip(1))} }

func (t Temporal) Debug(msg string, kv ...any) { t.z.Debug(msg, fields(kv)...) }
func (t Temporal) Info(msg string, kv ...any)  { t.z.Info(msg, fields(kv)...) }
func (t Temporal) Warn(msg string, kv ...any)  { t.z.Warn(msg, fields(kv)...) }
func (t Temporal) Error(msg string, kv ...any) { t.z.Error(msg, fields(kv)...) }

// With returns a logger that adds the key-value pairs to every entry.
func (t Temporal) With(kv ...any) log.Logger { return Temporal{z: t.z.With(fields(kv)...)} }

func fields(kv []any) []zap.Field {
	fs := make([]zap.Field, 0, len(kv)/2+1)
	for i := 0; i+1 < len(kv); i += 2 {
		key, ok := kv[i].(string)
		if !ok {
			key = fmt.Sprint(kv[i])
		}
		fs = append(fs, zap.Any(key, kv[i+1]))
	}
	if len(kv)%2 == 1 {
		fs = append(fs, zap.Any("extra", kv[len(kv)-1]))
	}
	return fs
}
