package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/testenv"
)

// TestThreeZonalClusters starts clusters in zones a, b and c with 50 KWOK
// nodes each, applies a Deployment in each through client-go and waits
// until all of its Pods are Running on nodes of the right zone.
func TestThreeZonalClusters(t *testing.T) {
	start := time.Now()
	env := testenv.New(t, testenv.Zones("a", "b", "c")...)
	t.Logf("3 clusters ready in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const nodes, replicas = 50, 20
	start = time.Now()
	for _, c := range env.Clusters {
		if _, err := c.AddNodes(ctx, testenv.NodePool{Name: "general", Count: nodes, CPU: "16", Memory: "64Gi", InstanceType: "m6i.4xlarge", Tier: "ondemand"}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("3 x %d nodes Ready in %v", nodes, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	for _, c := range env.Clusters {
		if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, deployment("web", replicas), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
	for _, c := range env.Clusters {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if !assert.NoError(ct, err, "list pods") {
				return
			}
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			assert.Equal(ct, replicas, running, "%s: pods running", c.Name)
		}, 2*time.Minute, 200*time.Millisecond)
		nodeList, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelZone + "=" + c.Zone})
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, n := range nodeList.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready != nodes {
			t.Errorf("%s: %d of %d nodes Ready in zone %s", c.Name, ready, nodes, c.Zone)
		}
	}
	t.Logf("3 x %d pods Running %v after the Deployments were created", replicas, time.Since(start).Round(time.Millisecond))
	for _, c := range env.Clusters {
		t.Logf("%s: %d processes, %d MiB resident", c.Name, len(c.Processes()), rssMiB(c.Processes()))
	}
}

// TestTeardownLeavesNoProcess checks that Stop removes every component
// process and the cluster's directory.
func TestTeardownLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("member clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{}, testenv.ClusterSpec{Zone: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c := env.Clusters[0]
	procs := c.Processes()
	// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok-controller.
	if len(procs) < 5 {
		_ = env.Stop(ctx)
		t.Fatalf("cluster runs %d processes %v, want at least 5", len(procs), procs)
	}
	if err := env.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if left := c.Processes(); len(left) > 0 {
		t.Errorf("processes left after teardown: %v", left)
	}
	if left := testenv.Processes(c.KwokName()); len(left) > 0 {
		t.Errorf("processes naming %s left after teardown: %v", c.KwokName(), left)
	}
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
			},
		},
	}
}
