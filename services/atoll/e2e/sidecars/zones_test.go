package sidecars

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
)

const (
	zoneApps = 30 // 30 Apps of 3 replicas, one per zone: 90 pods
	// zoneMaxUnavailable is the versions' maxUnavailable: how many Apps
	// move at once in the open zone.
	zoneMaxUnavailable = 10
	// zoneBake is each zone's bake time.
	zoneBake = 2
	// zoneDeadline is how long a zone may take to be healthy on a new
	// version (the region's admission is given it, main_test.go): the
	// failing version 3 waits it out. Version 2's zones were healthy in
	// 4 to 6 s here, so it leaves them four times that under CI's load.
	zoneDeadline = 25 * time.Second
	// neverReady ends the image of a sidecar that never becomes ready
	// (testdata/stages.yaml, pod-image-updated-never-ready).
	neverReady = "log:never-ready"
)

var zones = []string{"a", "b", "c"}

// setZoneVersion stores the next version of the managed sidecars (the log
// sidecar with image), as the gateway does, and returns its number.
func setZoneVersion(t *testing.T, image string) int64 {
	t.Helper()
	ctx := context.Background()
	kv, err := gwBus.KV(ctx, bus.BucketSidecars)
	require.NoError(t, err)
	var cur api.SidecarVersion
	if e, err := kv.Get(ctx, api.SidecarCurrentKey); err == nil {
		require.NoError(t, json.Unmarshal(e.Value(), &cur))
	}
	v := api.SidecarVersion{Version: cur.Version + 1, Created: time.Now().UTC(), CreatedBy: "e2e", SidecarSpec: api.SidecarSpec{
		Sidecars: []api.ManagedSidecar{{Container: api.Container{Name: "atoll-log-shipper", Image: image,
			Resources: api.Resources{Requests: api.ResourceList{CPU: "10m", Memory: "16Mi"}}}}},
		Rollout: api.SidecarRollout{MaxUnavailable: zoneMaxUnavailable, BakeSeconds: zoneBake, OnFailure: api.SidecarOnFailureRollback}}}
	doc, err := json.Marshal(v)
	require.NoError(t, err)
	_, err = kv.Create(ctx, api.SidecarVersionKey(v.Version), doc)
	require.NoError(t, err)
	_, err = kv.Put(ctx, api.SidecarCurrentKey, doc)
	require.NoError(t, err)
	return v.Version
}

// rolloutProgress reads the sidecar rollout's progress.
func rolloutProgress(t require.TestingT) api.SidecarProgress {
	kv, err := gwBus.KV(context.Background(), bus.BucketSidecars)
	require.NoError(t, err)
	var p api.SidecarProgress
	if e, err := kv.Get(context.Background(), api.SidecarProgressKey); err == nil {
		require.NoError(t, json.Unmarshal(e.Value(), &p))
	}
	return p
}

// rolloutEvent returns the sidecar rollout's event for version and zone;
// false when there is none.
func rolloutEvent(t require.TestingT, version int64, zone, event string) (api.WorkloadEvent, bool) {
	js, err := jetstream.New(reg.Bus.NC)
	require.NoError(t, err)
	s, err := js.Stream(context.Background(), bus.StreamEvents)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), bus.EventSubject(api.SidecarEventProject, api.SidecarEventKind, api.SidecarEventName(version, zone), event))
	if err != nil {
		return api.WorkloadEvent{}, false
	}
	var ev api.WorkloadEvent
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	return ev, true
}

// zonePod is what the zone test remembers of one pod.
type zonePod struct {
	pod
	zone, app string
	spec      string // the sidecar's image in the spec
}

// zonePods lists the pods of the Apps whose names start with prefix, in
// every zone, by cluster/name.
func zonePods(t require.TestingT, prefix string) map[string]zonePod {
	out, err := listZonePods(prefix)
	require.NoError(t, err)
	return out
}

