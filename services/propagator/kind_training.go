package propagator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// The TrainingJob: its one shard (the scheduler never splits a gang) is an
// Indexed Job of completions = parallelism = workers, and a headless
// Service of the same name. Kubernetes gives an Indexed Job's pod the
// hostname <job>-<index>; with the Service as the pods' subdomain, worker
// i resolves as <job>-<i>.<job> in the namespace, so rank 0 is the master
// (MASTER_ADDR). RANK comes from the completion-index annotation through
// the downward API; the PET_* names torchrun reads and TF_CONFIG refer to
// it as $(RANK), which Kubernetes expands from the earlier variable.
//
// The Job has backoffLimit 0: one failed worker fails the gang (the
// scheduler's failure policy decides what follows). The gang attempt is
// an annotation of the pod template, so a new attempt (a restart or a
// re-placement) is a new template and the Job is replaced whole (apply's
// immutable-template path). The Service is applied beside the Job and
// deleted with the shard, as an App's PodDisruptionBudget is.

var services = corev1.SchemeGroupVersion.WithResource("services")

// trainingKind is the TrainingJob's part of the propagator.
type trainingKind struct{ basic }

func (trainingKind) resource() schema.GroupVersionResource { return jobs }

func (trainingKind) render(d *desired, sh api.Shard) object { return renderTraining(d.workload, sh) }

func (trainingKind) create(ctx context.Context, _ *term, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
	return createJob(ctx, cs, ns, obj, o)
}

// invalid replaces the Job: a new gang attempt is a new template.
func (trainingKind) invalid(ctx context.Context, t *target, o object, ns string, err error) error {
	return t.replaceJob(ctx, o, ns, err)
}

// beside applies the gang's headless Service.
func (trainingKind) beside(ctx context.Context, t *target, w *api.Workload, sh api.Shard, ns string) error {
	svc := renderTrainingService(w, sh)
	return t.applyBeside(ctx, services, "service", ns, svc.Name, svc)
}

func (trainingKind) owned(_, name string) []owned { return []owned{{jobs, name}, {services, name}} }

// masterAddr is rank 0's DNS name inside the namespace.
func masterAddr(name string) string { return name + "-0." + name }

// trainingEnv is the environment every worker gets, RANK first (the
// others expand $(RANK)).
func trainingEnv(w *api.Workload, s *api.TrainingJobSpec) []corev1.EnvVar {
	name := w.Metadata.Name
	workers, port := strconv.Itoa(int(s.Workers)), strconv.Itoa(int(s.MasterPort))
	env := []corev1.EnvVar{
		{Name: "RANK", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"}}},
		{Name: "WORLD_SIZE", Value: workers},
		{Name: "MASTER_ADDR", Value: masterAddr(name)},
		{Name: "MASTER_PORT", Value: port},
		{Name: "PET_NNODES", Value: workers},
		{Name: "PET_NODE_RANK", Value: "$(RANK)"},
		{Name: "PET_MASTER_ADDR", Value: masterAddr(name)},
		{Name: "PET_MASTER_PORT", Value: port},
	}
	if s.TFConfig {
		env = append(env, corev1.EnvVar{Name: "TF_CONFIG", Value: tfConfig(name, s)})
	}
	return env
}

// tfConfig is TensorFlow's cluster spec: every worker's address, and this
// pod's task index as $(RANK).
func tfConfig(name string, s *api.TrainingJobSpec) string {
	addrs := make([]string, s.Workers)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("%s-%d.%s:%d", name, i, name, s.MasterPort)
	}
	cluster, _ := json.Marshal(map[string][]string{"worker": addrs})
	return fmt.Sprintf(`{"cluster":%s,"task":{"type":"worker","index":$(RANK)}}`, cluster)
}

// renderTraining makes the gang's Indexed Job.
func renderTraining(w *api.Workload, sh api.Shard) object {
	s := w.Spec.(*api.TrainingJobSpec)
	tmpl := podTemplate(w, sh, corev1.RestartPolicyNever)
	tmpl.Spec.Subdomain = w.Metadata.Name
	env := trainingEnv(w, s)
	for i := range tmpl.Spec.Containers {
		tmpl.Spec.Containers[i].Env = append(env[:len(env):len(env)], tmpl.Spec.Containers[i].Env...)
	}
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[api.AnnoGangAttempt] = strconv.Itoa(int(sh.Attempt))
	m := meta(w, sh)
	m.Annotations[api.AnnoGangAttempt] = strconv.Itoa(int(sh.Attempt))
	j := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: m,
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(s.Workers),
			Parallelism:    ptr.To(s.Workers),
			BackoffLimit:   ptr.To(int32(0)),
			Suspend:        ptr.To(w.Control.Paused),
			Template:       tmpl,
		},
	}
	return object{gvr: jobs, name: j.Name, obj: j}
}

// renderTrainingService makes the gang's headless Service: it publishes
// the workers' addresses before they are ready, so rank 0 is resolvable
// while the others start.
func renderTrainingService(w *api.Workload, sh api.Shard) *corev1.Service {
	s := w.Spec.(*api.TrainingJobSpec)
	m := meta(w, sh)
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 selector(w),
			PublishNotReadyAddresses: true,
			Ports:                    []corev1.ServicePort{{Name: "master", Port: s.MasterPort}},
		},
	}
}
