package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
)

// member is a configured member cluster with a label of its own.
var member = clusters.Member{Name: "zone-a", Zone: "a", Labels: map[string]string{"env": "prod"}}

func TestClusterOpValidation(t *testing.T) {
	s := &Service{clusters: map[string]*cluster{member.Name: {member: member}}}
	long := strings.Repeat("x", 64)
	tests := []struct {
		name string
		op   api.ClusterOp
		// want lists "field code" of every problem, in order; empty when valid.
		want []string
	}{
		{"cordon", api.ClusterOp{Cluster: "zone-a", Op: "cordon"}, nil},
		{"uncordon", api.ClusterOp{Cluster: "zone-a", Op: "uncordon", Principal: "alice"}, nil},
		{"set and remove", api.ClusterOp{Cluster: "zone-a", Op: "labels", SetLabels: map[string]string{"team": "ml", "example.com/gpu": ""}, RemoveLabels: []string{"old"}}, nil},
		{"no cluster", api.ClusterOp{Op: "cordon"}, []string{"cluster Required"}},
		{"cluster not a DNS label", api.ClusterOp{Cluster: "Zone_A", Op: "cordon"}, []string{"cluster Invalid"}},
		{"no op", api.ClusterOp{Cluster: "zone-a"}, []string{"op Required"}},
		{"unknown op", api.ClusterOp{Cluster: "zone-a", Op: "drain"}, []string{"op Unsupported"}},
		{"cordon with labels", api.ClusterOp{Cluster: "zone-a", Op: "cordon", SetLabels: map[string]string{"a": "b"}, RemoveLabels: []string{"c"}},
			[]string{"setLabels Forbidden", "removeLabels Forbidden"}},
		{"labels without any", api.ClusterOp{Cluster: "zone-a", Op: "labels"}, []string{"setLabels Required"}},
		{"bad key and value", api.ClusterOp{Cluster: "zone-a", Op: "labels", SetLabels: map[string]string{"-bad": "ok", "good": "no spaces", "x": long}},
			[]string{"setLabels.-bad Invalid", "setLabels.good Invalid", "setLabels.x Invalid"}},
		{"bad key to remove", api.ClusterOp{Cluster: "zone-a", Op: "labels", RemoveLabels: []string{"a/b/c"}}, []string{"removeLabels[0] Invalid"}},
		{"zone label", api.ClusterOp{Cluster: "zone-a", Op: "labels", SetLabels: map[string]string{api.NodeLabelZone: "b"}},
			[]string{"setLabels.topology.kubernetes.io/zone Forbidden"}},
		{"zone label removed", api.ClusterOp{Cluster: "zone-a", Op: "labels", RemoveLabels: []string{api.NodeLabelZone}},
			[]string{"removeLabels[0] Forbidden"}},
		{"platform prefix", api.ClusterOp{Cluster: "zone-a", Op: "labels", SetLabels: map[string]string{"atoll.dev/tier": "x"}},
			[]string{"setLabels.atoll.dev/tier Forbidden"}},
		{"label from config changed", api.ClusterOp{Cluster: "zone-a", Op: "labels", SetLabels: map[string]string{"env": "dev"}},
			[]string{"setLabels.env Forbidden"}},
		{"label from config removed", api.ClusterOp{Cluster: "zone-a", Op: "labels", RemoveLabels: []string{"team", "env"}},
			[]string{"removeLabels[1] Forbidden"}},
		{"set and removed", api.ClusterOp{Cluster: "zone-a", Op: "labels", SetLabels: map[string]string{"team": "ml"}, RemoveLabels: []string{"team", "team"}},
			[]string{"removeLabels[0] Invalid", "removeLabels[1] Duplicate", "removeLabels[1] Invalid"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.checkOp(&tc.op)
			var got []string
			var oe *OpError
			if errors.As(err, &oe) {
				if oe.Status != api.StatusBadRequest {
					t.Errorf("status %d, want 400", oe.Status)
				}
				for _, f := range oe.Body.Fields {
					got = append(got, f.Field+" "+f.Code)
				}
			} else if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems (-want +got):\n-%q\n+%q", tc.want, got)
			}
		})
	}
	if _, err := s.checkOp(&api.ClusterOp{Cluster: "zone-z", Op: "cordon"}); !isStatus(err, api.StatusNotFound) {
		t.Errorf("unknown cluster: %v, want 404", err)
	}
}