// listZonePods is zonePods for the sampler's goroutine.
func listZonePods(prefix string) (map[string]zonePod, error) {
	out := map[string]zonePod{}
	for _, c := range reg.Env.Clusters {
		l, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, p := range l.Items {
			app := p.Labels[api.LabelWorkload]
			if p.DeletionTimestamp != nil || !strings.HasPrefix(app, prefix) {
				continue
			}
			zp := zonePod{zone: c.Zone, app: app, pod: pod{uid: string(p.UID)}}
			for _, cnd := range p.Status.Conditions {
				if cnd.Type == corev1.PodReady {
					zp.ready = cnd.Status == corev1.ConditionTrue
				}
			}
			for _, s := range p.Spec.InitContainers {
				if s.Name == "atoll-log-shipper" {
					zp.spec = s.Image
				}
			}
			for _, s := range p.Status.InitContainerStatuses {
				if s.Name == "atoll-log-shipper" {
					zp.image, zp.sidecar = s.Image, s.RestartCount
				}
			}
			for _, s := range p.Status.ContainerStatuses {
				if s.Name == "web" {
					zp.main = s.RestartCount
				}
			}
			out[c.Name+"/"+p.Name] = zp
		}
	}
	return out, nil
}

// zonesOn says whether want pods run image, all ready.
func zonesOn(ps map[string]zonePod, want int, image string) bool {
	if len(ps) != want {
		return false
	}
	for _, p := range ps {
		if !p.ready || p.image != image || p.spec != image {
			return false
		}
	}
	return true
}

