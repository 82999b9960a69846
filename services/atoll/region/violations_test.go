package region

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The region keeps the permission violations its connections log, with
// the connection's name, whether it comes with the record or the logger.
func TestViolationHandler(t *testing.T) {
	const violation = "nats: permissions violation for publish to \"$KV.quota.x\""
	tests := []struct {
		name string
		log  func(*slog.Logger)
		want []string
	}{
		{"async error", func(l *slog.Logger) {
			l.Warn("nats async error", "connection", "atoll-scheduler-0", "subject", "", "err", violation)
		}, []string{"atoll-scheduler-0: " + violation}},
		{"connection from With", func(l *slog.Logger) {
			l.With("component", "bus", "connection", "atoll-gateway-1").Warn("nats async error", "err", violation)
		}, []string{"atoll-gateway-1: " + violation}},
		{"other errors", func(l *slog.Logger) {
			l.Warn("nats async error", "connection", "atoll-quota-0", "err", "nats: slow consumer")
			l.Info("bus ready", "url", "nats://127.0.0.1:4222")
		}, nil},
		{"below the inner handler's level", func(l *slog.Logger) {
			l.Warn("nats async error", "connection", "c", "err", "Permissions Violation for Subscription to \"atoll.evt.>\"")
		}, []string{"c: Permissions Violation for Subscription to \"atoll.evt.>\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := &violations{}
			// The inner handler drops warnings; violations are kept anyway.
			inner := slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})
			tt.log(slog.New(&violationHandler{Handler: inner, seen: seen}))
			r := &Region{violations: seen}
			if diff := cmp.Diff(tt.want, r.PermissionViolations()); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
	if (&violationHandler{Handler: slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})}).Enabled(context.Background(), slog.LevelInfo) {
		t.Error("enabled for info under an error-level handler")
	}
}
