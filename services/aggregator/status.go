package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

// shardView is what one cluster holds of a workload.
type shardView struct {
	cluster, zone string
	healthy       bool
	desired       int32
	pods          []*corev1.Pod
	deployment    *appsv1.Deployment
	job           *batchv1.Job
}

// folder computes a kind's phase and counts from its shards. Adding a kind
// means adding its folder here.
type folder func(w *api.Workload, shards []shardView, st *api.Status)

var folders = map[string]folder{
	api.KindApp:    foldApp,
	api.KindJobSet: foldJobSet,
	api.KindPod:    foldPod,
}

// fold computes and stores the status of one workload.
func (s *Service) fold(ctx context.Context, key string) error {
	_, _, _, err := api.ParseKey(key)
	if err != nil {
		return nil
	}
	var w *api.Workload
	if e, ok := s.workloads.Get(key); ok {
		if w, err = api.Decode(e.Value); err != nil {
			return nil
		}
	}
	var p *api.PlacementDecision
	if e, ok := s.placements.Get(key); ok {
		p = &api.PlacementDecision{}
		if json.Unmarshal(e.Value, p) != nil {
			p = nil
		}
	}
	if w == nil {
		return s.forgetStatus(ctx, key)
	}
	st := api.Status{Key: key, Generation: w.Metadata.Generation, Desired: w.Spec.Pods(), Phase: api.PhasePending}
	switch {
	case w.Control.Stopped:
		s.foldStopped(w, p, &st)
	case p == nil || p.Generation != w.Metadata.Generation && p.Unschedulable:
		st.Conditions = append(st.Conditions, api.Condition{Type: "Scheduled", Status: false, Reason: "Waiting", Message: "waiting for the scheduler"})
	case p.Unschedulable:
		st.Phase = api.PhaseUnscheduled
		st.Reasons = p.Reasons
		st.Conditions = append(st.Conditions, api.Condition{Type: "Scheduled", Status: false, Reason: "Unschedulable", Message: summarize(p.Reasons)})
	default:
		shards := s.shards(w, p)
		st.Zones, st.Clusters = map[string]api.ZoneStatus{}, map[string]api.ZoneStatus{}
		if w.Control.Paused && w.Kind == api.KindApp {
			// A paused App's Deployments are held at zero.
			st.Desired = 0
			for i := range shards {
				shards[i].desired = 0
			}
		}
		folders[w.Kind](w, shards, &st)
		if w.Control.Paused {
			foldPaused(w, shards, &st)
		}
		images := map[string]bool{}
		for _, sh := range shards {
			for _, pod := range sh.pods {
				if pod.Status.Phase == corev1.PodRunning {
					for _, c := range pod.Spec.Containers {
						images[c.Image] = true
					}
				}
			}
		}
		for img := range images {
			st.Images = append(st.Images, img)
		}
		slices.Sort(st.Images)
	}
	st.Events = s.latestEvents(key)
	return s.writeStatus(ctx, w, st)
}

// shards reads each placed shard from its cluster's informer caches.
func (s *Service) shards(w *api.Workload, p *api.PlacementDecision) []shardView {
	ns := api.Namespace(w.Metadata.Project)
	var out []shardView
	for _, sh := range p.Shards {
		v := shardView{cluster: sh.Cluster, zone: sh.Zone, desired: sh.Replicas}
		if w.Kind == api.KindJobSet {
			v.desired = sh.IndexEnd - sh.IndexStart
		}
		if cw, ok := s.watches[sh.Cluster]; ok {
			v.healthy = cw.isHealthy()
			v.pods = cw.workloadPods(w.Key())
			v.deployment, _ = cw.deployments.Deployments(ns).Get(w.Metadata.Name)
			v.job, _ = cw.jobs.Jobs(ns).Get(w.Metadata.Name)
		}
		out = append(out, v)
	}
	return out
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

// count adds a shard's pods to the status, per zone and cluster.
func count(sh shardView) (ready, running int32) {
	for _, p := range sh.pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
		if podReady(p) {
			ready++
		}
	}
	return ready, running
}

func addTo(st *api.Status, sh shardView, zs api.ZoneStatus) {
	z := st.Zones[sh.zone]
	z.Desired += zs.Desired
	z.Ready += zs.Ready
	z.Running += zs.Running
	z.Succeeded += zs.Succeeded
	z.Failed += zs.Failed
	st.Zones[sh.zone] = z
	st.Clusters[sh.cluster] = zs
	st.Ready += zs.Ready
	st.Running += zs.Running
	st.Succeeded += zs.Succeeded
	st.Failed += zs.Failed
}

