package podkind

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
)

const project = "pods"

// client is the Compute API as a developer of project.
func client(t *testing.T) *sdk.Client {
	t.Helper()
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.Token("dev", false, map[string]string{project: "developer"})))
	require.NoError(t, err)
	return c
}

func podDoc(name, appImage, extra string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"name":%q},"spec":{%s
"template":{"containers":[
 {"name":"app","image":%q,"resources":{"requests":{"cpu":"10m","memory":"16Mi"}}},
 {"name":"helper","image":"helper:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, name, extra, appImage)
}

// containers returns the status's containers by name.
func containers(p computeapi.PodStatus) map[string]computeapi.PodContainerStatus {
	out := map[string]computeapi.PodContainerStatus{}
	for _, c := range p.Containers {
		out[c.Name] = c
	}
	return out
}

// livePod reads the workload's Pod in cluster.
func livePod(ctx context.Context, c *testenv.Cluster, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return c.Client.CoreV1().Pods(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
}

// running is what a container should show: image and restart count.
type running struct {
	image    string
	restarts int32
}

// waitContainers waits until the Pod's status, and the live Pod in its
// cluster, show want, and returns the status.
func waitContainers(t *testing.T, c *sdk.Client, name string, want map[string]running) computeapi.PodStatus {
	t.Helper()
	ctx := context.Background()
	var pod computeapi.PodStatus
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		w, err := c.Get(ctx, project, api.KindPod, name)
		if !assert.NoError(ct, err) {
			return
		}
		pod = w.Status.Pod
		assert.Equal(ct, api.PhaseRunning, w.Status.Phase)
		got := map[string]running{}
		for n, cs := range containers(pod) {
			got[n] = running{cs.Image, cs.RestartCount}
		}
		assert.Equal(ct, want, got, "containers in the status")
		if pod.Cluster == "" {
			return
		}
		live, err := livePod(ctx, reg.Env.Cluster(pod.Cluster), name)
		if assert.NoError(ct, err) {
			assert.Equal(ct, string(live.UID), pod.Uid, "status UID and live Pod's")
		}
	}, 60*time.Second, 250*time.Millisecond)
	return pod
}

// TestPodImageUpdatedInPlace: a Pod with two main containers and the
// platform's managed sidecar (a native sidecar: an init container with
// restartPolicy Always) has a main container's image changed by its user,
// then the sidecar's by the platform. Each time the live Pod is patched,
// not replaced (same UID, same cluster), and only the changed container
// restarts: its image and restart count change, the others' do not.
func TestPodImageUpdatedInPlace(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	c := client(t)
	const name = "web"
	_, _, err := c.Apply(ctx, project, podDoc(name, "app:1", ""))
	require.NoError(t, err)

	const sidecar = "atoll-log-shipper" // admission's default managed sidecar
	w, err := c.Get(ctx, project, api.KindPod, name)
	require.NoError(t, err)
	shipper := ""
	var spec api.PodSpec
	require.NoError(t, json.Unmarshal(w.Spec, &spec))
	for _, s := range spec.Template.Sidecars {
		if s.Name == sidecar {
			shipper = s.Image
		}
	}
	require.NotEmpty(t, shipper, "admission injected no %s sidecar: %+v", sidecar, spec.Template.Sidecars)

	start := time.Now()
	before := waitContainers(t, c, name, map[string]running{"app": {"app:1", 0}, "helper": {"helper:1", 0}, sidecar: {shipper, 0}})
	t.Logf("Pod running in %s (uid %s) %v after create", before.Cluster, before.Uid, time.Since(start).Round(time.Millisecond))
	cluster := reg.Env.Cluster(before.Cluster)
	require.NotNil(t, cluster, before.Cluster)

	// Managed sidecars stay native sidecars: an init container that keeps running.
	live, err := livePod(ctx, cluster, name)
	require.NoError(t, err)
	require.NotEmpty(t, live.Spec.InitContainers)
	assert.Equal(t, sidecar, live.Spec.InitContainers[0].Name)
	if assert.NotNil(t, live.Spec.InitContainers[0].RestartPolicy) {
		assert.Equal(t, corev1.ContainerRestartPolicyAlways, *live.Spec.InitContainers[0].RestartPolicy)
	}
	for _, s := range before.Containers {
		if s.Name == sidecar {
			assert.Equal(t, computeapi.PodContainerStatusType(api.ContainerSidecar), s.Type)
		}
	}

	// The user changes a main container's image.
	start = time.Now()
	_, _, err = c.Apply(ctx, project, podDoc(name, "app:2", ""))
	require.NoError(t, err)
	after := waitContainers(t, c, name, map[string]running{"app": {"app:2", 1}, "helper": {"helper:1", 0}, sidecar: {shipper, 0}})
	assert.Equal(t, before.Uid, after.Uid, "the Pod was replaced, not patched")
	assert.Equal(t, before.Cluster, after.Cluster, "the Pod moved")
	t.Logf("app's image updated in place %v after the apply: same uid %s, app restarts 1, others 0", time.Since(start).Round(time.Millisecond), after.Uid)

	// The platform updates its sidecar: admission writes the new
	// generation with the new sidecar image (as it mutates every
	// workload it admits; it has no runtime reload of its configuration,
	// so the test writes that generation as admission would).
	newShipper := shipper + "-patched"
	kv, err := reg.Bus.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	key := api.Key(project, api.KindPod, name)
	_, err = bus.Update(ctx, kv, key, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, fmt.Errorf("workload %s not found", key)
		}
		w, err := api.Decode(cur)
		if err != nil {
			return nil, err
		}
		sc := w.Spec.PodTemplate().Sidecars
		for i := range sc {
			if sc[i].Name == sidecar {
				sc[i].Image = newShipper
			}
		}
		w.Metadata.Generation++
		w.Metadata.Updated = time.Now().UTC()
		w.Metadata.Event, w.Metadata.EventMessage = api.EventUpdated, "platform sidecar "+sidecar+" updated to "+newShipper
		return json.Marshal(w)
	})
	require.NoError(t, err)
	start = time.Now()
	final := waitContainers(t, c, name, map[string]running{"app": {"app:2", 1}, "helper": {"helper:1", 0}, sidecar: {newShipper, 1}})
	assert.Equal(t, before.Uid, final.Uid, "the Pod was replaced, not patched")
	assert.Equal(t, before.Cluster, final.Cluster, "the Pod moved")
	t.Logf("sidecar's image updated in place %v after the write: same uid, sidecar restarts 1, app 1 (from before), helper 0", time.Since(start).Round(time.Millisecond))
	live, err = livePod(ctx, cluster, name)
	require.NoError(t, err)
	assert.Equal(t, newShipper, live.Spec.InitContainers[0].Image)

	// Any other change (an environment variable) cannot be made to a live
	// Pod: the Pod is replaced, in the same cluster. (Admission mutates
	// the sidecar back to its configured image.)
	start = time.Now()
	withEnv := strings.Replace(string(podDoc(name, "app:2", "")), `"image":"app:2",`, `"image":"app:2","env":[{"name":"MODE","value":"fast"}],`, 1)
	_, _, err = c.Apply(ctx, project, []byte(withEnv))
	require.NoError(t, err)
	replaced := waitContainers(t, c, name, map[string]running{"app": {"app:2", 0}, "helper": {"helper:1", 0}, sidecar: {shipper, 0}})
	assert.NotEqual(t, before.Uid, replaced.Uid, "an env change was applied in place")
	assert.Equal(t, before.Cluster, replaced.Cluster, "the Pod moved")
	live, err = livePod(ctx, cluster, name)
	require.NoError(t, err)
	// The user's variables follow the platform's identity (api.IdentityEnv).
	env := live.Spec.Containers[0].Env
	assert.Equal(t, []corev1.EnvVar{{Name: "MODE", Value: "fast"}}, env[min(len(api.IdentityEnv), len(env)):])
	t.Logf("an env change replaced the Pod in %s %v after the apply (uid %s)", replaced.Cluster, time.Since(start).Round(time.Millisecond), replaced.Uid)
	require.NoError(t, c.Delete(ctx, project, api.KindPod, name))
}

