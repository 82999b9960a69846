// Package cache is the gateway's read cache: every workload with its
// status, held in memory and fed by watches on the workloads and status
// buckets. Once filled, gets and lists never leave the process and never
// reach a member cluster. A read lags the buckets by the watches' delivery
// time; callers that must read their own write wait for it with WaitFor.
//
// While the cache fills (seconds at 100,000 workloads) it answers from the
// buckets instead: a get reads the key from both buckets, a list reads
// the project's keys (a filtered watch: the project's share of the
// bucket, not the region), a wait polls the key. So the gateway serves
// as soon as it has started, whatever the region's size; only what spans
// the whole region (Projects) waits for the fill.
package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// DirectPoll is how often WaitFor reads its key from the buckets while the
// cache fills.
const DirectPoll = 50 * time.Millisecond

// Item is one cached workload, its response rendered once per change.
//
// An item keeps what lists filter on and writers wait for, and the
// rendered response; not the decoded documents. A region holds every
// workload here, and decoded specs and statuses are pointer-rich: at
// 50,000 workloads they made most of the heap each collection had to
// scan, while the bytes of JSON cost the collector nothing to scan.
type Item struct {
	Key, Project, Kind, Name string
	// UID and Generation identify the workload document the item shows.
	UID        string
	Generation int64
	// Labels are the workload's labels (read-only).
	Labels map[string]string
	// Phase is the status phase ("Pending" before any status).
	Phase string
	// SidecarVersion is the version of the managed sidecars the workload
	// runs (api.Metadata.SidecarVersion).
	SidecarVersion int64
	// Tier is the workload's tier (its spec's Scheduling); the launch
	// SLIs are per tier.
	Tier api.Tier
	// JSON is the rendered API response.
	JSON []byte
}

// Renderer turns a workload and its status (nil when none) into the API's JSON.
type Renderer func(w *api.Workload, st *api.Status) ([]byte, error)

// Cache holds every workload of the region.
type Cache struct {
	// workloads is set once its mirror exists; status changes that come
	// before are covered by the workloads' first replay. The mirrors hold
	// the documents' bytes, decoded on each refresh (a status change
	// decodes its workload again, some tens of microseconds): decoded,
	// the two mirrors were most of the gateway's heap at 100,000
	// workloads, and the runtime's forced collection every two minutes
	// marked all of it even in a region at rest; bytes are not scanned.
	workloads atomic.Pointer[bus.Mirror]
	status    *bus.Mirror
	// kvWorkloads and kvStatus answer reads while the cache fills.
	kvWorkloads, kvStatus jetstream.KeyValue
	render                Renderer
	log                   *slog.Logger
	ready                 chan struct{}
	// filled is set once both mirrors hold every key that existed at
	// start: refreshes before it are skipped, and one pass over the
	// workloads then renders each once (the replays would render a
	// workload once per mirror and again in that pass: 2-3 renders each,
	// the gateway's start at 10,000 workloads and more).
	filled atomic.Bool
	cancel context.CancelFunc // ends the mirrors and the wait for them
	wg     sync.WaitGroup     // the goroutine that waits for the mirrors to fill

	mu        sync.RWMutex
	items     map[string]*Item    // mu must be held
	byProject map[string][]string // mu must be held: sorted keys per project
	changed   chan struct{}       // mu must be held: closed and replaced on every change
}

// Start mirrors the buckets until ctx is done or Stop.
func Start(ctx context.Context, b *bus.Bus, render Renderer, log *slog.Logger) (*Cache, error) {
	c := &Cache{render: render, log: log, items: map[string]*Item{}, byProject: map[string][]string{},
		changed: make(chan struct{}), ready: make(chan struct{})}
	var err error
	if c.kvWorkloads, err = b.KV(ctx, bus.BucketWorkloads); err != nil {
		return nil, fmt.Errorf("workloads bucket: %w", err)
	}
	if c.kvStatus, err = b.KV(ctx, bus.BucketStatus); err != nil {
		return nil, fmt.Errorf("status bucket: %w", err)
	}
	ctx, c.cancel = context.WithCancel(ctx)
	// The status mirror starts first so that the first workload refresh finds its status.
	if c.status, err = b.Mirror(ctx, bus.BucketStatus, c.refresh); err != nil {
		c.cancel()
		return nil, fmt.Errorf("mirror status: %w", err)
	}
	wm, err := b.Mirror(ctx, bus.BucketWorkloads, c.refresh)
	if err != nil {
		c.cancel()
		c.status.Stop()
		return nil, fmt.Errorf("mirror workloads: %w", err)
	}
	c.workloads.Store(wm)
	c.wg.Go(func() {
		for _, ch := range []<-chan struct{}{c.status.Ready(), wm.Ready()} {
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
		// Every key either mirror held before this pass: a change from
		// here on refreshes its key itself (a mirror stores a value before
		// it calls refresh, so a refresh skipped before filled is set finds
		// its key in this pass).
		c.filled.Store(true)
		for _, k := range wm.Keys() {
			c.refresh(k)
		}
		close(c.ready)
	})
	return c, nil
}

// Stop ends the mirrors and returns once every goroutine of the cache has
// ended; the cache keeps what it held. Stop on a nil cache does nothing.
func (c *Cache) Stop() {
	if c == nil {
		return
	}
	c.cancel()
	c.workloads.Load().Stop()
	c.status.Stop()
	c.wg.Wait()
}

// Ready is closed once every workload and status that existed at start is
// cached; before, reads go to the buckets.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// Filled reports whether Ready is closed.
func (c *Cache) Filled() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// waitFilled waits for the fill, at most until ctx ends.
func (c *Cache) waitFilled(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the gateway's cache is still filling: %w", ctx.Err())
	}
}

