package disruption

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// AnnoMirror marks a static (mirror) pod, which the kubelet owns.
const AnnoMirror = corev1.MirrorPodAnnotationKey

// PodRef names a pod.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Blocked is a pod whose eviction a PodDisruptionBudget refused (429).
type Blocked struct {
	Pod PodRef `json:"pod"`
	// PDB is namespace/name of the budget that blocks it ("" when none
	// matched, e.g. a budget removed since).
	PDB     string `json:"pdb,omitempty"`
	Message string `json:"message,omitempty"`
}

// DrainResult is what one pass of Drain did and found.
type DrainResult struct {
	// Evicted are the pods this pass evicted (200).
	Evicted []PodRef `json:"evicted,omitempty"`
	// Deleted are the pods this pass deleted without eviction (Force).
	Deleted []PodRef `json:"deleted,omitempty"`
	// Blocked are the pods a PodDisruptionBudget kept (429).
	Blocked []Blocked `json:"blocked,omitempty"`
	// Terminating counts pods already going (evicted earlier).
	Terminating int `json:"terminating"`
	// Failed are other refusals (500: two budgets on one pod, ...), by
	// pod, with the error.
	Failed map[string]string `json:"failed,omitempty"`
	// Skipped counts DaemonSet and mirror pods, never evicted.
	Skipped int `json:"skipped"`
	// Abandoned counts terminating pods no longer waited for
	// (DrainOptions.SkipTerminatingAfter).
	Abandoned int `json:"abandoned,omitempty"`
}

// Done reports whether nothing evictable is left on the node.
func (r DrainResult) Done() bool {
	return len(r.Evicted) == 0 && len(r.Deleted) == 0 && len(r.Blocked) == 0 && r.Terminating == 0 && len(r.Failed) == 0
}

// DrainOptions tunes a pass.
type DrainOptions struct {
	// Force deletes the pods an eviction would be refused for (a drain
	// past its deadline whose policy is to force), bypassing budgets.
	Force bool
	// GracePeriod, when set, is the evicted or deleted pods' grace period.
	GracePeriod *int64
	// Skip lists pod UIDs not to evict again (already evicted by an
	// earlier pass, possibly of another replica).
	Skip map[string]bool
	// SkipTerminatingAfter, when positive, stops waiting for a pod this
	// long past its deletion time (deletionTimestamp: the end of its grace
	// period): on a node whose kubelet is gone nothing ever confirms the
	// deletion (kubectl drain's --skip-wait-for-delete-timeout).
	SkipTerminatingAfter time.Duration
}

// Drain runs one pass of draining node: every pod on it but DaemonSet
// and mirror pods, and pods already terminating, is evicted through the
// Eviction API (or deleted, with Force). It returns what it did; the
// caller repeats passes with a backoff until Done or its deadline, so a
// pass interrupted by a crash is resumed by the next one. The error is
// for the API being unreachable, not for refused evictions.
func Drain(ctx context.Context, cs kubernetes.Interface, node string, o DrainOptions) (DrainResult, error) {
	var res DrainResult
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return res, fmt.Errorf("drain %s: list pods: %w", node, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		ref := PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
		switch {
		case skipped(p):
			res.Skipped++
			continue
		case p.DeletionTimestamp != nil && o.SkipTerminatingAfter > 0 && time.Now().After(p.DeletionTimestamp.Add(o.SkipTerminatingAfter)):
			res.Abandoned++
			continue
		case p.DeletionTimestamp != nil || o.Skip[ref.UID]:
			res.Terminating++
			continue
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			continue
		}
		if o.Force {
			err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: o.GracePeriod, Preconditions: metav1.NewUIDPreconditions(ref.UID),
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return res, fmt.Errorf("drain %s: delete %s/%s: %w", node, p.Namespace, p.Name, err)
			}
			res.Deleted = append(res.Deleted, ref)
			continue
		}
		err := cs.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: o.GracePeriod, Preconditions: metav1.NewUIDPreconditions(ref.UID)},
		})
		switch {
		case err == nil:
			res.Evicted = append(res.Evicted, ref)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone, or another pod of the same name now.
		case apierrors.IsTooManyRequests(err):
			res.Blocked = append(res.Blocked, Blocked{Pod: ref, PDB: blockingPDB(ctx, cs, p), Message: err.Error()})
		case apierrors.IsInternalError(err) || apierrors.IsForbidden(err):
			if res.Failed == nil {
				res.Failed = map[string]string{}
			}
			res.Failed[p.Namespace+"/"+p.Name] = err.Error()
		default:
			return res, fmt.Errorf("drain %s: evict %s/%s: %w", node, p.Namespace, p.Name, err)
		}
	}
	return res, nil
}

// skipped reports whether a drain leaves p alone: DaemonSet pods (their
// controller would recreate them on the node) and mirror pods.
func skipped(p *corev1.Pod) bool {
	if _, ok := p.Annotations[AnnoMirror]; ok {
		return true
	}
	return slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool {
		return o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller
	})
}

// blockingPDB names the budget of p's namespace whose selector matches p.
func blockingPDB(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) string {
	list, err := cs.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, b := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			return b.Namespace + "/" + b.Name
		}
	}
	return ""
}
