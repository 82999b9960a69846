package lease

import (
	"context"
	"errors"
	"strings"
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
// campaigning in a group also keeps a presence key,
// PresenceKey(group, holder), written every RenewEvery and deleted when it
// stops, and counts the presence keys whose revision it has seen change
// within TTL on its own clock (never the writer's timestamps, as for
// leases). Its share is the group's leases it campaigns for divided by the
// replicas live, rounded up; a holder above its share gives one lease back
// after a renewal: it stops the lease's function as when a lease is lost,
// deletes the lease (compare-and-set on its own revision), and waits
// Cooldown before campaigning for it again, so that a replica below its
// share takes it at its next poll. It gives back at most one lease of a
// group per TTL, so that the count it judges by includes the last move.
//
// Presence is a hint, never safety: a wrong count moves one lease more or
// one fewer, and the lease protocol still lets one replica act at a time.
// A presence key left by a replica that died is deleted by any replica
// once it has stayed unchanged for presenceForget.

// PresenceKey is the key, in the leases bucket, of holder's presence in
// group: replicas.<group>.<holder>.
func PresenceKey(group, holder string) string { return presencePrefix + group + "." + holder }

// IsPresenceKey reports whether key in the leases bucket is a presence
// key rather than a lease.
func IsPresenceKey(key string) bool { return strings.HasPrefix(key, presencePrefix) }

const (
	presencePrefix = "replicas."
	// presenceForget is how many TTLs a presence key may stay unchanged
	// before a replica deletes it as left by a dead replica.
	presenceForget = 10
)

// group is the state of one group of shared leases in this elector;
// Elector.mu must be held to read or change it.
type group struct {
	names       map[string]int // the group's leases this replica campaigns for (Run calls of each)
	live        int            // replicas live at the last look, this one included
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
		g = &group{names: map[string]int{}, live: 1, cancel: cancel, done: make(chan struct{})}
		e.groups[name] = g
		go e.presence(pctx, name, g)
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

// presence keeps this replica's presence key in group and counts the
// replicas live, until ctx ends; then it deletes the key.
func (e *Elector) presence(ctx context.Context, name string, g *group) {
	defer close(g.done)
	key := PresenceKey(name, e.holder)
	type observed struct {
		rev uint64
		at  time.Time
	}
	seen := map[string]observed{}
	t := e.o.Clock.NewTicker(e.o.RenewEvery)
	defer t.Stop()
	for {
		if _, err := e.kv.Put(ctx, key, e.record(time.Time{})); err != nil && ctx.Err() == nil {
			e.o.Logger.Debug("write presence", "key", key, "err", err)
		}
		if revs, err := e.presenceRevisions(ctx, name); err == nil {
			now := e.o.Clock.Now()
			live := 1
			for k, rev := range revs {
				if k == key {
					continue
				}
				o, ok := seen[k]
				if !ok || o.rev != rev {
					o = observed{rev: rev, at: now}
					seen[k] = o
				}
				switch since := now.Sub(o.at); {
				case since < e.o.TTL:
					live++
				case since >= presenceForget*e.o.TTL:
					_ = e.kv.Delete(ctx, k, jetstream.LastRevision(rev))
				}
			}
			for k := range seen {
				if _, ok := revs[k]; !ok {
					delete(seen, k)
				}
			}
			e.mu.Lock()
			g.live = live
			e.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = e.kv.Delete(dctx, key)
			cancel()
			return
		case <-t.C():
		}
	}
}

// presenceRevisions returns the presence keys of group and their revisions.
func (e *Elector) presenceRevisions(ctx context.Context, name string) (map[string]uint64, error) {
	lister, err := e.kv.ListKeysFiltered(ctx, PresenceKey(name, "*"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = lister.Stop() }()
	out := map[string]uint64{}
	for k := range lister.Keys() {
		ent, err := e.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, err
		default:
			out[k] = ent.Revision()
		}
	}
	return out, nil
}

// giveBack reports whether this replica, holding a lease of group, holds
// more than its share of the group and may give one back now; when it
// does, it notes the release.
func (e *Elector) giveBack(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[name]
	if g == nil || g.live <= 1 {
		return false
	}
	held := 0
	for l := range g.names {
		if e.held[l] {
			held++
		}
	}
	share := (len(g.names) + g.live - 1) / g.live
	now := e.o.Clock.Now()
	if held <= share || (!g.lastRelease.IsZero() && now.Sub(g.lastRelease) < e.o.TTL) {
		return false
	}
	g.lastRelease = now
	return true
}
