package api

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
)

// VolumeClaimTemplate is a persistent volume claim made for each replica
// of an App or each index of a JobSet: the containers mount it by its
// Name, like a volume of the template.
//
// A JobSet's claims. Each index's pod gets its own claim, made in the
// member cluster that runs it (a generic ephemeral volume: the claim is
// named "<pod>-<name>" and owned by the pod), so a JobSet of N indexes
// has N claims, and its storage counts towards the project's quota as
// Completions times the templates' sizes. A claim lives as long as its
// pod: the Job keeps a finished index's pod, and its claim, until the
// JobSet is deleted; a failed index is retried in a new pod with a new,
// empty claim (its data is never moved or shared). Data that must
// outlive the JobSet belongs in a regional store.
type VolumeClaimTemplate struct {
	// Name names the claim's volume, which volumeMounts name; a DNS label
	// unique among the template's volumes.
	Name string `json:"name"`
	// Storage is the claim's storage request ("1Gi").
	Storage string `json:"storage"`
	// StorageClass is the claim's class; unset means the cluster's
	// default class, "" means no class (binds a matching static volume).
	StorageClass *string `json:"storageClass,omitempty"`
	// AccessModes are the claim's access modes (default ReadWriteOnce).
	AccessModes []string `json:"accessModes,omitempty"`
}

// accessModes are the access modes a claim may ask for.
var accessModes = []string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}

// DefaultAccessMode is a claim's access mode when it names none.
const DefaultAccessMode = "ReadWriteOnce"

// maxClaimTemplates bounds a workload's claim templates.
const maxClaimTemplates = 16

// claimNames returns the names of claim templates cs.
func claimNames(cs []VolumeClaimTemplate) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return names
}

// claimsBytes is the total storage of one set of claims cs (unparsable
// sizes, caught by validation, count as zero).
func claimsBytes(cs []VolumeClaimTemplate) int64 {
	var n int64
	for _, c := range cs {
		if q, err := resource.ParseQuantity(c.Storage); err == nil {
			n += q.Value()
		}
	}
	return n
}

// validateClaimTemplates checks claim templates cs at path p against the
// pod template t they are mounted into.
func validateClaimTemplates(p string, cs []VolumeClaimTemplate, t *PodTemplate, fe *FieldErrors) {
	if len(cs) > maxClaimTemplates {
		fe.add(p, CodeTooLarge, "%d claim templates exceed the maximum of %d", len(cs), maxClaimTemplates)
	}
	seen := map[string]bool{}
	for _, v := range t.Volumes {
		seen[v.Name] = true
	}
	for i, c := range cs {
		pp := fmt.Sprintf("%s[%d]", p, i)
		switch {
		case !IsDNSLabel(c.Name):
			fe.add(pp+".name", CodeInvalid, "%q is not a DNS label", c.Name)
		case seen[c.Name]:
			fe.add(pp+".name", CodeDuplicate, "a volume or claim named %q is already defined", c.Name)
		}
		seen[c.Name] = true
		switch q, err := resource.ParseQuantity(c.Storage); {
		case c.Storage == "":
			fe.add(pp+".storage", CodeRequired, "storage is required")
		case err != nil:
			fe.add(pp+".storage", CodeInvalid, "%q is not a quantity", c.Storage)
		case q.Sign() <= 0:
			fe.add(pp+".storage", CodeInvalid, "%s is not positive", c.Storage)
		}
		if sc := c.StorageClass; sc != nil && *sc != "" && !IsDNSSubdomain(*sc) {
			fe.add(pp+".storageClass", CodeInvalid, "%q is not a storage class name", *sc)
		}
		for j, m := range c.AccessModes {
			if !slices.Contains(accessModes, m) {
				fe.add(fmt.Sprintf("%s.accessModes[%d]", pp, j), CodeUnsupported, "%q: one of %v", m, accessModes)
			}
		}
	}
}
