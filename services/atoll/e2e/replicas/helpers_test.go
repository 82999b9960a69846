package replicas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/sdk"
)

// appDoc is a small App: 3 replicas, one per zone.
func appDoc(project, name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":3,"placement":{"zones":["a","b","c"]},"template":{"containers":[{"name":"web","image":"nginx","resources":{"requests":{"cpu":%q,"memory":"32Mi"}}}]}}}`,
		project, name, appCPU))
}

// appCPU is each App container's CPU request: with the platform's
// sidecar, 200 Apps take about two thirds of a zone's nodesPerZone nodes.
const appCPU = "150m"

// smallDoc is a tiny 1-replica App.
func smallDoc(project, name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`,
		project, name))
}

// created is the outcome of one create.
type created struct {
	name     string
	first    time.Time // the first attempt
	accepted time.Time // zero when never accepted
	calls    int       // SDK calls made (each may retry inside the SDK)
	err      error     // the last error when never accepted
}

func (c created) latency() time.Duration { return c.accepted.Sub(c.first) }

// creator creates workloads through the SDK against the gateway, as a
// client would: each create keeps its Idempotency-Key across calls and is
// called again, on a 5xx or a transport error, until it is accepted or
// giveUp has passed since its first attempt. It counts the 5xx answers and
// transport errors the SDK sees on creates.
type creator struct {
	c       *sdk.Client
	project string
	giveUp  time.Duration

	fiveXX    atomic.Int64
	transport atomic.Int64

	mu      sync.Mutex
	results []created // mu must be held
}

func newCreator(t *testing.T, project string) *creator {
	t.Helper()
	cr := &creator{project: project, giveUp: 30 * time.Second}
	hooks := sdk.Hooks{OnResponse: func(req *http.Request, resp *http.Response, err error, _ time.Duration, _ int) {
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/workloads") {
			return
		}
		switch {
		case err != nil:
			cr.transport.Add(1)
		case resp.StatusCode >= 500:
			cr.fiveXX.Add(1)
		}
	}}
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken), sdk.WithHooks(hooks), sdk.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cr.c = c
	return cr
}

// create creates one workload and records the outcome.
func (cr *creator) create(ctx context.Context, name string, doc []byte) created {
	res := created{name: name, first: time.Now()}
	key := sdk.NewIdempotencyKey()
	for {
		res.calls++
		_, err := cr.c.CreateWorkloadJSON(ctx, cr.project, doc, key)
		var apiErr *sdk.Error
		switch {
		case err == nil, errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
			// A conflict is an earlier call's create, answered too late.
			res.accepted = time.Now()
		case errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests:
			res.err = err
		case time.Since(res.first) > cr.giveUp || ctx.Err() != nil:
			res.err = fmt.Errorf("not accepted after %v: %w", cr.giveUp, err)
		default:
			// The SDK has used its retries; call again after a pause.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		break
	}
	cr.mu.Lock()
	cr.results = append(cr.results, res)
	cr.mu.Unlock()
	return res
}

// steady creates n workloads named prefix-NNN from doc, one every interval
// in the background (open loop: a slow create never delays the next one).
// The returned function waits for all of them.
func (cr *creator) steady(ctx context.Context, prefix string, n int, interval time.Duration, doc func(project, name string) []byte) (wait func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := range n {
			name := fmt.Sprintf("%s-%03d", prefix, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				cr.create(ctx, name, doc(cr.project, name))
			}()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		<-done
		wg.Wait()
	}
}

// outcome sums up the creates so far.
type outcome struct {
	n, accepted, over2s int
	p50, p99, max       time.Duration
	slowest             []created // the ones over 2 s, slowest first
	failed              []created
}

func (cr *creator) outcome() outcome {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	var o outcome
	var lat []time.Duration
	for _, r := range cr.results {
		o.n++
		if r.accepted.IsZero() {
			o.failed = append(o.failed, r)
			continue
		}
		o.accepted++
		lat = append(lat, r.latency())
		if r.latency() > 2*time.Second {
			o.over2s++
			o.slowest = append(o.slowest, r)
		}
	}
	slices.SortFunc(o.slowest, func(a, b created) int { return int(b.latency() - a.latency()) })
	slices.Sort(lat)
	o.p50, o.p99, o.max = percentile(lat, 50), percentile(lat, 99), percentile(lat, 100)
	return o
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// snapshot returns a copy of the creates so far.
func (cr *creator) snapshot() []created {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return slices.Clone(cr.results)
}

// table renders rows as aligned columns for t.Logf.
func table(header string, rows ...string) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	_ = w.Flush()
	return "\n" + b.String()
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// getJSON reads key of bucket into v; false when the key does not exist.
func getJSON(ctx context.Context, bucket, key string, v any) (bool, error) {
	kv, err := reg.Bus.KV(ctx, bucket)
	if err != nil {
		return false, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	return true, json.Unmarshal(e.Value(), v)
}

// projectKeys lists the keys of bucket that belong to project.
func projectKeys(ctx context.Context, bucket, project string) ([]string, error) {
	kv, err := reg.Bus.KV(ctx, bucket)
	if err != nil {
		return nil, err
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", bucket, err)
	}
	var out []string
	for _, k := range keys {
		if p, _, _, err := api.ParseKey(k); err == nil && p == project {
			out = append(out, k)
		}
	}
	return out, nil
}
