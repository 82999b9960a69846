package bus

import "atoll.dev/libs/api"

// The contract between the services: every request/reply endpoint, with
// who serves it, who may call it and its payload types. A service
// registers its endpoints from these (Call.Endpoint) and calls the others'
// through them (Call.Call); no verb is written anywhere else
// (TestVerbsOnlyInTheContract), and Grants gives each service the
// subjects of what it serves and what it may call, computed from here.

// Admission's endpoints. Only the gateway may submit, update, delete and
// operate, so admission believes the identity headers it sets
// (HeaderPrincipal); the autoscaler has an endpoint of its own.
var (
	// AdmissionSubmit admits a new workload: the request is the workload
	// document as JSON, which admission decodes and validates itself; the
	// reply is the workload as stored.
	AdmissionSubmit = Call[[]byte, *api.Workload]{Service: UserAdmission, Verb: "submit", Callers: []string{UserGateway}}
	// AdmissionUpdate replaces a workload's spec and labels (the request
	// as AdmissionSubmit's); the reply is the workload as stored.
	AdmissionUpdate = Call[[]byte, *api.Workload]{Service: UserAdmission, Verb: "update", Callers: []string{UserGateway}}
	// AdmissionDelete removes a workload.
	AdmissionDelete = Call[api.WorkloadRef, api.Ack]{Service: UserAdmission, Verb: "delete", Callers: []string{UserGateway}}
	// AdmissionOperate runs one operation (pause, resume, stop, start,
	// restart, restart-container, scale) on a workload for the user the
	// gateway names; the reply is the workload as stored after.
	AdmissionOperate = Call[api.Operation, *api.Workload]{Service: UserAdmission, Verb: "operate", Callers: []string{UserGateway}}
	// AdmissionAutoscale is the autoscaler's own operate endpoint: it
	// takes only scale operations on Apps, and acts as the autoscaler
	// whatever the request's headers say. Admission knows its caller by
	// the subject it received on, which only the autoscaler's user may
	// publish to, never by the reply subject the caller chose.
	AdmissionAutoscale = Call[api.Operation, *api.Workload]{Service: UserAdmission, Verb: "autoscale", Callers: []string{UserAutoscaler}}
)

// Admission's project endpoints: admission is the one writer of the
// projects bucket. The gateway has checked the caller's right (platform
// admin, self-service, the project's admin) before it calls; admission
// keeps the invariants (a valid name, one project per name, the
// self-service limit, no deletion while workloads remain, at least one
// admin). The caller is HeaderPrincipal.
var (
	// ProjectCreate creates a project with its owner as its admin; the
	// reply is the project as stored.
	ProjectCreate = Call[api.ProjectCreate, *api.ProjectDoc]{Service: UserAdmission, Verb: "project-create", Callers: []string{UserGateway}}
	// ProjectDelete deletes a project that holds no workloads; with
	// Cascade it marks the project deleting and admission deletes what it
	// holds, then the project.
	ProjectDelete = Call[api.ProjectRef, api.Ack]{Service: UserAdmission, Verb: "project-delete", Callers: []string{UserGateway}}
	// MemberSet adds a member or changes its role; the reply is the
	// project as stored.
	MemberSet = Call[api.MemberSet, *api.ProjectDoc]{Service: UserAdmission, Verb: "member-set", Callers: []string{UserGateway}}
	// MemberRemove removes a member; the reply is the project as stored.
	MemberRemove = Call[api.MemberRemove, *api.ProjectDoc]{Service: UserAdmission, Verb: "member-remove", Callers: []string{UserGateway}}
)

// Admission's project token endpoints (tokens are keys of the projects
// bucket). The gateway makes the secret and checks the caller is a
// person with the admin role in the project; admission stores the digest.
var (
	// TokenCreate stores a project token; the reply is the token as stored.
	TokenCreate = Call[api.TokenCreate, *api.ProjectToken]{Service: UserAdmission, Verb: "token-create", Callers: []string{UserGateway}}
	// TokenRevoke deletes a project token.
	TokenRevoke = Call[api.TokenRef, api.Ack]{Service: UserAdmission, Verb: "token-revoke", Callers: []string{UserGateway}}
	// TokenUsed records a token's last use (a gateway sends it at most
	// every api.TokenUsedEvery per token).
	TokenUsed = Call[api.TokenUsed, api.Ack]{Service: UserAdmission, Verb: "token-used", Callers: []string{UserGateway}}
)

