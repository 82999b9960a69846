package stateful

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
)

const (
	project = "state"
	// class is the storage class of the claims and the static volumes.
	class = "manual"
	// volumesPerCluster are the static volumes made in each cluster.
	volumesPerCluster = 3
)

// client is the Compute API as a developer of project.
func client(t *testing.T) *sdk.Client {
	t.Helper()
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.Token("dev", false, map[string]string{project: "developer"})))
	require.NoError(t, err)
	return c
}

// appDoc is an App of replicas whose replicas each get a claim "data" of
// class, mounted at /data.
func appDoc(name, image string, replicas int) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":%q},"spec":{"replicas":%d,
"template":{"containers":[{"name":"db","image":%q,"resources":{"requests":{"cpu":"10m","memory":"16Mi"}},
 "volumeMounts":[{"name":"data","mountPath":"/data"}]}],
 "volumeClaimTemplates":[{"name":"data","storage":"1Gi","storageClass":%q}]}}}`, name, replicas, image, class)
}

// provision makes, in every cluster, a storage class without a
// provisioner and static volumes of it for the claims to bind.
func provision(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, cl := range reg.Env.Clusters {
		_, err := cl.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: class},
			Provisioner: "kubernetes.io/no-provisioner",
		}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, cl.Name)
		}
		for i := range volumesPerCluster {
			name := fmt.Sprintf("pv-%s-%d", cl.Name, i)
			_, err := cl.Client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName:              class,
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/atoll-stateful/" + name}},
				},
			}, metav1.CreateOptions{})
			if !apierrors.IsAlreadyExists(err) {
				require.NoError(t, err, name)
			}
		}
	}
}

// replica is one replica as its cluster holds it.
type replica struct {
	cluster, zone string
	pod           string // the pod's name: the App's name and its ordinal
	podUID        string
	claim         string // the claim its volume "data" names
	claimUID      string
	image         string
	phase         corev1.PodPhase
	claimPhase    corev1.PersistentVolumeClaimPhase
}

// replicas reads the App's pods in cluster, and their claims.
func replicas(ctx context.Context, cl *testenv.Cluster, app string) ([]replica, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ns := api.Namespace(project)
	pods, err := cl.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + app})
	if err != nil {
		return nil, err
	}
	var out []replica
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		r := replica{cluster: cl.Name, zone: cl.Zone, pod: p.Name, podUID: string(p.UID), phase: p.Status.Phase, image: p.Spec.Containers[0].Image}
		for _, v := range p.Spec.Volumes {
			if v.Name == "data" && v.PersistentVolumeClaim != nil {
				r.claim = v.PersistentVolumeClaim.ClaimName
			}
		}
		if r.claim != "" {
			c, err := cl.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, r.claim, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			r.claimUID, r.claimPhase = string(c.UID), c.Status.Phase
		}
		out = append(out, r)
	}
	return out, nil
}

// waitReplicas waits until every cluster but skip runs exactly perZone
// replicas of the App, the first ordinals of its zone's range, each with
// its own claim bound (and, without skip, the App is Running with image
// ready everywhere), and returns them by pod name.
func waitReplicas(t *testing.T, c *sdk.Client, app, image string, perZone int, skip string) map[string]replica {
	t.Helper()
	ctx := context.Background()
	var got map[string]replica
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		got = map[string]replica{}
		for _, cl := range reg.Env.Clusters {
			if cl.Name == skip {
				continue
			}
			rs, err := replicas(ctx, cl, app)
			if !assert.NoError(ct, err, cl.Name) || !assert.Len(ct, rs, perZone, "replicas in %s", cl.Name) {
				continue
			}
			var want, names []string
			for i := range perZone {
				want = append(want, api.ReplicaName(app, api.OrdinalStart(cl.Zone)+int32(i)))
			}
			for _, r := range rs {
				names = append(names, r.pod)
				ord := strings.TrimPrefix(r.pod, app+"-")
				assert.Equal(ct, "data-"+app+"-"+ord, r.claim, "claim of %s", r.pod)
				assert.Equal(ct, corev1.ClaimBound, r.claimPhase, "claim %s", r.claim)
				assert.Equal(ct, corev1.PodRunning, r.phase, "pod %s", r.pod)
				assert.Equal(ct, image, r.image, "pod %s", r.pod)
				got[r.pod] = r
			}
			assert.ElementsMatch(ct, want, names, "pods in zone %s", cl.Zone)
		}
		if skip != "" {
			return
		}
		w, err := c.Get(ctx, project, api.KindApp, app)
		if assert.NoError(ct, err) {
			assert.Equal(ct, api.PhaseRunning, w.Status.Phase)
			assert.Equal(ct, int32(perZone*len(reg.Env.Clusters)), w.Status.Ready)
		}
	}, 90*time.Second, 250*time.Millisecond)
	return got
}

// inZone returns the replica of rs in cluster's zone with the first
// ordinal of its range.
func inZone(rs map[string]replica, cl *testenv.Cluster, app string) replica {
	return rs[api.ReplicaName(app, api.OrdinalStart(cl.Zone))]
}

// TestAppClaimsStableIdentity: an App of 3 replicas with a claim template
// runs one replica per zone, each the first ordinal of its zone's range
// with its own bound claim. A deleted pod comes back with the same name,
// in the same cluster, mounting the same claim (same UID). When zone b's
// API server freezes, the App (onZoneLoss Wait, the default) keeps that
// replica placed there, pending, with a WaitingForZone condition naming
// the zone, rather than starting it elsewhere without its data; when the
// zone returns, the same replica runs again with the same claim.
func TestAppClaimsStableIdentity(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	c := client(t)
	provision(t)
	const app = "db"
	_, _, err := c.Apply(ctx, project, appDoc(app, "db:1", 3))
	require.NoError(t, err)
	start := time.Now()
	first := waitReplicas(t, c, app, "db:1", 1, "")
	t.Logf("3 replicas running with bound claims %v after create", time.Since(start).Round(time.Millisecond))
	for _, r := range first {
		t.Logf("  %s (zone %s): pod %s, claim %s", r.cluster, r.zone, r.pod, r.claim)
	}

	// The pod of zone a is deleted: the same ordinal returns there, with
	// the same claim.
	za := reg.Env.Clusters[0]
	old := inZone(first, za, app)
	require.NoError(t, za.Client.CoreV1().Pods(api.Namespace(project)).Delete(ctx, old.pod, metav1.DeleteOptions{}))
	deleted := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		rs, err := replicas(ctx, za, app)
		if !assert.NoError(ct, err) || !assert.Len(ct, rs, 1) {
			return
		}
		r := rs[0]
		assert.NotEqual(ct, old.podUID, r.podUID, "the deleted pod itself")
		assert.Equal(ct, old.pod, r.pod, "its ordinal")
		assert.Equal(ct, old.claim, r.claim, "its claim")
		assert.Equal(ct, old.claimUID, r.claimUID, "the same claim object")
		assert.Equal(ct, corev1.PodRunning, r.phase)
	}, 60*time.Second, 250*time.Millisecond)
	t.Logf("pod %s back in %s with claim %s %v after its deletion", old.pod, za.Name, old.claim, time.Since(deleted).Round(time.Millisecond))
	first = waitReplicas(t, c, app, "db:1", 1, "")

	// Scaled to 6: each zone's next ordinal joins with a claim of its
	// own; the first replicas keep their pods and claims.
	_, _, err = c.Apply(ctx, project, appDoc(app, "db:1", 6))
	require.NoError(t, err)
	six := waitReplicas(t, c, app, "db:1", 2, "")
	for name, r := range first {
		assert.Equal(t, r.podUID, six[name].podUID, "pod %s restarted by the scale", name)
		assert.Equal(t, r.claimUID, six[name].claimUID, "claim of %s", name)
	}
	// A new image rolls out: every pod is replaced, keeping its name and
	// its claim.
	_, _, err = c.Apply(ctx, project, appDoc(app, "db:2", 6))
	require.NoError(t, err)
	rolled := waitReplicas(t, c, app, "db:2", 2, "")
	for name, r := range six {
		assert.NotEqual(t, r.podUID, rolled[name].podUID, "pod %s not replaced by the rollout", name)
		assert.Equal(t, r.claimUID, rolled[name].claimUID, "claim of %s after the rollout", name)
	}
	// Back to 3: the added ordinals go, their claims stay for their return.
	_, _, err = c.Apply(ctx, project, appDoc(app, "db:2", 3))
	require.NoError(t, err)
	first = waitReplicas(t, c, app, "db:2", 1, "")
	for _, cl := range reg.Env.Clusters {
		kept := api.ClaimName("data", app, api.OrdinalStart(cl.Zone)+1)
		_, err := cl.Client.CoreV1().PersistentVolumeClaims(api.Namespace(project)).Get(ctx, kept, metav1.GetOptions{})
		assert.NoError(t, err, "claim %s of a scaled-away replica in %s", kept, cl.Name)
	}
	t.Logf("scaled 3 → 6 → 3 with a rollout of db:2 between: ordinals, pods and claims kept")

	// Zone b is lost: its API server freezes.
	zb := reg.Env.Clusters[1]
	paused, err := zb.PauseComponent(testenv.KubeAPIServer)
	require.NoError(t, err)
	resumed := false
	defer func() {
		if !resumed {
			_ = paused.Resume()
		}
	}()
	frozeAt := time.Now()
	key := api.Key(project, api.KindApp, app)
	var cond computeapi.Condition
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		w, err := c.Get(ctx, project, api.KindApp, app)
		if !assert.NoError(ct, err) {
			return
		}
		var found bool
		for _, k := range w.Status.Conditions {
			if k.Reason == api.ReasonWaitingForZone {
				cond, found = k, true
			}
		}
		assert.True(ct, found, "no %s condition: %+v", api.ReasonWaitingForZone, w.Status.Conditions)
		assert.Equal(ct, int32(0), w.Status.Zones[zb.Zone].Ready, "zone %s's replica counts as ready", zb.Zone)
		assert.Equal(ct, int32(2), w.Status.Ready)
	}, 90*time.Second, 500*time.Millisecond, "no %s condition within 90 s of %s's loss", api.ReasonWaitingForZone, zb.Name)
	t.Logf("%s frozen: condition %s after %v: %s", zb.Name, cond.Reason, time.Since(frozeAt).Round(time.Millisecond), cond.Message)
	assert.Contains(t, cond.Message, "zone "+zb.Zone)
	assert.Contains(t, cond.Message, "Wait")

	// The replica stays placed in the lost zone: no shard moves out of it,
	// and no other cluster runs a second replica.
	bc := busclient.New(reg.Bus, nil)
	assert.Never(t, func() bool {
		p, err := bc.Placement(ctx, key)
		if err != nil || p == nil {
			return false
		}
		for _, sh := range p.Shards {
			if sh.Cluster == zb.Name {
				return false
			}
		}
		return true
	}, 10*time.Second, 500*time.Millisecond, "the replica of %s was placed elsewhere", zb.Name)
	for _, cl := range []*testenv.Cluster{za, reg.Env.Clusters[2]} {
		rs, err := replicas(ctx, cl, app)
		require.NoError(t, err)
		assert.Len(t, rs, 1, "replicas in %s while %s is lost", cl.Name, zb.Name)
	}

	// The zone returns: its replica runs again with its claim.
	require.NoError(t, paused.Resume())
	resumed = true
	back := waitReplicas(t, c, app, "db:2", 1, "")
	assert.Equal(t, inZone(first, zb, app).claimUID, inZone(back, zb, app).claimUID, "the claim of zone %s", zb.Zone)
	w, err := c.Get(ctx, project, api.KindApp, app)
	require.NoError(t, err)
	for _, k := range w.Status.Conditions {
		assert.NotEqual(t, api.ReasonWaitingForZone, k.Reason, "still waiting after the zone's return")
	}

	// Deleting the App deletes its claims.
	require.NoError(t, c.Delete(ctx, project, api.KindApp, app))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, cl := range reg.Env.Clusters {
			lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			list, err := cl.Client.CoreV1().PersistentVolumeClaims(api.Namespace(project)).List(lctx, metav1.ListOptions{})
			cancel()
			if assert.NoError(ct, err, cl.Name) {
				var left []string
				for _, c := range list.Items {
					if strings.HasPrefix(c.Name, "data-"+app+"-") && c.DeletionTimestamp == nil {
						left = append(left, c.Name)
					}
				}
				assert.Empty(ct, left, "claims left in %s", cl.Name)
			}
		}
	}, 60*time.Second, 500*time.Millisecond)
}

// TestClaimMistakesRefused: mistakes in claim templates and the zone loss
// policy get 422 through the gateway, naming the field, and nothing is
// written.
func TestClaimMistakesRefused(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	c := client(t)
	tests := []struct {
		name, doc, field, code string
	}{
		{"no storage", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":"bad"},"spec":{"template":{"containers":[{"name":"a","image":"x:1"}],
"volumeClaimTemplates":[{"name":"data"}]}}}`, "spec.template.volumeClaimTemplates[0].storage", api.CodeRequired},
		{"mount of no claim", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":"bad"},"spec":{"template":{"containers":[{"name":"a","image":"x:1","volumeMounts":[{"name":"logs","mountPath":"/l"}]}],
"volumeClaimTemplates":[{"name":"data","storage":"1Gi"}]}}}`, "spec.template.containers[a].volumeMounts[0].name", api.CodeInvalid},
		{"unknown zone loss policy", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":"bad"},"spec":{"onZoneLoss":"Move","template":{"containers":[{"name":"a","image":"x:1"}],
"volumeClaimTemplates":[{"name":"data","storage":"1Gi"}]}}}`, "spec.onZoneLoss", api.CodeUnsupported},
		{"claims on a CronJob", `{"apiVersion":"atoll.dev/v1","kind":"CronJob","metadata":{"name":"bad"},"spec":{"schedule":"* * * * *","template":{"containers":[{"name":"a","image":"x:1"}],
"volumeClaimTemplates":[{"name":"data","storage":"1Gi"}]}}}`, "spec.template.volumeClaimTemplates", api.CodeUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.Apply(ctx, project, []byte(tc.doc))
			var se *sdk.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, 422, se.Status)
			var fields []string
			for _, f := range se.Body.Fields {
				fields = append(fields, f.Field+" "+f.Code)
				assert.NotEmpty(t, f.Reason, f.Field)
			}
			assert.Contains(t, fields, tc.field+" "+tc.code)
		})
	}
	for _, kind := range []string{api.KindApp, api.KindCronJob} {
		_, err := c.Get(ctx, project, kind, "bad")
		var se *sdk.Error
		if assert.ErrorAs(t, err, &se, kind) {
			assert.Equal(t, 404, se.Status, "a refused %s was written", kind)
		}
	}
}

