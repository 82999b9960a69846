package aggregator

import (
	"fmt"
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
	f.q.Add(key)
	project, kind, _, err := api.ParseKey(key)
	if err != nil || !strings.EqualFold(kind, api.KindConfig) && !strings.EqualFold(kind, api.KindSecret) {
		return
	}
	m := f.workloadsSet.Load()
	if m == nil {
		return // the first replay: every key is folded anyway
	}
	for _, k := range m.Keys() {
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
