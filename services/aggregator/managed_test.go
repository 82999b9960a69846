package aggregator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
)

// TestTermHoldsOnlyThePlatformsObjects: in a member cluster shared with
// another team, the aggregator's caches of the kinds' objects hold the
// platform's Deployment, without its managed fields, and never the other
// team's (the server does not send it); its pod cache still holds every
// pod (the inventory counts them all).
func TestTermHoldsOnlyThePlatformsObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a member cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testenv.New(t, testenv.Zones("a")...).Clusters[0]
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer b.Close()

	deployment := func(name string, l map[string]string) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
		}
	}
	ours := deployment("web", map[string]string{api.LabelManaged: "true", api.LabelProject: "p", api.LabelKind: "App", api.LabelWorkload: "web"})
	theirs := deployment("theirs", map[string]string{"team": "other"})
	for _, d := range []*appsv1.Deployment{ours, theirs} {
		_, err := c.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	_, err = c.Client.CoreV1().Pods("default").Create(ctx, bare, metav1.CreateOptions{})
	require.NoError(t, err)

	s := startAggregator(t, b, clusters.Members{{Name: c.Name, Zone: c.Zone, Kubeconfig: c.Kubeconfig}})
	defer s.Stop()
	w := s.clusters[c.Name]
	var term *clusterTerm
	require.Eventually(t, func() bool {
		w.mu.Lock()
		term = w.term
		w.mu.Unlock()
		if term == nil {
			return false
		}
		_, held, _ := term.indexers[deployments].GetByKey("default/web")
		return held
	}, 2*time.Minute, 100*time.Millisecond, "the aggregator caches the platform's Deployment")

	o, _, _ := term.indexers[deployments].GetByKey("default/web")
	require.Empty(t, o.(*appsv1.Deployment).ManagedFields, "the cached Deployment keeps its managed fields")
	require.Equal(t, "busybox", o.(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Image, "the spec is kept")
	_, held, _ := term.indexers[deployments].GetByKey("default/theirs")
	require.False(t, held, "the aggregator caches another team's Deployment")
	require.Equal(t, []string{"default/web"}, term.indexers[deployments].ListKeys())
	_, held, _ = term.pods.GetByKey("default/bare")
	require.True(t, held, "the pod cache holds every pod of the cluster")
}
