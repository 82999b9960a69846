// Package lease elects one holder per named lease kept in a Key-Value
// bucket (bus.BucketLeases). Every service that acts on watched state runs
// its acting part under a lease: one lease per service (the scheduler), or
// one per member cluster so that replicas share the clusters (the
// propagator, the aggregator).
//
// Safety does not rest on clocks agreeing across machines: a candidate never
// reads the holder's timestamps. It takes a held lease only after it has
// seen the lease's revision stay unchanged for a whole TTL on its own
// monotonic clock (client-go's leaderelection does the same with its
// "observed time"). A holder renews every RenewEvery and, once StopAfter has
// passed since the start of its last successful renewal, cancels the
// context it gave its function and waits for the function to return. Since
// StopAfter < TTL and a candidate's observation of a revision starts no
// earlier than the write that made it, the old holder has stopped acting
// before any candidate can take the lease. Functions run under a lease must
// therefore honour their context promptly.
//
// Takeover after a holder dies without releasing (kill -9, a frozen host) is
// TTL after the holder's last renewal, 6 s with the defaults: a candidate
// watches the key, so it sees each revision as it is written and takes the
// lease as soon as it has seen it unchanged for a TTL. A holder that stops
// cleanly deletes its lease and a candidate takes it as the deletion
// arrives. A replica
// that restarts under the same Options.Instance (a pod restarting its
// container) takes back the leases its previous run held at once.
//
// Replicas spread leases: before taking a free or expired lease a candidate
// waits Stagger for each lease it already holds, so the replica holding
// fewer leases usually wins; and a group of leases run with RunShared is
// rebalanced when a replica holds more than its share (share.go).
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/utils/clock"
)

// Record is the value of a lease key.
type Record struct {
	// Holder identifies the replica holding the lease.
	Holder string `json:"holder"`
	// Acquired is when the holder took the lease (its own clock; for display).
	Acquired time.Time `json:"acquired"`
	// Renewed is when the holder last renewed it (its own clock; for display).
	Renewed time.Time `json:"renewed"`
	// Instance is the holder's Options.Instance, its replica's name across
	// restarts ("" when it has none).
	Instance string `json:"instance,omitempty"`
}

// Options tunes an Elector; zero fields take the defaults.
type Options struct {
	// TTL is how long a candidate must see a lease unchanged before it
	// takes it (default 6s).
	TTL time.Duration
	// RenewEvery is the holder's renewal period (default TTL/6).
	RenewEvery time.Duration
	// StopAfter is how long a holder acts without a successful renewal
	// (default TTL/2; must be below TTL).
	StopAfter time.Duration
	// Poll is how often a candidate reads a lease it does not hold
	// (default TTL/6).
	Poll time.Duration
	// Stagger delays taking a free lease by this much per lease already
	// held (default 200ms).
	Stagger time.Duration
	// Cooldown is how long a replica that gave back a shared lease does
	// not take it while it is free (default 2*TTL; see RunShared).
	Cooldown time.Duration
	// Instance names this replica across its restarts; no other live
	// replica has the same (see InstanceEnv and InstanceOf). A lease whose
	// record names this Instance but another holder was held by an earlier
	// run of this replica, which has ended: it is taken back at once
	// instead of after a TTL. Empty: none, every lease is waited for.
	Instance string
	// Clock is the time source (default the real clock).
	Clock clock.WithTicker
	// Logger receives leadership changes (default slog.Default()).
	Logger *slog.Logger
	// OnChange, when set, is called whenever a lease is taken or lost.
	OnChange func(name string, held bool)
}