// The quota service's endpoints: reservations by the services that admit
// and place workloads, limits and the ledger by the gateway.
var (
	// QuotaReserve holds a workload's demand, replacing what its key held;
	// a 409 with api.ErrorBody.Quota refuses it.
	QuotaReserve = Call[api.QuotaReserve, api.Ack]{Service: UserQuota, Verb: "reserve", Callers: []string{UserAdmission, UserScheduler}}
	// QuotaRelease gives back what a workload's key held.
	QuotaRelease = Call[api.QuotaRelease, api.Ack]{Service: UserQuota, Verb: "release", Callers: []string{UserAdmission, UserScheduler}}
	// QuotaGet answers a project's api.Ledger (limits, usage, the number
	// of reservations); the request names the project only.
	QuotaGet = Call[api.QuotaRelease, *api.Ledger]{Service: UserQuota, Verb: "get", Callers: []string{UserGateway}}
	// QuotaSet sets a project's limit for one tier.
	QuotaSet = Call[api.QuotaSet, api.Ack]{Service: UserQuota, Verb: "set", Callers: []string{UserGateway}}
	// QuotaRequestCreate stores a project's request for more quota.
	QuotaRequestCreate = Call[api.QuotaRequestCreate, *api.QuotaRequest]{Service: UserQuota, Verb: "request-create", Callers: []string{UserGateway}}
	// QuotaRequestList lists quota requests, by project and state.
	QuotaRequestList = Call[api.QuotaRequestList, *api.QuotaRequestItems]{Service: UserQuota, Verb: "request-list", Callers: []string{UserGateway}}
	// QuotaRequestDecide approves (applying the limits) or rejects a
	// quota request; a 409 refuses a request decided already.
	QuotaRequestDecide = Call[api.QuotaRequestDecide, *api.QuotaRequest]{Service: UserQuota, Verb: "request-decide", Callers: []string{UserGateway}}
	// QuotaForget deletes a deleted project's ledger (it holds no
	// reservation); admission calls it as it finishes the deletion.
	QuotaForget = Call[api.ProjectRef, api.Ack]{Service: UserQuota, Verb: "forget", Callers: []string{UserAdmission}}
)

// AggregatorCluster is a platform admin's operation on a member cluster
// (cordon, uncordon, labels), through the gateway, which has checked the
// caller; the reply is the cluster's inventory as written.
var AggregatorCluster = Call[api.ClusterOp, *api.ClusterInfo]{Service: UserAggregator, Verb: "cluster", Callers: []string{UserGateway}}

// The remediation service's endpoints. They answer the gateway (which
// checks its caller is a platform admin) and the admin user (operators:
// `atoll-admin remediation`).
var (
	// RemediationStatus answers one cluster's status or every cluster's
	// (api.RemediationClusterStatus, which the gateway maps to the Compute
	// API's RemediationCluster).
	RemediationStatus = Call[api.RemediationStatusRequest, []api.RemediationClusterStatus]{Service: UserRemediation, Verb: "status", Callers: []string{UserGateway, UserAdmin}}
	// RemediationPause stops new actions in a cluster or the region; the
	// reply names the scope paused ({"paused": "zone-a"}).
	RemediationPause = Call[api.RemediationPauseRequest, api.RemediationScope]{Service: UserRemediation, Verb: "pause", Callers: []string{UserGateway, UserAdmin}}
	// RemediationResume lifts a pause; the reply names the scope resumed.
	RemediationResume = Call[api.RemediationPauseRequest, api.RemediationScope]{Service: UserRemediation, Verb: "resume", Callers: []string{UserGateway, UserAdmin}}
)

// Rotation of the key-encryption key of Secrets (`atoll-admin
// rotate-kek`): the propagator alone can unwrap a Secret's data key, and
// admission alone writes the workloads bucket, so the propagator rewraps
// and admission stores.
var (
	// PropagatorRotateKEK rewraps, for api.KEKRotation.To, the data keys of
	// up to Limit stored Secrets sealed under another KEK, each stored
	// through AdmissionRewrap; the reply counts what is left. Operators
	// call it (the admin user).
	PropagatorRotateKEK = Call[api.KEKRotation, api.KEKRotationResult]{Service: UserPropagator, Verb: "rotate-kek", Callers: []string{UserAdmin}}
	// AdmissionRewrap stores a Secret's rewrapped sealed data (only its
	// KeyID and WrappedKey change), compare-and-set on the revision the
	// propagator read. Only the propagator may call it.
	AdmissionRewrap = Call[api.SecretRewrap, api.Ack]{Service: UserAdmission, Verb: "rewrap", Callers: []string{UserPropagator}}
)

// PropagatorRemoveProject deletes a project's namespace from every member
// cluster, for admission, which finishes a project's deletion with it
// once the project holds no workload.
var PropagatorRemoveProject = Call[api.ProjectRef, api.Ack]{Service: UserPropagator, Verb: "remove-project", Callers: []string{UserAdmission}}

// Contract lists every endpoint of the contract.
func Contract() []Descriptor {
	return []Descriptor{
		AdmissionSubmit, AdmissionUpdate, AdmissionDelete, AdmissionOperate, AdmissionAutoscale,
		ProjectCreate, ProjectDelete, MemberSet, MemberRemove,
		TokenCreate, TokenRevoke, TokenUsed,
		QuotaReserve, QuotaRelease, QuotaGet, QuotaSet, QuotaForget, QuotaRequestCreate, QuotaRequestList, QuotaRequestDecide,
		AggregatorCluster,
		RemediationStatus, RemediationPause, RemediationResume,
		PropagatorRotateKEK, AdmissionRewrap,
		PropagatorRemoveProject,
	}
}
