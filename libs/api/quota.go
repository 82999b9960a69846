package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The quota bucket holds two kinds of key (services/quota is its only
// writer; its package comment explains how they stay consistent):
//
//	p.<project>        Ledger: limits and usage per tier (bounded size)
//	r.<project>.<key>  Reservation: what one workload holds
//
// <project> and <key> are escaped with EscapeKeyToken.
const (
	// QuotaProjectPrefix starts every Ledger key.
	QuotaProjectPrefix = "p."
	// QuotaReservationPrefix starts every Reservation key.
	QuotaReservationPrefix = "r."
	// QuotaProjectFilter matches every Ledger key (a KV watch filter).
	QuotaProjectFilter = QuotaProjectPrefix + ">"
)

// QuotaProjectKey is the quota bucket key of a project's Ledger.
func QuotaProjectKey(project string) string {
	return QuotaProjectPrefix + escape(project, true)
}

// QuotaProjectOfKey returns the project of a Ledger key.
func QuotaProjectOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, QuotaProjectPrefix)
	if !ok {
		return "", false
	}
	p, err := UnescapeKeyToken(rest)
	return p, err == nil
}

// QuotaReservationKey is the quota bucket key of the reservation of
// workload key in project.
func QuotaReservationKey(project, key string) string {
	return QuotaReservationPrefix + escape(project, true) + "." + escape(key, false)
}

// QuotaReservationFilter matches the keys of every reservation of project.
func QuotaReservationFilter(project string) string {
	return QuotaReservationPrefix + escape(project, true) + ".>"
}

// EscapeKeyToken makes s usable in a Key-Value key ([-/_=.a-zA-Z0-9], no
// empty dot-separated token): every other byte, '=', and each '.' that
// would leave a token empty become =XX (hex). It is injective.
func EscapeKeyToken(s string) string { return escape(s, false) }

// escape is EscapeKeyToken; with allDots every '.' is escaped, so the
// result is a single token.
func escape(s string, allDots bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		case c == '.' && !allDots && i > 0 && i < len(s)-1 && s[i-1] != '.':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	if b.Len() == 0 {
		return "="
	}
	return b.String()
}

// UnescapeKeyToken reverses EscapeKeyToken.
func UnescapeKeyToken(s string) (string, error) {
	if s == "=" {
		return "", nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("escaped key %q: short escape at %d", s, i)
		}
		c, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("escaped key %q: bad escape at %d: %w", s, i, err)
		}
		b.WriteByte(byte(c))
		i += 2
	}
	return b.String(), nil
}

// Ledger is a project's quota: limits and usage per tier. It is the value
// at QuotaProjectKey(project) and the reply of quota's get. Its size does
// not grow with the number of workloads: each reservation is a key of its
// own.
type Ledger struct {
	Project string `json:"project"`
	// Limits per tier; a tier without an entry is unlimited.
	Limits map[Tier]Limit `json:"limits,omitempty"`
	// Usage totals what the project's reservations hold, per tier.
	Usage map[Tier]Demand `json:"used,omitempty"`
	// Reservations counts the workloads that hold a reservation.
	Reservations int64 `json:"reservations"`
	// Seq counts the reservation transactions decided (applied or refused).
	Seq uint64 `json:"seq,omitempty"`
	// Txns are the outcomes of the last transactions decided, oldest first:
	// a transaction id followed by TxnApplied or TxnRefused. Quota keeps a
	// bounded number; it strips them from the get reply.
	Txns []string `json:"txns,omitempty"`
}

// Transaction outcomes, the last byte of a Ledger.Txns entry.
const (
	TxnApplied = '+'
	TxnRefused = '-'
)

// Used is what the project's reservations of tier t hold.
func (l *Ledger) Used(t Tier) Demand {
	u := l.Usage[t]
	u.Tier = t
	return u
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

// Clone returns a copy whose maps and slices can be changed without touching l.
func (l *Ledger) Clone() *Ledger {
	c := *l
	c.Limits = make(map[Tier]Limit, len(l.Limits))
	for k, v := range l.Limits {
		c.Limits[k] = v
	}
	c.Usage = make(map[Tier]Demand, len(l.Usage)+1)
	for k, v := range l.Usage {
		c.Usage[k] = v
	}
	c.Txns = append([]string(nil), l.Txns...)
	return &c
}

// ReservationState says whether a reservation is counted in its project's
// Ledger or is an intent whose transaction may not be decided yet.
type ReservationState string

// Reservation states.
const (
	// ReservationPending: transaction Txn replaces Prev (counted before it)
	// with Demand, if the limits allow.
	ReservationPending ReservationState = "pending"
	// ReservationCommitted: Demand is counted.
	ReservationCommitted ReservationState = "committed"
	// ReservationReleasing: transaction Txn gives back Demand; the key is
	// deleted once it is decided.
	ReservationReleasing ReservationState = "releasing"
)

// Reservation is one workload's share of its project's quota, at
// QuotaReservationKey(Project, Key).
type Reservation struct {
	Project string           `json:"project"`
	Key     string           `json:"key"`
	State   ReservationState `json:"state"`
	Demand  Demand           `json:"demand"`
	// Prev is what the project's Ledger counts for the key until a pending
	// transaction is applied; nil when it counts nothing.
	Prev *Demand `json:"prev,omitempty"`
	// Txn identifies the last transaction on the key.
	Txn string `json:"txn,omitempty"`
	// Seq is a lower bound of the Ledger's Seq when Txn began.
	Seq uint64 `json:"seq,omitempty"`
	// At is when the reservation last changed (the orphan sweep's clock).
	At time.Time `json:"at"`
}