func foldApp(w *api.Workload, shards []shardView, st *api.Status) {
	gen := w.Metadata.Generation
	rolled, sick := true, false
	for _, sh := range shards {
		ready, running := count(sh)
		addTo(st, sh, api.ZoneStatus{Desired: sh.desired, Ready: ready, Running: running})
		d := sh.deployment
		if d == nil || generationOf(d.Annotations) != gen || d.Status.ObservedGeneration < d.Generation ||
			d.Status.UpdatedReplicas != sh.desired || d.Status.Replicas != sh.desired || d.Status.AvailableReplicas != sh.desired ||
			ready != sh.desired {
			rolled = false
		}
		sick = sick || !sh.healthy
	}
	switch {
	case sick:
		st.Phase = api.PhaseDegraded
		st.Conditions = append(st.Conditions, api.Condition{Type: "ClustersHealthy", Status: false, Reason: "ClusterUnhealthy", Message: "a shard's cluster is unhealthy; it is being moved"})
	case rolled && st.Ready == st.Desired:
		st.Phase = api.PhaseRunning
	case st.Ready == 0 && st.Running == 0:
		st.Phase = api.PhaseScheduled
	default:
		st.Phase = api.PhaseProgressing
	}
	st.Conditions = append(st.Conditions, api.Condition{Type: "Available", Status: st.Ready == st.Desired, Reason: fmt.Sprintf("%d/%d ready", st.Ready, st.Desired)})
}

func foldJobSet(w *api.Workload, shards []shardView, st *api.Status) {
	js := w.Spec.(*api.JobSetSpec)
	failed := false
	for _, sh := range shards {
		ready, running := count(sh)
		zs := api.ZoneStatus{Desired: sh.desired, Ready: ready, Running: running}
		if j := sh.job; j != nil {
			zs.Succeeded, zs.Failed = j.Status.Succeeded, j.Status.Failed
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
					failed = true
				}
			}
		}
		addTo(st, sh, zs)
	}
	st.Desired = js.Completions
	switch {
	case failed:
		st.Phase = api.PhaseFailed
	case st.Succeeded >= js.Completions:
		st.Phase = api.PhaseSucceeded
	case st.Running > 0 || st.Succeeded > 0:
		st.Phase = api.PhaseRunning
	default:
		st.Phase = api.PhaseScheduled
	}
}

func foldPod(w *api.Workload, shards []shardView, st *api.Status) {
	st.Phase = api.PhaseScheduled
	for _, sh := range shards {
		ready, running := count(sh)
		zs := api.ZoneStatus{Desired: 1, Ready: ready, Running: running}
		for _, p := range sh.pods {
			switch p.Status.Phase {
			case corev1.PodSucceeded:
				zs.Succeeded++
			case corev1.PodFailed:
				zs.Failed++
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					st.Conditions = append(st.Conditions, api.Condition{Type: "PodScheduled", Status: false, Reason: c.Reason, Message: c.Message})
				}
			}
		}
		addTo(st, sh, zs)
		switch {
		case zs.Succeeded > 0:
			st.Phase = api.PhaseSucceeded
		case zs.Failed > 0:
			st.Phase = api.PhaseFailed
		case ready > 0:
			st.Phase = api.PhaseRunning
		case !sh.healthy:
			st.Phase = api.PhaseDegraded
		}
	}
}

// foldPaused turns the phase of a paused workload into Paused once every
// shard has let its pods go: an App's Deployments at zero with no pod left
// (foldApp calls that Running, with nothing desired), a JobSet's Jobs
// suspended with none active. Until then it is Progressing; a finished
// JobSet keeps Succeeded or Failed, and a sick cluster keeps Degraded.
func foldPaused(w *api.Workload, shards []shardView, st *api.Status) {
	done := false
	switch w.Kind {
	case api.KindApp:
		done = st.Phase == api.PhaseRunning
	case api.KindJobSet:
		if st.Phase == api.PhaseSucceeded || st.Phase == api.PhaseFailed {
			return
		}
		done = true
		for _, sh := range shards {
			done = done && jobSuspended(sh.job, w.Metadata.Generation)
		}
	}
	reason := "Pausing"
	switch {
	case st.Phase == api.PhaseDegraded:
	case done:
		st.Phase, reason = api.PhasePaused, "Paused"
	default:
		st.Phase = api.PhaseProgressing
	}
	st.Conditions = append(st.Conditions, api.Condition{Type: "Paused", Status: done, Reason: reason})
}