func (o *Options) defaults() error {
	if o.TTL <= 0 {
		o.TTL = 6 * time.Second
	}
	if o.RenewEvery <= 0 {
		o.RenewEvery = o.TTL / 6
	}
	if o.StopAfter <= 0 {
		o.StopAfter = o.TTL / 2
	}
	if o.Poll <= 0 {
		o.Poll = o.TTL / 6
	}
	if o.Stagger <= 0 {
		o.Stagger = 200 * time.Millisecond
	}
	if o.Cooldown <= 0 {
		o.Cooldown = 2 * o.TTL
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StopAfter >= o.TTL || o.RenewEvery >= o.StopAfter {
		return fmt.Errorf("lease options: need RenewEvery (%s) < StopAfter (%s) < TTL (%s)", o.RenewEvery, o.StopAfter, o.TTL)
	}
	return nil
}

// Elector campaigns for leases on behalf of one replica.
type Elector struct {
	kv     jetstream.KeyValue
	holder string
	o      Options

	mu     sync.Mutex
	held   map[string]bool   // mu must be held
	groups map[string]*group // mu must be held; the groups of shared leases campaigned for (share.go)
}

// NewElector returns an elector for the replica named holder (use
// NewHolderID for a name unique to this process).
func NewElector(kv jetstream.KeyValue, holder string, o Options) (*Elector, error) {
	if holder == "" {
		return nil, errors.New("lease: empty holder id")
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return &Elector{kv: kv, holder: holder, o: o, held: map[string]bool{}, groups: map[string]*group{}}, nil
}

// InstanceEnv names the environment variable that gives a replica a name
// that stays the same across its restarts and that no other live replica
// has (a pod's name, a Compose container's name; the test region sets
// <service>-<replica>). NewHolderID builds holder ids on it.
const InstanceEnv = "ATOLL_INSTANCE"

// NewHolderID returns prefix-hostname-random, unique to this process. When
// InstanceEnv is set it returns instance-random instead (prefix-instance-random
// when the instance does not start with prefix), and InstanceOf gives the
// part a later run of the same replica shares.
func NewHolderID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	if inst := os.Getenv(InstanceEnv); inst != "" {
		if !strings.HasPrefix(inst, prefix) {
			inst = prefix + "-" + inst
		}
		return inst + "-" + hex.EncodeToString(b[:])
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%s-%s", prefix, host, hex.EncodeToString(b[:]))
}

// InstanceOf returns the part of holder, made by NewHolderID, that a later
// run of the same replica shares (its id without the random suffix), or ""
// when InstanceEnv is not set or holder was not made on it.
func InstanceOf(holder string) string {
	inst := os.Getenv(InstanceEnv)
	i := strings.LastIndex(holder, "-")
	if inst == "" || i < 0 || !strings.HasSuffix(holder[:i], inst) {
		return ""
	}
	return holder[:i]
}

// Holder is this elector's replica name.
func (e *Elector) Holder() string { return e.holder }

// Held reports whether this replica holds lease name now.
func (e *Elector) Held(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.held[name]
}

// HeldNames lists the leases this replica holds now.
func (e *Elector) HeldNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.held))
	for n, ok := range e.held {
		if ok {
			out = append(out, n)
		}
	}
	return out
}

func (e *Elector) heldCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ok := range e.held {
		if ok {
			n++
		}
	}
	return n
}

func (e *Elector) setHeld(name string, held bool) {
	e.mu.Lock()
	if held {
		e.held[name] = true
	} else {
		delete(e.held, name)
	}
	e.mu.Unlock()
	if e.o.OnChange != nil {
		e.o.OnChange(name, held)
	}
}

// Current returns the record of lease name and its revision, or
// jetstream.ErrKeyNotFound when nobody holds it.
func Current(ctx context.Context, kv jetstream.KeyValue, name string) (Record, uint64, error) {
	ent, err := kv.Get(ctx, name)
	if err != nil {
		return Record{}, 0, err
	}
	var r Record
	if err := json.Unmarshal(ent.Value(), &r); err != nil {
		return Record{}, 0, fmt.Errorf("decode lease %s: %w", name, err)
	}
	return r, ent.Revision(), nil
}

// Run campaigns for lease name until ctx ends. Each time the lease is won
// fn runs with a context that is cancelled when the lease is lost (or ctx
// ends); Run waits for fn to return before it campaigns again. When ctx ends
// while the lease is held, the lease is released for a standby to take at
// once. Lease names must be valid Key-Value keys.
func (e *Elector) Run(ctx context.Context, name string, fn func(ctx context.Context)) {
	e.run(ctx, name, "", fn)
}

// run is Run for a lease of group, or of none when group is "".
func (e *Elector) run(ctx context.Context, name, group string, fn func(ctx context.Context)) {
	log := e.o.Logger.With("lease", name, "holder", e.holder)
	var (
		observedRev uint64    // the revision last seen held by another
		observedAt  time.Time // when it was first seen
		ownRev      uint64    // the revision this replica last wrote
		coolUntil   time.Time // until when this replica does not take the lease free (it gave it back)
	)
	changed := e.watch(ctx, name, log)
	for ctx.Err() == nil {
		rev, ok := e.tryAcquire(ctx, name, &observedRev, &observedAt, ownRev, !e.o.Clock.Now().Before(coolUntil), log)
		if ok {
			var gaveBack bool
			ownRev, gaveBack = e.lead(ctx, name, group, rev, fn, log)
			if gaveBack {
				coolUntil = e.o.Clock.Now().Add(e.o.Cooldown)
			}
			continue
		}
		// Wake at the next poll, when the revision seen would have stayed
		// unchanged a whole TTL if that is sooner, or when the key changes
		// (renewed, released): a standby takes a lease the moment it
		// expires or is released, not at its next poll.
		wait := e.o.Poll
		if observedRev != 0 {
			if left := e.o.TTL - e.o.Clock.Since(observedAt); left > 0 && left < wait {
				wait = left
			}
		}
		t := e.o.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-changed:
			t.Stop()
		}
	}
}

