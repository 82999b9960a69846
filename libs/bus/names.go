package bus

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Subject roots. Every subject the platform uses is built here and nowhere else.
const (
	// EventRoot prefixes domain events: atoll.evt.<project>.<kind>.<name>.<event>.
	// This subject tree is a public API.
	EventRoot = "atoll.evt"
	// ClusterRoot prefixes member-cluster signals: atoll.cluster.<cluster>.<event>.
	ClusterRoot = "atoll.cluster"
	// NodeRoot prefixes node signals: atoll.node.<cluster>.<node>.<event>.
	NodeRoot = "atoll.node"
	// MetricsRoot prefixes autoscaling metrics: atoll.metrics.<project>.<app>.<metric>.
	MetricsRoot = "atoll.metrics"
	// AuditRoot prefixes audit records: atoll.audit.<project>.<verb>.
	AuditRoot = "atoll.audit"
	// DeadLetterRoot prefixes messages that exhausted their deliveries:
	// atoll.dlq.<stream>.<consumer>.
	DeadLetterRoot = "atoll.dlq"
	// RequestRoot prefixes request/reply endpoints: atoll.req.<service>.<verb>.
	RequestRoot = "atoll.req"
	// DebugRoot prefixes log and exec streams (libs/debugstream):
	// atoll.debug.<verb>.<project>.<kind>.<name> opens a session,
	// atoll.debug.session.<id>.<direction> carries its frames.
	DebugRoot = "atoll.debug"
)

// Stream names.
const (
	// StreamEvents holds domain events.
	StreamEvents = "ATOLL_EVENTS"
	// StreamSignals holds cluster and node signals.
	StreamSignals = "ATOLL_SIGNALS"
	// StreamAudit holds audit records.
	StreamAudit = "ATOLL_AUDIT"
	// StreamDeadLetter holds messages that exhausted their deliveries.
	StreamDeadLetter = "ATOLL_DLQ"
)

// Key-Value bucket names; each has exactly one writing service (DESIGN.md).
const (
	// BucketWorkloads is written by admission.
	BucketWorkloads = "workloads"
	// BucketQuota is written by quota.
	BucketQuota = "quota"
	// BucketPlacements is written by the scheduler.
	BucketPlacements = "placements"
	// BucketStatus is written by the aggregator.
	BucketStatus = "status"
	// BucketClusters is written by the aggregator.
	BucketClusters = "clusters"
	// BucketIdempotency is written by the gateway: the outcome of each
	// create made with an Idempotency-Key, kept for IdempotencyTTL.
	BucketIdempotency = "idempotency"
	// BucketLeases holds the leases of services that act on watched state
	// (libs/bus/lease): one key per lease, written only by its candidates.
	BucketLeases = "leases"
	// BucketObservations is written by the aggregator replica holding each
	// member cluster's lease: what the cluster holds of each workload (key
	// <cluster>.<project>.<kind>.<name>) and the cluster's term marker
	// (key <cluster>), which the replica folding statuses reads.
	BucketObservations = "observations"
	// BucketScalers is written by the autoscaler: per Scaler (key
	// <project>.scaler.<name>) its history and recent decisions.
	BucketScalers = "scalers"
	// BucketDisruption is the disruption ledger (libs/disruption), shared
	// by the two services that take nodes out of service, remediation and
	// upgrade: one key per member cluster (d.<cluster>) holding a lease per
	// node being disrupted, keyed by node UID, decided by compare-and-set.
	BucketDisruption = "disruption"
	// BucketRemediation is written by the remediation service: its policy
	// (key policy), pauses (pause.region, pause.<cluster>), each cluster's
	// view (s.<cluster>: reachable, breakers) and what it is doing to each
	// node it watches (n.<cluster>.<node UID>).
	BucketRemediation = "remediation"
	// BucketUpgrade holds the rotation plans of the upgrade service: each
	// plan's spec (plan.<name>) and its operator control (ctl.<name>:
	// pause, resume, abort), written by platform admins, and its progress
	// (p.<name>), written by the upgrade service only.
	BucketUpgrade = "upgrade"
	// BucketRollouts is written by the aggregator (lease
	// aggregator-rollout): each App's zone-by-zone rollout progress
	// (api.Rollout) under the workload's key.
	BucketRollouts = "rollouts"
	// BucketHosts is written by admission: the claim of each host an App
	// exposes (key: the host; value: api.HostClaim), which keeps hosts
	// unique in the region.
	BucketHosts = "hosts"
	// BucketProjects is written by admission: each project as a resource
	// (api.ProjectDoc at api.ProjectKey: owner, labels, members and their
	// roles) and the self-service projects each user made
	// (api.ProjectCreationsKey). Every gateway replica watches it for
	// roles.
	BucketProjects = "projects"
	// BucketEventCreds is written by the gateway: each events credential
	// of a project (key c.<id>: its project, name, digest, expiry and the
	// connections the auth callout let in), see eventcreds.go.
	BucketEventCreds = "eventcreds"
	// BucketSidecars is written by the gateway (platform admins): the
	// versions of the platform's managed sidecars (api.SidecarVersion), one
	// key per version (api.SidecarVersionKey) and the current one
	// (api.SidecarCurrentKey). Admission mirrors the current one and
	// injects it.
	BucketSidecars = "sidecars"
)

