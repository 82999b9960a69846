package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/cache"
)

// BenchmarkCacheLag measures how stale a read can be: the time from a
// write to the workloads bucket until the gateway's cache serves it, for
// writes one at a time and in bursts of 100.
func BenchmarkCacheLag(b *testing.B) {
	g := newTestGateway(b, gateway.Config{})
	ctx := context.Background()
	kv, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		b.Fatal(err)
	}
	measure := func(label, metric string, n, burst int) {
		lags := make([]time.Duration, 0, n)
		for i := 0; i < n; i += burst {
			type put struct {
				key string
				gen int64
				at  time.Time
			}
			var puts []put
			for j := range burst {
				w, _ := benchApp("lag", (i+j)%200)
				w.Metadata.Generation = int64(i + j + 1)
				raw, _ := json.Marshal(w)
				at := time.Now()
				if _, err := kv.Put(ctx, w.Key(), raw); err != nil {
					b.Fatal(err)
				}
				puts = append(puts, put{w.Key(), w.Metadata.Generation, at})
			}
			for _, p := range puts {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				ok := g.GW.Cache().WaitFor(wctx, p.key, func(it *cache.Item) bool { return it != nil && it.Generation >= p.gen })
				cancel()
				if !ok {
					b.Fatalf("%s not cached after 10 s", p.key)
				}
				lags = append(lags, time.Since(p.at))
			}
		}
		slices.Sort(lags)
		pct := func(q float64) time.Duration { return lags[int(q*float64(len(lags)-1))] }
		fmt.Printf("cache lag, %-22s P50 %8v  P99 %8v  max %8v  (%d writes)\n", label, pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lags[len(lags)-1].Round(time.Microsecond), len(lags))
		b.ReportMetric(float64(pct(0.99).Microseconds()), metric+"-p99-µs")
	}
	for range b.N {
		measure("one write at a time", "single", 2000, 1)
		measure("bursts of 100", "burst", 2000, 100)
	}
}