// watch returns a channel that gets a signal (never blocking) when lease
// name's key changes, until ctx ends; a channel that never does when the
// bucket cannot be watched (the elector then polls only).
func (e *Elector) watch(ctx context.Context, name string, log *slog.Logger) <-chan struct{} {
	ch := make(chan struct{}, 1)
	w, err := e.kv.Watch(ctx, name, jetstream.UpdatesOnly())
	if err != nil {
		log.Debug("watch lease; polling only", "err", err)
		return ch
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case ent, ok := <-w.Updates():
				if !ok {
					return
				}
				if ent == nil {
					continue
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch
}

// tryAcquire makes one attempt to take lease name; it returns the revision
// written when it did. Without takeFree it does not take a free lease, only
// an expired one.
func (e *Elector) tryAcquire(ctx context.Context, name string, observedRev *uint64, observedAt *time.Time, ownRev uint64, takeFree bool, log *slog.Logger) (uint64, bool) {
	cur, rev, err := Current(ctx, e.kv, name)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if !takeFree {
			return 0, false
		}
		if !e.sleep(ctx, time.Duration(e.heldCount())*e.o.Stagger) {
			return 0, false
		}
		n, err := e.kv.Create(ctx, name, e.record(time.Time{}))
		if err != nil {
			return 0, false // another candidate was first, or the bus is down
		}
		return n, true
	case err != nil:
		if ctx.Err() == nil {
			log.Debug("read lease", "err", err)
		}
		return 0, false
	}
	if e.o.Instance != "" && cur.Instance == e.o.Instance && cur.Holder != e.holder {
		// Held by this replica's previous run, which has ended (a replica
		// runs once at a time): no one acts under it, take it back now.
		n, err := e.kv.Update(ctx, name, e.record(time.Time{}), rev)
		if err != nil {
			return 0, false
		}
		log.Info("lease taken back from this replica's previous run", "previous", cur.Holder)
		return n, true
	}
	if cur.Holder == e.holder && (rev == ownRev || takeFree) {
		// Still ours (renewals failed for a while, nobody took it): take
		// it back with compare-and-set. The revision may be newer than
		// the last this replica knows it wrote, when a renewal that timed
		// out was applied all the same (a slow or restarting bus); the
		// record still names this replica, whose function has stopped, so
		// no one acts under it and waiting a TTL would only idle.
		n, err := e.kv.Update(ctx, name, e.record(cur.Acquired), rev)
		return n, err == nil
	}
	now := e.o.Clock.Now()
	if rev != *observedRev {
		*observedRev, *observedAt = rev, now
		return 0, false
	}
	if e.o.Clock.Since(*observedAt) < e.o.TTL {
		return 0, false
	}
	if !e.sleep(ctx, time.Duration(e.heldCount())*e.o.Stagger) {
		return 0, false
	}
	n, err := e.kv.Update(ctx, name, e.record(time.Time{}), rev)
	if err != nil {
		return 0, false
	}
	log.Info("lease taken over from an expired holder", "previous", cur.Holder, "unchanged_for", e.o.Clock.Since(*observedAt).String())
	return n, true
}

func (e *Elector) record(acquired time.Time) []byte {
	now := e.o.Clock.Now().UTC()
	if acquired.IsZero() {
		acquired = now
	}
	b, _ := json.Marshal(Record{Holder: e.holder, Acquired: acquired, Renewed: now, Instance: e.o.Instance})
	return b
}

// lead runs fn while the lease is held and returns the last revision this
// replica wrote, and whether it gave the lease back to share group's
// leases (see RunShared).
func (e *Elector) lead(ctx context.Context, name, group string, rev uint64, fn func(context.Context), log *slog.Logger) (uint64, bool) {
	lastOK := e.o.Clock.Now() // no later than the write that won the lease
	acquired := lastOK.UTC()
	e.setHeld(name, true)
	log.Info("lease acquired")
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(lctx)
	}()
	stop := func(reason string) {
		cancel()
		<-done
		e.setHeld(name, false)
		log.Info("lease given up", "reason", reason)
	}
	t := e.o.Clock.NewTicker(e.o.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stop("stopping")
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = e.kv.Delete(rctx, name, jetstream.LastRevision(rev))
			rcancel()
			return 0, false
		case <-done:
			// fn returned by itself: it no longer wants to act; let another.
			cancel()
			e.setHeld(name, false)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = e.kv.Delete(rctx, name, jetstream.LastRevision(rev))
			rcancel()
			<-ctx.Done()
			return 0, false
		case <-t.C():
			start := e.o.Clock.Now()
			left := e.o.StopAfter - e.o.Clock.Since(lastOK)
			rctx, rcancel := context.WithTimeout(ctx, max(left, time.Millisecond))
			n, err := e.kv.Update(rctx, name, e.record(acquired), rev)
			rcancel()
			switch {
			case err == nil:
				rev, lastOK = n, start
				if group != "" && e.giveBack(group, name) {
					stop("given back: this replica holds more than its share of " + group)
					rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
					_ = e.kv.Delete(rctx, name, jetstream.LastRevision(rev))
					rcancel()
					return 0, true
				}
			case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
				stop("lease lost to another holder")
				return 0, false
			case ctx.Err() != nil:
			default:
				log.Warn("renew lease", "err", err)
			}
			if e.o.Clock.Since(lastOK) >= e.o.StopAfter {
				stop(fmt.Sprintf("not renewed for %s", e.o.StopAfter))
				return rev, false
			}
		}
	}
}

// sleep waits d on the elector's clock; false when ctx ended first.
func (e *Elector) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := e.o.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
