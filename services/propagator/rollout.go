package propagator

import (
	"encoding/json"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"atoll.dev/libs/api"
)

// An App's template change rolls out one zone at a time
// (services/aggregator/rollout): the aggregator's rollout controller
// keeps, per App, the stable template and which zones were given the
// spec's (bucket rollouts). A shard is rendered with
// Rollout.TemplateFor(its zone, the spec's template), so a zone moves to a
// new template only when the controller gives it; a change of the rollout
// document requeues the key like a placement change. Each App Deployment
// carries the hash of the template it runs (api.AnnoTemplate), which the
// aggregator observes to tell when a zone runs its revision, and rolls
// its pods within the App's availability budget (rollingUpdate).

// rolloutRev returns the revision of key's rollout in the mirror; 0 when
// there is none (or no mirror: tests).
func (s *Service) rolloutRev(key string) uint64 {
	if s.rollouts == nil {
		return 0
	}
	e, _ := s.rollouts.Get(key)
	return e.Revision
}

// rolloutOf returns key's rollout document and its revision from the
// mirror; nil and 0 when there is none (or no mirror: tests).
func (s *Service) rolloutOf(key string) (*api.Rollout, uint64) {
	if s.rollouts == nil {
		return nil, 0
	}
	e, ok := s.rollouts.Get(key)
	if !ok {
		return nil, 0
	}
	var r api.Rollout
	if err := json.Unmarshal(e.Value, &r); err != nil {
		s.log.Warn("undecodable rollout", "key", key, "err", err)
		return nil, e.Revision
	}
	return &r, e.Revision
}

// zoneWorkload returns the workload as sh's zone runs it: an App's with
// the template its rollout gives that zone; d.workload otherwise.
func (d *desired) zoneWorkload(sh api.Shard) *api.Workload {
	w := d.workload
	s, ok := w.Spec.(*api.AppSpec)
	if !ok || d.rollout == nil {
		return w
	}
	t := d.rollout.TemplateFor(sh.Zone, &s.Template)
	if t == &s.Template {
		return w
	}
	spec := *s
	spec.Template = *t
	zw := *w
	zw.Spec = &spec
	return &zw
}

// rollingUpdate is an App Deployment's strategy: it never takes more of a
// shard's replicas out of service than the App's availability budget
// lets a drain take. Deployments round maxUnavailable down; the budget's
// PodDisruptionBudget rounds up, so the same value is never more. A
// minAvailable budget m becomes maxUnavailable 100%-m (a percentage) or
// replicas-m (a count). maxSurge stays Kubernetes' 25% (rounded up, so
// at least one new pod starts even when none may go).
func rollingUpdate(s *api.AppSpec, replicas int32) appsv1.DeploymentStrategy {
	kind, v := s.Availability.Budget()
	val := intstr.Parse(v)
	if kind == "minAvailable" {
		if val.Type == intstr.String {
			var p int
			if n, err := intstr.GetScaledValueFromIntOrPercent(&val, 100, true); err == nil {
				p = n
			}
			val = intstr.FromString(strconv.Itoa(max(0, 100-p)) + "%")
		} else {
			val = intstr.FromInt32(max(0, replicas-val.IntVal))
		}
	}
	surge := intstr.FromString("25%")
	return appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &val, MaxSurge: &surge},
	}
}