// TestClaimsCountTowardQuota: every replica's claims count towards the
// project's storage: an App of 3 replicas with a 1Gi claim each uses
// 3Gi, and one that would pass the storage cap is refused with 409
// QuotaExceeded naming storage.
func TestClaimsCountTowardQuota(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const quotaProject = "state-quota"
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.Token("dev", false, map[string]string{quotaProject: "developer"})))
	require.NoError(t, err)
	admin, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken))
	require.NoError(t, err)
	const gi = int64(1 << 30)
	_, err = admin.SetQuota(ctx, quotaProject, string(api.TierOnDemand), computeapi.QuotaLimit{StorageBytes: ptr(4 * gi)})
	require.NoError(t, err)

	_, _, err = c.Apply(ctx, quotaProject, appDoc("small", "db:1", 3))
	require.NoError(t, err)
	q, err := c.Quota(ctx, quotaProject)
	require.NoError(t, err)
	var used int64
	for _, tq := range q.Tiers {
		if tq.Tier == string(api.TierOnDemand) {
			used = tq.Used.StorageBytes
		}
	}
	assert.Equal(t, 3*gi, used, "storage used by 3 replicas of a 1Gi claim")

	_, _, err = c.Apply(ctx, quotaProject, appDoc("big", "db:1", 2))
	var se *sdk.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 409, se.Status)
	assert.Equal(t, "QuotaExceeded", se.Body.Code)
	if assert.NotNil(t, se.Body.Quota) {
		assert.Equal(t, api.ResourceStorage, se.Body.Quota.Resource)
	}
	require.NoError(t, c.Delete(ctx, quotaProject, api.KindApp, "small"))
}

func ptr[T any](v T) *T { return &v }
