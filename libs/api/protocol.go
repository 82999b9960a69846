package api

import (
	"fmt"
	"time"
)

// WorkloadEvent is a domain event on atoll.evt.<project>.<kind>.<name>.<event>.
type WorkloadEvent struct {
	Project    string    `json:"project"`
	Kind       string    `json:"kind"`
	Name       string    `json:"name"`
	Event      string    `json:"event"`
	Generation int64     `json:"generation"`
	Time       time.Time `json:"time"`
	Message    string    `json:"message,omitempty"`
}

// Domain event names.
const (
	EventAdmitted      = "admitted"
	EventUpdated       = "updated"
	EventScheduled     = "scheduled"
	EventUnschedulable = "unschedulable"
	EventPropagated    = "propagated"
	EventRunning       = "running"
	EventProgressing   = "progressing"
	EventDegraded      = "degraded"
	EventSucceeded     = "succeeded"
	EventFailed        = "failed"
	EventDeleted       = "deleted"
	// Operations (admission publishes them when one changes a workload).
	EventPaused    = "paused"
	EventResumed   = "resumed"
	EventStopped   = "stopped"
	EventStarted   = "started"
	EventRestarted = "restarted"
	EventScaled    = "scaled"
)

// Limit caps a project's use of one tier. Each amount is a cap: 0
// forbids the resource (GPUs: 0 means none allowed). A resource left
// unset (nil) follows the region's default for the tier
// (QuotaDefaults); there is no unlimited value, a platform admin sets a
// large amount instead.
type Limit struct {
	MilliCPU    *int64 `json:"milliCPU,omitempty"`
	MemoryBytes *int64 `json:"memoryBytes,omitempty"`
	GPUs        *int64 `json:"gpus,omitempty"`
	Pods        *int64 `json:"pods,omitempty"`
	// StorageBytes caps requested storage: emptyDir size limits and
	// persistent volume claims.
	StorageBytes *int64 `json:"storageBytes,omitempty"`
}

// QuotaReserve asks to hold Demand for a workload, replacing what it held.
type QuotaReserve struct {
	Project string `json:"project"`
	Key     string `json:"key"`
	Demand  Demand `json:"demand"`
}

// QuotaRelease gives back what a workload held.
type QuotaRelease struct {
	Project string `json:"project"`
	Key     string `json:"key"`
}

// QuotaSet sets a project's limit for one tier, replacing the tier's
// previous limit; its unset resources follow the region's default.
type QuotaSet struct {
	Project string `json:"project"`
	Tier    Tier   `json:"tier"`
	Limit   Limit  `json:"limit"`
}

// QuotaRejection says which limit a reservation would break.
type QuotaRejection struct {
	Project   string `json:"project"`
	Tier      Tier   `json:"tier"`
	Resource  string `json:"resource"`
	Limit     int64  `json:"limit"`
	Used      int64  `json:"used"`
	Requested int64  `json:"requested"`
}

func (r *QuotaRejection) Error() string {
	switch {
	case r.Resource == ResourceWorkloads:
		return fmt.Sprintf("project %s holds %d workloads, the most a project may hold; delete workloads it no longer needs, or ask a platform admin",
			r.Project, r.Used)
	case r.Limit == 0:
		return fmt.Sprintf("quota of project %s, tier %s, allows no %s (limit 0), requested %d; ask a platform admin for a quota",
			r.Project, r.Tier, r.Resource, r.Requested)
	}
	return fmt.Sprintf("quota exceeded for project %s, tier %s, %s: limit %d, used %d, requested %d",
		r.Project, r.Tier, r.Resource, r.Limit, r.Used, r.Requested)
}

// Request/reply error codes, HTTP-like, carried in Nats-Service-Error-Code.
const (
	StatusBadRequest    = 400
	StatusForbidden     = 403
	StatusNotFound      = 404
	StatusConflict      = 409
	StatusUnprocessable = 422
	StatusInternal      = 500
	StatusUnavailable   = 503
)

// ErrorBody is the JSON body of an error reply.
type ErrorBody struct {
	// Code is a machine-readable reason (Invalid, Forbidden, QuotaExceeded, ...).
	Code    string `json:"code"`
	Message string `json:"message"`
	// Fields lists every field problem, for Invalid and Forbidden.
	Fields FieldErrors `json:"fields,omitempty"`
	// Quota names the broken limit, for QuotaExceeded.
	Quota *QuotaRejection `json:"quota,omitempty"`
}

// WorkloadRef names one workload.
type WorkloadRef struct {
	Project string `json:"project"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	// Force, on a delete, deletes a Config or Secret that workloads still
	// name (they then show ConditionConfigMissing).
	Force bool `json:"force,omitempty"`
}
