package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The quota bucket holds two kinds of key (services/quota is its only
// writer; its package comment explains how they stay consistent), and
// the region's defaults:
//
//	p.<project>        Ledger: limits and usage per tier (bounded size)
//	r.<project>.<key>  Reservation: what one workload holds
//	d.defaults         QuotaDefaults: the quota of a project with no limit of its own
//
// <project> and <key> are escaped with EscapeKeyToken.
const (
	// QuotaProjectPrefix starts every Ledger key.
	QuotaProjectPrefix = "p."
	// QuotaReservationPrefix starts every Reservation key.
	QuotaReservationPrefix = "r."
	// QuotaProjectFilter matches every Ledger key (a KV watch filter).
	QuotaProjectFilter = QuotaProjectPrefix + ">"
	// QuotaDefaultsKey holds the region's QuotaDefaults, as the quota
	// service is configured (it writes the key when it starts), for
	// readers such as the gateway.
	QuotaDefaultsKey = "d.defaults"
)

// DefaultMaxWorkloads is how many workloads a project may hold unless
// the quota service is configured otherwise.
const DefaultMaxWorkloads = 10_000

// QuotaDefaults is the quota of a project with no limit of its own: per
// tier, every resource capped (a tier missing here, or a resource unset,
// is 0: forbidden), and the number of workloads a project may hold.
type QuotaDefaults struct {
	// Limits per tier; each resource of each is a cap.
	Limits map[Tier]Limit `json:"limits"`
	// MaxWorkloads caps the workloads of a project, whatever their tier.
	MaxWorkloads int64 `json:"maxWorkloads"`
}

// Resolved are a tier's caps: what a Limit sets, the default where it
// sets nothing.
type Resolved struct {
	MilliCPU, MemoryBytes, GPUs, Pods, StorageBytes int64
}

// Resolve returns the caps of tier t for a project whose explicit limit
// for t is lim (nil: none), given the region's defaults.
func (d QuotaDefaults) Resolve(t Tier, lim *Limit) Resolved {
	def := d.Limits[t]
	pick := func(own *int64, dflt *int64) int64 {
		switch {
		case lim != nil && own != nil:
			return *own
		case dflt != nil:
			return *dflt
		}
		return 0
	}
	var l Limit
	if lim != nil {
		l = *lim
	}
	return Resolved{
		MilliCPU:     pick(l.MilliCPU, def.MilliCPU),
		MemoryBytes:  pick(l.MemoryBytes, def.MemoryBytes),
		GPUs:         pick(l.GPUs, def.GPUs),
		Pods:         pick(l.Pods, def.Pods),
		StorageBytes: pick(l.StorageBytes, def.StorageBytes),
	}
}

// Quota resource names, as a QuotaRejection names them.
const (
	ResourceCPU       = "cpu"
	ResourceMemory    = "memory"
	ResourcePods      = "pods"
	ResourceStorage   = "storage"
	ResourceWorkloads = "workloads"
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
	// Limits per tier set for the project; a tier without an entry, and a
	// resource an entry leaves unset, follow the region's QuotaDefaults.
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
	// Grants are the IDs of the last GrantRing quota requests whose limits
	// were applied, oldest first: an approval finished twice (a retry, the
	// repair sweep) applies them once.
	Grants []string `json:"grants,omitempty"`
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

// Caps are the project's caps for tier t: its own limit where it set
// one, the region's default elsewhere.
func (l *Ledger) Caps(t Tier, def QuotaDefaults) Resolved {
	if lim, ok := l.Limits[t]; ok {
		return def.Resolve(t, &lim)
	}
	return def.Resolve(t, nil)
}

// Check returns the first cap of tier d.Tier, under the region's
// defaults def, that holding d on top of used would break, or nil. prev
// is what d replaces in the same tier (zero for none): a resource d does
// not raise above prev is not checked, so shrinking or stopping a
// workload is never refused, even over a cap lowered since.
func (l *Ledger) Check(d, used, prev Demand, def QuotaDefaults) *QuotaRejection {
	c := l.Caps(d.Tier, def)
	for _, r := range []struct {
		name                    string
		limit, used, want, prev int64
	}{
		{ResourceCPU, c.MilliCPU, used.MilliCPU, d.MilliCPU, prev.MilliCPU},
		{ResourceMemory, c.MemoryBytes, used.MemoryBytes, d.MemoryBytes, prev.MemoryBytes},
		{ResourceGPUName, c.GPUs, used.GPUs, d.GPUs, prev.GPUs},
		{ResourcePods, c.Pods, used.Pods, d.Pods, prev.Pods},
		{ResourceStorage, c.StorageBytes, used.StorageBytes, d.StorageBytes, prev.StorageBytes},
	} {
		if r.want > r.prev && r.used+r.want > r.limit {
			return &QuotaRejection{Project: l.Project, Tier: d.Tier, Resource: r.name, Limit: r.limit, Used: r.used, Requested: r.want}
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
	c.Grants = append([]string(nil), l.Grants...)
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
	// Aborted marks a pending intent that a recount found undecidable (its
	// outcome had left the ledger's ring) and refused: written to the key
	// before the ledger records the refusal, so its owner can no longer
	// commit it, and finished (as refused) only once a ledger recording
	// that refusal has been written.
	Aborted bool `json:"aborted,omitempty"`
}
