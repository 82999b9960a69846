package propagator

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/micro"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// A deleted project's namespaces. Admission, finishing a project's
// deletion once it holds no workload, asks any propagator replica to
// delete the project's namespace in every member cluster
// (bus.PropagatorRemoveProject). The member clusters' namespace
// controller then removes what is left in it; the member cluster's
// NamespacePolicy lets the propagator delete project namespaces only.
// The call is idempotent: a namespace already gone counts as removed.

func (s *Service) removeProject(ctx context.Context, req api.ProjectRef, _ micro.Request) (api.Ack, error) {
	if code, reason, ok := api.CheckProject(req.Project); !ok {
		return nil, fmt.Errorf("project %q: %s (%s)", req.Project, reason, code)
	}
	if err := s.waitFilled(ctx); err != nil {
		return nil, err
	}
	// Only once this replica has seen every workload of the project
	// deleted: a reconcile of one it still holds would create its objects
	// again in a namespace being deleted. Admission retries.
	n := 0
	for _, k := range s.workloads.Keys() {
		if p, _, _, err := api.ParseKey(k); err == nil && p == req.Project {
			n++
		}
	}
	if n > 0 {
		return nil, fmt.Errorf("project %s: %d workloads not yet removed here; retry", req.Project, n)
	}
	for _, t := range s.targets {
		if err := t.removeNamespace(ctx, req.Project); err != nil {
			return nil, err
		}
	}
	s.log.Info("project namespaces deleted", "project", req.Project, "clusters", len(s.targets))
	return api.Ack{"removed": true}, nil
}

// removeNamespace deletes project's namespace in t's cluster and forgets
// that it existed, so that a project of the same name made later gets it
// again.
func (t *target) removeNamespace(ctx context.Context, project string) error {
	ns := api.Namespace(project)
	t.mu.Lock()
	delete(t.namespaces, ns)
	delete(t.configAccess, ns)
	t.mu.Unlock()
	err := t.call(func() error {
		err := t.dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Delete(ctx, ns,
			metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete namespace %s in %s: %w", ns, t.name, err)
	}
	return nil
}
