package lease

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Sharing a group of leases among replicas.
//
// RunShared campaigns as Run does for a lease of a group the replicas of a
// service share, such as the propagator's one lease per member cluster.
// Stagger spreads such leases as replicas take free or expired ones, but a
// replica that starts after the others have taken every lease of the group
// (a restart after a kill) would stay a mere standby. So each replica
// campaigning in a group also keeps a presence record,
// PresenceKey(group, holder): how many of the group's leases it holds and
// which it campaigns for, written every RenewEvery and deleted when it
// stops. Every countEvery it reads the others' records, and counts as live
// those whose revision it has seen change within TTL on its own clock
// (never the writer's timestamps, as for leases).
//
// A holder gives a lease back, after a renewal, when it holds at least two
// more of the group than a live replica that campaigns for that lease: it
// stops the lease's function as when a lease is lost, deletes the lease
// (compare-and-set on its own revision), and for Cooldown does not take
// that lease while it is free, so that the replica below takes it at its
// next poll (it still takes it over if it expires: a taker that dies is
// replaced within the usual bound). It gives back at most one lease of a
// group per TTL, so that the counts it judges by include the last move,
// and never on counts older than TTL. Two replicas sharing 3 leases end
// 2 and 1; three sharing 4 end 2, 1 and 1.
//
// Presence is a hint, never safety: a stale or wrong count moves a lease
// once more or once fewer, and the lease protocol still lets one replica
// act at a time. A presence record left by a replica that died is deleted
// by any replica once it has stayed unchanged for presenceForget TTLs.
//
// The records are read from a watch of the group's keys, kept for the
// presence loop's life (presenceWatch): listing them at each count made
// and deleted a consumer on the server every countEvery per group and
// replica, most of an idle region's JetStream API traffic. The library
// sits below libs/bus and its bucket mirror, and a group has a handful of
// replicas, so the watch is its own.

// PresenceKey is the key, in the leases bucket, of holder's presence in
// group: replicas.<group>.<holder>, with any character a key may not hold
// in one token (a dot of a host name) replaced by '_'.
func PresenceKey(group, holder string) string {
	return presencePrefix + group + "." + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
			return r
		}
		return '_'
	}, holder)
}

// IsPresenceKey reports whether key in the leases bucket is a presence
// record rather than a lease.
func IsPresenceKey(key string) bool { return strings.HasPrefix(key, presencePrefix) }

const (
	presencePrefix = "replicas."
	// presenceForget is how many TTLs a presence record may stay unchanged
	// before a replica deletes it as left by a dead replica.
	presenceForget = 10
	// presenceRewatch is how many TTLs a presence watch may deliver
	// nothing before it is started again.
	presenceRewatch = 3
)

// presence is the value of a presence key.
type presence struct {
	Holder string `json:"holder"`
	// Held is how many of the group's leases the replica holds.
	Held int `json:"held"`
	// Names are the group's leases it campaigns for.
	Names []string `json:"names"`
}

// group is the state of one group of shared leases in this elector;
// Elector.mu must be held to read or change it.
type group struct {
	names       map[string]int // the group's leases this replica campaigns for (Run calls of each)
	peers       []presence     // the other live replicas at the last count
	countedAt   time.Time      // when peers were counted (zero: never)
	lastRelease time.Time      // when this replica last gave back a lease of the group
	cancel      context.CancelFunc
	done        chan struct{} // closed when the presence loop has ended
}

// RunShared is Run for lease name of group (see the comment above).
func (e *Elector) RunShared(ctx context.Context, group, name string, fn func(ctx context.Context)) {
	e.join(ctx, group, name)
	defer e.leave(group, name)
	e.run(ctx, name, group, fn)
}

func (e *Elector) join(ctx context.Context, name, lease string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[name]
	if g == nil {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g = &group{names: map[string]int{}, cancel: cancel, done: make(chan struct{})}
		e.groups[name] = g
		go e.presence(pctx, name, g) //nolint:gosec // G118: the group outlives the request that made it; cancel (stored in g) ends it and done says it ended
	}
	g.names[lease]++
}

func (e *Elector) leave(name, lease string) {
	e.mu.Lock()
	g := e.groups[name]
	g.names[lease]--
	if g.names[lease] == 0 {
		delete(g.names, lease)
	}
	last := len(g.names) == 0
	if last {
		delete(e.groups, name)
	}
	e.mu.Unlock()
	if last {
		g.cancel()
		<-g.done
	}
}

// own is this replica's presence record in g; e.mu must be held.
func (e *Elector) own(g *group) presence {
	p := presence{Holder: e.holder}
	for l := range g.names {
		p.Names = append(p.Names, l)
		if e.held[l] {
			p.Held++
		}
	}
	slices.Sort(p.Names)
	return p
}

