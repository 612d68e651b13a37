// Package logging builds the services' slog loggers from their level and
// format settings.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// New returns a logger writing to w at level (debug, info, warn, error)
// in format (json, text).
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	lv := strings.ToLower(strings.TrimSpace(level))
	if lv == "warning" {
		lv = "warn"
	}
	if err := l.UnmarshalText([]byte(lv)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "json", "":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", format)
}