func jobSuspended(j *batchv1.Job, gen int64) bool {
	if j == nil || generationOf(j.Annotations) != gen || j.Spec.Suspend == nil || !*j.Spec.Suspend || j.Status.Active > 0 {
		return false
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobSuspended {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// foldStopped reports a stopped workload: Stopped once its placement of
// this generation has no shards and no object of it is left in any
// healthy cluster (an unreachable one is cleaned when it comes back);
// Progressing while they are removed. Nothing is desired.
func (s *Service) foldStopped(w *api.Workload, p *api.PlacementDecision, st *api.Status) {
	st.Desired = 0
	left := 0
	ns := api.Namespace(w.Metadata.Project)
	sel := labels.SelectorFromSet(labels.Set{api.LabelKind: api.KindLabel(w.Kind), api.LabelWorkload: w.Metadata.Name})
	for _, cw := range s.watches {
		if !cw.isHealthy() {
			continue
		}
		pods := cw.workloadPods(w.Key())
		left += len(pods)
		for _, pod := range pods {
			if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning {
				st.Running++
			}
		}
		if d, err := cw.deployments.Deployments(ns).Get(w.Metadata.Name); err == nil && sel.Matches(labels.Set(d.Labels)) {
			left++
		}
		if j, err := cw.jobs.Jobs(ns).Get(w.Metadata.Name); err == nil && sel.Matches(labels.Set(j.Labels)) {
			left++
		}
	}
	if p != nil && p.Generation == w.Metadata.Generation && len(p.Shards) == 0 && left == 0 {
		st.Phase = api.PhaseStopped
		st.Conditions = append(st.Conditions, api.Condition{Type: "Stopped", Status: true, Reason: "Stopped", Message: "no object is left in any cluster; start it to run again"})
		return
	}
	st.Phase = api.PhaseProgressing
	st.Conditions = append(st.Conditions, api.Condition{Type: "Stopped", Status: false, Reason: "Stopping", Message: fmt.Sprintf("%d objects left in the member clusters", left)})
}

func summarize(rs []api.Rejection) string {
	if len(rs) == 0 {
		return "no member cluster can take it"
	}
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%s: %s: %s", r.Cluster, r.Filter, r.Reason)
	}
	return out
}

// phaseEvents maps a phase reached to the event announcing it.
var phaseEvents = map[string]string{
	api.PhaseRunning:     api.EventRunning,
	api.PhaseDegraded:    api.EventDegraded,
	api.PhaseSucceeded:   api.EventSucceeded,
	api.PhaseFailed:      api.EventFailed,
	api.PhaseProgressing: api.EventProgressing,
}

// writeStatus stores st if it changed, and announces a new phase.
func (s *Service) writeStatus(ctx context.Context, w *api.Workload, st api.Status) error {
	key := st.Key
	body, _ := json.Marshal(st)
	s.mu.Lock()
	prev, known := s.written[key]
	s.mu.Unlock()
	if !known {
		if e, err := s.status.Get(ctx, key); err == nil {
			var old api.Status
			if json.Unmarshal(e.Value(), &old) == nil {
				old.Updated = time.Time{}
				ob, _ := json.Marshal(old)
				prev = writtenStatus{rev: e.Revision(), body: ob, phase: old.Phase}
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("read status %s: %w", key, err)
		}
	}
	if string(prev.body) == string(body) {
		return nil
	}
	st.Updated = time.Now().UTC()
	full, _ := json.Marshal(st)
	rev, err := bus.CompareAndSet(ctx, s.status, key, full, prev.rev)
	if errors.Is(err, bus.ErrConflict) {
		s.mu.Lock()
		delete(s.written, key) // re-read next time
		s.mu.Unlock()
		return err
	}
	if err != nil {
		return fmt.Errorf("write status %s: %w", key, err)
	}
	s.mu.Lock()
	s.written[key] = writtenStatus{rev: rev, body: body, phase: st.Phase}
	s.mu.Unlock()
	if ev, ok := phaseEvents[st.Phase]; ok && st.Phase != prev.phase {
		events.PublishAsync(ctx, s.bus, w, ev, fmt.Sprintf("%d/%d ready", st.Ready, st.Desired), rev, s.log)
	}
	return nil
}

// forgetStatus removes the status of a deleted workload once no cluster
// holds any of its objects.
func (s *Service) forgetStatus(ctx context.Context, key string) error {
	for _, cw := range s.watches {
		if len(cw.workloadPods(key)) > 0 && cw.isHealthy() {
			return nil // pods still terminating; their deletion requeues the key
		}
	}
	s.mu.Lock()
	delete(s.written, key)
	delete(s.events, key)
	s.mu.Unlock()
	if err := s.status.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete status %s: %w", key, err)
	}
	return nil
}
