package admission_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

// startWithConfig runs an admission service with cfg on b until t ends or
// the returned stop is called.
func startWithConfig(t *testing.T, b *bus.Bus, cfg *admission.Config) (stop func()) {
	t.Helper()
	a := admission.New(b, slog.Default(), cfg)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = a.Stop()
		}
	}
	t.Cleanup(stop)
	return stop
}

func graceApp(name string, grace int) string {
	return fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"ops","name":%q},
"spec":{"replicas":2,"template":{"terminationGracePeriodSeconds":%d,"containers":[{"name":"a","image":"x"}]}}}`, name, grace)
}

// TestGracePeriodMaximumIsThePlatforms: admission holds templates to the
// maximum grace period its operators configured (not the default 300):
// over it is 422 TooLarge naming spec.template.terminationGracePeriodSeconds
// and the maximum, and nothing is written; at it is admitted. After the
// maximum is lowered, an App admitted under the higher one can still be
// scaled (its template did not change), but an update keeping the old
// grace period is refused.
func TestGracePeriodMaximumIsThePlatforms(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	q := quota.New(b, slog.Default(), quota.Ample())
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop() })
	stop := startWithConfig(t, b, &admission.Config{MaxTerminationGracePeriodSeconds: 600})

	const field = "spec.template.terminationGracePeriodSeconds"
	for _, tc := range []struct {
		name   string
		grace  int
		reason string // "" when admitted
	}{
		{"over the default, under the platform's", 450, ""},
		{"at the platform's", 600, ""},
		{"over the platform's", 601, "601 exceeds the platform's maximum of 600 seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("grace-%d", tc.grace)
			reply, eb := call(t, b, bus.AdmissionSubmit, []byte(graceApp(name, tc.grace)), nil)
			if tc.reason == "" {
				if eb != nil {
					t.Fatalf("refused: %+v", eb)
				}
				return
			}
			if eb == nil {
				t.Fatalf("admitted: %s", reply.Data)
			}
			if code := reply.Header.Get("Nats-Service-Error-Code"); code != "422" {
				t.Errorf("status %s, want 422", code)
			}
			if len(eb.Fields) != 1 || eb.Fields[0].Field != field || eb.Fields[0].Code != api.CodeTooLarge || eb.Fields[0].Reason != tc.reason {
				t.Errorf("fields %+v, want one %s %s %q", eb.Fields, field, api.CodeTooLarge, tc.reason)
			}
			for _, k := range keys(t, b) {
				if strings.HasSuffix(k, name) {
					t.Errorf("%s written", k)
				}
			}
		})
	}

	// The operators lower the maximum to 60.
	stop()
	startWithConfig(t, b, &admission.Config{MaxTerminationGracePeriodSeconds: 60})
	four := int32(4)
	if _, code, eb := operate(t, b, api.Operation{Project: "ops", Kind: api.KindApp, Name: "grace-600", Op: api.OpScale, Replicas: &four}); eb != nil {
		t.Errorf("scaling an App admitted under the higher maximum: %s %+v", code, eb)
	}
	reply, eb := call(t, b, bus.AdmissionUpdate, []byte(graceApp("grace-600", 600)), nil)
	if eb == nil || reply.Header.Get("Nats-Service-Error-Code") != "422" || len(eb.Fields) != 1 || eb.Fields[0].Field != field ||
		eb.Fields[0].Reason != "600 exceeds the platform's maximum of 60 seconds" {
		t.Errorf("update over the lowered maximum: %s %+v, want 422 on %s", reply.Header.Get("Nats-Service-Error-Code"), eb, field)
	}
}

// TestMaxTerminationGracePeriodSetting: the setting's bounds and what an
// unset one means.
func TestMaxTerminationGracePeriodSetting(t *testing.T) {
	for _, tc := range []struct {
		max     int64
		wantErr bool
		limit   int64 // Config.Limits with it
	}{
		{0, true, 300},
		{4, true, 4},
		{5, false, 5},
		{300, false, 300},
		{3600, false, 3600},
	} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			if err := admission.CheckMaxTerminationGracePeriod(tc.max); (err != nil) != tc.wantErr {
				t.Errorf("CheckMaxTerminationGracePeriod(%d) = %v, want an error %v", tc.max, err, tc.wantErr)
			}
			c := &admission.Config{MaxTerminationGracePeriodSeconds: tc.max}
			if got := c.Limits().MaxTerminationGracePeriodSeconds; got != tc.limit {
				t.Errorf("Limits() with %d: %d, want %d", tc.max, got, tc.limit)
			}
		})
	}
}
