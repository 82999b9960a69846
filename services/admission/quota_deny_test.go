package admission_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

// regionWithPolicy is region with quota configured by cfg.
func regionWithPolicy(t *testing.T, cfg *quota.Config) *bus.Bus {
	t.Helper()
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	q := quota.New(b, slog.New(slog.DiscardHandler), cfg)
	a := admission.New(b, slog.New(slog.DiscardHandler), nil)
	for _, s := range []interface {
		Start(context.Context) error
		Stop() error
	}{q, a} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	return b
}

// Quota denies by default: a GPU with no GPU quota is refused (409,
// limit 0), and a workload past the project's cap is refused with 422;
// neither writes anything.
func TestQuotaDeniesByDefault(t *testing.T) {
	lim, err := quota.ParseLimits("OnDemand:cpu=10,memory=10Gi,gpus=0,pods=10,storage=10Gi")
	if err != nil {
		t.Fatal(err)
	}
	b := regionWithPolicy(t, &quota.Config{Defaults: api.QuotaDefaults{Limits: lim, MaxWorkloads: 2}})
	app := func(name, resources string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"new","name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"x:1","resources":%s}]}}}`, name, resources)
	}
	tests := []struct {
		name     string
		doc      []byte
		status   string
		code     string
		resource string
		limit    int64
		keys     []string
	}{
		{"a GPU with GPU quota 0", app("gpu", `{"requests":{"nvidia.com/gpu":1}}`), "409", "QuotaExceeded", "nvidia.com/gpu", 0, nil},
		{"a Reserved app with no Reserved quota", fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"new","name":"res"},
"spec":{"tier":"Reserved","replicas":1,"template":{"containers":[{"name":"a","image":"x:1"}]}}}`), "409", "QuotaExceeded", "cpu", 0, nil},
		{"first within the default", app("one", `{}`), "", "", "", 0, []string{"new.app.one"}},
		{"second within the default", app("two", `{}`), "", "", "", 0, []string{"new.app.one", "new.app.two"}},
		{"third past the workload cap", app("three", `{}`), "422", "TooManyWorkloads", "workloads", 2, []string{"new.app.one", "new.app.two"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reply, eb := call(t, b, bus.AdmissionSubmit, tc.doc, nil)
			if got := reply.Header.Get("Nats-Service-Error-Code"); got != tc.status {
				t.Fatalf("status %q, want %q (%s)", got, tc.status, reply.Data)
			}
			if eb != nil && (eb.Code != tc.code || eb.Quota == nil || eb.Quota.Resource != tc.resource || eb.Quota.Limit != tc.limit) {
				t.Errorf("body %+v, want %s on %s limit %d", eb, tc.code, tc.resource, tc.limit)
			}
			got := keys(t, b)
			slices.Sort(got)
			if !slices.Equal(got, tc.keys) {
				t.Errorf("workloads %v, want %v", got, tc.keys)
			}
		})
	}
}
