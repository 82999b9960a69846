package aggregator

import (
	"fmt"
	"slices"
	"strings"

	"atoll.dev/libs/api"
)

// A workload whose Config or Secret is gone (deleted with force while it
// named it) says so in its status, condition api.ConditionConfigMissing,
// rather than leaving pods that cannot start to speak for it. Its status
// is folded again when a Config or Secret of its project changes.

// workloadChanged queues the fold of a changed workload and, for a Config
// or Secret, of every workload of its project (which may name it).
func (f *foldState) workloadChanged(key string) {
	if !f.live.Load() {
		return // the mirror's first replay: the term queues every key
	}
	f.q.Add(key)
	project, kind, _, err := api.ParseKey(key)
	if err != nil || !strings.EqualFold(kind, api.KindConfig) && !strings.EqualFold(kind, api.KindSecret) {
		return
	}
	for _, k := range f.workloads.Keys() {
		if strings.HasPrefix(k, project+".") && k != key {
			f.q.Add(k)
		}
	}
}

// configConditions says which Configs and Secrets w names (not optional)
// are missing; none when all are there.
func (f *foldState) configConditions(w *api.Workload) []api.Condition {
	if w.Kind == api.KindConfig || w.Kind == api.KindSecret {
		return nil
	}
	var missing []string
	for _, r := range w.Spec.PodTemplate().Refs() {
		if r.Optional {
			continue
		}
		if _, ok := f.workloads.Get(api.Key(w.Metadata.Project, r.Kind, r.Name)); !ok {
			missing = append(missing, r.Kind+" "+r.Name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return []api.Condition{{Type: api.ConditionConfigMissing, Status: true, Reason: "NotFound",
		Message: fmt.Sprintf("%s missing: its pods do not start until it is created again or no longer named", strings.Join(missing, ", "))}}
}

// runningConfigVersions reads, from the annotations of the running pods
// (the propagator's api.ConfigVersionAnnotation), the versions of the
// Configs and Secrets they run, by "Config/name": sorted, more than one
// while a change rolls through; nil when they run none.
func runningConfigVersions(pods []*podView) map[string][]string {
	var out map[string][]string
	for _, p := range pods {
		if !p.running() {
			continue
		}
		for line := range strings.Lines(p.Configs.String()) {
			id, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
			if slices.Contains(out[id], v) {
				continue
			}
			if out == nil {
				out = map[string][]string{}
			}
			out[id] = append(out[id], v)
		}
	}
	for id := range out {
		slices.Sort(out[id])
	}
	return out
}

// configVersions returns the versions a pod's annotations say it runs,
// canonically: sorted "Config/name=version" lines (podView.Configs).
func configVersions(annotations map[string]string) string {
	var lines []string
	for a, v := range annotations {
		if id := configVersionID(a); id != "" {
			lines = append(lines, id+"="+v+"\n")
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "")
}

// configVersionID is the "Config/name" or "Secret/name" a pod annotation
// carries the version of; "" for any other annotation.
func configVersionID(annotation string) string {
	for _, k := range []string{api.KindConfig, api.KindSecret} {
		prefix := api.ConfigVersionAnnotation(k + "/")
		if name, ok := strings.CutPrefix(annotation, prefix); ok && name != "" {
			return k + "/" + name
		}
	}
	return ""
}

// foldConfigVersions puts in each zone's status the versions its
// clusters' running pods run.
func foldConfigVersions(shards []shardView, st *api.Status) {
	for _, sh := range shards {
		if len(sh.obs.ConfigVersions) == 0 {
			continue
		}
		z := st.Zones[sh.zone]
		if z.ConfigVersions == nil {
			z.ConfigVersions = map[string][]string{}
		}
		for id, vs := range sh.obs.ConfigVersions {
			for _, v := range vs {
				if !slices.Contains(z.ConfigVersions[id], v) {
					z.ConfigVersions[id] = append(z.ConfigVersions[id], v)
				}
			}
			slices.Sort(z.ConfigVersions[id])
		}
		st.Zones[sh.zone] = z
	}
}
