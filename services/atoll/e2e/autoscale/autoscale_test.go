package autoscale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/autoscaler"
)

// do sends one request to the gateway as token.
func do(t require.TestingT, method, path, token string, body []byte) (int, []byte) {
	req, err := http.NewRequest(method, reg.GatewayURL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// push sends one custom metric sample through the gateway.
func push(project, app, metric, token string, v float64) (int, error) {
	req, err := http.NewRequest("POST", reg.GatewayURL+"/v1/projects/"+project+"/apps/"+app+"/metrics/"+metric,
		strings.NewReader(fmt.Sprintf(`{"value":%g}`, v)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func submit(t *testing.T, doc string) {
	t.Helper()
	var w struct {
		Metadata struct{ Project string } `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal([]byte(doc), &w))
	code, body := do(t, "POST", "/v1/projects/"+w.Metadata.Project+"/workloads", reg.AdminToken, []byte(doc))
	require.Equal(t, http.StatusCreated, code, "submit: %s", body)
}

// appDoc is an App of n replicas in zones a, b and c, each pod asking
// 100m of CPU (so 150m of usage is 150%).
func appDoc(project, name string, n int) string {
	return fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"placement":{"zones":["a","b","c"]},"template":{"containers":[{"name":"web","image":"nginx","resources":{"requests":{"cpu":"100m","memory":"32Mi"}}}]}}}`,
		project, name, n)
}

func scalerDoc(project, name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"Scaler","metadata":{"project":%q,"name":%q},"spec":%s}`, project, name, spec)
}

func kv(t require.TestingT, bucket string) jetstream.KeyValue {
	k, err := reg.Bus.KV(context.Background(), bucket)
	require.NoError(t, err)
	return k
}

// replicas is the App's replicas as stored.
func replicas(t require.TestingT, project, name string) int32 {
	e, err := kv(t, bus.BucketWorkloads).Get(context.Background(), api.Key(project, api.KindApp, name))
	require.NoError(t, err)
	w, err := api.Decode(e.Value())
	require.NoError(t, err)
	return w.Spec.Pods()
}

func status(t require.TestingT, project, name string) api.Status {
	var st api.Status
	e, err := kv(t, bus.BucketStatus).Get(context.Background(), api.Key(project, api.KindApp, name))
	if err == nil {
		require.NoError(t, json.Unmarshal(e.Value(), &st))
	}
	return st
}

// waitRunning waits until the App's status counts n ready pods of its
// generation.
func waitRunning(t *testing.T, project, name string, n int32, within time.Duration) api.Status {
	t.Helper()
	var st api.Status
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st = status(c, project, name)
		assert.Equal(c, n, st.Ready, "ready pods of %s/%s", project, name)
	}, within, 500*time.Millisecond)
	return st
}

// setUsage sets the simulated CPU of every pod of the App in every member
// cluster; it returns how many pods it set.
func setUsage(t *testing.T, project, name, cpu string) int {
	t.Helper()
	ctx := context.Background()
	sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s", api.LabelProject, project, api.LabelKind, api.KindLabel(api.KindApp), api.LabelWorkload, name)
	n := 0
	for _, c := range reg.Env.Clusters {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel})
		require.NoError(t, err)
		for _, p := range pods.Items {
			require.NoError(t, c.SetPodUsage(ctx, p.Namespace, p.Name, cpu, ""))
			n++
		}
	}
	return n
}

func state(t require.TestingT, project, name string) autoscaler.State {
	var st autoscaler.State
	e, err := kv(t, bus.BucketScalers).Get(context.Background(), api.Key(project, api.KindScaler, name))
	if err == nil {
		require.NoError(t, json.Unmarshal(e.Value(), &st))
	}
	return st
}

// lastDecision is the Scaler's last recorded decision.
func lastDecision(t require.TestingT, project, name string) (autoscaler.Record, bool) {
	st := state(t, project, name)
	if len(st.Decisions) == 0 {
		return autoscaler.Record{}, false
	}
	return st.Decisions[len(st.Decisions)-1], true
}

// scaledEvent waits for the Scaler's last scaled event: the autoscaler
// publishes it once its scale call has returned, so the App's new
// replicas can be read a moment before it.
func scaledEvent(t *testing.T, project, name string) api.WorkloadEvent {
	t.Helper()
	var ev api.WorkloadEvent
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var ok bool
		ev, ok = lastEvent(c, project, api.KindScaler, name, api.EventScaled)
		assert.True(c, ok, "no scaled event")
	}, 10*time.Second, 100*time.Millisecond)
	return ev
}

func lastEvent(t require.TestingT, project, kind, name, event string) (api.WorkloadEvent, bool) {
	js, err := jetstream.New(reg.Bus.NC)
	require.NoError(t, err)
	s, err := js.Stream(context.Background(), bus.StreamEvents)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), bus.EventSubject(project, kind, name, event))
	if err != nil {
		return api.WorkloadEvent{}, false
	}
	var ev api.WorkloadEvent
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	return ev, true
}

// signalMetricsServers sends sig to the metrics-server of every member
// cluster (SIGSTOP: it stops answering; SIGCONT: it resumes).
func signalMetricsServers(t *testing.T, sig syscall.Signal) {
	t.Helper()
	n := 0
	for _, c := range reg.Env.Clusters {
		for _, pid := range c.Processes() {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if strings.TrimSpace(string(comm)) == "metrics-server" {
				require.NoError(t, syscall.Kill(pid, sig))
				n++
			}
		}
	}
	require.Equal(t, len(reg.Env.Clusters), n, "metrics-server processes signalled")
}

// TestCPU: an App of 3 with a CPU target of 50% goes to 9 within 60 s of
// its pods' usage rising to 150%, spread over the zones. Its scale-up
// policy allows +200% a step: with the default (+4 pods) it would stop at
// 7 first, and once the 4 new pods report their idle 1m, (450+4)/700 =
// 65% asks 10, as the simulated load does not spread onto new pods. with
// metrics-server stopped and the usage down, the replicas hold; once
// metrics-server is back, they go down only after the (45 s) down window.
func TestCPU(t *testing.T) {
	e2e.Need(t)
	t.Parallel()
	const p, name, window = "cpu", "web", 45 * time.Second
	submit(t, appDoc(p, name, 3))
	submit(t, scalerDoc(p, name, fmt.Sprintf(`{"target":%q,"minReplicas":3,"maxReplicas":12,
"metrics":[{"type":"cpu","targetUtilization":50,"onFailure":{"action":"hold","afterSeconds":30}}],
"behavior":{"scaleUp":{"policies":[{"type":"percent","value":200,"periodSeconds":15}]},"scaleDown":{"stabilizationWindowSeconds":%d}}}`, name, int(window.Seconds()))))
	waitRunning(t, p, name, 3, 2*time.Minute)
	// The first samples arrive about 45 s after a cluster starts; a
	// decision from a fresh sample (1m of 100m: it asks 1, min holds 3)
	// shows the loop is live.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d, ok := lastDecision(c, p, name)
		if assert.True(c, ok) && assert.Len(c, d.Proposals, 1) {
			assert.Equal(c, "ok", d.Proposals[0].State, "%+v", d)
			assert.Equal(c, int32(3), d.Desired)
		}
	}, 3*time.Minute, time.Second)

	require.Equal(t, 3, setUsage(t, p, name, "150m"))
	changed := time.Now()
	require.Eventually(t, func() bool { return replicas(t, p, name) == 9 }, 60*time.Second, 200*time.Millisecond,
		"9 replicas within 60 s of the usage change")
	t.Logf("3 -> 9 in %v", time.Since(changed).Round(time.Second))
	st := waitRunning(t, p, name, 9, 2*time.Minute)
	for _, z := range []string{"a", "b", "c"} {
		assert.Equal(t, int32(3), st.Zones[z].Ready, "ready pods in zone %s: %+v", z, st.Zones)
	}
	ev := scaledEvent(t, p, name)
	assert.Contains(t, ev.Message, "metric cpu")

	// metrics-server down, usage down: the metric fails and holds.
	signalMetricsServers(t, syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			signalMetricsServers(t, syscall.SIGCONT)
		}
	}()
	setUsage(t, p, name, "1m")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d, ok := lastDecision(c, p, name)
		if assert.True(c, ok) && assert.Len(c, d.Proposals, 1) {
			assert.Equal(c, "failed-hold", d.Proposals[0].State)
		}
	}, 2*time.Minute, time.Second)
	held := time.Now()
	for time.Since(held) < window+10*time.Second { // the hold is the subject: it must last past the down window
		require.Equal(t, int32(9), replicas(t, p, name), "replicas while metrics-server is down")
		time.Sleep(time.Second)
	}

	signalMetricsServers(t, syscall.SIGCONT)
	resumed = true
	back := time.Now()
	var down time.Time
	require.Eventually(t, func() bool {
		if replicas(t, p, name) < 9 {
			down = time.Now()
			return true
		}
		return false
	}, window+2*time.Minute, 200*time.Millisecond)
	assert.GreaterOrEqual(t, down.Sub(back), window, "scaled down before the down window passed")
	require.Eventually(t, func() bool { return replicas(t, p, name) == 3 }, time.Minute, 200*time.Millisecond)
	t.Logf("metrics back; scaled down after %v", down.Sub(back).Round(time.Second))
	// No bounce while the removed pods go: they are neither ready nor
	// measured for the autoscaler.
	require.Never(t, func() bool { return replicas(t, p, name) != 3 }, 30*time.Second, 500*time.Millisecond, "replicas after the scale-down")
}

// TestScheduleFloor: a schedule's floor of 6 holds 6 with no load during
// its window and releases after it (and the down window). The CPU metric
// falls back to 0 replicas when it fails (TestCPU stops metrics-server
// for a while): a fallback never goes below the floor, and with or
// without samples the App goes back to its minimum after the window.
func TestScheduleFloor(t *testing.T) {
	e2e.Need(t)
	t.Parallel()
	const p, name = "sched", "batch"
	// The window opens at the next minute that leaves time to set up.
	open := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(open) < 20*time.Second {
		open = open.Add(time.Minute)
	}
	submit(t, appDoc(p, name, 2))
	submit(t, scalerDoc(p, name, fmt.Sprintf(`{"target":%q,"minReplicas":2,"maxReplicas":10,
"metrics":[{"type":"cpu","targetUtilization":50,"onFailure":{"action":"fallback","replicas":0}}],
"schedules":[{"name":"nightly-batch","cron":"%d %d * * *","timeZone":"UTC","replicas":6,"durationSeconds":60}],
"behavior":{"scaleDown":{"stabilizationWindowSeconds":15}}}`, name, open.Minute(), open.Hour())))
	require.Never(t, func() bool { return replicas(t, p, name) != 2 }, time.Until(open)-2*time.Second, time.Second, "before the window")
	require.Eventually(t, func() bool { return replicas(t, p, name) == 6 }, 30*time.Second, 200*time.Millisecond, "floor at the window's start")
	d, ok := lastDecision(t, p, name)
	require.True(t, ok)
	assert.Equal(t, int32(6), d.Floor)
	assert.Equal(t, "nightly-batch", d.FloorSchedule)
	closes := open.Add(60 * time.Second)
	require.Never(t, func() bool { return replicas(t, p, name) != 6 }, time.Until(closes)-time.Second, time.Second, "during the window")
	// After the window the CPU metric decides, step by step: pods added
	// for the floor have no samples yet and count as fully used on a
	// scale-down (the missing-pod rule), so it comes down over a few
	// evaluations (6 -> 5 -> 3 -> 2 in 60 s in one run), not at once.
	require.Eventually(t, func() bool { return replicas(t, p, name) == 2 }, 2*time.Minute, 200*time.Millisecond, "released after the window")
	t.Logf("back to 2 replicas %v after the window closed", time.Since(closes).Round(time.Second))
}

// TestCustomMetricThroughTheGateway: a custom metric pushed by a
// developer of the project through the gateway drives an App.
func TestCustomMetricThroughTheGateway(t *testing.T) {
	e2e.Need(t)
	t.Parallel()
	const p, name = "custom", "api"
	submit(t, appDoc(p, name, 2))
	submit(t, scalerDoc(p, name, fmt.Sprintf(`{"target":%q,"minReplicas":1,"maxReplicas":10,
"metrics":[{"type":"custom","name":"qps","targetPerPod":100}]}`, name)))
	dev := reg.Token("dev", false, map[string]string{p: "developer"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { // a client pushing its load every 2 s
		defer wg.Done()
		for ctx.Err() == nil {
			if code, err := push(p, name, "qps", dev, 500); err != nil || code != http.StatusAccepted {
				t.Errorf("push: %d %v", code, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()
	require.Eventually(t, func() bool { return replicas(t, p, name) == 5 }, 60*time.Second, 200*time.Millisecond, "500 qps at 100 per pod")
	ev := scaledEvent(t, p, name)
	assert.Contains(t, ev.Message, "metric qps")
}

// TestQuotaRefusal: a Scaler that would take its App over the project's
// quota is refused at the scale step, with the quota's reason in its
// event; the App keeps its replicas.
func TestQuotaRefusal(t *testing.T) {
	e2e.Need(t)
	t.Parallel()
	const p, name = "tight", "api"
	code, body := do(t, "PUT", "/v1/projects/"+p+"/quota/OnDemand", reg.AdminToken, []byte(`{"pods":4}`))
	require.Equal(t, http.StatusOK, code, "%s", body)
	submit(t, appDoc(p, name, 3))
	submit(t, scalerDoc(p, name, fmt.Sprintf(`{"target":%q,"minReplicas":1,"maxReplicas":10,
"metrics":[{"type":"custom","name":"qps","targetPerPod":100}]}`, name)))
	dev := reg.Token("dev", false, map[string]string{p: "developer"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := do(c, "POST", "/v1/projects/"+p+"/apps/"+name+"/metrics/qps", dev, []byte(`{"value":900}`))
		assert.Equal(c, http.StatusAccepted, code, "%s", body)
		ev, ok := lastEvent(c, p, api.KindScaler, name, api.EventScaleRefused)
		if assert.True(c, ok, "no scale-refused event") {
			assert.Contains(c, ev.Message, "QuotaExceeded")
			assert.Contains(c, ev.Message, "limit 4")
		}
	}, 60*time.Second, 2*time.Second)
	assert.Equal(t, int32(3), replicas(t, p, name))
	d, ok := lastDecision(t, p, name)
	require.True(t, ok)
	assert.Equal(t, autoscaler.OutcomeRefused, d.Outcome)

	// The history the CLI and the console show, through the API.
	code, body = do(t, "GET", "/v1/projects/"+p+"/scalers/"+name+"/history", reg.Token("viewer", false, map[string]string{p: "viewer"}), nil)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var h computeapi.ScalerHistory
	require.NoError(t, json.Unmarshal(body, &h))
	require.NotEmpty(t, h.Decisions)
	last := h.Decisions[len(h.Decisions)-1]
	assert.Equal(t, computeapi.ScalerDecisionOutcome("refused"), last.Outcome)
	assert.Contains(t, last.Detail, "QuotaExceeded")
	assert.Greater(t, last.Desired, int32(4), "wanted more than the quota's 4 pods (7: the default rate policy's +4)")
	if assert.Len(t, last.Proposals, 1) {
		assert.Equal(t, "qps", last.Proposals[0].Metric)
		assert.Equal(t, 900.0, last.Proposals[0].Value)
	}
}