// presence keeps this replica's presence record in group and counts the
// live replicas, until ctx ends; then it deletes the record.
func (e *Elector) presence(ctx context.Context, name string, g *group) {
	defer close(g.done)
	key := PresenceKey(name, e.holder)
	type observed struct {
		rev uint64
		at  time.Time
	}
	seen := map[string]observed{}
	pw := newPresenceWatch(e, name)
	go pw.run(ctx)
	var ownRev uint64
	countEvery := max(e.o.TTL/2, e.o.RenewEvery)
	var counted time.Time
	t := e.o.Clock.NewTicker(e.o.RenewEvery)
	defer t.Stop()
	for {
		e.mu.Lock()
		body, _ := json.Marshal(e.own(g))
		e.mu.Unlock()
		if rev, err := e.kv.Put(ctx, key, body); err == nil {
			ownRev = rev
		} else if ctx.Err() == nil {
			e.o.Logger.Warn("write presence", "key", key, "err", err)
		}
		if e.o.Clock.Since(counted) >= countEvery {
			counted = e.o.Clock.Now()
			if records, ok := pw.records(); ok {
				now := e.o.Clock.Now()
				var peers []presence
				for k, r := range records {
					if k == key {
						continue
					}
					o, ok := seen[k]
					if !ok || o.rev != r.rev {
						o = observed{rev: r.rev, at: now}
						seen[k] = o
					}
					switch since := now.Sub(o.at); {
					case since < e.o.TTL:
						peers = append(peers, r.p)
					case since >= presenceForget*e.o.TTL:
						_ = e.kv.Delete(ctx, k, jetstream.LastRevision(r.rev))
					}
				}
				for k := range seen {
					if _, ok := records[k]; !ok {
						delete(seen, k)
					}
				}
				e.mu.Lock()
				g.peers, g.countedAt = peers, now
				e.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if ownRev != 0 {
				_ = e.kv.Delete(dctx, key, jetstream.LastRevision(ownRev))
			}
			cancel()
			return
		case <-t.C():
		}
	}
}

type presenceRecord struct {
	p   presence
	rev uint64
}

// presenceWatch holds the presence records of a group, by key, from a
// watch of its keys.
type presenceWatch struct {
	e      *Elector
	filter string
	mu     sync.Mutex
	recs   map[string]presenceRecord
	synced bool // the watch has delivered every record there was
}

func newPresenceWatch(e *Elector, group string) *presenceWatch {
	return &presenceWatch{e: e, filter: presencePrefix + group + ".*", recs: map[string]presenceRecord{}}
}

// records returns a copy of the records, and false until the watch has
// delivered every record there was when it started.
func (w *presenceWatch) records() (map[string]presenceRecord, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.recs), w.synced
}

// run watches the group's keys until ctx ends. A watch that ends (the
// bus went away and the watcher gave up) is started again, and so is
// every presenceRewatch TTLs one that no longer delivers anything: the
// records then read as unchanged, so the peers as dead, which only stops
// give-backs (presence is a hint, never safety) until the next watch.
func (w *presenceWatch) run(ctx context.Context) {
	for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, w.e.o.TTL) {
		if w.watch(ctx) {
			delay = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// watch runs one watch until it ends or stalls; it reports whether it
// delivered the records there were.
func (w *presenceWatch) watch(ctx context.Context) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kw, err := w.e.kv.Watch(wctx, w.filter)
	if err != nil {
		if ctx.Err() == nil {
			w.e.o.Logger.Debug("watch presence", "filter", w.filter, "err", err)
		}
		return false
	}
	defer func() { _ = kw.Stop() }()
	// This watch's records: private until it has caught up, then the
	// records others read (w.recs is the same map from then on, changed
	// under w.mu).
	recs := map[string]presenceRecord{}
	synced := false
	stall := time.NewTimer(presenceRewatch * w.e.o.TTL)
	defer stall.Stop()
	for {
		select {
		case <-ctx.Done():
			return synced
		case <-stall.C:
			// Live replicas write every RenewEvery: a watch silent this
			// long has stopped delivering.
			return synced
		case ent, ok := <-kw.Updates():
			if !ok {
				return synced
			}
			stall.Reset(presenceRewatch * w.e.o.TTL)
			w.mu.Lock()
			switch {
			case ent == nil:
				synced = true
				w.recs, w.synced = recs, true
			case ent.Operation() != jetstream.KeyValuePut:
				delete(recs, ent.Key())
			default:
				var p presence
				if json.Unmarshal(ent.Value(), &p) == nil {
					recs[ent.Key()] = presenceRecord{p: p, rev: ent.Revision()}
				}
			}
			w.mu.Unlock()
		}
	}
}

// giveBack reports whether this replica, holding lease of group, should
// give it back now (see the comment above); when so, it notes the release.
func (e *Elector) giveBack(name, lease string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[name]
	now := e.o.Clock.Now()
	if g == nil || g.countedAt.IsZero() || now.Sub(g.countedAt) > e.o.TTL {
		return false
	}
	if !g.lastRelease.IsZero() && now.Sub(g.lastRelease) < e.o.TTL {
		return false
	}
	least := -1
	for _, p := range g.peers {
		if slices.Contains(p.Names, lease) && (least < 0 || p.Held < least) {
			least = p.Held
		}
	}
	if least < 0 || e.own(g).Held < least+2 {
		return false
	}
	g.lastRelease = now
	return true
}
