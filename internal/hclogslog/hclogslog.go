// Package hclogslog adapts an hclog.Logger to log/slog's Handler, for the
// libraries (River) that log through slog: every log line of the process
// still goes through hclog, with its level, name and key-value pairs.
package hclogslog

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// New returns a slog.Logger that writes to l. A nil l discards.
func New(l hclog.Logger) *slog.Logger {
	if l == nil {
		l = hclog.NewNullLogger()
	}
	return slog.New(&handler{l: l})
}

// handler forwards slog records to an hclog.Logger.
type handler struct {
	l     hclog.Logger
	group string
}

func level(l slog.Level) hclog.Level {
	switch {
	case l >= slog.LevelError:
		return hclog.Error
	case l >= slog.LevelWarn:
		return hclog.Warn
	case l >= slog.LevelInfo:
		return hclog.Info
	}
	return hclog.Debug
}

// Enabled follows hclog's level.
func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	switch level(l) {
	case hclog.Error:
		return h.l.IsError()
	case hclog.Warn:
		return h.l.IsWarn()
	case hclog.Info:
		return h.l.IsInfo()
	}
	return h.l.IsDebug()
}

// Handle writes one record as one hclog line.
func (h *handler) Handle(_ context.Context, r slog.Record) error {
	args := make([]any, 0, 2*r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, h.key(a.Key), a.Value.Resolve().Any())
		return true
	})
	h.l.Log(level(r.Level), r.Message, args...)
	return nil
}

func (h *handler) key(k string) string {
	if h.group == "" {
		return k
	}
	return h.group + "." + k
}

// WithAttrs returns a handler whose lines carry attrs.
func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	args := make([]any, 0, 2*len(attrs))
	for _, a := range attrs {
		args = append(args, h.key(a.Key), a.Value.Resolve().Any())
	}
	return &handler{l: h.l.With(args...), group: h.group}
}

// WithGroup prefixes later keys with name.
func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{l: h.l, group: h.key(name)}
}
