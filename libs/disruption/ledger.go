package disruption

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/utils/clock"

	"atoll.dev/libs/bus"
)

// Errors of Acquire, tested with errors.Is.
var (
	// ErrHeld says another owner holds an unexpired lease on the node.
	ErrHeld = errors.New("node leased by another owner")
	// ErrBudget says one more disrupted node would exceed a budget.
	ErrBudget = errors.New("disruption budget exhausted")
	// ErrNotHeld says the caller does not hold the lease it renews.
	ErrNotHeld = errors.New("lease not held")
)

// NodeRef names a node of a member cluster.
type NodeRef struct {
	Cluster string `json:"cluster"`
	// Pool is the node's pool (label atoll.dev/pool), "" for none.
	Pool string `json:"pool"`
	Name string `json:"name"`
	// UID is the node object's UID: the lease's key.
	UID string `json:"uid"`
}

// Lease is one owner's hold on one node.
type Lease struct {
	Node NodeRef `json:"node"`
	// Owner is the service holding the node ("remediation", "upgrade").
	Owner string `json:"owner"`
	// Reason says what the owner does to the node, for people.
	Reason   string    `json:"reason,omitempty"`
	Acquired time.Time `json:"acquired"`
	// Expires is when the lease lapses unless renewed: a crashed owner's
	// nodes return to the budget.
	Expires time.Time `json:"expires"`
}

// Record is the value of one cluster's ledger key.
type Record struct {
	// Leases are by node UID.
	Leases map[string]Lease `json:"leases"`
}

// Limit is a count ("2") or a percentage of a domain's nodes ("25%");
// empty means no limit.
type Limit string

// Allowed is how many of total nodes the limit lets be unavailable at
// once: a count as is; a percentage of total rounded DOWN, but never
// below one while total and the percentage are positive. -1 means
// unlimited.
func (l Limit) Allowed(total int) (int, error) {
	s := strings.TrimSpace(string(l))
	if s == "" {
		return -1, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return 0, fmt.Errorf("limit %q: want 0%% to 100%%", s)
		}
		a := total * n / 100
		if a < 1 && n > 0 && total > 0 {
			a = 1
		}
		return a, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("limit %q: want a count or a percentage", s)
	}
	return n, nil
}

// Validate reports a malformed limit.
func (l Limit) Validate() error { _, err := l.Allowed(1); return err }

// Budget is the most nodes that may be unavailable at once, per pool and
// per cluster.
type Budget struct {
	Pool    Limit `json:"pool,omitempty"`
	Cluster Limit `json:"cluster,omitempty"`
}

// Fleet is what a caller knows of a cluster's nodes when it asks for a
// lease: each node's pool and whether it is NotReady, by UID.
type Fleet map[string]FleetNode

// FleetNode is one node of a Fleet.
type FleetNode struct {
	Pool     string
	NotReady bool
}

// Request asks for a lease on a node.
type Request struct {
	Node   NodeRef
	Owner  string
	Reason string
	// TTL is the lease's lifetime from now (Renew extends it).
	TTL    time.Duration
	Budget Budget
	// Fleet is every node of the cluster; the budget's totals come from it.
	Fleet Fleet
}

// Ledger reads and writes the disruption ledger.
type Ledger struct {
	kv    jetstream.KeyValue
	clock clock.PassiveClock
}

// NewLedger returns a ledger on kv (bucket bus.BucketDisruption); clk nil
// is the real clock.
func NewLedger(kv jetstream.KeyValue, clk clock.PassiveClock) *Ledger {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Ledger{kv: kv, clock: clk}
}

// OpenLedger opens the ledger's bucket on b.
func OpenLedger(ctx context.Context, b *bus.Bus) (*Ledger, error) {
	kv, err := b.KV(ctx, bus.BucketDisruption)
	if err != nil {
		return nil, fmt.Errorf("disruption ledger: %w", err)
	}
	return NewLedger(kv, nil), nil
}

// Key is the ledger key of a cluster.
func Key(cluster string) string { return "d." + cluster }

