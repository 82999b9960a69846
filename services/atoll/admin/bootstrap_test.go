package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/admission"
	"atoll.dev/services/aggregator"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
	"atoll.dev/services/propagator"
	"atoll.dev/services/quota"
	"atoll.dev/services/scheduler"
)

// permissionLog records the permission violations the bus logs, per
// connection.
type permissionLog struct {
	mu  sync.Mutex
	got []string
}

func (l *permissionLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *permissionLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && strings.Contains(strings.ToLower(a.Value.String()), "permissions violation") {
			l.mu.Lock()
			l.got = append(l.got, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}
func (l *permissionLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *permissionLog) WithGroup(string) slog.Handler      { return l }

func (l *permissionLog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func runAtoll(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	root := Root()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("atoll %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// The services run as their own NATS users, after `atoll-admin bootstrap auth`
// and `atoll-admin bootstrap`, on a nats-server configured with the generated
// users: a submission through the gateway flows through admission and
// quota to a placement, and no service meets a permission violation.
func TestServicesRunAsTheirOwnUsers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds")
	out := runAtoll(t, ctx, "bootstrap", "auth", "--dir", creds)
	if !strings.Contains(out, "auth.conf") {
		t.Fatalf("bootstrap auth said %q", out)
	}

	// A nats-server whose configuration includes the generated one.
	conf := filepath.Join(dir, "nats.conf")
	text := fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\ninclude ./creds/auth.conf\n", filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()

	runAtoll(t, ctx, "bootstrap", "--nats", url, "--creds", filepath.Join(creds, "admin.nk"), "--max-bytes", "workloads=768MiB")

	perms := &permissionLog{}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	open := func(user string) *bus.Bus {
		t.Helper()
		cfg := bus.Config{URL: url, Name: "atoll-" + user, SkipEnsure: true, Logger: slog.New(perms)}
		b, err := bus.Open(ctx, cfg.WithCredentials(filepath.Join(creds, user+".nk")))
		if err != nil {
			t.Fatalf("open bus as %s: %v", user, err)
		}
		t.Cleanup(b.Close)
		if b.User() != user {
			t.Fatalf("connected as %q, want %q", b.User(), user)
		}
		return b
	}
	admin := open(bus.UserAdmin)
	// --max-bytes set the workloads bucket's limit; the others keep theirs.
	for name, want := range map[string]int64{"KV_" + bus.BucketWorkloads: 768 << 20, "KV_" + bus.BucketQuota: bus.DefaultMaxBytes[bus.BucketQuota], bus.StreamAudit: bus.DefaultMaxBytes[bus.StreamAudit]} {
		s, err := admin.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxBytes; got != want {
			t.Errorf("%s max bytes %d, want %d", name, got, want)
		}
	}

	q := quota.New(open(bus.UserQuota), quiet, quota.Ample())
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop() })
	adm := admission.New(open(bus.UserAdmission), quiet, nil)
	if err := adm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Stop() })
	sch := scheduler.New(open(bus.UserScheduler), quiet)
	if err := sch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sch.Stop)
	agg, err := aggregator.New(open(bus.UserAggregator), quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := agg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agg.Stop)
	prop, err := propagator.New(open(bus.UserPropagator), quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := prop.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prop.Stop)
	authn, err := auth.New(auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(open(bus.UserGateway), quiet, &gateway.Config{Listen: "127.0.0.1:0", Authenticator: authn})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Stop(context.Background()) })

	// One healthy member cluster in the inventory, as the aggregator
	// writes it from a real cluster.
	ci := api.ClusterInfo{
		Name: "zone-a-1", Zone: "a", Healthy: true, Updated: time.Now().UTC(), LastSeen: time.Now().UTC(),
		Pools: map[string]api.PoolInfo{"general": {
			Nodes: 3, ReadyNodes: 3,
			Allocatable:     api.Quantities{MilliCPU: 30000, MemoryBytes: 64 << 30},
			AllocatablePods: 330,
			MaxNodeFree:     api.Quantities{MilliCPU: 10000, MemoryBytes: 32 << 30},
		}},
	}
	body, err := json.Marshal(&ci)
	if err != nil {
		t.Fatal(err)
	}
	clustersKV, err := admin.KV(ctx, bus.BucketClusters)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clustersKV.Put(ctx, ci.Name, body); err != nil {
		t.Fatal(err)
	}

	token, _ := authn.Mint(auth.Identity{Subject: "dev", Roles: map[string]auth.Role{"demo": auth.Role("developer")}})
	client, err := sdk.New(gw.URL(), sdk.WithToken(token), sdk.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"demo","name":"web"},
		"spec":{"replicas":3,"tier":"OnDemand","template":{"containers":[{"name":"web","image":"nginx:1.27",
		"resources":{"requests":{"cpu":"250m","memory":"256Mi"}}}]}}}`)
	if _, err := client.CreateWorkloadJSON(ctx, "demo", doc, sdk.NewIdempotencyKey()); err != nil {
		t.Fatalf("create through the gateway: %v", err)
	}
	if _, err := client.Quota(ctx, "demo"); err != nil {
		t.Errorf("quota through the gateway: %v", err)
	}

	// The scheduler places it on the one cluster.
	placements, err := admin.KV(ctx, bus.BucketPlacements)
	if err != nil {
		t.Fatal(err)
	}
	key := api.Key("demo", api.KindApp, "web")
	// (A decision made before the first inventory has no cluster yet;
	// the next one places it.)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var placed api.PlacementDecision
		e, err := placements.Get(ctx, key)
		if assert.NoError(c, err, "placement of %s", key) && assert.NoError(c, json.Unmarshal(e.Value(), &placed), "placement of %s", key) {
			assert.Contains(c, fmt.Sprint(placed), "zone-a-1", "placement, want a shard on zone-a-1")
		}
	}, 30*time.Second, 20*time.Millisecond)

	// The gateway reaches the aggregator's debug and cluster endpoints,
	// which answer (the workload has no Pods: there are no member clusters).
	err = client.Logs(ctx, "demo", "app", "web", computeapi.StreamLogsParams{}, func(computeapi.LogLine) error { return nil })
	if err == nil || strings.Contains(err.Error(), "no debug stream server") || strings.Contains(err.Error(), "no answer") {
		t.Errorf("logs: %v, want the aggregator's refusal", err)
	}
	adminToken, _ := authn.Mint(auth.Identity{Subject: "ops", PlatformAdmin: true})
	ops, err := sdk.New(gw.URL(), sdk.WithToken(adminToken), sdk.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Cordon(ctx, "zone-a-1", true); err != nil && strings.Contains(err.Error(), "did not answer") {
		t.Errorf("cordon: %v", err)
	}
	if v := perms.violations(); len(v) > 0 {
		t.Errorf("%d permission violations, first: %s", len(v), v[0])
	}
}
