package aggregator

import (
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

// observation is what one member cluster holds of one workload, computed
// from synced informer caches by the cluster's lease holder: the value of
// <cluster>.<workload key> in the observations bucket. It says only what
// the status folding needs, and is the same for the same objects, so an
// unchanged shard is not rewritten.
type observation struct {
	// Pods counts the workload's pods, terminating ones included.
	Pods int32 `json:"pods,omitempty"`
	// Running and Ready count the pods that are not terminating.
	Running int32 `json:"running,omitempty"`
	Ready   int32 `json:"ready,omitempty"`
	// Succeeded and Failed count pods by phase.
	Succeeded int32 `json:"succeeded,omitempty"`
	Failed    int32 `json:"failed,omitempty"`
	// Unscheduled are the distinct PodScheduled=False conditions of the pods.
	Unscheduled []api.Condition `json:"unscheduled,omitempty"`
	// Images are the images of the running pods' containers, sorted.
	Images []string `json:"images,omitempty"`
	// Deployment is the workload's Deployment, when there is one.
	Deployment *deploymentObservation `json:"deployment,omitempty"`
	// Job is the workload's Job, when there is one.
	Job *jobObservation `json:"job,omitempty"`
	// CronJob, Runs and DaemonSet are a CronJob's and a Daemon's
	// (cronjob_daemon.go).
	CronJob   *cronJobObservation   `json:"cronJob,omitempty"`
	Runs      []runObservation      `json:"runs,omitempty"`
	DaemonSet *daemonSetObservation `json:"daemonSet,omitempty"`
	// Gang is a TrainingJob's workers (training.go).
	Gang *gangObservation `json:"gang,omitempty"`
	// Pod is a Pod workload's Pod and claim (pod.go).
	Pod *podObservation `json:"pod,omitempty"`
	// Events are the latest Kubernetes events of its objects, oldest first.
	Events []api.Event `json:"events,omitempty"`
}

type deploymentObservation struct {
	// Generation is the workload generation the Deployment was rendered for.
	Generation int64 `json:"generation"`
	// Observed says its controller has seen its latest spec.
	Observed  bool  `json:"observed"`
	Replicas  int32 `json:"replicas"`
	Updated   int32 `json:"updated"`
	Available int32 `json:"available"`
	// Template is the hash of the pod template it runs (api.AnnoTemplate),
	// for zone-by-zone rollouts (rollouts.go).
	Template string `json:"template,omitempty"`
	// Failing counts pods of its current template that failed or
	// crash-loop (rollouts_observe.go).
	Failing int32 `json:"failing,omitempty"`
}

type jobObservation struct {
	// Generation is the workload generation the Job was rendered for.
	Generation int64 `json:"generation"`
	Active     int32 `json:"active,omitempty"`
	Succeeded  int32 `json:"succeeded,omitempty"`
	Failed     int32 `json:"failed,omitempty"`
	// FailedCondition is its JobFailed condition.
	FailedCondition bool `json:"failedCondition,omitempty"`
	// Suspended is spec.suspend with the JobSuspended condition true.
	Suspended bool `json:"suspended,omitempty"`
}

// maxUnscheduled bounds the conditions an observation carries.
const maxUnscheduled = 5

// observation returns what the term's caches hold of the workload key, nil
// when they hold no object of it.
func (t *clusterTerm) observation(key string) *observation {
	_, _, name, err := api.ParseKey(key)
	if err != nil {
		// A kind this build does not know: its objects are still counted.
		name = key[strings.LastIndexByte(key, '.')+1:]
	}
	var pods []*corev1.Pod
	if objs, err := t.pods.ByIndex(byWorkload, key); err == nil {
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
	}
	var dep *appsv1.Deployment
	if objs, err := t.deployments.ByIndex(byWorkload, key); err == nil {
		for _, o := range objs {
			if d, ok := o.(*appsv1.Deployment); ok && d.Name == name {
				dep = d
			}
		}
	}
	var job *batchv1.Job
	if objs, err := t.jobs.ByIndex(byWorkload, key); err == nil {
		for _, o := range objs {
			if j, ok := o.(*batchv1.Job); ok && j.Name == name {
				job = j
			}
		}
	}
	cj, ds, runs := t.kindObjects(key, name) // cronjob_daemon.go
	if len(pods) == 0 && dep == nil && job == nil && cj == nil && ds == nil && len(runs) == 0 {
		return nil
	}
	obs := observe(pods, dep, job)
	observeKinds(obs, cj, ds, runs)
	observeGang(obs, key, pods, job)   // training.go
	t.observePod(obs, key, name, pods) // pod.go
	obs.Events = t.latestEvents(key)
	return obs
}

// observe sums up a workload's objects in one cluster.
func observe(pods []*corev1.Pod, dep *appsv1.Deployment, job *batchv1.Job) *observation {
	obs := &observation{Pods: int32(len(pods))}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	images := map[string]bool{}
	for _, p := range pods {
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			obs.Succeeded++
		case corev1.PodFailed:
			obs.Failed++
		case corev1.PodRunning:
			for _, c := range p.Spec.Containers {
				images[c.Image] = true
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && len(obs.Unscheduled) < maxUnscheduled {
				cond := api.Condition{Type: "PodScheduled", Status: false, Reason: c.Reason, Message: c.Message}
				if !slices.Contains(obs.Unscheduled, cond) {
					obs.Unscheduled = append(obs.Unscheduled, cond)
				}
			}
		}
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			obs.Running++
		}
		if podReady(p) {
			obs.Ready++
		}
	}
	for img := range images {
		obs.Images = append(obs.Images, img)
	}
	slices.Sort(obs.Images)
	if d := dep; d != nil {
		obs.Deployment = &deploymentObservation{
			Generation: generationOf(d.Annotations), Observed: d.Status.ObservedGeneration >= d.Generation,
			Replicas: d.Status.Replicas, Updated: d.Status.UpdatedReplicas, Available: d.Status.AvailableReplicas,
			Template: d.Annotations[api.AnnoTemplate],
			Failing:  failingPods(pods, d),
		}
	}
	if j := job; j != nil {
		jo := &jobObservation{Generation: generationOf(j.Annotations), Active: j.Status.Active, Succeeded: j.Status.Succeeded, Failed: j.Status.Failed}
		for _, c := range j.Status.Conditions {
			switch {
			case c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue:
				jo.FailedCondition = true
			case c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionTrue:
				jo.Suspended = j.Spec.Suspend != nil && *j.Spec.Suspend
			}
		}
		obs.Job = jo
	}
	return obs
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func generationOf(annotations map[string]string) int64 {
	g, _ := strconv.ParseInt(annotations[api.AnnoGeneration], 10, 64)
	return g
}
