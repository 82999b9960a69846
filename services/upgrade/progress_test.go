package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/bus"
	"atoll.dev/services/upgrade/plan"
)

// TestLargePlanProgressIsStored: the progress of a plan over 10,000 nodes
// (3.5 MB of JSON, over the NATS server's 1 MiB message limit) is
// stored, compressed, and read back as it was; a small one is stored as
// plain JSON.
func TestLargePlanProgressIsStored(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	kv, err := b.KV(ctx, bus.BucketUpgrade)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{kv: kv}
	since := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, n := range []int{10, 10_000} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			name := fmt.Sprintf("plan-%d", n)
			pr := &progress{p: plan.Progress{Plan: name, Phase: plan.PhaseRunning, Nodes: map[string]*plan.Node{}, Updated: since}}
			for i := range n {
				uid := fmt.Sprintf("%08x-4d2c-4f0b-9b7e-%012x", i*2654435761, i*40503)
				pr.p.Nodes[uid] = &plan.Node{UID: uid, Name: fmt.Sprintf("zone-a-general-%05d", i), Cluster: "zone-a", Pool: "general",
					State: plan.NodeDone, Surge: i%10 == 0, Replacement: fmt.Sprintf("zone-a-general-%05d-r1", i), Cordoned: true,
					Evicted: []string{fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)}, Since: since.Add(time.Duration(i) * time.Second),
					DrainStarted: since.Add(time.Duration(i)*time.Second - 30*time.Second)}
			}
			if err := s.store(ctx, name, pr); err != nil {
				t.Fatalf("store: %v", err)
			}
			e, err := kv.Get(ctx, ProgressKey(name))
			if err != nil {
				t.Fatal(err)
			}
			compressed := e.Value()[0] != '{'
			raw, _ := json.Marshal(pr.p)
			t.Logf("%d nodes: %d bytes of JSON, %d stored, compressed %v", n, len(raw), len(e.Value()), compressed)
			if compressed != (n > 100) {
				t.Errorf("compressed = %v for %d nodes", compressed, n)
			}
			var got plan.Progress
			rev, err := get(ctx, kv, ProgressKey(name), &got)
			if err != nil {
				t.Fatal(err)
			}
			if rev != pr.rev {
				t.Errorf("read revision %d, stored %d", rev, pr.rev)
			}
			if diff := cmp.Diff(pr.p, got); diff != "" {
				t.Errorf("read back (-stored +read):\n%s", diff)
			}
		})
	}
}

// openBus starts an embedded NATS server for the test.
func openBus(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
