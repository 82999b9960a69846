package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Quota requests: a project admin asks for a tier's limits to change, and
// a platform admin approves (the quota service applies the limits) or
// rejects the request. They live in the quota bucket, which the quota
// service alone writes:
//
//	q.<project>.<n>   QuotaRequest number n of the project (ID <project>-<n>)
//
// Approving is two keys, the request and the project's Ledger, so it is
// a transaction in the shape of a reservation's (services/quota
// requests.go): the request first becomes QuotaRequestApproving (the
// intent), then the ledger is changed with the request's ID recorded in
// Ledger.Grants (the single point of decision: an ID already there is not
// applied again), then the request becomes QuotaRequestApproved.
const (
	// QuotaRequestPrefix starts every QuotaRequest key.
	QuotaRequestPrefix = "q."
	// QuotaRequestFilter matches every QuotaRequest key.
	QuotaRequestFilter = QuotaRequestPrefix + ">"
	// KindQuotaRequest is the kind a quota request's events name on its
	// project's event subject (atoll.evt.<project>.quotarequest.<id>.<event>).
	KindQuotaRequest = "QuotaRequest"
	// MaxQuotaReason bounds a request's and a rejection's reason, in bytes.
	MaxQuotaReason = 1024
	// GrantRing is how many approved request IDs a Ledger keeps in Grants.
	GrantRing = 64
)

// QuotaRequestState is where a quota request stands.
type QuotaRequestState string

// Quota request states.
const (
	// QuotaRequestPending waits for a platform admin.
	QuotaRequestPending QuotaRequestState = "pending"
	// QuotaRequestApproving is an approval under way: the limits may or
	// may not be applied yet; whoever finishes it (a retried approve, the
	// quota service's repair sweep) applies them at most once.
	QuotaRequestApproving QuotaRequestState = "approving"
	// QuotaRequestApproved: the limits are applied.
	QuotaRequestApproved QuotaRequestState = "approved"
	// QuotaRequestRejected: nothing was applied; Decision.Reason says why.
	QuotaRequestRejected QuotaRequestState = "rejected"
)

// QuotaRequestStates lists the states, in a request's order.
var QuotaRequestStates = []QuotaRequestState{QuotaRequestPending, QuotaRequestApproving, QuotaRequestApproved, QuotaRequestRejected}

// Decided says whether a request in state s is approved or rejected (or
// on its way to approved).
func (s QuotaRequestState) Decided() bool { return s != QuotaRequestPending }

// QuotaRequest is a request for a tier's limits to change, at
// QuotaRequestKey(Project, n).
type QuotaRequest struct {
	// ID is <project>-<n>.
	ID      string `json:"id"`
	Project string `json:"project"`
	Tier    Tier   `json:"tier"`
	// Limit holds the caps asked for; a resource left unset keeps the
	// project's limit (or default) for it.
	Limit  Limit             `json:"limit"`
	Reason string            `json:"reason"`
	State  QuotaRequestState `json:"state"`
	// Requester is the caller who asked.
	Requester string    `json:"requester"`
	Created   time.Time `json:"created"`
	// Reviewer, Decided and Decision are set once a platform admin decides.
	Reviewer string    `json:"reviewer,omitempty"`
	Decided  time.Time `json:"decided,omitzero"`
	// Decision is the reviewer's reason (required to reject).
	Decision string `json:"decision,omitempty"`
}

// QuotaRequestKey is the quota bucket key of request n of project.
func QuotaRequestKey(project string, n uint64) string {
	return QuotaRequestPrefix + escape(project, true) + "." + strconv.FormatUint(n, 10)
}

// QuotaRequestProjectFilter matches the keys of project's requests.
func QuotaRequestProjectFilter(project string) string {
	return QuotaRequestPrefix + escape(project, true) + ".>"
}

// QuotaRequestID is the ID of request n of project.
func QuotaRequestID(project string, n uint64) string {
	return project + "-" + strconv.FormatUint(n, 10)
}

// ParseQuotaRequestID splits an ID into its project and number (the
// number follows the last '-').
func ParseQuotaRequestID(id string) (project string, n uint64, err error) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, fmt.Errorf("quota request ID %q: want <project>-<number>", id)
	}
	n, err = strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil || n == 0 || !IsDNSLabel(id[:i]) {
		return "", 0, fmt.Errorf("quota request ID %q: want <project>-<number>", id)
	}
	return id[:i], n, nil
}

