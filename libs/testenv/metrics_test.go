package testenv_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/testenv"
)

// TestMetricsServerReportsAnnotatedUsage starts a cluster with
// metrics-server, runs a pod and changes its simulated CPU through its
// annotation: the metrics API reports the new usage.
func TestMetricsServerReportsAnnotatedUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("member clusters are not started under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{MetricsServer: true}, testenv.Zones("m")...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop(context.Background()) })
	c := env.Clusters[0]
	_, err = c.AddNodes(ctx, testenv.NodePool{Name: "general", Count: 1, CPU: "16", Memory: "64Gi"})
	require.NoError(t, err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: "default", Annotations: map[string]string{testenv.AnnoUsageCPU: "250m"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	_, err = c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	usage := func(ct *assert.CollectT) float64 {
		raw, err := c.Client.Discovery().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy").DoRaw(ctx)
		if !assert.NoError(ct, err) {
			return -1
		}
		var pm struct {
			Containers []struct {
				Usage map[string]string `json:"usage"`
			} `json:"containers"`
		}
		require.NoError(ct, json.Unmarshal(raw, &pm))
		if !assert.Len(ct, pm.Containers, 1) {
			return -1
		}
		q := resource.MustParse(pm.Containers[0].Usage["cpu"])
		return q.AsApproximateFloat64() * 1000
	}
	start := time.Now()
	// metrics-server's API is served about a minute after the cluster
	// starts on a quiet machine (58 s); in a CI run under load it once
	// took more than 3 minutes.
	require.EventuallyWithT(t, func(ct *assert.CollectT) { assert.InDelta(ct, 250, usage(ct), 25) }, 5*time.Minute, time.Second)
	t.Logf("first pod metrics after %v", time.Since(start).Round(time.Second))
	require.NoError(t, c.SetPodUsage(ctx, "default", "busy", "900m", ""))
	start = time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) { assert.InDelta(ct, 900, usage(ct), 50) }, 2*time.Minute, time.Second)
	t.Logf("changed usage seen after %v", time.Since(start).Round(time.Second))
}
