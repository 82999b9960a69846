package propagator

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"atoll.dev/libs/api"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The JobSet: each shard is an Indexed Job, told its index range. A Job's
// pod template is immutable: an apply that changes it is refused as
// Invalid, and the Job is replaced (replaceJob).

var jobs = batchv1.SchemeGroupVersion.WithResource("jobs")

// jobSetKind is the JobSet's part of the propagator.
type jobSetKind struct{ basic }

func (jobSetKind) resource() schema.GroupVersionResource { return jobs }

func (jobSetKind) render(d *desired, sh api.Shard) object { return renderJobSet(d.workload, sh) }

func (jobSetKind) create(ctx context.Context, _ *term, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
	return createJob(ctx, cs, ns, obj, o)
}

func (jobSetKind) invalid(ctx context.Context, t *target, o object, ns string, err error) error {
	return t.replaceJob(ctx, o, ns, err)
}

func (jobSetKind) owned(_, name string) []owned { return []owned{{jobs, name}} }

func createJob(ctx context.Context, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
	_, err := cs.BatchV1().Jobs(ns).Create(ctx, obj.(*batchv1.Job), o)
	return err
}

// replaceJob deletes a Job whose apply the API server refused as Invalid
// (applyErr): its template is immutable. It returns an error, so the key
// is retried and the Job created anew.
func (t *target) replaceJob(ctx context.Context, o object, ns string, applyErr error) error {
	t.log.Info("replacing immutable job", "namespace", ns, "name", o.name)
	if err := t.delete(ctx, o.gvr, ns, o.name); err != nil {
		return err
	}
	return fmt.Errorf("apply %s/%s: replaced immutable job, re-applying: %w", ns, o.name, applyErr)
}

// renderJobSet makes a shard's Indexed Job, told its index range; a
// paused JobSet's Jobs are suspended (their pods go, their progress stays).
func renderJobSet(w *api.Workload, sh api.Shard) object {
	s := w.Spec.(*api.JobSetSpec)
	tmpl := podTemplate(w, sh, corev1.RestartPolicyNever)
	rangeEnv := []corev1.EnvVar{
		{Name: "ATOLL_INDEX_START", Value: strconv.Itoa(int(sh.IndexStart))},
		{Name: "ATOLL_INDEX_END", Value: strconv.Itoa(int(sh.IndexEnd))},
		{Name: "ATOLL_COMPLETIONS", Value: strconv.Itoa(int(s.Completions))},
	}
	for i := range tmpl.Spec.Containers {
		tmpl.Spec.Containers[i].Env = append(tmpl.Spec.Containers[i].Env, rangeEnv...)
	}
	m := meta(w, sh)
	tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, indexClaims(w.Spec.PodTemplate().VolumeClaimTemplates, maps.Clone(m.Labels))...)
	m.Annotations[api.AnnoIndexRange] = fmt.Sprintf("%d-%d", sh.IndexStart, sh.IndexEnd-1)
	j := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: m,
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(sh.IndexEnd - sh.IndexStart),
			Parallelism:    ptr.To(sh.Replicas),
			BackoffLimit:   s.BackoffLimit,
			Suspend:        ptr.To(w.Control.Paused),
			Template:       tmpl,
		},
	}
	return object{gvr: jobs, name: j.Name, obj: j}
}

// indexClaims makes the pod volumes of a JobSet's claim templates: each a
// generic ephemeral volume, so the member cluster makes every index's pod
// its own claim ("<pod>-<name>", owned by the pod, labelled like the
// Job) and deletes it with the pod (libs/api/claims_jobset.go).
func indexClaims(cs []api.VolumeClaimTemplate, labels map[string]string) []corev1.Volume {
	var vols []corev1.Volume
	for _, c := range cs {
		size, err := resource.ParseQuantity(c.Storage)
		if err != nil {
			continue // admission validated it
		}
		modes := []corev1.PersistentVolumeAccessMode{api.AccessReadWriteOnce}
		if len(c.AccessModes) > 0 {
			modes = modes[:0]
			for _, m := range c.AccessModes {
				modes = append(modes, corev1.PersistentVolumeAccessMode(m))
			}
		}
		var class *string
		if c.StorageClass != "" {
			class = &c.StorageClass // else the cluster's default
		}
		vols = append(vols, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      modes,
					StorageClassName: class,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
				},
			}},
		}})
	}
	return vols
}
