package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Limits on what the bus stores, so that no stream or bucket can fill the
// NATS servers' store and stop every write in the region, and so that no
// service can wipe a bucket.
//
// Size. Every stream and bucket has a MaxBytes (DefaultMaxBytes, changed
// per name with Config.MaxBytes, `atoll-admin bootstrap --max-bytes`). A
// full stream drops its oldest messages (DiscardOld: events, signals,
// audit, dead letters); a full bucket refuses new writes (DiscardNew, as
// every Key-Value bucket), so its writer fails loudly rather than losing
// state. Each service exports the fill of the streams it uses
// (StreamFill: atoll_stream_fill_ratio); alert at FillAlertRatio. The
// defaults add up to under 3 GiB per server, inside the 4 GB store of
// deploy/compose/nats.conf; a server's max_file_store must hold their sum
// (JetStream refuses a stream whose MaxBytes it could not hold).
//
// Wiping. Nobody but the admin may purge a stream (Grants never grant
// STREAM.PURGE), but a rollup needs no such grant: a message published
// with the header Nats-Rollup: all to any subject of a bucket its writer
// may publish to would replace the whole bucket. Every bucket's stream
// therefore denies purges and rollups (DenyPurge, AllowRollup false, the
// Key-Value default being the opposite): no service purges keys (it
// deletes them, which needs no rollup), and nats-server refuses a rollup
// on a stream that denies purges. Ensure sets both on buckets made by an
// older version too.

// DefaultMaxBytes are the size limits of the region's streams (by stream
// name) and buckets (by bucket name), in bytes.
var DefaultMaxBytes = map[string]int64{
	StreamEvents:       512 * mib, // 7 days of domain events
	StreamSignals:      128 * mib, // a day of cluster and node signals
	StreamAudit:        768 * mib, // 30 days of audit records, failed logins included
	StreamDeadLetter:   112 * mib, // 16 MiB given to BucketSidecars
	BucketWorkloads:    512 * mib, // 5 revisions of every workload
	BucketPlacements:   256 * mib,
	BucketStatus:       128 * mib,
	BucketObservations: 128 * mib,
	BucketIdempotency:  128 * mib, // a day of creates' outcomes
	BucketQuota:        64 * mib,
	BucketScalers:      64 * mib,
	BucketRollouts:     64 * mib,
	BucketProjects:     64 * mib,
	BucketEventCreds:   8 * mib, // a record per events credential
	BucketRemediation:  32 * mib,
	BucketClusters:     16 * mib,
	BucketLeases:       16 * mib,
	BucketDisruption:   16 * mib,
	BucketUpgrade:      16 * mib,
	BucketHosts:        16 * mib, // a claim per exposed App
	BucketSidecars:     16 * mib, // a key per version of the managed sidecars
}

// FillAlertRatio is the fill (atoll_stream_fill_ratio) past which a
// stream or bucket should page: raise its MaxBytes and the servers'
// store, or find what writes so much, before a bucket refuses writes or
// a stream drops history still needed.
const FillAlertRatio = 0.8

const (
	kib = int64(1) << 10
	mib = kib << 10
	gib = mib << 10
	tib = gib << 10
)

// WithMaxBytes returns t with the size limits of the streams and buckets
// named in limits (stream names, bucket names) replaced; a name that is
// neither, or a limit below 1, is an error.
func (t Topology) WithMaxBytes(limits map[string]int64) (Topology, error) {
	out := Topology{Streams: slices.Clone(t.Streams), Buckets: slices.Clone(t.Buckets)}
	left := maps.Clone(limits)
	for name, n := range limits {
		if n < 1 {
			return t, fmt.Errorf("max bytes of %s: %d is not a size", name, n)
		}
	}
	for i := range out.Streams {
		if n, ok := left[out.Streams[i].Name]; ok {
			out.Streams[i].MaxBytes = n
			delete(left, out.Streams[i].Name)
		}
	}
	for i := range out.Buckets {
		if n, ok := left[out.Buckets[i].Bucket]; ok {
			out.Buckets[i].MaxBytes = n
			delete(left, out.Buckets[i].Bucket)
		}
	}
	if len(left) > 0 {
		return t, fmt.Errorf("max bytes: no stream or bucket named %s", strings.Join(slices.Sorted(maps.Keys(left)), ", "))
	}
	return out, nil
}