// sampler watches the rollout: the lowest ready count of every App, and
// when each zone's first pod was given each sidecar image.
type sampler struct {
	mu     sync.Mutex
	lowest map[string]int32
	first  map[string]time.Time // zone/image: first seen in a pod's spec
	// moving is, per zone, the most Apps seen at once with their pod
	// there not ready on the image its spec names (moving).
	moving map[string]int
	// specs are the sidecar images each pod's spec was seen with.
	specs   map[string]map[string]bool
	samples int
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func sample(names []string, prefix string) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{lowest: map[string]int32{}, first: map[string]time.Time{}, moving: map[string]int{}, specs: map[string]map[string]bool{}, cancel: cancel}
	s.wg.Go(func() {
		for ctx.Err() == nil {
			now := time.Now()
			seen := map[string]bool{}
			ps, err := listZonePods(prefix) // a failed list is a missed sample
			moving := map[string]map[string]bool{}
			for _, p := range ps {
				seen[p.zone+"/"+p.spec] = true
				if !p.ready || p.image != p.spec {
					if moving[p.zone] == nil {
						moving[p.zone] = map[string]bool{}
					}
					moving[p.zone][p.app] = true
				}
			}
			s.mu.Lock()
			for k := range seen {
				if _, ok := s.first[k]; !ok {
					s.first[k] = now
				}
			}
			for k, p := range ps {
				if s.specs[k] == nil {
					s.specs[k] = map[string]bool{}
				}
				s.specs[k][p.spec] = true
			}
			if err == nil {
				for z, apps := range moving {
					s.moving[z] = max(s.moving[z], len(apps))
				}
			}
			s.mu.Unlock()
			for _, name := range names {
				key := api.Key(project, api.KindApp, name)
				if st, err := cl.Status(ctx, key); err == nil && st != nil {
					s.mu.Lock()
					if cur, ok := s.lowest[key]; !ok || st.Ready < cur {
						s.lowest[key] = st.Ready
					}
					s.samples++
					s.mu.Unlock()
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return s
}

func (s *sampler) stop() {
	s.cancel()
	s.wg.Wait()
}

// firstMove returns when zone's first pod was given image; false when
// none was.
func (s *sampler) firstMove(zone, image string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.first[zone+"/"+image]
	return at, ok
}

// TestSidecarRolloutZoneByZone runs 30 Apps of 3 replicas over zones a, b
// and c with the log sidecar's first version and sets a second (image
// only): every pod ends on it with its UID, its user container's restart
// count unchanged and its sidecar's up by exactly one; zone b's first pod
// moves after zone a's baked event, zone c's after zone b's; no App is
// ever below its availability budget (sampled); an App submitted during
// the rollout runs the new version only. Then a third version whose
// sidecar never becomes ready fails the health gate in zone a, which
// returns to the second version in place; zones b and c are never touched.
func TestSidecarRolloutZoneByZone(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	start := time.Now()
	// The other test's Apps would move with these versions: gone first.
	for _, name := range []string{"probe", "late", "app-0", "app-1", "app-2", "app-3", "app-4", "app-5"} {
		_ = cl.Delete(ctx, project, api.KindApp, name)
	}
	v1 := setZoneVersion(t, "log:z1")
	require.Eventually(t, func() bool {
		w, err := cl.Apply(ctx, appDoc("zprobe"))
		return err == nil && w.Metadata.SidecarVersion == v1
	}, 30*time.Second, 200*time.Millisecond, "admission injects version %d", v1)
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, "zprobe"))
	var names []string
	for i := range zoneApps {
		names = append(names, fmt.Sprintf("z-%02d", i))
		w, err := cl.Submit(ctx, appDoc(names[i]))
		require.NoError(t, err)
		require.Equal(t, v1, w.Metadata.SidecarVersion)
	}
	require.Eventually(t, func() bool { return zonesOn(zonePods(t, "z-"), zoneApps*replicas, "log:z1") }, 3*time.Minute, time.Second, "every pod ready on log:z1")
	require.Eventually(t, func() bool {
		p := rolloutProgress(t)
		return p.Version == v1 && p.Phase == api.SidecarRolloutComplete
	}, 30*time.Second, 200*time.Millisecond, "version %d's rollout complete", v1)
	before := zonePods(t, "z-")
	t.Logf("%d Apps running on version %d after %s", zoneApps, v1, time.Since(start).Round(time.Millisecond))

	// Version 2, image only.
	s := sample(names, "z-")
	rollStart := time.Now()
	v2 := setZoneVersion(t, "log:z2")
	require.Eventually(t, func() bool {
		p := rolloutProgress(t)
		z := p.Zone("a")
		return z != nil && z.Open()
	}, 30*time.Second, 100*time.Millisecond, "zone a opened to version %d", v2)
	// Submitted during the rollout: the new version, in every zone.
	late, err := cl.Submit(ctx, appDoc("zlate"))
	require.NoError(t, err)
	assert.Equal(t, v2, late.Metadata.SidecarVersion, "the late App's version")
	assert.Nil(t, late.Metadata.SidecarPrevious, "the late App holds no zone back")

	if !assert.Eventually(t, func() bool {
		p := rolloutProgress(t)
		return p.Version == v2 && p.Phase == api.SidecarRolloutComplete && zonesOn(zonePods(t, "z-"), zoneApps*replicas, "log:z2")
	}, 4*time.Minute, 250*time.Millisecond, "every pod ready on log:z2") {
		t.Logf("progress %+v", rolloutProgress(t))
		s.stop()
		t.FailNow()
	}
	t.Logf("version %d rolled out over 3 zones in %s", v2, time.Since(rollStart).Round(time.Millisecond))
	require.Eventually(t, func() bool { return zonesOn(zonePods(t, "zlate"), replicas, "log:z2") }, time.Minute, 250*time.Millisecond, "the late App ready")
	s.stop()

	after := zonePods(t, "z-")
	for k, was := range before {
		now, ok := after[k]
		if !assert.True(t, ok, "pod %s was replaced", k) {
			continue
		}
		assert.Equal(t, was.uid, now.uid, "pod %s UID", k)
		assert.Equal(t, was.main, now.main, "pod %s: the user container's restarts", k)
		assert.Equal(t, was.sidecar+1, now.sidecar, "pod %s: the sidecar's restarts", k)
	}
	t.Logf("%d status samples", s.samples)
	for key, low := range s.lowest {
		// maxUnavailable 1: at most one pod of an App not ready.
		assert.GreaterOrEqual(t, low, int32(replicas-1), "%s ready pods fell to %d", key, low)
	}
	assert.Len(t, s.lowest, zoneApps, "Apps sampled")
	for _, z := range []string{"a", "b", "c"} {
		// maxUnavailable: at most that many Apps moving in a zone at once.
		assert.LessOrEqual(t, s.moving[z], zoneMaxUnavailable, "zone %s: Apps moving at once", z)
		t.Logf("zone %s: at most %d Apps moving at once", z, s.moving[z])
	}
	// Zone by zone: each zone's first move after the zone before baked.
	var baked time.Time
	for i, z := range zones {
		started, ok := rolloutEvent(t, v2, z, api.EventSidecarZoneStarted)
		require.True(t, ok, "zone %s started event", z)
		done, ok := rolloutEvent(t, v2, z, api.EventSidecarZoneBaked)
		require.True(t, ok, "zone %s baked event", z)
		moved, ok := s.firstMove(z, "log:z2")
		require.True(t, ok, "zone %s moved", z)
		t.Logf("zone %s: started %s, first pod moved %s, baked %s", z, started.Time.Format(time.StampMilli), moved.Format(time.StampMilli), done.Time.Format(time.StampMilli))
		if i > 0 {
			assert.False(t, started.Time.Before(baked), "zone %s started %s before zone %s baked %s", z, started.Time, zones[i-1], baked)
			assert.True(t, moved.After(baked), "zone %s's first pod moved %s, before zone %s baked %s", z, moved, zones[i-1], baked)
		}
		assert.GreaterOrEqual(t, done.Time.Sub(started.Time), zoneBake*time.Second, "zone %s baked %s after it started", z, done.Time.Sub(started.Time))
		baked = done.Time
	}
	_, ok := rolloutEvent(t, v2, "", api.EventSidecarRolloutDone)
	assert.True(t, ok, "rollout done event")
	// The late App ran version 2 only: it was never moved, and no
	// sidecar of it restarted.
	for k, p := range zonePods(t, "zlate") {
		assert.Equal(t, int32(0), p.sidecar, "late pod %s: its sidecar restarted", k)
	}
	w, err := cl.Workload(ctx, api.Key(project, api.KindApp, "zlate"))
	require.NoError(t, err)
	assert.Equal(t, late.Metadata.Generation, w.Metadata.Generation, "the late App was moved")

	// Version 3's sidecar never becomes ready: zone a fails the gate and
	// returns to version 2 in place; zones b and c never move.
	//
	s = sample(nil, "z-")
	failStart := time.Now()
	v3 := setZoneVersion(t, neverReady)
	if !assert.Eventually(t, func() bool {
		p := rolloutProgress(t)
		z := p.Zone("a")
		return p.Version == v3 && p.Phase == api.SidecarRolloutPaused && z != nil && z.Phase == api.SidecarZoneRolledBack
	}, zoneDeadline+time.Minute, 250*time.Millisecond, "version %d paused and rolled back in zone a", v3) {
		t.Logf("progress %+v", rolloutProgress(t))
		s.stop()
		t.FailNow()
	}
	require.Eventually(t, func() bool {
		return zonesOn(zonePods(t, "z-"), zoneApps*replicas, "log:z2")
	}, time.Minute, 250*time.Millisecond, "every pod back on log:z2")
	t.Logf("version %d failed and rolled back in %s", v3, time.Since(failStart).Round(time.Millisecond))
	s.stop()
	p := rolloutProgress(t)
	for _, z := range []string{"b", "c"} {
		pz := p.Zone(z)
		require.NotNil(t, pz, "zone %s in the progress", z)
		assert.Equal(t, api.SidecarZonePending, pz.Phase, "zone %s", z)
		_, moved := s.firstMove(z, neverReady)
		assert.False(t, moved, "a pod in zone %s was given version %d", z, v3)
		_, started := rolloutEvent(t, v3, z, api.EventSidecarZoneStarted)
		assert.False(t, started, "zone %s started on version %d", z, v3)
	}
	_, moved := s.firstMove("a", neverReady)
	assert.True(t, moved, "zone a was given version %d", v3)
	for _, ev := range []string{api.EventSidecarZoneStarted, api.EventSidecarZoneFailed, api.EventSidecarRolledBack} {
		_, ok := rolloutEvent(t, v3, "a", ev)
		assert.True(t, ok, "zone a %s event", ev)
	}
	final := zonePods(t, "z-")
	failed := 0 // zone a's pods given version 3: maxUnavailable Apps'
	for k, was := range after {
		now, ok := final[k]
		if !assert.True(t, ok, "pod %s was replaced", k) {
			continue
		}
		assert.Equal(t, was.uid, now.uid, "pod %s UID", k)
		assert.Equal(t, was.main, now.main, "pod %s: the user container's restarts", k)
		want := was.sidecar // zones b and c, and the Apps zone a was not opened to: untouched
		if s.specs[k][neverReady] {
			assert.Equal(t, "a", now.zone, "pod %s was given version %d", k, v3)
			want += 2 // to version 3 and back
			failed++
		}
		assert.Equal(t, want, now.sidecar, "pod %s (zone %s): the sidecar's restarts", k, now.zone)
	}
	assert.Equal(t, zoneMaxUnavailable, failed, "pods moved to version %d before the gate failed", v3)
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}
