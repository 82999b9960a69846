package propagator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

func trainingWorkload(tf bool) *api.Workload {
	s := &api.TrainingJobSpec{Workers: 3, TFConfig: tf}
	s.Template.Containers = []api.Container{{Name: "t", Image: "t:1", Env: []api.EnvVar{{Name: "EPOCHS", Value: "3"}}}}
	s.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindTrainingJob, Metadata: api.Metadata{Project: "ml", Name: "bert", Generation: 1}, Spec: s}
}

func TestRenderTrainingJob(t *testing.T) {
	w := trainingWorkload(true)
	o := renderTraining(w, api.Shard{Cluster: "zone-b", Zone: "b", Replicas: 3, Attempt: 2})
	j := o.obj.(*batchv1.Job)
	if o.gvr != jobs || j.Name != "bert" || j.Namespace != "atoll-ml" {
		t.Fatalf("object %v %s/%s", o.gvr, j.Namespace, j.Name)
	}
	if *j.Spec.CompletionMode != batchv1.IndexedCompletion || *j.Spec.Completions != 3 || *j.Spec.Parallelism != 3 || *j.Spec.BackoffLimit != 0 {
		t.Errorf("job spec: indexed, completions = parallelism = 3, backoffLimit 0; got %+v", j.Spec)
	}
	p := j.Spec.Template
	if p.Spec.Subdomain != "bert" || p.Annotations[api.AnnoGangAttempt] != "2" || p.Labels[api.LabelWorkload] != "bert" {
		t.Errorf("pod template: subdomain %q, attempt %q, labels %v", p.Spec.Subdomain, p.Annotations[api.AnnoGangAttempt], p.Labels)
	}
	env := p.Spec.Containers[0].Env
	var names []string
	values := map[string]string{}
	for _, e := range env {
		names = append(names, e.Name)
		values[e.Name] = e.Value
	}
	want := []string{"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "TF_CONFIG", "EPOCHS"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("env names, RANK first so the others may expand it (-want +got):\n%s", diff)
	}
	if env[0].ValueFrom == nil || env[0].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("RANK %+v, want the completion index from the downward API", env[0])
	}
	wantValues := map[string]string{"WORLD_SIZE": "3", "MASTER_ADDR": "bert-0.bert", "MASTER_PORT": "29500", "PET_NNODES": "3",
		"PET_NODE_RANK": "$(RANK)", "PET_MASTER_ADDR": "bert-0.bert", "PET_MASTER_PORT": "29500", "EPOCHS": "3"}
	for k, v := range wantValues {
		if values[k] != v {
			t.Errorf("%s = %q, want %q", k, values[k], v)
		}
	}
	var tf map[string]any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(values["TF_CONFIG"], "$(RANK)", "1")), &tf); err != nil {
		t.Errorf("TF_CONFIG %q with RANK=1 is not JSON: %v", values["TF_CONFIG"], err)
	} else if diff := cmp.Diff(map[string]any{
		"cluster": map[string]any{"worker": []any{"bert-0.bert:29500", "bert-1.bert:29500", "bert-2.bert:29500"}},
		"task":    map[string]any{"type": "worker", "index": float64(1)},
	}, tf); diff != "" {
		t.Errorf("TF_CONFIG (-want +got):\n%s", diff)
	}

	// Without tfConfig there is no TF_CONFIG; a new attempt is a new template.
	o1 := renderTraining(trainingWorkload(false), api.Shard{Cluster: "zone-b", Replicas: 3, Attempt: 1})
	for _, e := range o1.obj.(*batchv1.Job).Spec.Template.Spec.Containers[0].Env {
		if e.Name == "TF_CONFIG" {
			t.Error("TF_CONFIG without tfConfig")
		}
	}
	stamp(&o1)
	o2 := renderTraining(trainingWorkload(false), api.Shard{Cluster: "zone-b", Replicas: 3, Attempt: 2})
	stamp(&o2)
	if o1.hash == o2.hash {
		t.Error("a new gang attempt renders the same object: the Job would not be recreated")
	}
}

func TestRenderTrainingService(t *testing.T) {
	svc := renderTrainingService(trainingWorkload(false), api.Shard{Cluster: "zone-b", Replicas: 3})
	if svc.Name != "bert" || svc.Namespace != "atoll-ml" || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("service %s/%s %+v: want a headless Service named as the Job, publishing not-ready workers", svc.Namespace, svc.Name, svc.Spec)
	}
	if diff := cmp.Diff(map[string]string{api.LabelKind: "trainingjob", api.LabelWorkload: "bert"}, svc.Spec.Selector); diff != "" {
		t.Errorf("selector (-want +got):\n%s", diff)
	}
}
