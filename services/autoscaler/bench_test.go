package autoscaler

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// BenchmarkScalers runs the autoscaler on an embedded bus with 10,000
// Scalers, each on its own App, and measures (per round):
//
//   - evals/s: a sample for every App (on target: no change) and the
//     time until all 10,000 Scalers have been evaluated once more;
//
//   - lag-p50-ms, lag-p99-ms: from the publication of a sample that asks
//     for more replicas to the arrival of the scale request at admission
//     (a stand-in that writes the App, see fakeAdmission), for 1,000 Apps
//     at 500 samples a second;
//
//   - bus-p50-ms, bus-p99-ms: the same run's baseline, one bare
//     publish-to-subscriber hop at the same pace (the lag takes two).
//
//     go test -run '^$' -bench Scalers -benchtime 1x ./services/autoscaler
func BenchmarkScalers(b *testing.B) {
	const n, scaled, rate = 10000, 1000, 500
	f := newFixture(b, 0, Config{SyncPeriod: time.Hour, PersistEvery: time.Hour})
	js, err := jetstream.New(f.b.NC)
	require.NoError(b, err)
	var acks []jetstream.PubAckFuture
	put := func(w *api.Workload) {
		w.APIVersion, w.Metadata.Generation = api.APIVersion, 1
		w.Spec.Default()
		body, err := json.Marshal(w)
		require.NoError(b, err)
		a, err := js.PublishAsync("$KV."+bus.BucketWorkloads+"."+w.Key(), body)
		require.NoError(b, err)
		acks = append(acks, a)
	}
	for i := range n {
		name := fmt.Sprintf("app-%05d", i)
		put(app("p", name, 3))
		put(scaler("p", name, name, 1, 100))
	}
	for _, a := range acks {
		select {
		case <-a.Ok():
		case err := <-a.Err():
			b.Fatal(err)
		}
	}
	f.start(b)
	require.Eventually(b, func() bool { return f.svc.Evaluations() >= n }, 5*time.Minute, 100*time.Millisecond, "first sweep")
	round := 0
	for b.Loop() {
		round++
		// Sweep: every App on target.
		before := f.svc.Evaluations()
		start := time.Now()
		for i := range n {
			f.publish(b, "p", fmt.Sprintf("app-%05d", i), "cpu", 50, 3)
		}
		require.Eventually(b, func() bool { return f.svc.Evaluations() >= before+n }, 5*time.Minute, 5*time.Millisecond)
		evalRate := float64(n) / time.Since(start).Seconds()

		// Lag: samples that ask for more, paced.
		sent := make(map[string]time.Time, scaled)
		tick := time.NewTicker(time.Second / rate)
		for i := range scaled {
			<-tick.C
			name := fmt.Sprintf("app-%05d", (round*scaled+i)%n)
			sent[api.Key("p", api.KindApp, name)] = time.Now()
			f.publish(b, "p", name, "cpu", 50*float64(3+round), 3)
		}
		tick.Stop()
		var lags []time.Duration
		require.Eventually(b, func() bool {
			lags = lags[:0]
			for k, at := range sent {
				got, ok := f.adm.requested(k)
				if !ok || got.Before(at) {
					return false
				}
				lags = append(lags, got.Sub(at))
			}
			return true
		}, 2*time.Minute, 20*time.Millisecond)
		slices.Sort(lags)
		floor := busFloor(b, f.b, scaled, rate)
		b.ReportMetric(evalRate, "evals/s")
		b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "lag-p50-ms")
		b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "lag-p99-ms")
		// The baseline of the same run: a bare publish to subscriber hop.
		b.ReportMetric(float64(floor[len(floor)/2].Microseconds())/1000, "bus-p50-ms")
		b.ReportMetric(float64(floor[len(floor)*99/100].Microseconds())/1000, "bus-p99-ms")
	}
}

// busFloor measures n bare publish-to-subscriber hops on b at rate a
// second: the floor under the sample-to-request lag, which takes two hops
// (the sample, the request) plus the work between.
func busFloor(tb testing.TB, b *bus.Bus, n, rate int) []time.Duration {
	got := make(chan time.Duration, n)
	sub, err := b.NC.Subscribe("bench.floor", func(m *nats.Msg) {
		var sent time.Time
		if err := sent.UnmarshalBinary(m.Data); err == nil {
			got <- time.Since(sent)
		}
	})
	require.NoError(tb, err)
	defer sub.Unsubscribe()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for range n {
		<-tick.C
		at, _ := time.Now().MarshalBinary()
		require.NoError(tb, b.NC.Publish("bench.floor", at))
	}
	out := make([]time.Duration, 0, n)
	for range n {
		select {
		case d := <-got:
			out = append(out, d)
		case <-time.After(10 * time.Second):
			tb.Fatal("bus floor: a message was lost")
		}
	}
	slices.Sort(out)
	return out
}