func isStatus(err error, status int) bool {
	var oe *OpError
	return errors.As(err, &oe) && oe.Status == status
}

func TestApplyOp(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	prev := api.ClusterAdmin{Labels: map[string]string{"team": "ml"}, By: "bob", At: at.Add(-time.Hour)}
	tests := []struct {
		name      string
		cur       api.ClusterAdmin
		op        api.ClusterOp
		want      api.ClusterAdmin
		wantEvent string
	}{
		{"cordon", prev, api.ClusterOp{Op: "cordon", Principal: "alice"},
			api.ClusterAdmin{Cordoned: true, Labels: map[string]string{"team": "ml"}, By: "alice", At: at}, api.ClusterEventCordoned},
		{"cordon again changes nothing", api.ClusterAdmin{Cordoned: true, By: "bob"}, api.ClusterOp{Op: "cordon", Principal: "alice"},
			api.ClusterAdmin{Cordoned: true, By: "bob"}, ""},
		{"uncordon", api.ClusterAdmin{Cordoned: true}, api.ClusterOp{Op: "uncordon", Principal: "alice"},
			api.ClusterAdmin{By: "alice", At: at}, api.ClusterEventUncordoned},
		{"set and remove", prev, api.ClusterOp{Op: "labels", SetLabels: map[string]string{"gpu": "a100"}, RemoveLabels: []string{"team", "absent"}},
			api.ClusterAdmin{Labels: map[string]string{"gpu": "a100"}, At: at}, api.ClusterEventLabeled},
		{"remove the last", prev, api.ClusterOp{Op: "labels", RemoveLabels: []string{"team"}, Principal: "alice"},
			api.ClusterAdmin{By: "alice", At: at}, api.ClusterEventLabeled},
		{"same labels changes nothing", prev, api.ClusterOp{Op: "labels", SetLabels: map[string]string{"team": "ml"}, RemoveLabels: []string{"absent"}},
			prev, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.cur.Labels)
			got, event, changed := applyOp(tc.cur, &tc.op, at)
			if !reflect.DeepEqual(got, tc.want) || event != tc.wantEvent || changed != (tc.wantEvent != "") {
				t.Errorf("applyOp (-want +got):\n-%+v %q\n+%+v %q %v", tc.want, tc.wantEvent, got, event, changed)
			}
			if !maps.Equal(before, tc.cur.Labels) {
				t.Errorf("applyOp changed its input labels: %v, were %v", tc.cur.Labels, before)
			}
		})
	}
}

func TestMergeAdmin(t *testing.T) {
	tests := []struct {
		name         string
		config       map[string]string
		admin        api.ClusterAdmin
		wantLabels   map[string]string
		wantCordoned bool
	}{
		{"nothing", nil, api.ClusterAdmin{}, nil, false},
		{"config only", map[string]string{"env": "prod"}, api.ClusterAdmin{}, map[string]string{"env": "prod"}, false},
		{"admin only, cordoned", nil, api.ClusterAdmin{Cordoned: true, Labels: map[string]string{"team": "ml"}},
			map[string]string{"team": "ml"}, true},
		{"config wins, reserved dropped", map[string]string{"env": "prod"},
			api.ClusterAdmin{Labels: map[string]string{"env": "dev", "team": "ml", api.NodeLabelZone: "z"}},
			map[string]string{"env": "prod", "team": "ml"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := clusters.Member{Name: "c", Zone: "a", Labels: tc.config}
			ci := api.ClusterInfo{Name: "c", Labels: map[string]string{"stale": "x"}, Cordoned: !tc.wantCordoned, Admin: tc.admin}
			mergeAdmin(&ci, m)
			if !reflect.DeepEqual(ci.Labels, tc.wantLabels) || ci.Cordoned != tc.wantCordoned {
				t.Errorf("merged (-want +got):\n-%v %v\n+%v %v", tc.wantLabels, tc.wantCordoned, ci.Labels, ci.Cordoned)
			}
			before := maps.Clone(tc.config)
			if ci.Labels != nil {
				ci.Labels["added"] = "later"
			}
			if !maps.Equal(before, tc.config) {
				t.Error("merged labels alias the configuration")
			}
		})
	}
}

