package bus

// Who may do what on the bus.
//
// Every service connects to NATS as its own user, allowed only the subjects
// its work needs; the admin user (the one-shot bootstrap, operators, the
// all-in-one region's own connection) may do anything. Grants below is the
// one source of truth: what each service reads, writes, publishes, serves
// and calls, in the bus's own terms (buckets, streams, endpoints). Grant.
// Permission turns that into NATS subjects, including the JetStream API
// subjects nats.go's jetstream package uses for them, and natsconf.go into
// a nats-server configuration and the embedded server's users.
//
// What a grant means in subjects:
//
//   - Reading a bucket b (Get, Watch, a Mirror, LastEntry) is publishing to
//     the read-only JetStream API of its stream KV_b: STREAM.INFO, DIRECT.GET
//     and STREAM.MSG.GET, and CONSUMER.CREATE, INFO, DELETE and MSG.NEXT for
//     the ordered consumers of watches; and answering their flow control
//     ($JS.FC.KV_b.>), and $JS.ACK.KV_b.> (acks mean nothing to a
//     bucket's ordered consumers; the grant keeps nats-server from tracking
//     each delivery's reply subject, see Permission). Nothing that changes
//     the stream (STREAM.UPDATE, PURGE, DELETE, MSG.DELETE) is ever
//     granted: only the admin has those. A followed stream's deliveries get
//     no such grant: durable consumers there ack through allow_responses,
//     and no service may ack another's.
//   - Writing a bucket is publishing to $KV.b.<key> for the keys granted: a
//     bucket has exactly one writing service (names.go), and the leases
//     bucket, shared by every leased service, is restricted per key.
//   - Emitting publishes to a stream's subjects (the JetStream ack comes
//     back to the connection's inbox), and reads the stream's info (its
//     fill, StreamFill); following a stream is reading it as a bucket is
//     read.
//   - Serving is a queue subscription on the endpoint's subject plus
//     $SRV.> (micro's discovery), publishing into its callers' inboxes
//     (InboxPrefix(caller).>, for the replies), and the right to answer
//     each other request once (allow_responses: discovery, acks); calling
//     is publishing to the endpoint's subject. The replies are granted by
//     subject because nats-server keeps allow_responses per client
//     connection on the server that delivered the request: in a cluster, a
//     replier that reconnects to another server between a request and its
//     reply would have the reply refused. A service may still publish into
//     no inbox but its callers'.
//   - Every user subscribes to its own inboxes only, _INBOX.<user>.> (the
//     connection's inbox prefix, see InboxPrefix), so no service reads
//     another's replies.
//
// Caller identity. Admission, quota's set, the aggregator's cluster
// operations and the debug endpoints believe the identity headers
// (HeaderPrincipal, HeaderPlatformAdmin) and the gateway's authorisation
// because only the gateway's user may publish to their subjects: the
// contract (contract.go) names each endpoint's callers, and Grants grants
// its subject to those only. A responder knows its caller by the subject
// the request came on, never by the reply subject, which the caller
// chooses: an endpoint that treats two callers differently is two
// endpoints (the autoscaler scales Apps through AdmissionAutoscale, not
// the gateway's AdmissionOperate). One more path reaches any subject,
// though: JetStream itself publishes to a push
// consumer's deliver subject (in any queue group) and to a direct get's
// reply subject, neither checked against the requester's permissions, so a
// service that writes a bucket could have a message it wrote there,
// identity headers and all, delivered to an endpoint
// (TestOnlyFromRefusesWhatJetStreamDeliversForAnotherUser does). Such
// messages never carry a reply subject in the caller's inboxes: OnlyFrom
// refuses them, and endpoints that trust their caller wrap their handlers
// with it.

import (
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/micro"
)

// The bus's users: one per service and the admin.
const (
	// UserAdmin bootstraps streams and buckets and may do anything.
	UserAdmin      = "admin"
	UserGateway    = "gateway"
	UserAdmission  = "admission"
	UserQuota      = "quota"
	UserScheduler  = "scheduler"
	UserPropagator = "propagator"
	UserAggregator = "aggregator"
	// UserAutoscaler is the autoscaler's user: the only caller of
	// admission's AdmissionAutoscale, which lets it only scale Apps.
	UserAutoscaler = "autoscaler"
	// UserRemediation is the remediation service's user.
	UserRemediation = "remediation"
	// UserUpgrade is the upgrade service's user.
	UserUpgrade = "upgrade"
)