// refresh rebuilds one key's item from the mirrors' current values. The
// mirrors store a value before calling refresh, so the last call for a key
// sees its latest workload and status.
func (c *Cache) refresh(key string) {
	if !c.filled.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.notifyLocked()
	wm := c.workloads.Load()
	if wm == nil {
		return
	}
	we, ok := wm.Get(key)
	if !ok {
		c.removeLocked(key)
		return
	}
	var sb []byte
	if se, ok := c.status.Get(key); ok {
		sb = se.Value
	}
	it, err := c.build(key, we.Value, sb)
	if err != nil {
		c.log.Warn("cache: "+err.Error(), "key", key, "revision", we.Revision)
		return
	}
	if _, had := c.items[key]; !had {
		keys := c.byProject[it.Project]
		i, _ := slices.BinarySearch(keys, key)
		c.byProject[it.Project] = slices.Insert(keys, i, key)
	}
	c.items[key] = it
}

// build renders one key's item from its workload's and status's bytes
// (sb nil when it has no status). An undecodable status renders as none.
func (c *Cache) build(key string, wb, sb []byte) (*Item, error) {
	w, err := api.Decode(wb)
	if err != nil {
		return nil, fmt.Errorf("undecodable workload: %w", err)
	}
	var st *api.Status
	if sb != nil {
		if st, err = decodeStatus(sb); err != nil {
			c.log.Warn("cache: undecodable status", "key", key, "err", err)
			st = nil
		}
	}
	b, err := c.render(w, st)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	it := &Item{Key: key, Project: w.Metadata.Project, Kind: w.Kind, Name: w.Metadata.Name,
		UID: w.Metadata.UID, Generation: w.Metadata.Generation, Labels: w.Metadata.Labels,
		Phase: api.PhasePending, SidecarVersion: w.Metadata.SidecarVersion, JSON: b}
	if st != nil && st.Phase != "" {
		it.Phase = st.Phase
	}
	if w.Spec != nil {
		it.Tier, _ = w.Spec.Scheduling()
	}
	return it, nil
}

// read is one key's item from the buckets (nil when it has no workload).
func (c *Cache) read(ctx context.Context, key string) (*Item, error) {
	we, err := c.kvWorkloads.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	var sb []byte
	se, err := c.kvStatus.Get(ctx, key)
	switch {
	case err == nil:
		sb = se.Value()
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, fmt.Errorf("read the status of %s: %w", key, err)
	}
	return c.build(key, we.Value(), sb)
}

// values reads the current value of every key of bucket that matches
// filter (a watch that stops at its last initial value).
func values(ctx context.Context, kv jetstream.KeyValue, filter string) (map[string][]byte, error) {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", filter, err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string][]byte{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s: %w", filter, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read %s: the watch ended", filter)
			}
			if e == nil {
				return out, nil
			}
			out[e.Key()] = e.Value()
		}
	}
}

// wildcards are what a subject token must not hold to name itself only.
const wildcards = ".*> \t\r\n"

// literal reports whether s is one token of a key, not a pattern.
func literal(s string) bool { return s != "" && !strings.ContainsAny(s, wildcards) }

// readProject reads a project's items from the buckets (only kind's when
// kind is set), with their keys in order.
func (c *Cache) readProject(ctx context.Context, project, kind string) ([]string, map[string]*Item, error) {
	if !literal(project) || strings.ContainsAny(kind, wildcards) {
		return nil, nil, nil // no such project: not a filter over others
	}
	filter := project + ".>"
	if kind != "" {
		filter = api.Key(project, kind, ">")
	}
	ws, err := values(ctx, c.kvWorkloads, filter)
	if err != nil {
		return nil, nil, err
	}
	sts, err := values(ctx, c.kvStatus, filter)
	if err != nil {
		return nil, nil, err
	}
	keys := make([]string, 0, len(ws))
	items := make(map[string]*Item, len(ws))
	for k, wb := range ws {
		it, err := c.build(k, wb, sts[k])
		if err != nil {
			c.log.Warn("cache: "+err.Error(), "key", k)
			continue
		}
		keys = append(keys, k)
		items[k] = it
	}
	slices.Sort(keys)
	return keys, items, nil
}

