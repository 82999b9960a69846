package propagator

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/clusters"
)

// ensureDebugAccess applies, in project namespace ns, the RoleBinding
// that lets the aggregator read logs and exec there
// (clusters.AggregatorDebugBinding): the aggregator has pods/log and
// pods/exec in project namespaces only, each bound as it is made.
func (t *target) ensureDebugAccess(ctx context.Context, ns string) error {
	body, err := json.Marshal(clusters.AggregatorDebugBinding(ns))
	if err != nil {
		return err
	}
	err = t.call(func() error {
		_, err := t.cs.RbacV1().RoleBindings(ns).Patch(ctx, clusters.AggregatorDebugRole, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
		return err
	})
	if err != nil {
		return fmt.Errorf("namespace %s: aggregator debug access: %w", ns, err)
	}
	return nil
}
