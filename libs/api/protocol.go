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

// Limit caps a project's use of one tier. A zero field means no limit on that resource.
type Limit struct {
	MilliCPU    int64 `json:"milliCPU,omitempty"`
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	GPUs        int64 `json:"gpus,omitempty"`
	Pods        int64 `json:"pods,omitempty"`
}

// Ledger is a project's quota: limits per tier and each workload's
// reservation, stored in the quota bucket under the project's name.
type Ledger struct {
	Project string `json:"project"`
	// Limits per tier; a tier without an entry is unlimited.
	Limits map[Tier]Limit `json:"limits,omitempty"`
	// Reservations by workload key.
	Reservations map[string]Reservation `json:"reservations,omitempty"`
}

// Reservation is one workload's share of its project's quota.
type Reservation struct {
	Demand Demand    `json:"demand"`
	At     time.Time `json:"at"`
}

// Used totals the reservations of one tier.
func (l *Ledger) Used(t Tier) Demand {
	u := Demand{Tier: t}
	for _, r := range l.Reservations {
		if r.Demand.Tier != t {
			continue
		}
		u.MilliCPU += r.Demand.MilliCPU
		u.MemoryBytes += r.Demand.MemoryBytes
		u.GPUs += r.Demand.GPUs
		u.Pods += r.Demand.Pods
	}
	return u
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

// QuotaSet sets a project's limit for one tier.
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
	return fmt.Sprintf("quota exceeded for project %s, tier %s, %s: limit %d, used %d, requested %d",
		r.Project, r.Tier, r.Resource, r.Limit, r.Used, r.Requested)
}

// Check returns the first limit of tier d.Tier that holding d on top of
// used would break, or nil.
func (l *Ledger) Check(d Demand, used Demand) *QuotaRejection {
	lim, ok := l.Limits[d.Tier]
	if !ok {
		return nil
	}
	for _, c := range []struct {
		name              string
		limit, used, want int64
	}{
		{"cpu", lim.MilliCPU, used.MilliCPU, d.MilliCPU},
		{"memory", lim.MemoryBytes, used.MemoryBytes, d.MemoryBytes},
		{"nvidia.com/gpu", lim.GPUs, used.GPUs, d.GPUs},
		{"pods", lim.Pods, used.Pods, d.Pods},
	} {
		if c.limit > 0 && c.used+c.want > c.limit {
			return &QuotaRejection{Project: l.Project, Tier: d.Tier, Resource: c.name, Limit: c.limit, Used: c.used, Requested: c.want}
		}
	}
	return nil
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
}

// Clone returns a copy whose maps can be changed without touching l.
func (l *Ledger) Clone() *Ledger {
	c := &Ledger{Project: l.Project, Limits: make(map[Tier]Limit, len(l.Limits)), Reservations: make(map[string]Reservation, len(l.Reservations)+1)}
	for k, v := range l.Limits {
		c.Limits[k] = v
	}
	for k, v := range l.Reservations {
		c.Reservations[k] = v
	}
	return c
}