// Acquire takes or renews the lease on r.Node for r.Owner. It fails with
// ErrHeld when another owner holds an unexpired lease on the node, and
// with ErrBudget when the node is not leased yet and one more disrupted
// node would exceed r.Budget in its pool or its cluster (nodes leased by
// anyone plus NotReady nodes of r.Fleet, each counted once). An owner's
// own lease is renewed whatever the budget: it is counted already.
func (l *Ledger) Acquire(ctx context.Context, r Request) (Lease, error) {
	got, errs, err := l.AcquireAll(ctx, []Request{r})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return Lease{}, fmt.Errorf("acquire %s: %w", r.Node.Name, err)
	}
	return got[0], nil
}

// AcquireAll is Acquire for requests on nodes of one cluster, in one write
// of the cluster's ledger: each request is decided in order, as if
// acquired one after the other, so a request counts the leases granted
// before it. It returns, by request, the lease granted or why it was not
// (ErrHeld, ErrBudget); err is set when nothing could be written.
func (l *Ledger) AcquireAll(ctx context.Context, rs []Request) (got []Lease, errs []error, err error) {
	if len(rs) == 0 {
		return nil, nil, nil
	}
	cluster := rs[0].Node.Cluster
	for _, r := range rs {
		if r.Owner == "" || r.Node.UID == "" || r.Node.Cluster == "" {
			return nil, nil, errors.New("acquire: owner, node UID and cluster are required")
		}
		if r.Node.Cluster != cluster {
			return nil, nil, fmt.Errorf("acquire: nodes of clusters %s and %s in one call", cluster, r.Node.Cluster)
		}
	}
	_, err = bus.Update(ctx, l.kv, Key(cluster), func(cur []byte, exists bool) ([]byte, error) {
		rec, err := decode(cur, exists)
		if err != nil {
			return nil, err
		}
		now := l.clock.Now()
		rec.expire(now)
		got, errs = make([]Lease, len(rs)), make([]error, len(rs))
		granted := 0
		for i, r := range rs {
			if held, ok := rec.Leases[r.Node.UID]; ok && held.Owner != r.Owner {
				errs[i] = fmt.Errorf("%s/%s held by %s (%s) until %s: %w", r.Node.Cluster, r.Node.Name,
					held.Owner, held.Reason, held.Expires.Format(time.RFC3339), ErrHeld)
				continue
			}
			if _, mine := rec.Leases[r.Node.UID]; !mine {
				if err := rec.fits(r); err != nil {
					errs[i] = err
					continue
				}
			}
			got[i] = Lease{Node: r.Node, Owner: r.Owner, Reason: r.Reason, Acquired: now, Expires: now.Add(r.TTL)}
			if prev, ok := rec.Leases[r.Node.UID]; ok {
				got[i].Acquired = prev.Acquired
			}
			rec.Leases[r.Node.UID] = got[i]
			granted++
		}
		if granted == 0 {
			return nil, bus.ErrNoChange
		}
		return json.Marshal(rec)
	})
	if errors.Is(err, bus.ErrNoChange) {
		err = nil
	}
	if err != nil {
		return nil, nil, err
	}
	return got, errs, nil
}

// Renew extends owner's lease on the node to ttl from now; ErrNotHeld
// when owner does not hold it (it expired and another took it, or it was
// released).
func (l *Ledger) Renew(ctx context.Context, node NodeRef, owner string, ttl time.Duration) error {
	notHeld, err := l.RenewAll(ctx, node.Cluster, owner, []NodeRef{node}, ttl)
	if err == nil && notHeld[node.UID] {
		err = ErrNotHeld
	}
	if err != nil {
		return fmt.Errorf("renew %s: %w", node.Name, err)
	}
	return nil
}