func TestNextInventoryCarriesAdminOver(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	fresh := api.ClusterInfo{Name: "zone-a", Zone: "a", Labels: member.Labels, Healthy: true, LastSeen: now,
		Pools: map[string]api.PoolInfo{"general": {Nodes: 3, ReadyNodes: 3}}}
	admin := api.ClusterAdmin{Cordoned: true, Labels: map[string]string{"team": "ml"}, By: "alice", At: now.Add(-time.Hour)}
	stored := fresh
	stored.Admin = admin
	mergeAdmin(&stored, member)
	stored.Updated = now.Add(-time.Second)
	storedBody, _ := json.Marshal(stored)

	// Unchanged and recent: nothing to write.
	if got := nextInventory(fresh, storedBody, member, now, 10*time.Second); got != nil {
		t.Errorf("unchanged recent inventory rewritten: %+v", got)
	}
	// Unchanged but old: rewritten, overrides kept.
	got := nextInventory(fresh, storedBody, member, now.Add(time.Minute), 10*time.Second)
	if got == nil || !got.Cordoned || !reflect.DeepEqual(got.Admin, admin) || got.Labels["team"] != "ml" || got.Labels["env"] != "prod" {
		t.Fatalf("old inventory rewritten as %+v, want cordoned with team=ml and env=prod", got)
	}
	// Changed capacity: rewritten at once, overrides kept.
	changed := fresh
	changed.Pools = map[string]api.PoolInfo{"general": {Nodes: 3, ReadyNodes: 2}}
	got = nextInventory(changed, storedBody, member, now, 10*time.Second)
	if got == nil || !got.Cordoned || got.Labels["team"] != "ml" || got.Pools["general"].ReadyNodes != 2 || !got.Updated.Equal(now) {
		t.Fatalf("changed inventory written as %+v", got)
	}
	// No capacity known (unreachable, or caches not synced): the stored one stays.
	unknown := fresh
	unknown.Pools, unknown.Healthy = nil, false
	got = nextInventory(unknown, storedBody, member, now, 10*time.Second)
	if got == nil || got.Healthy || got.Pools["general"].ReadyNodes != 3 || !got.Cordoned {
		t.Fatalf("inventory without capacity written as %+v, want the stored capacity", got)
	}
	// Nothing stored (a new region): config labels only.
	got = nextInventory(fresh, nil, member, now, 10*time.Second)
	if got == nil || got.Cordoned || !maps.Equal(got.Labels, member.Labels) {
		t.Fatalf("first inventory %+v, want not cordoned with the config labels", got)
	}
}

// deadKubeconfig points at a port nothing listens on: a member cluster
// that is down.
func deadKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func startAggregator(t *testing.T, b *bus.Bus, ms clusters.Members) *Service {
	t.Helper()
	s, err := New(b, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), ms)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// request sends a cluster operation the way the gateway will.
func request(t *testing.T, b *bus.Bus, body string) (*api.ClusterInfo, *api.ErrorBody, string) {
	t.Helper()
	ci, eb, code, err := tryRequest(b, body)
	if err != nil {
		t.Fatal(err)
	}
	return ci, eb, code
}