// TestPodVolumePending: a Pod whose claim cannot bind (a class no
// cluster has) does not run, and its status says the claim is Pending.
func TestPodVolumePending(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	c := client(t)
	const name = "unbound"
	_, _, err := c.Apply(ctx, project, podDoc(name, "db:1", `"volume":{"size":"1Gi","storageClassName":"no-such-class","mountPath":"/data"},`))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		w, err := c.Get(ctx, project, api.KindPod, name)
		if !assert.NoError(ct, err) {
			return
		}
		pod := w.Status.Pod
		assert.NotEmpty(ct, pod.Cluster)
		assert.Equal(ct, api.PodClaimName(name, pod.Cluster), pod.Volume.Claim)
		assert.Equal(ct, "Pending", pod.Volume.Phase)
		assert.Zero(ct, w.Status.Running, "running without its volume")
	}, 30*time.Second, 250*time.Millisecond)
	require.NoError(t, c.Delete(ctx, project, api.KindPod, name))
}

// staticVolume is a PersistentVolume with no class, which a claim with
// storageClassName "" binds (no provisioner in the test clusters).
func staticVolume(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/atoll-podkind/" + name}},
		},
	}
}

// TestPodVolumeBindsAndFailsOver: a Pod with a volume gets a claim in its
// cluster, bound to a static volume and mounted. When its cluster's API
// server is frozen, the Pod runs in another cluster within 60 s, with a
// failed-over event naming both, and a fresh claim there (the data
// policy: nothing is copied). When the lost cluster comes back, its stale
// Pod and claim are removed: one Pod in the region.
func TestPodVolumeBindsAndFailsOver(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	c := client(t)
	for _, cl := range reg.Env.Clusters {
		_, err := cl.Client.CoreV1().PersistentVolumes().Create(ctx, staticVolume("pv-"+cl.Name), metav1.CreateOptions{})
		require.NoError(t, err, cl.Name)
	}
	const name = "store"
	_, _, err := c.Apply(ctx, project, podDoc(name, "db:1", `"volume":{"size":"1Gi","storageClassName":"","mountPath":"/data"},`))
	require.NoError(t, err)

	// bound waits until the Pod runs with its claim bound and returns its status.
	bound := func(notIn string) computeapi.PodStatus {
		var pod computeapi.PodStatus
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			w, err := c.Get(ctx, project, api.KindPod, name)
			if !assert.NoError(ct, err) {
				return
			}
			pod = w.Status.Pod
			assert.Equal(ct, api.PhaseRunning, w.Status.Phase)
			assert.NotEqual(ct, notIn, pod.Cluster, "still in the lost cluster")
			assert.Equal(ct, api.PodClaimName(name, pod.Cluster), pod.Volume.Claim)
			assert.Equal(ct, "Bound", pod.Volume.Phase)
			assert.Equal(ct, "1Gi", pod.Volume.Capacity)
		}, 60*time.Second, 250*time.Millisecond)
		return pod
	}
	start := time.Now()
	first := bound("")
	t.Logf("Pod running in %s with claim %s bound to %s, %v after create", first.Cluster, first.Volume.Claim, first.Volume.VolumeName, time.Since(start).Round(time.Millisecond))
	lost := reg.Env.Cluster(first.Cluster)
	live, err := livePod(ctx, lost, name)
	require.NoError(t, err)
	var claim string
	for _, v := range live.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	assert.Equal(t, first.Volume.Claim, claim, "the Pod mounts its claim")
	for _, ctr := range live.Spec.Containers {
		assert.Contains(t, ctr.VolumeMounts, corev1.VolumeMount{Name: api.PodVolumeName, MountPath: "/data"}, ctr.Name)
	}

	// Its cluster is lost: the API server freezes.
	paused, err := lost.PauseComponent(testenv.KubeAPIServer)
	require.NoError(t, err)
	resumed := false
	defer func() {
		if !resumed {
			_ = paused.Resume()
		}
	}()
	frozeAt := time.Now()
	var second string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := busclient.New(reg.Bus, nil).Placement(ctx, api.Key(project, api.KindPod, name))
		if !assert.NoError(ct, err) || !assert.NotNil(ct, p) || !assert.Len(ct, p.Shards, 1) {
			return
		}
		second = p.Shards[0].Cluster
		if !assert.NotEqual(ct, first.Cluster, second, "still placed in the frozen cluster") {
			return
		}
		pod, err := livePod(ctx, reg.Env.Cluster(second), name)
		if assert.NoError(ct, err, "the Pod in %s", second) {
			assert.Equal(ct, corev1.PodRunning, pod.Status.Phase)
		}
	}, 60*time.Second, 250*time.Millisecond, "the Pod does not run in another cluster within 60 s of %s's loss", first.Cluster)
	moved := time.Since(frozeAt)
	t.Logf("%s frozen: the Pod runs in %s %v later", first.Cluster, second, moved.Round(time.Millisecond))

	var failedOver *computeapi.Event
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		evs, err := c.ListEvents(ctx, project, api.KindPod, name, 0)
		if !assert.NoError(ct, err) {
			return
		}
		for _, e := range evs {
			if e.Event == api.EventFailedOver {
				failedOver = &e
			}
		}
		assert.NotNil(ct, failedOver, "no %s event", api.EventFailedOver)
	}, 10*time.Second, 250*time.Millisecond)
	assert.Contains(t, failedOver.Message, "from "+first.Cluster+" to "+second)
	t.Logf("event %s at %s: %s", failedOver.Event, failedOver.Time.Format(time.TimeOnly), failedOver.Message)

	// A fresh claim in the new cluster, bound there.
	now := bound(first.Cluster)
	assert.Equal(t, second, now.Cluster)
	assert.NotEqual(t, first.Uid, now.Uid)

	// The lost cluster comes back: its stale Pod and claim are removed.
	require.NoError(t, paused.Resume())
	resumed = true
	back := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := livePod(ctx, lost, name)
		assert.True(ct, apierrors.IsNotFound(err), "stale Pod still in %s: %v", first.Cluster, err)
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = lost.Client.CoreV1().PersistentVolumeClaims(api.Namespace(project)).Get(lctx, first.Volume.Claim, metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "stale claim still in %s: %v", first.Cluster, err)
	}, 90*time.Second, 500*time.Millisecond)
	t.Logf("%s back: its stale Pod and claim removed %v later", first.Cluster, time.Since(back).Round(time.Millisecond))
	// One Pod in the region, in the new cluster.
	for _, cl := range reg.Env.Clusters {
		_, err := livePod(ctx, cl, name)
		if cl.Name == second {
			assert.NoError(t, err, cl.Name)
		} else {
			assert.True(t, apierrors.IsNotFound(err), "a Pod in %s: %v", cl.Name, err)
		}
	}
	require.NoError(t, c.Delete(ctx, project, api.KindPod, name))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := reg.Env.Cluster(second).Client.CoreV1().PersistentVolumeClaims(api.Namespace(project)).Get(lctx, now.Volume.Claim, metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "claim %s left after delete: %v", now.Volume.Claim, err)
	}, 30*time.Second, 250*time.Millisecond)
}
