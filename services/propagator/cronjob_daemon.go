package propagator

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// The CronJob and the Daemon: a CronJob's one shard is a Kubernetes
// CronJob (the scheduler places it in one cluster); each of a Daemon's
// shards is a DaemonSet. The Jobs a CronJob makes carry the workload's
// labels, so the aggregator folds them into the CronJob's status, and the
// CronJob's time fence in their annotations: api.AnnoFireFrom from the
// shard (part of the hash: a move changes it) and api.AnnoFireUntil, the
// lease, outside the hash (cronjob_fence.go explains the fence).

var (
	cronjobs   = batchv1.SchemeGroupVersion.WithResource("cronjobs")
	daemonsets = appsv1.SchemeGroupVersion.WithResource("daemonsets")
)

func init() {
	renderers[api.KindCronJob] = renderer{render: renderCronJob, resource: cronjobs,
		create: func(ctx context.Context, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
			// The fence first: no Job of the CronJob escapes it.
			if err := ensureFence(ctx, cs, false); err != nil {
				return err
			}
			_, err := cs.BatchV1().CronJobs(ns).Create(ctx, obj.(*batchv1.CronJob), o)
			return err
		},
		unhashed: leaseCronJob}
	renderers[api.KindDaemon] = renderer{render: renderDaemon, resource: daemonsets,
		create: func(ctx context.Context, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
			_, err := cs.AppsV1().DaemonSets(ns).Create(ctx, obj.(*appsv1.DaemonSet), o)
			return err
		}}
}

// renderCronJob makes the CronJob of the shard. A paused CronJob is
// suspended (as its own suspend field does): no new runs, running ones
// finish.
func renderCronJob(w *api.Workload, sh api.Shard) object {
	s := w.Spec.(*api.CronJobSpec)
	var tz *string
	if s.TimeZone != "" {
		tz = ptr.To(s.TimeZone)
	}
	m := meta(w, sh)
	jobMeta := metav1.ObjectMeta{Labels: labels(w, sh), Annotations: map[string]string{api.AnnoGeneration: m.Annotations[api.AnnoGeneration]}}
	if !sh.FireFrom.IsZero() {
		jobMeta.Annotations[api.AnnoFireFrom] = sh.FireFrom.UTC().Format(time.RFC3339)
	}
	c := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: m,
		Spec: batchv1.CronJobSpec{
			Schedule:                   s.Schedule,
			TimeZone:                   tz,
			StartingDeadlineSeconds:    s.StartingDeadlineSeconds,
			ConcurrencyPolicy:          batchv1.ConcurrencyPolicy(s.ConcurrencyPolicy),
			Suspend:                    ptr.To(s.Suspend || w.Control.Paused),
			SuccessfulJobsHistoryLimit: s.SuccessfulJobsHistoryLimit,
			FailedJobsHistoryLimit:     s.FailedJobsHistoryLimit,
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: jobMeta,
				Spec: batchv1.JobSpec{
					Parallelism:  ptr.To(s.Parallelism),
					Completions:  ptr.To(s.Completions),
					BackoffLimit: s.BackoffLimit,
					Template:     podTemplate(w, sh, corev1.RestartPolicyNever),
				},
			},
		},
	}
	return object{gvr: cronjobs, name: c.Name, obj: c}
}

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