// Users lists every user: the admin first, then the services.
func Users() []string {
	return []string{UserAdmin, UserGateway, UserAdmission, UserQuota, UserScheduler, UserPropagator, UserAggregator, UserRemediation, UserAutoscaler, UserUpgrade}
}

// Keys is a bucket and the keys written in it ("*" and ">" wildcards; ">"
// alone: every key).
type Keys struct {
	Bucket string
	Keys   []string
}

// Grant is what one service does on the bus.
type Grant struct {
	// Writes are the buckets the service writes, each with the keys it may
	// write; it may read them too.
	Writes []Keys
	// Reads are the buckets it only reads: gets, watches, mirrors.
	Reads []string
	// Emits are the stream subjects it publishes to through JetStream.
	Emits []string
	// Follows are the streams whose stored messages it reads (the last
	// message on a subject, ordered consumers).
	Follows []string
	// Serves are the subjects of its micro endpoints.
	Serves []string
	// Calls are the endpoint subjects it sends requests to.
	Calls []string
	// Answers are the users whose requests it answers: the callers of what
	// it serves. It may publish into their inboxes (InboxPrefix), so its
	// replies are allowed by whichever server it is connected to when it
	// sends them (see Permission).
	Answers []string
	// Sends and Receives are plain subjects it publishes and subscribes to
	// (the frames of debug sessions).
	Sends, Receives []string
}

// Grants returns what each service may do, by user name. The admin has no
// grant: it may do anything. The request/reply endpoints a service serves
// and calls are not listed here: they come from the contract
// (contract.go), each endpoint granted to the service that serves it and
// to its callers.
func Grants() map[string]Grant {
	all := []string{">"}
	events := EventRoot + ".>"
	metrics := MetricsRoot + ".>" // samples: the aggregator's and the gateway's (custom)
	debugOpen := []string{DebugSubject("logs", "*", "*", "*"), DebugSubject("exec", "*", "*", "*")}
	grants := map[string]Grant{
		UserGateway: {
			// Rotation plans and their controls (the upgrade service alone
			// writes their progress, p.*).
			// Events credentials (eventcreds.go): their records, and the
			// auth callout's requests and answers. The versions of the
			// managed sidecars (platform admins).
			Writes: []Keys{{BucketIdempotency, all}, {BucketUpgrade, []string{"plan.*", "ctl.*"}}, {BucketEventCreds, all},
				{BucketSidecars, []string{"current", "v.*", "ctl"}}},
			// Observations: the Apps' endpoints per cluster (GET .../endpoints).
			// Projects: every request's roles come from its memberships.
			Reads:   []string{BucketWorkloads, BucketStatus, BucketClusters, BucketQuota, BucketScalers, BucketRollouts, BucketObservations, BucketProjects},
			Emits:   []string{AuditRoot + ".>"},
			Follows: []string{StreamEvents},
			// Only the gateway opens debug sessions.
			Calls:    debugOpen,
			Sends:    []string{DebugSessionSubject("*", "up"), metrics},
			Receives: []string{DebugSessionSubject("*", "down"), AuthCalloutSubject},
		},
		UserAdmission: {
			Writes: []Keys{{BucketWorkloads, all}, {BucketHosts, all}, {BucketProjects, all}, {BucketLeases, []string{"admission-repair", "admission-sidecars"}}, {BucketSidecars, []string{"progress"}}},
			// Sidecars: the versions it injects and rolls out; status: the
			// rollout's health gate; quota: its repair loop checks that a
			// written workload's reservation is held (repair_quota.go).
			Reads:   []string{BucketSidecars, BucketStatus, BucketQuota},
			Emits:   []string{events},
			Follows: []string{StreamEvents},
		},
		UserQuota: {
			Writes: []Keys{{BucketQuota, all}, {BucketLeases, []string{"quota-sweeps"}}},
			Reads:  []string{BucketWorkloads},
			// Quota requests' events, on their projects' subjects.
			Emits: []string{events},
		},
		UserScheduler: {
			Writes:  []Keys{{BucketPlacements, all}, {BucketLeases, []string{"scheduler"}}},
			Reads:   []string{BucketWorkloads, BucketStatus, BucketClusters},
			Emits:   []string{events},
			Follows: []string{StreamEvents},
		},
		UserPropagator: {
			Writes: []Keys{{BucketLeases, []string{"propagator.*", "replicas.propagator.*"}}},
			// Observations and clusters: the Apps' endpoints and the
			// clusters' health, for the managed EndpointSlices. Sidecars:
			// the sidecar rollout's progress, which zones run a new version.
			Reads:   []string{BucketWorkloads, BucketPlacements, BucketRollouts, BucketObservations, BucketClusters, BucketSidecars},
			Emits:   []string{events},
			Follows: []string{StreamEvents},
		},
		UserAggregator: {
			Writes: []Keys{
				{BucketStatus, all}, {BucketClusters, all}, {BucketObservations, all},
				{BucketLeases, []string{"aggregator.*", "replicas.aggregator.*", "aggregator-status", "aggregator-rollout"}},
				{BucketRollouts, all},
			},
			Reads:    []string{BucketWorkloads, BucketPlacements},
			Emits:    []string{events, ClusterRoot + ".>"},
			Follows:  []string{StreamEvents},
			Serves:   debugOpen,
			Sends:    []string{DebugSessionSubject("*", "down"), metrics},
			Receives: []string{DebugSessionSubject("*", "up")},
		},
		UserAutoscaler: {
			Writes:   []Keys{{BucketScalers, all}, {BucketLeases, []string{"autoscaler"}}},
			Reads:    []string{BucketWorkloads, BucketStatus},
			Emits:    []string{events},
			Follows:  []string{StreamEvents},
			Receives: []string{metrics},
		},
		UserRemediation: {
			Writes: []Keys{
				{BucketRemediation, all}, {BucketDisruption, all},
				{BucketLeases, []string{"remediation.*", "replicas.remediation.*"}},
			},
			Emits:   []string{NodeRoot + ".>"},
			Follows: []string{StreamSignals},
		},
		UserUpgrade: {
			Writes: []Keys{
				{BucketUpgrade, []string{"p.*"}}, {BucketDisruption, all},
				{BucketLeases, []string{"upgrade"}},
			},
			Reads: []string{BucketWorkloads, BucketStatus},
			Emits: []string{ClusterRoot + ".>"},
		},
	}
	grantContract(grants)
	grantAnswers(grants)
	return grants
}