// tryRequest is request for polls: it returns its failure.
func tryRequest(b *bus.Bus, body string) (*api.ClusterInfo, *api.ErrorBody, string, error) {
	reply, err := b.NC.Request(bus.AggregatorCluster.Subject(), []byte(body), 10*time.Second)
	if err != nil {
		return nil, nil, "", err
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		var eb api.ErrorBody
		if err := json.Unmarshal(reply.Data, &eb); err != nil {
			return nil, nil, "", fmt.Errorf("error body %q: %w", reply.Data, err)
		}
		return nil, &eb, code, nil
	}
	var ci api.ClusterInfo
	if err := json.Unmarshal(reply.Data, &ci); err != nil {
		return nil, nil, "", fmt.Errorf("reply %q: %w", reply.Data, err)
	}
	return &ci, nil, "", nil
}

func stored(t *testing.T, b *bus.Bus, name string) (api.ClusterInfo, uint64) {
	t.Helper()
	kv, err := b.KV(context.Background(), bus.BucketClusters)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("inventory of %s: %v", name, err)
	}
	var ci api.ClusterInfo
	if err := json.Unmarshal(e.Value(), &ci); err != nil {
		t.Fatal(err)
	}
	return ci, e.Revision()
}

// nextSignal returns the subject and body of the next signal that is not
// about health, or "" when none comes within wait.
func nextSignal(t *testing.T, sub *nats.Subscription, wait time.Duration) (string, []byte) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if errors.Is(err, nats.ErrTimeout) {
			return "", nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(msg.Subject, ".healthy") && !strings.HasSuffix(msg.Subject, ".unhealthy") {
			return msg.Subject, msg.Data
		}
	}
}

