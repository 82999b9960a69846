package api

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Claim templates (PodTemplate.VolumeClaimTemplates) give every pod of a
// workload its own PersistentVolumeClaim, named after the pod's stable
// identity: an App's replica ordinal (rendered as a StatefulSet per member
// cluster, ordinal ranges per zone), a JobSet's completion index. Only
// the kinds whose Kind.Claims is set accept them. A claim lives in the
// cluster of its pod and is never moved (see ZoneLossPolicy).

// MaxVolumeClaimTemplates bounds the claim templates of one pod template.
const MaxVolumeClaimTemplates = 8

// Access modes a claim template may ask for.
const (
	AccessReadWriteOnce    = "ReadWriteOnce"
	AccessReadOnlyMany     = "ReadOnlyMany"
	AccessReadWriteMany    = "ReadWriteMany"
	AccessReadWriteOncePod = "ReadWriteOncePod"
)

// accessModes are the access modes a claim template may ask for.
var accessModes = []string{AccessReadWriteOnce, AccessReadOnlyMany, AccessReadWriteMany, AccessReadWriteOncePod}

// VolumeClaimTemplate is a persistent volume claim made for each pod. Its
// Name is also the pod volume the containers mount (volumeMounts[].name).
type VolumeClaimTemplate struct {
	// Name names the claim template and the pod volume (a DNS label).
	Name string `json:"name"`
	// Storage is each claim's storage request ("10Gi").
	Storage string `json:"storage"`
	// StorageClass is the claims' storage class; empty means the
	// cluster's default class.
	StorageClass string `json:"storageClass,omitempty"`
	// AccessModes are the claims' access modes (default ReadWriteOnce).
	AccessModes []string `json:"accessModes,omitempty"`
}

// ZoneLossPolicy is what a workload with claim templates does with the
// replicas of a zone that is lost: their claims (and data) stay in the
// lost zone's cluster, never moved.
type ZoneLossPolicy string

// Zone loss policies.
const (
	// ZoneLossWait keeps a lost zone's replicas where their data is: they
	// stay pending, with a condition saying why, until the zone returns.
	// The default.
	ZoneLossWait ZoneLossPolicy = "Wait"
	// ZoneLossRecreate recreates a lost zone's replicas in the surviving
	// zones, with new, empty claims.
	ZoneLossRecreate ZoneLossPolicy = "Recreate"
)

func (p ZoneLossPolicy) validate(path string, fe *FieldErrors) {
	switch p {
	case "", ZoneLossWait, ZoneLossRecreate:
	default:
		fe.add(path, CodeUnsupported, "%q: want %s or %s", p, ZoneLossWait, ZoneLossRecreate)
	}
}

// ClaimBytesPerPod is the total storage request of one pod's claims, what
// each pod's claims count towards the project's storage quota
// (unparsable sizes, caught by validation, count as zero).
func (t *PodTemplate) ClaimBytesPerPod() int64 {
	var n int64
	for _, c := range t.VolumeClaimTemplates {
		if q, err := resource.ParseQuantity(c.Storage); err == nil {
			n += q.Value()
		}
	}
	return n
}

func (t *PodTemplate) claimDefaults() {
	for i := range t.VolumeClaimTemplates {
		if c := &t.VolumeClaimTemplates[i]; len(c.AccessModes) == 0 {
			c.AccessModes = []string{AccessReadWriteOnce}
		}
	}
}

// validateClaims checks the claim templates; vols holds the template's
// volume names, and gets the claims' names added (the mounts' targets).
func (t *PodTemplate) validateClaims(path string, vols map[string]bool, fe *FieldErrors) {
	if len(t.VolumeClaimTemplates) > MaxVolumeClaimTemplates {
		fe.add(path+".volumeClaimTemplates", CodeTooLarge, "%d claim templates: at most %d", len(t.VolumeClaimTemplates), MaxVolumeClaimTemplates)
	}
	for i, c := range t.VolumeClaimTemplates {
		p := fmt.Sprintf("%s.volumeClaimTemplates[%d]", path, i)
		switch {
		case c.Name == "":
			fe.add(p+".name", CodeRequired, "name is required")
		case !IsDNSLabel(c.Name):
			fe.add(p+".name", CodeInvalid, "%q is not a DNS label", c.Name)
		case vols[c.Name]:
			fe.add(p+".name", CodeDuplicate, "volume %q is defined twice (a claim template is also a volume)", c.Name)
		}
		vols[c.Name] = true
		switch q, err := resource.ParseQuantity(c.Storage); {
		case c.Storage == "":
			fe.add(p+".storage", CodeRequired, "storage is required (e.g. \"1Gi\")")
		case err != nil:
			fe.add(p+".storage", CodeInvalid, "%q is not a quantity", c.Storage)
		case q.Sign() <= 0:
			fe.add(p+".storage", CodeInvalid, "%s is not positive", c.Storage)
		}
		if c.StorageClass != "" && !IsDNSSubdomain(c.StorageClass) {
			fe.add(p+".storageClass", CodeInvalid, "%q is not a storage class name", c.StorageClass)
		}
		for j, m := range c.AccessModes {
			if !slices.Contains(accessModes, m) {
				fe.add(fmt.Sprintf("%s.accessModes[%d]", p, j), CodeUnsupported, "%q: want one of %v", m, accessModes)
			}
		}
	}
}

// ordinalSlots is how many ordinal ranges of MaxReplicas ordinals zones
// are spread over (OrdinalStart).
const ordinalSlots = 200

// OrdinalStart is the first ordinal of an App's replicas in zone, the
// start of the zone's ordinal range (its StatefulSet's spec.ordinals.start):
// a fixed function of the zone's name, so a replica keeps its ordinal, and
// with it its claim and its zone, whatever the replicas of other zones do
// (scale, loss). A zone's range holds MaxReplicas ordinals. Two zones may
// hash to the same range: their replicas then share ordinals, told apart
// by their clusters (a claim lives in its pod's cluster).
func OrdinalStart(zone string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(zone))
	return int32(h.Sum32()%ordinalSlots) * MaxReplicas
}

// ReplicaName is the pod of an App's replica ordinal (its StatefulSet's
// pod name).
func ReplicaName(app string, ordinal int32) string {
	return app + "-" + strconv.Itoa(int(ordinal))
}

// ClaimName is the claim of template claim for an App's replica ordinal,
// as its StatefulSet names it.
func ClaimName(claim, app string, ordinal int32) string {
	return claim + "-" + ReplicaName(app, ordinal)
}

// WaitsOnZoneLoss reports whether w keeps the replicas of a lost zone
// there, pending, rather than recreating them elsewhere: an App with claim
// templates and policy Wait (the default).
func WaitsOnZoneLoss(w *Workload) bool {
	s, ok := w.Spec.(*AppSpec)
	return ok && len(s.Template.VolumeClaimTemplates) > 0 && s.OnZoneLoss != ZoneLossRecreate
}

// ReasonWaitingForZone is the reason of the condition an App's status
// carries while replicas of a lost zone wait for it (ZoneLossWait).
const ReasonWaitingForZone = "WaitingForZone"