// grantAnswers adds to each grant that serves subjects the users that call
// them (Calls); the contract's admin callers, who have no grant, were
// added by grantContract.
func grantAnswers(grants map[string]Grant) {
	for server, g := range grants {
		for caller, c := range grants {
			if caller != server && slices.ContainsFunc(c.Calls, func(s string) bool { return slices.Contains(g.Serves, s) }) {
				g.Answers = append(slices.Clip(g.Answers), caller)
			}
		}
		slices.Sort(g.Answers)
		g.Answers = slices.Compact(g.Answers)
		grants[server] = g
	}
}

// grantContract adds to grants the request/reply endpoints of the
// contract: each endpoint's subject to the service that serves it, and
// to each of its callers but the admin, who may do anything.
func grantContract(grants map[string]Grant) {
	for _, d := range Contract() {
		rt := d.route()
		g := grants[rt.service]
		g.Serves = append(slices.Clip(g.Serves), d.Subject())
		if slices.Contains(rt.callers, UserAdmin) {
			g.Answers = append(slices.Clip(g.Answers), UserAdmin)
		}
		grants[rt.service] = g
		for _, u := range rt.callers {
			if u == UserAdmin {
				continue // may do anything
			}
			g := grants[u]
			g.Calls = append(slices.Clip(g.Calls), d.Subject())
			grants[u] = g
		}
	}
}

// Permission is a user's subject permissions.
type Permission struct {
	// Publish and Subscribe are the subjects allowed; everything else is
	// refused.
	Publish, Subscribe []string
	// Responses lets the user answer the requests it receives, once each,
	// whatever their reply subject. nats-server tracks the reply subjects
	// it may answer per client connection, on the server that delivered
	// the request: a reply sent after the connection moved to another
	// server (or reconnected to the same one) is refused. Replies to its
	// callers go to their inboxes, granted in Publish (Grant.Answers);
	// Responses covers the rest: micro's discovery ($SRV) and acks.
	Responses bool
}

// InboxPrefix is the inbox prefix of user's connections: replies to its
// requests come to InboxPrefix(user)+".>", which only user may subscribe to.
func InboxPrefix(user string) string { return "_INBOX." + user }

// jsAPI is the JetStream API prefix.
const jsAPI = "$JS.API."

