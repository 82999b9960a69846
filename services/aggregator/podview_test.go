package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/clusters"
)

// views returns the pods' views, as the informer's transform makes them.
func views(pods []*corev1.Pod) []*podView {
	out := make([]*podView, len(pods))
	for i, p := range pods {
		out[i] = viewOf(p)
	}
	return out
}

// fullPod is a platform pod as a member cluster's API server returns it:
// managedFields, annotations, a full spec and status.
func fullPod(i int) *corev1.Pod {
	env := make([]corev1.EnvVar, 12)
	for j := range env {
		env[j] = corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", j), Value: fmt.Sprintf("value-of-setting-%d-for-the-service", j)}
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 5, FailureThreshold: 3}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "conf", MountPath: "/etc/conf", ReadOnly: true}, {Name: "logs", MountPath: "/var/log/app"}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	fields := `{"f:metadata":{"f:labels":{".":{},"f:atoll.dev/kind":{},"f:atoll.dev/managed":{},"f:atoll.dev/project":{},"f:atoll.dev/workload":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0c1b\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{},"f:readinessProbe":{},"f:resources":{},"f:volumeMounts":{}}},"f:volumes":{}}}`
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%d-7d9c5b8f4-x%05d", i%500, i), Namespace: fmt.Sprintf("atoll-p%d", i%20),
			UID: "0c1b2d3e-4f50-6172-8394-a5b6c7d8e9f0", ResourceVersion: fmt.Sprint(100000 + i),
			CreationTimestamp: metav1.Now(),
			Labels: map[string]string{
				api.LabelManaged: "true", api.LabelProject: fmt.Sprintf("p%d", i%20), api.LabelKind: "app",
				api.LabelWorkload: fmt.Sprintf("web-%d", i%500), api.LabelShard: "zone-a", "pod-template-hash": "7d9c5b8f4",
			},
			Annotations: map[string]string{
				"atoll.dev/template":                "sha256:9f2c4e1d8b7a6c5e4f3d2c1b0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e",
				"kubectl.kubernetes.io/restartedAt": "2026-11-27T08:00:00Z",
				"note":                              "a team's annotation that says something about the pod at some length",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c5b8f4", UID: "0c1b", Controller: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields), Subresource: "status"},
			},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "log-shipper", Image: "atoll/log-shipper:1.4.2", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Resources: res, VolumeMounts: mounts[2:], Env: env[:4]}},
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/team/web:2026.11.27", Env: env, Resources: res,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}, ReadinessProbe: probe, LivenessProbe: probe, VolumeMounts: mounts,
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true)}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-conf"}}}},
				{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			NodeName: fmt.Sprintf("node-%04d", i%3000), ServiceAccountName: "default", AutomountServiceAccountToken: ptr.To(false),
			Tolerations: []corev1.Toleration{{Key: "atoll.dev/tier", Operator: corev1.TolerationOpEqual, Value: "OnDemand", Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
			NodeSelector: map[string]string{"atoll.dev/pool": "general"},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), HostIP: "192.168.0.10", StartTime: ptr.To(metav1.Now()),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "log-shipper", Image: "atoll/log-shipper:1.4.2", ImageID: "docker-pullable://atoll/log-shipper@sha256:0123456789abcdef", ContainerID: "containerd://0123456789abcdef0123456789abcdef", Ready: true, Started: ptr.To(true), State: running}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "app", Image: "registry.example/team/web:2026.11.27", ImageID: "docker-pullable://registry.example/team/web@sha256:fedcba9876543210", ContainerID: "containerd://fedcba9876543210fedcba9876543210", Ready: true, Started: ptr.To(true), State: running}},
		},
	}
}

// TestViewOfKeepsWhatIsRead: a view holds what the aggregator reads of a
// pod, derived as it was from the pod itself.
func TestViewOfKeepsWhatIsRead(t *testing.T) {
	p := fullPod(7)
	p.Labels["statefulset.kubernetes.io/pod-name"] = p.Name
	p.Annotations["batch.kubernetes.io/job-completion-index"] = "3"
	p.Annotations[api.AnnoGangAttempt] = "2"
	v := viewOf(p)
	assert.Equal(t, "p7.app.web-7", v.Key.String())
	assert.Equal(t, p.Name, v.Name)
	assert.Equal(t, "atoll-p7", v.Namespace.String())
	assert.Equal(t, "node-0007", v.Node.String())
	assert.Equal(t, corev1.PodRunning, v.phase())
	assert.True(t, v.Ready)
	assert.True(t, podReady(v))
	assert.Equal(t, int32(3), v.Index)
	assert.Equal(t, int32(2), v.Attempt)
	assert.Equal(t, podRequests(p), v.Requests)
	assert.Equal(t, api.Quantities{MilliCPU: 500, MemoryBytes: 512 << 20}, v.Requests, "the native sidecar's request counts")
	_, kept := v.label("statefulset.kubernetes.io/pod-name")
	assert.False(t, kept, "a label unique to one pod is not kept")
	got, _ := v.label("pod-template-hash")
	assert.Equal(t, "7d9c5b8f4", got)
	require.Len(t, v.Containers, 2)
	assert.Equal(t, sidecarContainer, v.Containers[0].Type)
	assert.Equal(t, []containerView{v.Containers[1]}, v.mains())
	assert.Equal(t, "app", v.mains()[0].Name.String())
	assert.Equal(t, int64(250), v.mains()[0].MilliCPU)
	assert.Equal(t, "Running", v.mains()[0].State.String())

	// Two pods of one template share their label set.
	assert.Equal(t, viewOf(fullPod(7)).Labels, viewOf(fullPod(507)).Labels)

	p.DeletionTimestamp = ptr.To(metav1.Now())
	assert.False(t, podReady(viewOf(p)), "a terminating pod is not ready")
	p = fullPod(1)
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes"}}
	p.Status.Phase = corev1.PodPending
	v = viewOf(p)
	assert.False(t, v.Ready)
	assert.Equal(t, &podCondition{Reason: "Unschedulable", Message: "0/3 nodes"}, v.Unscheduled)

	other := fullPod(2)
	other.Labels = map[string]string{"app": "someone-elses"}
	v = viewOf(other)
	assert.Equal(t, istr{}, v.Key, "a pod that is not the platform's has no key")
	_, ok := workloadKeyOf(v)
	assert.False(t, ok)
}