// QuotaRequestCreate asks for a tier's limits to change: amounts as
// quantities (cpu "64" or "500m", memory "256Gi"), each optional but at
// least one.
type QuotaRequestCreate struct {
	Project   string `json:"project"`
	Tier      string `json:"tier"`
	CPU       string `json:"cpu,omitempty"`
	Memory    string `json:"memory,omitempty"`
	Storage   string `json:"storage,omitempty"`
	GPUs      *int64 `json:"gpus,omitempty"`
	Pods      *int64 `json:"pods,omitempty"`
	Reason    string `json:"reason"`
	Requester string `json:"requester"`
}

// Limit validates the request and returns the limit it asks for; every
// problem is named by its field.
func (c QuotaRequestCreate) Limit() (Limit, FieldErrors) {
	var fe FieldErrors
	var lim Limit
	if !IsDNSLabel(c.Project) {
		fe.add("project", CodeInvalid, "a DNS label")
	}
	if !ValidTier(c.Tier) {
		fe.add("tier", CodeUnsupported, "unknown tier %q: one of Reserved, OnDemand, Preemptible", c.Tier)
	}
	quantity := func(field, v string, milli bool, example string) *int64 {
		if v == "" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		switch {
		case err != nil:
			fe.add(field, CodeInvalid, "%q is not a quantity (such as %s)", v, example)
			return nil
		case q.Sign() < 0:
			fe.add(field, CodeInvalid, "%q is negative: a cap is 0 (forbidden) or more", v)
			return nil
		}
		if milli {
			return new(q.MilliValue())
		}
		return new(q.Value())
	}
	lim.MilliCPU = quantity("cpu", c.CPU, true, "64 or 500m")
	lim.MemoryBytes = quantity("memory", c.Memory, false, "256Gi")
	lim.StorageBytes = quantity("storage", c.Storage, false, "1Ti")
	for _, a := range []struct {
		field string
		v     *int64
	}{{"gpus", c.GPUs}, {"pods", c.Pods}} {
		if a.v != nil && *a.v < 0 {
			fe.add(a.field, CodeInvalid, "%d is negative: a cap is 0 (forbidden) or more", *a.v)
		}
	}
	lim.GPUs, lim.Pods = c.GPUs, c.Pods
	if c.CPU == "" && c.Memory == "" && c.Storage == "" && c.GPUs == nil && c.Pods == nil {
		fe.add("cpu", CodeRequired, "name at least one amount (cpu, memory, storage, gpus, pods)")
	}
	switch {
	case strings.TrimSpace(c.Reason) == "":
		fe.add("reason", CodeRequired, "say why the project needs it")
	case len(c.Reason) > MaxQuotaReason:
		fe.add("reason", CodeTooLarge, "at most %d bytes", MaxQuotaReason)
	}
	return lim, fe
}

// QuotaRequestList asks for requests: of one project (empty: every
// project), in one state (empty: any).
type QuotaRequestList struct {
	Project string            `json:"project,omitempty"`
	State   QuotaRequestState `json:"state,omitempty"`
}

// QuotaRequestItems are requests, oldest first.
type QuotaRequestItems struct {
	Items []QuotaRequest `json:"items"`
}

// QuotaRequestDecide approves or rejects a request.
type QuotaRequestDecide struct {
	ID       string `json:"id"`
	Approve  bool   `json:"approve"`
	Reviewer string `json:"reviewer"`
	// Reason is required to reject.
	Reason string `json:"reason,omitempty"`
}

// ValidTier says whether t names a tier.
func ValidTier(t string) bool {
	for _, x := range Tiers {
		if string(x) == t {
			return true
		}
	}
	return false
}

// Apply sets in l the amounts that want sets, keeping l's others.
func (l Limit) Apply(want Limit) Limit {
	for _, p := range []struct{ dst, src **int64 }{
		{&l.MilliCPU, &want.MilliCPU}, {&l.MemoryBytes, &want.MemoryBytes}, {&l.GPUs, &want.GPUs}, {&l.Pods, &want.Pods}, {&l.StorageBytes, &want.StorageBytes},
	} {
		if *p.src != nil {
			*p.dst = new(**p.src)
		}
	}
	return l
}