// Permission returns the subjects the grant allows user, sorted and
// without duplicates.
func (g Grant) Permission(user string) Permission {
	var pub, sub []string
	read := func(stream string) {
		pub = append(pub,
			jsAPI+"STREAM.INFO."+stream,
			jsAPI+"DIRECT.GET."+stream, jsAPI+"DIRECT.GET."+stream+".>",
			jsAPI+"STREAM.MSG.GET."+stream,
			jsAPI+"CONSUMER.CREATE."+stream, jsAPI+"CONSUMER.CREATE."+stream+".>",
			jsAPI+"CONSUMER.INFO."+stream+".*",
			jsAPI+"CONSUMER.DELETE."+stream+".*",
			jsAPI+"CONSUMER.MSG.NEXT."+stream+".*",
			"$JS.FC."+stream+".>",
		)
	}
	// readBucket also lets the user "ack" what its watches deliver: a
	// bucket's stream has only ordered consumers (no acks), but each
	// delivery carries a $JS.ACK reply subject, and nats-server tracks
	// every reply subject a user with allow_responses may not publish to
	// for 2 minutes, scanning them all once a second: a watch of 50,000
	// keys made every publish of such a service pay for 50,000 entries.
	readBucket := func(b string) {
		read(kvStream(b))
		pub = append(pub, "$JS.ACK."+kvStream(b)+".>")
	}
	for _, w := range g.Writes {
		readBucket(w.Bucket)
		for _, k := range w.Keys {
			pub = append(pub, kvSubject(w.Bucket, k))
		}
	}
	for _, b := range g.Reads {
		readBucket(b)
	}
	for _, s := range g.Follows {
		read(s)
	}
	pub = append(pub, g.Emits...)
	for _, s := range DefaultTopology(1).Streams {
		// The fill of the streams it emits to (StreamFill).
		if slices.ContainsFunc(g.Emits, func(subject string) bool { return streamHolds(s, subject) }) {
			pub = append(pub, jsAPI+"STREAM.INFO."+s.Name)
		}
	}
	pub = append(pub, g.Calls...)
	pub = append(pub, g.Sends...)
	if slices.Contains(g.Receives, AuthCalloutSubject) {
		pub = append(pub, authCalloutReplies) // the auth callout's answers
	}
	// Replies to its callers, allowed on every server of a cluster and
	// across reconnects, which allow_responses is not.
	for _, c := range g.Answers {
		pub = append(pub, InboxPrefix(c)+".>")
	}
	sub = append(sub, InboxPrefix(user)+".>")
	sub = append(sub, g.Serves...)
	sub = append(sub, g.Receives...)
	if len(g.Serves) > 0 {
		sub = append(sub, "$SRV.>")
	}
	slices.Sort(pub)
	slices.Sort(sub)
	return Permission{Publish: slices.Compact(pub), Subscribe: slices.Compact(sub), Responses: len(g.Serves) > 0}
}

// Streams lists the streams the grant reads: its buckets' and those it
// follows.
func (g Grant) Streams() []string {
	var out []string
	for _, w := range g.Writes {
		out = append(out, kvStream(w.Bucket))
	}
	for _, b := range g.Reads {
		out = append(out, kvStream(b))
	}
	out = append(out, g.Follows...)
	slices.Sort(out)
	return slices.Compact(out)
}

func kvStream(bucket string) string       { return "KV_" + bucket }
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// OnlyFrom wraps the handler of an endpoint that believes what its callers
// say about themselves: it answers only requests whose reply subject is in
// the inboxes of one of users, and refuses the others with 403. Subject
// permissions keep other users from publishing to the endpoint; this also
// refuses what JetStream publishes there on another user's behalf (a
// consumer's deliver subject, a direct get's reply), whose reply subject is
// JetStream's own or none. It does not tell one caller from another: a
// caller chooses its reply subject, and may name another user's inbox
// (where it will not see the answer, but the request is served all the
// same). Who called is the subject's business: each endpoint's subject is
// granted to its callers only (Grants), and an endpoint that treats
// callers differently has one subject per caller. A bus connected without
// a user (permissions off) passes every request.
func (b *Bus) OnlyFrom(h micro.HandlerFunc, users ...string) micro.HandlerFunc {
	if b.user == "" {
		return h
	}
	return func(r micro.Request) {
		for _, u := range users {
			if strings.HasPrefix(r.Reply(), InboxPrefix(u)+".") {
				h(r)
				return
			}
		}
		_ = RespondError(r, http.StatusForbidden, "caller not allowed", map[string]string{
			"code": "Forbidden", "message": "this endpoint answers only " + strings.Join(users, ", "),
		})
	}
}