// IdempotencyTTL is how long a create's Idempotency-Key is remembered.
const IdempotencyTTL = 24 * time.Hour

// EventSubject names one domain event of one workload.
func EventSubject(project, kind, name, event string) string {
	return join(EventRoot, project, strings.ToLower(kind), name, event)
}

// ClusterSubject names one signal of a member cluster.
func ClusterSubject(cluster, event string) string { return join(ClusterRoot, cluster, event) }

// NodeSubject names one signal of a node in a member cluster.
func NodeSubject(cluster, node, event string) string { return join(NodeRoot, cluster, node, event) }

// MetricsSubject names one metric sample of an App.
func MetricsSubject(project, app, metric string) string {
	return join(MetricsRoot, project, app, metric)
}

// AuditSubject names the audit record of one verb in a project.
func AuditSubject(project, verb string) string { return join(AuditRoot, project, verb) }

// DeadLetterSubject names where a consumer's exhausted messages go.
func DeadLetterSubject(stream, consumer string) string {
	return join(DeadLetterRoot, stream, consumer)
}

// RequestSubject names a request/reply endpoint of a service.
func RequestSubject(service, verb string) string { return join(RequestRoot, service, verb) }

// DebugSubject names the endpoint that opens a debug session (verb "logs"
// or "exec") on one workload.
func DebugSubject(verb, project, kind, name string) string {
	return join(DebugRoot, verb, project, strings.ToLower(kind), name)
}

// DebugSessionSubject names one direction ("up": client to server, "down":
// server to client) of an open debug session.
func DebugSessionSubject(id, direction string) string {
	return join(DebugRoot, "session", id, direction)
}

func join(parts ...string) string { return strings.Join(parts, ".") }

// Topology lists the streams and buckets of a region.
type Topology struct {
	Streams []jetstream.StreamConfig
	Buckets []jetstream.KeyValueConfig
}

// DefaultTopology returns the region's streams and buckets at the given
// replication factor (1 embedded, 3 or 5 in production), each limited to
// its DefaultMaxBytes (Topology.WithMaxBytes changes them).
func DefaultTopology(replicas int) Topology {
	if replicas < 1 {
		replicas = 1
	}
	stream := func(name string, maxAge time.Duration, roots ...string) jetstream.StreamConfig {
		subjects := make([]string, len(roots))
		for i, r := range roots {
			subjects[i] = r + ".>"
		}
		return jetstream.StreamConfig{
			Name:       name,
			Subjects:   subjects,
			Storage:    jetstream.FileStorage,
			Replicas:   replicas,
			MaxAge:     maxAge,
			Duplicates: 2 * time.Minute,
			Discard:    jetstream.DiscardOld,
			MaxBytes:   DefaultMaxBytes[name],
		}
	}
	// The events stream answers direct gets: events.Publisher.Published
	// reads a workload's last event before every Ensure (each
	// reconcile's, and admission's repair of every workload), and a direct
	// get is the message as stored, where STREAM.MSG.GET wraps it in JSON
	// with its body in base64, on the server and the client. A direct get
	// may be answered by a follower a write behind: an Ensure that misses
	// an event just stored publishes it again under the same Nats-Msg-Id,
	// which the stream drops as a duplicate.
	events := func(c jetstream.StreamConfig) jetstream.StreamConfig {
		c.AllowDirect = true
		return c
	}
	bucket := func(name string, history uint8) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{
			Bucket:   name,
			History:  history,
			Storage:  jetstream.FileStorage,
			Replicas: replicas,
			MaxBytes: DefaultMaxBytes[name],
		}
	}
	ttlBucket := func(name string, ttl time.Duration) jetstream.KeyValueConfig {
		c := bucket(name, 1)
		c.TTL = ttl
		return c
	}
	return Topology{
		Streams: []jetstream.StreamConfig{
			events(stream(StreamEvents, 7*24*time.Hour, EventRoot)),
			stream(StreamSignals, 24*time.Hour, ClusterRoot, NodeRoot),
			stream(StreamAudit, 30*24*time.Hour, AuditRoot),
			stream(StreamDeadLetter, 14*24*time.Hour, DeadLetterRoot),
		},
		Buckets: []jetstream.KeyValueConfig{
			bucket(BucketWorkloads, 5),
			bucket(BucketQuota, 1),
			bucket(BucketPlacements, 5),
			bucket(BucketStatus, 1),
			bucket(BucketClusters, 1),
			ttlBucket(BucketIdempotency, IdempotencyTTL),
			bucket(BucketLeases, 1),
			bucket(BucketObservations, 1),
			bucket(BucketScalers, 1),
			bucket(BucketDisruption, 1),
			bucket(BucketRemediation, 1),
			bucket(BucketUpgrade, 1),
			bucket(BucketRollouts, 1),
			bucket(BucketHosts, 1),
			bucket(BucketProjects, 1),
			bucket(BucketEventCreds, 1),
			bucket(BucketSidecars, 1),
		},
	}
}