// ParseMaxBytes parses size limits written name=size, comma-separated
// ("workloads=1GiB,ATOLL_AUDIT=2GiB"): a name is a stream's or a
// bucket's, a size is a number of bytes with an optional binary suffix
// (KiB, MiB, GiB, TiB; Ki, Mi, Gi, Ti alike).
func ParseMaxBytes(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, size, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("max bytes %q: want name=size", part)
		}
		n, err := parseSize(size)
		if err != nil {
			return nil, fmt.Errorf("max bytes of %s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}

func parseSize(s string) (int64, error) {
	num, unit := s, int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"KiB", kib}, {"MiB", mib}, {"GiB", gib}, {"TiB", tib}, {"Ki", kib}, {"Mi", mib}, {"Gi", gib}, {"Ti", tib}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, unit = strings.TrimSuffix(s, u.suffix), u.n
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 1 || n > (1<<62)/unit {
		return 0, fmt.Errorf("%q is not a size (512MiB, 2GiB, 1048576)", s)
	}
	return n * unit, nil
}

// topology is the region's topology at b's replication with b's size
// limits.
func (b *Bus) topology() (Topology, error) {
	return DefaultTopology(b.cfg.Replicas).WithMaxBytes(b.cfg.MaxBytes)
}

// ensureTopology ensures the region's topology (Ensure).
func (b *Bus) ensureTopology(ctx context.Context) error {
	t, err := b.topology()
	if err != nil {
		return err
	}
	return b.Ensure(ctx, t)
}

// ensureBucket creates the bucket kc, or updates the one there, with the
// stream settings no Key-Value configuration holds: purges and rollups
// denied. A bucket that exists is updated on its stream directly, so that
// rollups are never allowed again, even for a moment.
func (b *Bus) ensureBucket(ctx context.Context, kc jetstream.KeyValueConfig) error {
	s, err := b.JS.Stream(ctx, kvStream(kc.Bucket))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := b.JS.CreateKeyValue(ctx, kc); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return err
		}
		s, err = b.JS.Stream(ctx, kvStream(kc.Bucket))
	}
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	want := bucketStream(cfg, kc)
	if streamConfigEqual(cfg, want) {
		return nil
	}
	_, err = b.JS.UpdateStream(ctx, want)
	return err
}

// bucketStream returns cfg, a bucket's stream configuration, with what
// Ensure sets from kc (the settings a Key-Value update changes: history,
// TTL, size, replicas) and purges and rollups denied.
func bucketStream(cfg jetstream.StreamConfig, kc jetstream.KeyValueConfig) jetstream.StreamConfig {
	history := int64(kc.History)
	if history < 1 {
		history = 1
	}
	cfg.MaxMsgsPerSubject = history
	cfg.MaxAge = kc.TTL
	cfg.MaxBytes = kc.MaxBytes
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = -1
	}
	if kc.Replicas > 0 {
		cfg.Replicas = kc.Replicas
	}
	cfg.Duplicates = 2 * time.Minute
	if kc.TTL > 0 && kc.TTL < cfg.Duplicates {
		cfg.Duplicates = kc.TTL
	}
	cfg.DenyPurge = true
	cfg.AllowRollup = false
	return cfg
}

func streamConfigEqual(a, b jetstream.StreamConfig) bool {
	return a.MaxMsgsPerSubject == b.MaxMsgsPerSubject && a.MaxAge == b.MaxAge && a.MaxBytes == b.MaxBytes &&
		a.Replicas == b.Replicas && a.Duplicates == b.Duplicates && a.DenyPurge == b.DenyPurge && a.AllowRollup == b.AllowRollup
}