// TestClusterOpsEndpoint drives the endpoint over NATS against an
// aggregator whose only member cluster is down, rewrites the inventory as
// the probes do, and restarts the aggregator.
func TestClusterOpsEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("embedded NATS")
	}
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := member
	m.Kubeconfig = deadKubeconfig(t)
	s := startAggregator(t, b, clusters.Members{m})
	defer func() { s.Stop() }()
	signals, err := b.NC.SubscribeSync(bus.ClusterSubject(m.Name, "*"))
	if err != nil {
		t.Fatal(err)
	}
	defer signals.Unsubscribe()

	// The first probe writes the inventory; until then a cordon is refused
	// as Unavailable, nothing else.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, eb, _, err := tryRequest(b, `{"cluster":"zone-a","op":"cordon","principal":"alice"}`)
		require.NoError(c, err)
		if eb != nil {
			assert.Equal(t, "Unavailable", eb.Code, "cordon before the first inventory: %+v", eb)
		}
		assert.Nil(c, eb)
	}, 10*time.Second, 100*time.Millisecond)
	ci, rev := stored(t, b, m.Name)
	if !ci.Cordoned || !ci.Admin.Cordoned || ci.Admin.By != "alice" || ci.Admin.At.IsZero() {
		t.Fatalf("after cordon stored %+v", ci)
	}
	if subj, _ := nextSignal(t, signals, 5*time.Second); subj != "atoll.cluster.zone-a.cordoned" {
		t.Fatalf("signal %q, want the cordon", subj)
	}
	// Cordoning again is a no-op: same record, no write, no signal.
	if got, eb, _ := request(t, b, `{"cluster":"zone-a","op":"cordon"}`); eb != nil || !got.Cordoned || got.Admin.By != "alice" {
		t.Fatalf("second cordon: %+v %+v", got, eb)
	}

	for _, tc := range []struct{ body, status, code string }{
		{`{"cluster":"zone-z","op":"cordon"}`, "404", "NotFound"},
		{`{"cluster":"zone-a","op":"labels","setLabels":{"topology.kubernetes.io/zone":"b"}}`, "400", "Forbidden"},
		{`{"cluster":"zone-a","op":"labels","removeLabels":["env"]}`, "400", "Forbidden"},
		{`{"cluster":"zone-a","op":"labels","setLabels":{"team":"not ok"}}`, "400", "Invalid"},
		{`{"cluster":"zone-a","op":"cordon","force":true}`, "400", "BadRequest"},
	} {
		if _, eb, code := request(t, b, tc.body); eb == nil || code != tc.status || eb.Code != tc.code || eb.Message == "" {
			t.Errorf("%s: %s %+v, want %s %s", tc.body, code, eb, tc.status, tc.code)
		}
	}

	got, eb, _ := request(t, b, `{"cluster":"zone-a","op":"labels","setLabels":{"team":"ml","tier":"gold"},"principal":"bob"}`)
	if eb != nil {
		t.Fatal(eb)
	}
	want := map[string]string{"env": "prod", "team": "ml", "tier": "gold"}
	if !maps.Equal(got.Labels, want) || !got.Cordoned || got.Admin.By != "bob" {
		t.Fatalf("after labels reply %+v, want labels %v and still cordoned", got, want)
	}
	subj, data := nextSignal(t, signals, 5*time.Second)
	if subj != "atoll.cluster.zone-a.labeled" {
		t.Fatalf("signal %q, want labeled", subj)
	}
	var sig api.ClusterSignal
	if err := json.Unmarshal(data, &sig); err != nil || sig.Principal != "bob" || !maps.Equal(sig.Labels, want) {
		t.Errorf("labeled signal %s: %v", data, err)
	}

	// Inventory rewrites, as the probes make, keep the overrides (the
	// aggregator stopped, so that only these write).
	s.Stop()
	w := s.clusters[m.Name]
	for i := range 3 {
		fresh := api.ClusterInfo{Name: m.Name, Zone: m.Zone, Labels: m.Labels, Healthy: true, LastSeen: time.Now().UTC(),
			Pools: map[string]api.PoolInfo{"general": {Nodes: 10 + i}}}
		w.writeInventory(ctx, fresh, time.Now().Add(-time.Minute)) // old: a restarted aggregator rewrites at once
	}
	ci, nrev := stored(t, b, m.Name)
	if nrev < rev+3 || ci.Pools["general"].Nodes != 12 || !ci.Cordoned || !maps.Equal(ci.Labels, want) {
		t.Fatalf("after 3 rewrites (revision %d, was %d) stored %+v", nrev, rev, ci)
	}

	// A restarted aggregator keeps them too, through its own probes.
	_, before := stored(t, b, m.Name)
	s = startAggregator(t, b, clusters.Members{m})
	inventoryKV, err := b.KV(ctx, bus.BucketClusters)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := inventoryKV.Get(ctx, m.Name)
		return err == nil && e.Revision() > before
	}, 30*time.Second, 100*time.Millisecond, "the restarted aggregator writes the inventory")
	ci, _ = stored(t, b, m.Name)
	if !ci.Cordoned || !maps.Equal(ci.Labels, want) || ci.Pools["general"].Nodes != 12 {
		t.Fatalf("after restart and a probe of the unreachable cluster stored %+v, want the overrides and the last known capacity", ci)
	}

	// Uncordon and remove the labels: the configuration's labels remain.
	if got, eb, _ := request(t, b, `{"cluster":"zone-a","op":"uncordon"}`); eb != nil || got.Cordoned || got.Admin.Cordoned {
		t.Fatalf("uncordon: %+v %+v", got, eb)
	}
	if got, eb, _ := request(t, b, `{"cluster":"zone-a","op":"labels","removeLabels":["team","tier"]}`); eb != nil ||
		!maps.Equal(got.Labels, m.Labels) || got.Admin.Labels != nil {
		t.Fatalf("remove labels: %+v %+v", got, eb)
	}
	var subjects []string
	for {
		subj, _ := nextSignal(t, signals, 500*time.Millisecond)
		if subj == "" {
			break
		}
		subjects = append(subjects, subj)
	}
	if fmt.Sprint(subjects) != "[atoll.cluster.zone-a.uncordoned atoll.cluster.zone-a.labeled]" {
		t.Errorf("signals %v", subjects)
	}
}