func (c *Cache) removeLocked(key string) {
	it, ok := c.items[key]
	if !ok {
		return
	}
	delete(c.items, key)
	keys := c.byProject[it.Project]
	if i, found := slices.BinarySearch(keys, key); found {
		keys = slices.Delete(keys, i, i+1)
	}
	if len(keys) == 0 {
		delete(c.byProject, it.Project)
	} else {
		c.byProject[it.Project] = keys
	}
}

func (c *Cache) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Get returns one workload. While the cache fills it reads the buckets;
// an error is a failed read there.
func (c *Cache) Get(ctx context.Context, key string) (*Item, bool, error) {
	if !c.Filled() {
		it, err := c.read(ctx, key)
		if err != nil {
			return nil, false, err
		}
		return it, it != nil, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	it, ok := c.items[key]
	return it, ok, nil
}

// Filter selects items of a list.
type Filter struct {
	// Kind, when set, is the kind as registered (App, JobSet, Pod).
	Kind string
	// Labels must all match.
	Labels map[string]string
	// Phase, when set, must equal the item's phase.
	Phase string
}

func (f Filter) match(it *Item) bool {
	if f.Kind != "" && it.Kind != f.Kind {
		return false
	}
	if f.Phase != "" && !strings.EqualFold(it.Phase, f.Phase) {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := it.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// List returns up to limit items of project matching f, in key order
// (kind, then name), starting after the key after; next is the last key
// returned when more items may follow. While the cache fills it reads the
// project's keys from the buckets; an error is a failed read there.
func (c *Cache) List(ctx context.Context, project string, f Filter, after string, limit int) (items []*Item, next string, err error) {
	if !c.Filled() {
		keys, byKey, err := c.readProject(ctx, project, f.Kind)
		if err != nil {
			return nil, "", err
		}
		items, next = page(keys, func(k string) *Item { return byKey[k] }, f, after, limit)
		return items, next, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	keys := c.byProject[project]
	if f.Kind != "" {
		// Keys sort by kind first: only the kind's range needs a look.
		keys = keys[sort.SearchStrings(keys, api.Key(project, f.Kind, "")):sort.SearchStrings(keys, api.Key(project, f.Kind, "~"))]
	}
	items, next = page(keys, func(k string) *Item { return c.items[k] }, f, after, limit)
	return items, next, nil
}

// page is List's page of the sorted keys.
func page(keys []string, item func(string) *Item, f Filter, after string, limit int) (items []*Item, next string) {
	start := sort.SearchStrings(keys, after)
	if start < len(keys) && keys[start] == after {
		start++
	}
	for _, k := range keys[start:] {
		it := item(k)
		if !f.match(it) {
			continue
		}
		if len(items) == limit {
			return items, items[len(items)-1].Key
		}
		items = append(items, it)
	}
	return items, ""
}

// Projects lists the projects that have workloads. It spans the region,
// so it waits for the fill (at most until ctx ends).
func (c *Cache) Projects(ctx context.Context) ([]string, error) {
	if err := c.waitFilled(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.byProject))
	for p := range c.byProject {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// HasProject reports whether project has a workload; while the cache
// fills it looks for one of its keys in the bucket.
func (c *Cache) HasProject(ctx context.Context, project string) (bool, error) {
	if c.Filled() {
		c.mu.RLock()
		defer c.mu.RUnlock()
		return len(c.byProject[project]) > 0, nil
	}
	if !literal(project) {
		return false, nil
	}
	l, err := c.kvWorkloads.ListKeysFiltered(ctx, project+".>")
	if err != nil {
		return false, fmt.Errorf("list the keys of %s: %w", project, err)
	}
	defer func() { _ = l.Stop() }()
	select {
	case _, ok := <-l.Keys():
		return ok, nil
	case <-ctx.Done():
		return false, fmt.Errorf("list the keys of %s: %w", project, ctx.Err())
	}
}

// Len is the number of cached workloads.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.items)
}

// WaitFor blocks until ok holds for key's item (nil when absent) or ctx
// ends; it returns whether ok held. Writers use it to read their own
// writes. While the cache fills it reads the key from the buckets every
// DirectPoll.
func (c *Cache) WaitFor(ctx context.Context, key string, ok func(*Item) bool) bool {
	for !c.Filled() {
		if it, err := c.read(ctx, key); err == nil && ok(it) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-c.ready:
		case <-time.After(DirectPoll):
		}
	}
	for {
		c.mu.RLock()
		it := c.items[key]
		ch := c.changed
		c.mu.RUnlock()
		if ok(it) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// decodeStatus decodes a workload's status from the status mirror's bytes.
func decodeStatus(b []byte) (*api.Status, error) {
	st := new(api.Status)
	if err := json.Unmarshal(b, st); err != nil {
		return nil, err
	}
	return st, nil
}
