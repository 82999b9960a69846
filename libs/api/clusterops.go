package api

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/validate/content"
)

// Cluster operations of platform admins, the Op of a ClusterOp.
const (
	// ClusterOpCordon stops new shards from being placed on the cluster.
	ClusterOpCordon = "cordon"
	// ClusterOpUncordon lets the cluster take new shards again.
	ClusterOpUncordon = "uncordon"
	// ClusterOpLabels sets and removes admin labels of the cluster.
	ClusterOpLabels = "labels"
)

// Cluster signals published on atoll.cluster.<cluster>.<event> when a
// cluster operation changed a cluster.
const (
	ClusterEventCordoned   = "cordoned"
	ClusterEventUncordoned = "uncordoned"
	ClusterEventLabeled    = "labeled"
)

// ClusterOp asks the aggregator to change a member cluster on behalf of a
// platform admin. It is the body of a request on
// bus.AggregatorCluster; the reply is the cluster's
// ClusterInfo as written.
type ClusterOp struct {
	// Cluster is the member cluster's name.
	Cluster string `json:"cluster"`
	// Op is one of cordon, uncordon and labels.
	Op string `json:"op"`
	// SetLabels adds or changes admin labels (op labels only).
	SetLabels map[string]string `json:"setLabels,omitempty"`
	// RemoveLabels removes admin labels by key (op labels only); removing
	// a label the cluster does not have is not an error.
	RemoveLabels []string `json:"removeLabels,omitempty"`
	// Principal is the admin asking, recorded with the change.
	Principal string `json:"principal,omitempty"`
}

// ClusterAdmin is what platform admins set on a member cluster. It is kept
// in the cluster's ClusterInfo and merged into the effective Cordoned and
// Labels on every inventory write, so it survives them.
type ClusterAdmin struct {
	// Cordoned is set by the cordon operation and cleared by uncordon.
	Cordoned bool `json:"cordoned,omitempty"`
	// Labels are the labels admins set; labels from the cluster
	// configuration are not among them and win over them.
	Labels map[string]string `json:"labels,omitempty"`
	// By is the principal of the last change.
	By string `json:"by,omitempty"`
	// At is when the last change was made.
	At time.Time `json:"at,omitzero"`
}

// ClusterSignal is the body of a signal on atoll.cluster.<cluster>.<event>.
type ClusterSignal struct {
	Cluster string    `json:"cluster"`
	Event   string    `json:"event"`
	Time    time.Time `json:"time"`
	Message string    `json:"message,omitempty"`
	// Principal made the change, for signals of cluster operations.
	Principal string `json:"principal,omitempty"`
	// Labels are the cluster's effective labels after a labeled signal.
	Labels map[string]string `json:"labels,omitempty"`
}

// reservedLabelPrefixes are label key prefixes the platform derives itself
// (the zone from the cluster's configuration; atoll.dev/ for its own use).
var reservedLabelPrefixes = []string{"topology.kubernetes.io/", "atoll.dev/"}

// ReservedClusterLabel reports whether a cluster label key belongs to the
// platform, so that admins may neither set nor remove it.
func ReservedClusterLabel(key string) bool {
	for _, p := range reservedLabelPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Validate returns every problem of the operation. It cannot know the
// labels of the cluster's configuration; the aggregator checks those.
func (o *ClusterOp) Validate() FieldErrors {
	var fe FieldErrors
	if o.Cluster == "" {
		fe.add("cluster", CodeRequired, "a cluster name is required")
	} else {
		for _, msg := range content.IsDNS1123Label(o.Cluster) {
			fe.add("cluster", CodeInvalid, "%q is not a cluster name: %s", o.Cluster, msg)
		}
	}
	switch o.Op {
	case ClusterOpCordon, ClusterOpUncordon:
		if len(o.SetLabels) > 0 {
			fe.add("setLabels", CodeForbidden, "labels can only be changed by op %q", ClusterOpLabels)
		}
		if len(o.RemoveLabels) > 0 {
			fe.add("removeLabels", CodeForbidden, "labels can only be changed by op %q", ClusterOpLabels)
		}
	case ClusterOpLabels:
		o.validateLabels(&fe)
	case "":
		fe.add("op", CodeRequired, "an op is required: one of %s, %s, %s", ClusterOpCordon, ClusterOpUncordon, ClusterOpLabels)
	default:
		fe.add("op", CodeUnsupported, "%q: one of %s, %s, %s", o.Op, ClusterOpCordon, ClusterOpUncordon, ClusterOpLabels)
	}
	return fe
}

func (o *ClusterOp) validateLabels(fe *FieldErrors) {
	if len(o.SetLabels) == 0 && len(o.RemoveLabels) == 0 {
		fe.add("setLabels", CodeRequired, "op %q needs setLabels or removeLabels", ClusterOpLabels)
		return
	}
	keys := make([]string, 0, len(o.SetLabels))
	for k := range o.SetLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report in a stable order
	for _, k := range keys {
		p := "setLabels." + k
		validateLabelKey(p, k, fe)
		for _, msg := range content.IsLabelValue(o.SetLabels[k]) {
			fe.add(p, CodeInvalid, "%q is not a label value: %s", o.SetLabels[k], msg)
		}
	}
	seen := map[string]bool{}
	for i, k := range o.RemoveLabels {
		p := fmt.Sprintf("removeLabels[%d]", i)
		validateLabelKey(p, k, fe)
		if seen[k] {
			fe.add(p, CodeDuplicate, "label %q is listed twice", k)
		}
		seen[k] = true
		if _, ok := o.SetLabels[k]; ok {
			fe.add(p, CodeInvalid, "label %q is both set and removed", k)
		}
	}
}

func validateLabelKey(p, k string, fe *FieldErrors) {
	if msgs := content.IsLabelKey(k); len(msgs) > 0 {
		fe.add(p, CodeInvalid, "%q is not a label key: %s", k, strings.Join(msgs, "; "))
		return
	}
	if k == NodeLabelZone {
		fe.add(p, CodeForbidden, "label %s is the cluster's zone, set by the platform from the cluster configuration; it cannot be changed", k)
		return
	}
	if ReservedClusterLabel(k) {
		fe.add(p, CodeForbidden, "label %s is reserved for the platform (prefixes %s); it cannot be changed", k, strings.Join(reservedLabelPrefixes, ", "))
	}
}
