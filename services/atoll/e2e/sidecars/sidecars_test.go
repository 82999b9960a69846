package sidecars

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
)

const (
	project  = "sidecars"
	apps     = 6 // 6 Apps of 3 replicas (one per zone): 18 pods, to keep CI time low
	replicas = 3
)

// setVersion stores version n of the managed sidecars as the gateway
// does, over the gateway's own NATS user.
func setVersion(t *testing.T, n int64, image string) {
	t.Helper()
	ctx := context.Background()
	kv, err := gwBus.KV(ctx, bus.BucketSidecars)
	require.NoError(t, err)
	v := api.SidecarVersion{Version: n, Created: time.Now().UTC(), CreatedBy: "e2e", SidecarSpec: api.SidecarSpec{
		Sidecars: []api.ManagedSidecar{{Container: api.Container{Name: "atoll-log-shipper", Image: image,
			Resources: api.Resources{Requests: api.ResourceList{CPU: "10m", Memory: "16Mi"}}}}},
		Rollout: api.SidecarRollout{MaxUnavailable: 3, BakeSeconds: 1, OnFailure: api.SidecarOnFailureRollback}}}
	doc, err := json.Marshal(v)
	require.NoError(t, err)
	_, err = kv.Create(ctx, api.SidecarVersionKey(n), doc)
	require.NoError(t, err)
	_, err = kv.Put(ctx, api.SidecarCurrentKey, doc)
	require.NoError(t, err)
}

func appDoc(name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"availability":{"maxUnavailable":"1"},"rollout":{"bakeSeconds":1,"deadlineSeconds":60},
"template":{"containers":[{"name":"web","image":"web:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, project, name, replicas)
}

// pod is what the test remembers of one pod.
type pod struct {
	uid           string
	image         string // the sidecar's image in the status
	ready         bool
	main, sidecar int32 // restart counts
}

// pods lists the project's pods in every zone, by cluster/name.
func pods(t *testing.T) map[string]pod {
	t.Helper()
	out := map[string]pod{}
	for _, c := range reg.Env.Clusters {
		l, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, p := range l.Items {
			if p.DeletionTimestamp != nil || !strings.HasPrefix(p.Labels[api.LabelWorkload], "app-") {
				continue // the probe's and the late App's
			}
			pd := pod{uid: string(p.UID)}
			for _, cnd := range p.Status.Conditions {
				if cnd.Type == corev1.PodReady {
					pd.ready = cnd.Status == corev1.ConditionTrue
				}
			}
			for _, s := range p.Status.InitContainerStatuses {
				if s.Name == "atoll-log-shipper" {
					pd.image, pd.sidecar = s.Image, s.RestartCount
				}
			}
			for _, s := range p.Status.ContainerStatuses {
				if s.Name == "web" {
					pd.main = s.RestartCount
				}
			}
			out[c.Name+"/"+p.Name] = pd
		}
	}
	return out
}

// allOn says whether want pods run image, all ready.
func allOn(ps map[string]pod, want int, image string) bool {
	if len(ps) != want {
		return false
	}
	for _, p := range ps {
		if !p.ready || p.image != image {
			return false
		}
	}
	return true
}

// TestSidecarImageRollsOutInPlace sets version 1 of the log sidecar,
// runs Apps over zones a, b and c, and sets version 2 (image only): every
// pod ends on version 2 with its UID, its user container's restart count
// unchanged and its sidecar's up by one; no App is ever below its budget
// (sampled); a workload submitted during the rollout runs one version.
func TestSidecarImageRollsOutInPlace(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	setVersion(t, 1, "log:1")
	// Admission mirrors the current version: wait until it injects it
	// (into a probe, deleted: an App moved between versions while its
	// own zone rollout runs would replace pods).
	require.Eventually(t, func() bool {
		w, err := cl.Apply(ctx, appDoc("probe"))
		return err == nil && w.Metadata.SidecarVersion == 1
	}, 30*time.Second, 200*time.Millisecond, "admission injects version 1")
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, "probe"))
	for i := range apps {
		w, err := cl.Submit(ctx, appDoc(fmt.Sprintf("app-%d", i)))
		require.NoError(t, err)
		require.Equal(t, int64(1), w.Metadata.SidecarVersion)
	}
	require.Eventually(t, func() bool { return allOn(pods(t), apps*replicas, "log:1") }, 3*time.Minute, time.Second, "every pod ready on log:1")
	before := pods(t)

	// Sample every App's ready pods while the rollout runs.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		lowest  = map[string]int32{}
		samples int
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for sampleCtx.Err() == nil {
			for i := range apps {
				key := api.Key(project, api.KindApp, fmt.Sprintf("app-%d", i))
				if st, err := cl.Status(sampleCtx, key); err == nil {
					mu.Lock()
					if cur, ok := lowest[key]; !ok || st.Ready < cur {
						lowest[key] = st.Ready
					}
					samples++
					mu.Unlock()
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	setVersion(t, 2, "log:2")
	// Submitted during the rollout: one version, whole.
	late, err := cl.Submit(ctx, appDoc("late"))
	require.NoError(t, err)
	lateSidecars := late.Spec.PodTemplate().Sidecars
	require.Len(t, lateSidecars, 1)
	assert.Equal(t, fmt.Sprintf("log:%d", late.Metadata.SidecarVersion), lateSidecars[0].Image, "the late App's sidecars are its version's")

	if !assert.Eventually(t, func() bool {
		return allOn(pods(t), apps*replicas, "log:2")
	}, 2*time.Minute, time.Second, "every pod ready on log:2") {
		for k, p := range pods(t) {
			_, old := before[k]
			t.Logf("pod %s: old %t %+v", k, old, p)
		}
		t.FailNow()
	}
	stopSampling()
	wg.Wait()

	after := pods(t)
	for k, was := range before {
		now, ok := after[k]
		if !assert.True(t, ok, "pod %s was replaced", k) {
			continue
		}
		assert.Equal(t, was.uid, now.uid, "pod %s UID", k)
		assert.Equal(t, was.main, now.main, "pod %s: the user container's restarts", k)
		assert.Equal(t, was.sidecar+1, now.sidecar, "pod %s: the sidecar's restarts", k)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d status samples", samples)
	for key, low := range lowest {
		// maxUnavailable 1 per shard, and one zone moves at a time.
		assert.GreaterOrEqual(t, low, int32(replicas-1), "%s ready pods fell to %d", key, low)
	}
	for i := range apps {
		w, err := cl.Workload(ctx, api.Key(project, api.KindApp, fmt.Sprintf("app-%d", i)))
		require.NoError(t, err)
		assert.Equal(t, int64(2), w.Metadata.SidecarVersion)
	}
}
