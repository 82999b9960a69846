package propagator

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// The Daemon: each of its shards is a DaemonSet.

var daemonsets = appsv1.SchemeGroupVersion.WithResource("daemonsets")

// daemonKind is the Daemon's part of the propagator.
type daemonKind struct{ basic }

func (daemonKind) resource() schema.GroupVersionResource { return daemonsets }

func (daemonKind) render(d *desired, sh api.Shard) object { return renderDaemon(d.workload, sh) }

func (daemonKind) create(ctx context.Context, _ *term, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
	_, err := cs.AppsV1().DaemonSets(ns).Create(ctx, obj.(*appsv1.DaemonSet), o)
	return err
}

func (daemonKind) owned(_, name string) []owned { return []owned{{daemonsets, name}} }

// renderDaemon makes the DaemonSet of the shard: one pod per node its
// nodeSelector and tolerations select.
func renderDaemon(w *api.Workload, sh api.Shard) object {
	s := w.Spec.(*api.DaemonSpec)
	d := &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: meta(w, sh),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector(w)},
			Template: podTemplate(w, sh, corev1.RestartPolicyAlways),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(s.MaxUnavailable))},
			},
		},
	}
	return object{gvr: daemonsets, name: d.Name, obj: d}
}
