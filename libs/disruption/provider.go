package disruption

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LabelPool is the node label naming a node's pool.
const LabelPool = "atoll.dev/pool"

// LabelReplaces is the label that, on a replacement node, names the node it replaced.
const LabelReplaces = "atoll.dev/replaces"

// AnnoKWOKNode marks a node KWOK simulates a kubelet for.
const AnnoKWOKNode = "kwok.x-k8s.io/node"

// Replacement describes the node that replaces another.
type Replacement struct {
	// Name is the new node's name. Callers derive it from the old node's
	// UID and their attempt (ReplacementName), so a retry after a crash
	// finds the node it created instead of creating a second one.
	Name string
	// Labels are set on the new node over the old one's (an upgrade's new
	// version label, ...).
	Labels map[string]string
}

// Provider replaces nodes. Its methods must be idempotent: a caller
// repeats a call whose outcome it did not record.
type Provider interface {
	// Replace creates r.Name in old's pool (unless it exists) and deletes
	// old (unless it is gone). A replacement that never became Ready is
	// itself replaced the same way by the next attempt.
	Replace(ctx context.Context, old *corev1.Node, r Replacement) error
}

// ReplacementName names attempt n at replacing node: <prefix>-r<hash>,
// with prefix the old name up to its last dash (the pool's node prefix)
// and hash a digest of its UID and n.
func ReplacementName(node *corev1.Node, attempt int) string {
	prefix := node.Name
	if i := strings.LastIndex(prefix, "-"); i > 0 {
		prefix = prefix[:i]
	}
	sum := sha256.Sum256([]byte(string(node.UID) + "/" + strconv.Itoa(attempt)))
	name := prefix + "-r" + hex.EncodeToString(sum[:4])
	if len(name) > 63 {
		name = name[len(name)-63:]
		name = strings.TrimLeft(name, "-")
	}
	return name
}

// KWOK is the Provider of the test clusters: a KWOK-managed node is
// replaced by a copy (labels, annotations, capacity, taints but the
// node-lifecycle ones) under a new name; KWOK makes it Ready.
type KWOK struct {
	Client kubernetes.Interface
	// NotReady, when set (tests), leaves replacements without KWOK's
	// annotation, so that they never become Ready.
	NotReady bool
}

var _ Provider = (*KWOK)(nil)

// Replace implements Provider: the new node first, then the old one goes.
func (k *KWOK) Replace(ctx context.Context, old *corev1.Node, r Replacement) error {
	labels := maps.Clone(old.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, r.Labels)
	labels["kubernetes.io/hostname"] = r.Name
	labels[LabelReplaces] = old.Name
	annotations := map[string]string{}
	for k, v := range old.Annotations {
		if strings.HasPrefix(k, "kwok.x-k8s.io/") || k == "node.alpha.kubernetes.io/ttl" {
			annotations[k] = v
		}
	}
	// KWOK manages the nodes with this annotation (the old node may have
	// lost it: a dead kubelet is simulated by taking it away).
	annotations[AnnoKWOKNode] = "fake"
	if k.NotReady {
		delete(annotations, AnnoKWOKNode)
	}
	var taints []corev1.Taint
	for _, t := range old.Spec.Taints {
		if !strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			taints = append(taints, t)
		}
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity: old.Status.Capacity, Allocatable: old.Status.Allocatable,
			Phase: corev1.NodeRunning, NodeInfo: old.Status.NodeInfo,
		},
	}
	if _, err := k.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("replace %s: create %s: %w", old.Name, r.Name, err)
	}
	err := k.Client.CoreV1().Nodes().Delete(ctx, old.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(old.UID))})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("replace %s: delete: %w", old.Name, err)
	}
	return nil
}
