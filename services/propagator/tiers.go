package propagator

import (
	"maps"

	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

// reservedPool pins the pods of a shard the scheduler put on a cluster's
// Reserved pools (api.Shard.PoolTier) to the nodes labelled
// atoll.dev/tier=Reserved, and tolerates the taint
// atoll.dev/tier=Reserved:NoSchedule with which those nodes keep other
// work off. Shards on shared pools are rendered as before.
func reservedPool(spec *corev1.PodSpec) {
	sel := maps.Clone(spec.NodeSelector) // the workload's own map is not ours to change
	if sel == nil {
		sel = map[string]string{}
	}
	sel[api.NodeLabelTier] = api.PoolTierReserved
	spec.NodeSelector = sel
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
		Key: api.NodeLabelTier, Operator: corev1.TolerationOpEqual, Value: api.PoolTierReserved, Effect: corev1.TaintEffectNoSchedule,
	})
}
