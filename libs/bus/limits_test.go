package bus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"atoll.dev/libs/bus"
)

// Every stream and bucket has a size limit, and the defaults fit the
// 4 GB store of deploy/compose/nats.conf, where each server holds a
// replica of everything.
func TestEveryStreamHasMaxBytes(t *testing.T) {
	top := bus.DefaultTopology(3)
	var sum int64
	for _, s := range top.Streams {
		if s.MaxBytes <= 0 {
			t.Errorf("stream %s has no MaxBytes", s.Name)
		}
		sum += s.MaxBytes
	}
	for _, b := range top.Buckets {
		if b.MaxBytes <= 0 {
			t.Errorf("bucket %s has no MaxBytes", b.Bucket)
		}
		sum += b.MaxBytes
	}
	if sum >= 3<<30 {
		t.Errorf("the defaults add up to %d bytes, want under 3 GiB", sum)
	}
	if n := len(top.Streams) + len(top.Buckets); len(bus.DefaultMaxBytes) != n {
		t.Errorf("DefaultMaxBytes has %d entries, the topology %d streams and buckets", len(bus.DefaultMaxBytes), n)
	}
}

func TestParseMaxBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]int64
		wantErr string
	}{
		{in: "", want: map[string]int64{}},
		{in: "workloads=1GiB, ATOLL_AUDIT=2Gi,leases=4096", want: map[string]int64{"workloads": 1 << 30, "ATOLL_AUDIT": 2 << 30, "leases": 4096}},
		{in: "status=512MiB,quota=64Ki,x=1TiB,y=10B", want: map[string]int64{"status": 512 << 20, "quota": 64 << 10, "x": 1 << 40, "y": 10}},
		{in: "workloads", wantErr: "want name=size"},
		{in: "=1GiB", wantErr: "want name=size"},
		{in: "workloads=big", wantErr: "not a size"},
		{in: "workloads=0", wantErr: "not a size"},
		{in: "workloads=-1GiB", wantErr: "not a size"},
		{in: "workloads=1GB", wantErr: "not a size"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := bus.ParseMaxBytes(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithMaxBytes(t *testing.T) {
	top, err := bus.DefaultTopology(1).WithMaxBytes(map[string]int64{bus.BucketWorkloads: 1 << 30, bus.StreamAudit: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, s := range top.Streams {
		got[s.Name] = s.MaxBytes
	}
	for _, b := range top.Buckets {
		got[b.Bucket] = b.MaxBytes
	}
	want := map[string]int64{}
	for k, v := range bus.DefaultMaxBytes {
		want[k] = v
	}
	want[bus.BucketWorkloads], want[bus.StreamAudit] = 1<<30, 2<<30
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if bus.DefaultTopology(1).Buckets[0].MaxBytes != bus.DefaultMaxBytes[bus.DefaultTopology(1).Buckets[0].Bucket] {
		t.Error("WithMaxBytes changed the topology it was called on")
	}
	for _, bad := range []map[string]int64{{"workload": 1 << 20}, {bus.BucketQuota: 0}, {"KV_quota": 1 << 20}} {
		if _, err := bus.DefaultTopology(1).WithMaxBytes(bad); err == nil {
			t.Errorf("WithMaxBytes(%v): no error", bad)
		}
	}
	if _, err := bus.Open(context.Background(), bus.Config{StoreDir: t.TempDir(), MaxBytes: map[string]int64{"nope": 1}}); err == nil {
		t.Error("Open with a limit on no stream: no error")
	}
}

// The fill metric is bytes over MaxBytes of each stream, as the server
// counts them; a full bucket refuses writes.
func TestStreamFill(t *testing.T) {
	const limit = 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Logger: quiet, MaxBytes: map[string]int64{bus.BucketScalers: limit}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	kv, err := b.KV(ctx, bus.BucketScalers)
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 1<<10)
	for i := range 32 {
		if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(b.StreamFill("KV_"+bus.BucketScalers, bus.StreamEvents))

	info, err := b.JS.Stream(ctx, "KV_"+bus.BucketScalers)
	if err != nil {
		t.Fatal(err)
	}
	used := float64(info.CachedInfo().State.Bytes)
	if used < limit/3 || used > limit {
		t.Fatalf("the bucket stores %v bytes after 32 KiB of values, the test expects about half of %d", used, limit)
	}
	type fill struct{ Bytes, Max, Ratio float64 }
	want := map[string]fill{
		"KV_" + bus.BucketScalers: {used, limit, used / limit},
		bus.StreamEvents:          {0, float64(bus.DefaultMaxBytes[bus.StreamEvents]), 0},
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]fill{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			stream := m.GetLabel()[0].GetValue()
			f := got[stream]
			switch mf.GetName() {
			case "atoll_stream_bytes":
				f.Bytes = m.GetGauge().GetValue()
			case "atoll_stream_max_bytes":
				f.Max = m.GetGauge().GetValue()
			case "atoll_stream_fill_ratio":
				f.Ratio = m.GetGauge().GetValue()
			}
			got[stream] = f
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fill (-want +got):\n%s", diff)
	}

	// Fill it: a write past MaxBytes is refused, not stored.
	var refused bool
	for i := range 64 {
		if _, err := kv.Put(ctx, fmt.Sprintf("full%d", i), value); err != nil {
			refused = true
			break
		}
	}
	if !refused {
		t.Error("64 KiB more in a 64 KiB bucket: every write accepted")
	}
}