// PodCacheBytesPerPodMax is the target for what the aggregator holds per
// cached pod (issue: cluster size).
const PodCacheBytesPerPodMax = 1024

// TestPodCacheBytesPerPod fills the pod informer a cluster term builds
// with 10,000 pods (served by an HTTP server speaking the API's list and
// watch) and measures the heap it then holds per pod: it stays under the
// target, because the informer keeps each pod's view (podview.go) and not
// the API object, which is several times larger (measured the same way
// here, as the baseline).
func TestPodCacheBytesPerPod(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a cache with 10,000 pods")
	}
	raw, viewed := podCacheBytes(t, 10000)
	t.Logf("bytes held per pod: %.0f as API objects, %.0f as views (%.1fx smaller)", raw, viewed, raw/viewed)
	assert.LessOrEqual(t, viewed, float64(PodCacheBytesPerPodMax), "bytes held per cached pod")
}

// BenchmarkPodCacheGrowth prints the bytes the pod cache holds per pod at
// 3,000, 10,000 and 30,000 pods, and the ratio to the smallest size: a
// cache whose cost per pod grows with the cluster shows a ratio above 1.
func BenchmarkPodCacheGrowth(b *testing.B) {
	var first float64
	for _, n := range []int{3000, 10000, 30000} {
		raw, viewed := podCacheBytes(b, n)
		if first == 0 {
			first = viewed
		}
		b.ReportMetric(viewed, fmt.Sprintf("B/pod@%d", n))
		fmt.Printf("pod cache at %6d pods: %5.0f B/pod held (API objects: %6.0f B/pod), %.2fx the bytes per pod at 3,000\n", n, viewed, raw, viewed/first)
	}
}

// podCacheBytes serves n pods, fills a cluster term's pod informer with
// them and returns the heap held per pod by the decoded API objects (the
// baseline) and by the informer's cache.
func podCacheBytes(t testing.TB, n int) (raw, viewed float64) {
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "200000"}}
	for i := range n {
		list.Items = append(list.Items, *fullPod(i))
	}
	body, err := json.Marshal(list)
	require.NoError(t, err)
	list = nil
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case r.URL.Path != "/api/v1/pods":
			http.NotFound(w, r)
		case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
			// As a server without streaming lists: the reflector lists.
			http.Error(w, "sendInitialEvents is not supported", http.StatusBadRequest)
		case q.Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}
	}))
	defer srv.Close()

	held := func(fill func(context.Context) any) float64 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		before := heapAlloc()
		keep := fill(ctx)
		after := heapAlloc()
		runtime.KeepAlive(keep)
		return float64(after-before) / float64(n)
	}
	// The baseline: the pods as the API returns them, decoded.
	raw = held(func(context.Context) any {
		var l corev1.PodList
		require.NoError(t, json.Unmarshal(body, &l))
		return &l
	})
	viewed = held(func(ctx context.Context) any {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
		require.NoError(t, err)
		c := &cluster{s: &Service{kinds: newKinds(), holder: "test"}, member: clusters.Member{Name: "zone-a"},
			cs: cs, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		term, err := c.newTerm()
		require.NoError(t, err)
		inf := term.factory.Core().V1().Pods().Informer()
		go inf.Run(ctx.Done())
		sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
		defer scancel()
		require.True(t, cache.WaitForCacheSync(sctx.Done(), inf.HasSynced))
		require.Len(t, term.pods.List(), n)
		objs, err := term.pods.ByIndex(byWorkload, "p7.app.web-7")
		require.NoError(t, err)
		require.Len(t, podsOf(objs), n/500, "the pods of one workload, by index")
		return term
	})
	return raw, viewed
}

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// viewsOf returns the pods among objs as the informer holds them.
func viewsOf(objs []any) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i], _ = slimPod(o)
	}
	return out
}
