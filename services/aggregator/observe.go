package aggregator

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

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
	// Sidecars counts the ready pods by each native sidecar's name and
	// the image it reports running (api.SidecarImageKey), for the
	// sidecar rollout's health gate (api.ZoneStatus.Sidecars).
	Sidecars map[string]int32 `json:"sidecars,omitempty"`
	// ConfigVersions are the versions of the Configs and Secrets the
	// running pods run, by "Config/name", sorted (configuse.go).
	ConfigVersions map[string][]string `json:"configVersions,omitempty"`
	// Part is what the workload's kind observes of its own objects (a
	// pointer to the kind's part type, kind_<name>.go), stored inline:
	// its fields sit beside these in the stored document.
	Part any `json:"-"`
	// Events are the latest Kubernetes events of its objects, oldest first.
	Events []api.Event `json:"events,omitempty"`
}

// maxUnscheduled bounds the conditions an observation carries.
const maxUnscheduled = 5

// observation returns what the term's caches hold of the workload key, nil
// when they hold no object of it.
func (t *clusterTerm) observation(key string) *observation {
	_, kindName, name, err := api.ParseKey(key)
	if err != nil {
		// A kind this build does not know: its pods are still counted.
		name = key[strings.LastIndexByte(key, '.')+1:]
	}
	var pods []*podView
	if objs, err := t.pods.ByIndex(byWorkload, key); err == nil {
		pods = podsOf(objs)
	}
	var part any
	found := false
	if k := t.c.s.kinds[kindName]; k != nil {
		part, found = k.observe(t, key, name, pods)
	}
	if len(pods) == 0 && !found {
		return nil
	}
	obs := observe(pods)
	obs.Part = part
	obs.Events = t.latestEvents(key)
	return obs
}

// observe sums up a workload's pods in one cluster.
func observe(pods []*podView) *observation {
	obs := &observation{Pods: int32(len(pods))}
	slices.SortFunc(pods, func(a, b *podView) int { return strings.Compare(a.Name, b.Name) })
	images := map[string]bool{}
	for _, p := range pods {
		switch p.phase() {
		case corev1.PodSucceeded:
			obs.Succeeded++
		case corev1.PodFailed:
			obs.Failed++
		case corev1.PodRunning:
			for _, c := range p.mains() {
				images[c.Image.String()] = true
			}
		}
		if c := p.Unscheduled; c != nil && len(obs.Unscheduled) < maxUnscheduled {
			cond := api.Condition{Type: "PodScheduled", Status: false, Reason: c.Reason, Message: c.Message}
			if !slices.Contains(obs.Unscheduled, cond) {
				obs.Unscheduled = append(obs.Unscheduled, cond)
			}
		}
		if p.Deleting {
			continue
		}
		if p.phase() == corev1.PodRunning {
			obs.Running++
		}
		if podReady(p) {
			obs.Ready++
			for _, c := range p.Containers {
				if c.Type == sidecarContainer && c.HasStatus {
					if obs.Sidecars == nil {
						obs.Sidecars = map[string]int32{}
					}
					obs.Sidecars[api.SidecarImageKey(c.Name.String(), c.StatusImage.String())]++
				}
			}
		}
	}
	for img := range images {
		obs.Images = append(obs.Images, img)
	}
	slices.Sort(obs.Images)
	obs.ConfigVersions = runningConfigVersions(pods) // configuse.go
	return obs
}

func podReady(p *podView) bool {
	return p.running() && p.Ready
}

func generationOf(annotations map[string]string) int64 {
	g, _ := strconv.ParseInt(annotations[api.AnnoGeneration], 10, 64)
	return g
}

// MarshalJSON writes the observation with its part's fields inline,
// before the events.
func (o observation) MarshalJSON() ([]byte, error) {
	type plain observation // without this method
	p := plain(o)
	p.Events = nil
	head, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	objs := [][]byte{head}
	if o.Part != nil {
		b, err := json.Marshal(o.Part)
		if err != nil {
			return nil, err
		}
		objs = append(objs, b)
	}
	if len(o.Events) > 0 {
		b, err := json.Marshal(struct {
			Events []api.Event `json:"events"`
		}{o.Events})
		if err != nil {
			return nil, err
		}
		objs = append(objs, b)
	}
	return joinObjects(objs), nil
}

// joinObjects joins JSON objects' members into one object; a null (a
// nil part) adds none.
func joinObjects(objs [][]byte) []byte {
	out := []byte{'{'}
	for _, b := range objs {
		members := bytes.TrimSpace(b)
		if len(members) < 2 || members[0] != '{' {
			continue
		}
		members = members[1 : len(members)-1]
		if len(members) == 0 {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, members...)
	}
	return append(out, '}')
}

// decodeObservation decodes a stored observation, and its part when k is
// the workload's kind (nil: the counts and events only).
func decodeObservation(k kind, b []byte) (observation, error) {
	var o observation
	if err := json.Unmarshal(b, &o); err != nil {
		return observation{}, err
	}
	if k != nil {
		part := k.part()
		if err := json.Unmarshal(b, part); err != nil {
			return observation{}, err
		}
		o.Part = part
	}
	return o, nil
}