// RenewAll is Renew for nodes of cluster, in one write of its ledger: it
// returns the UIDs of those owner does not hold (not renewed).
func (l *Ledger) RenewAll(ctx context.Context, cluster, owner string, nodes []NodeRef, ttl time.Duration) (notHeld map[string]bool, err error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	_, err = bus.Update(ctx, l.kv, Key(cluster), func(cur []byte, exists bool) ([]byte, error) {
		rec, err := decode(cur, exists)
		if err != nil {
			return nil, err
		}
		now := l.clock.Now()
		rec.expire(now)
		notHeld = map[string]bool{}
		for _, node := range nodes {
			held, ok := rec.Leases[node.UID]
			if !ok || held.Owner != owner {
				notHeld[node.UID] = true
				continue
			}
			held.Expires = now.Add(ttl)
			rec.Leases[node.UID] = held
		}
		if len(notHeld) == len(nodes) {
			return nil, bus.ErrNoChange
		}
		return json.Marshal(rec)
	})
	if errors.Is(err, bus.ErrNoChange) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return notHeld, nil
}

// Release drops owner's lease on the node; releasing a lease not held is
// not an error.
func (l *Ledger) Release(ctx context.Context, node NodeRef, owner string) error {
	_, err := bus.Update(ctx, l.kv, Key(node.Cluster), func(cur []byte, exists bool) ([]byte, error) {
		rec, err := decode(cur, exists)
		if err != nil {
			return nil, err
		}
		if held, ok := rec.Leases[node.UID]; !ok || held.Owner != owner {
			return nil, bus.ErrNoChange
		}
		delete(rec.Leases, node.UID)
		return json.Marshal(rec)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return fmt.Errorf("release %s: %w", node.Name, err)
	}
	return nil
}

// Leases lists a cluster's unexpired leases, by node name.
func (l *Ledger) Leases(ctx context.Context, cluster string) ([]Lease, error) {
	e, err := l.kv.Get(ctx, Key(cluster))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: %w", cluster, err)
	}
	rec, err := decode(e.Value(), true)
	if err != nil {
		return nil, err
	}
	rec.expire(l.clock.Now())
	out := slices.Collect(maps.Values(rec.Leases))
	slices.SortFunc(out, func(a, b Lease) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out, nil
}

func decode(cur []byte, exists bool) (*Record, error) {
	rec := &Record{}
	if exists && len(cur) > 0 {
		if err := json.Unmarshal(cur, rec); err != nil {
			return nil, fmt.Errorf("decode ledger: %w", err)
		}
	}
	if rec.Leases == nil {
		rec.Leases = map[string]Lease{}
	}
	return rec, nil
}

// expire drops the leases past their expiry.
func (rec *Record) expire(now time.Time) {
	maps.DeleteFunc(rec.Leases, func(_ string, l Lease) bool { return !now.Before(l.Expires) })
}

// fits checks that r.Node, added to the disrupted nodes, stays within the
// budget of its pool and its cluster.
func (rec *Record) fits(r Request) error {
	out := map[string]string{} // disrupted node UID -> pool
	// Acting on a node that is NotReady already makes nothing less
	// available: it waits only for the nodes under lease, so one broken
	// node never waits for another to be repaired.
	if !r.Fleet[r.Node.UID].NotReady {
		for uid, n := range r.Fleet {
			if n.NotReady {
				out[uid] = n.Pool
			}
		}
	}
	for uid, l := range rec.Leases {
		out[uid] = l.Node.Pool
	}
	out[r.Node.UID] = r.Node.Pool
	poolTotal, poolOut := 0, 0
	for _, n := range r.Fleet {
		if n.Pool == r.Node.Pool {
			poolTotal++
		}
	}
	for _, p := range out {
		if p == r.Node.Pool {
			poolOut++
		}
	}
	for _, c := range []struct {
		domain     string
		limit      Limit
		total, out int
	}{
		{"pool " + r.Node.Pool, r.Budget.Pool, poolTotal, poolOut},
		{"cluster " + r.Node.Cluster, r.Budget.Cluster, len(r.Fleet), len(out)},
	} {
		allowed, err := c.limit.Allowed(c.total)
		if err != nil {
			return err
		}
		if allowed >= 0 && c.out > allowed {
			return fmt.Errorf("%s: %d of %d nodes would be unavailable, budget %s allows %d: %w",
				c.domain, c.out, c.total, c.limit, allowed, ErrBudget)
		}
	}
	return nil
}
