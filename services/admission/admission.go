// Package admission is the admission service, the only writer of the
// workloads bucket. A submitted workload is decoded strictly, defaulted,
// validated (every problem at once), checked against tenant policy, given
// the platform's managed sidecars, reserved against its project's quota
// and written with compare-and-set; then its event is published.
// Operations (pause, resume, stop, start, restart, restart-container,
// scale) change a stored workload's Control or size through the same
// steps: validated, quota adjusted, compare-and-set, event.
//
// Every write goes through bus.Update, the platform's one compare-and-set
// loop. The quota reservation is made inside it, for the value about to
// be written, so a retry after a lost race reserves for what it will
// really write; a write that does not happen in the end (refused, its
// context ended, every race lost) sets the reservation back to what the
// stored workload demands, so quota always matches the stored workloads.
//
// Events are never lost. The workload records which event opened its
// current generation (Metadata.Event). A replica that dies between a write
// and its event leaves that record behind, and the repair loop, run by
// whichever replica holds the admission-repair lease, ensures the event of
// every workload's current generation (and of each recent deletion) with
// the same idempotency key the writer used: on start, a short grace after
// every write, and every RepairEvery.
//
// Admission believes who the caller says the user is (the identity
// headers bus.HeaderPrincipal and bus.HeaderPlatformAdmin, and the
// gateway's authorisation behind them) only because of the bus's
// permissions (libs/bus Grants): only the gateway's NATS user may publish
// to admission's subjects. The endpoints also answer only requests whose
// reply subject is in their caller's inboxes (bus.Bus.OnlyFrom), because
// JetStream can deliver a message to any subject on another user's behalf
// (a consumer's deliver subject, a direct get's reply). The autoscaler
// has an endpoint of its own (bus.AdmissionAutoscale), whose subject only
// its user may publish to: admission knows the caller by the subject a
// request came on, never by its reply subject, which the caller chooses.
// It may only scale an App; its headers are not read, its principal is
// the autoscaler, and quota applies to its scales as to anyone's.
package admission

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/events"
)

// RequestTimeout bounds each request's work. The endpoints are
// bus.AdmissionSubmit, AdmissionUpdate, AdmissionDelete, AdmissionOperate
// and AdmissionAutoscale.
const RequestTimeout = 15 * time.Second

// Request headers the gateway sets on behalf of the caller.
const (
	HeaderPrincipal     = bus.HeaderPrincipal
	HeaderPlatformAdmin = bus.HeaderPlatformAdmin
)

// Config is the platform configuration admission applies.
type Config struct {
	// Sidecars are injected into every workload's pods as native sidecars
	// (logging, traffic, security agents).
	Sidecars []api.Container `json:"sidecars,omitempty"`
	// InitContainers run before each workload's own init containers.
	InitContainers []api.Container `json:"initContainers,omitempty"`
	// Sealer seals Secrets' values before they are stored (secret.go);
	// nil refuses every Secret. Not read from the file: the command loads
	// it from the operator's key (--kek-public).
	Sealer Sealer `json:"-"`
	// MaxTerminationGracePeriodSeconds is the platform's maximum grace
	// period of a pod (a template's terminationGracePeriodSeconds and its
	// hooks' sleeps); a workload over it is refused with 422. It comes
	// from the flag --max-termination-grace-period-seconds, not the file;
	// 0 means api.DefaultMaxTerminationGracePeriodSeconds.
	MaxTerminationGracePeriodSeconds int64 `json:"-"`
}

// Limits are the platform's bounds on workloads that c sets.
func (c *Config) Limits() api.Limits {
	l := api.DefaultLimits()
	if c.MaxTerminationGracePeriodSeconds != 0 {
		l.MaxTerminationGracePeriodSeconds = c.MaxTerminationGracePeriodSeconds
	}
	return l
}

// CheckMaxTerminationGracePeriod says why seconds cannot be the platform's
// maximum grace period: a pod whose template sets none gets
// api.DefaultTerminationGracePeriodSeconds, which must fit under it.
func CheckMaxTerminationGracePeriod(seconds int64) error {
	if seconds < api.DefaultTerminationGracePeriodSeconds {
		return fmt.Errorf("the maximum termination grace period %ds is below the default grace period of %ds", seconds, api.DefaultTerminationGracePeriodSeconds)
	}
	return nil
}

// DefaultConfig injects a small log shipper beside every workload.
func DefaultConfig() *Config {
	return &Config{Sidecars: []api.Container{{
		Name:  "atoll-log-shipper",
		Image: "registry.atoll.dev/log-shipper:1.0",
		Resources: api.Resources{
			Requests: api.ResourceList{CPU: "10m", Memory: "16Mi"},
			Limits:   api.ResourceList{CPU: "100m", Memory: "64Mi"},
		},
	}}}
}

// Service serves admission requests.
type Service struct {
	bus    *bus.Bus
	log    *slog.Logger
	cfg    *Config
	limits api.Limits // cfg.Limits()
	quota  *bus.Requester
	events *events.Publisher
	hooks  hooks
	// retention is the events stream's oldest event, for the repair.
	retention *retention

	workloads jetstream.KeyValue
	hosts     jetstream.KeyValue // the exposed Apps' host claims (hosts.go)
	// sidecars mirrors the current version of the managed sidecars
	// (sidecars.go); nil before Start.
	sidecars *bus.TypedMirror[*api.SidecarVersion]
	// claimGrace is HostClaimGrace, shorter in tests.
	claimGrace time.Duration

	// sidecarTiming are the sidecar rollout's periods
	// (sidecars_rollout.go), shorter in tests.
	sidecarTiming sidecarTiming
	// sidecarEnsured is the revision of the sidecar progress whose events
	// this replica published or found published (ensureSidecarSteps).
	sidecarEnsured atomic.Uint64

	endpoints *bus.Endpoints
	cancel    context.CancelFunc // ends the repair loop
	repairing sync.WaitGroup     // the repair loop
	metrics   *bus.Metrics       // nil without an admin server
}

// hooks let tests stand in for a crash at a chosen point.
type hooks struct {
	// beforeWrite runs in each attempt of a write, after the reservation,
	// just before the compare-and-set.
	beforeWrite func(ctx context.Context, key string)
	// crashed, when set, makes writes return before publishing their
	// event and keeps the repair loop from starting, as a replica that
	// died right after its write would.
	crashed atomic.Bool
}

// New returns an admission service; cfg nil means DefaultConfig.
func New(b *bus.Bus, log *slog.Logger, cfg *Config) *Service {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	log = log.With("component", "admission")
	return &Service{
		bus:       b,
		log:       log,
		cfg:       cfg,
		limits:    cfg.Limits(),
		quota:     bus.NewRequester(b.NC, bus.RequestPolicy{Breaker: bus.BreakerPolicy{Logger: log}}),
		events:    events.NewPublisher(b, log, events.Options{}),
		retention: &retention{bus: b},

		claimGrace:    HostClaimGrace,
		sidecarTiming: sidecarTimingFromEnv(log),
	}
}

// Start opens the workloads bucket, starts campaigning for the repair
// lease and registers the endpoints.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.workloads, err = s.bus.KV(ctx, bus.BucketWorkloads); err != nil {
		return err
	}
	if s.hosts, err = s.bus.KV(ctx, bus.BucketHosts); err != nil {
		return err
	}
	if err := s.startSidecars(ctx); err != nil {
		return err
	}
	if !s.hooks.crashed.Load() {
		if err := s.startRepair(ctx); err != nil {
			return err
		}
	}
	s.endpoints, err = s.bus.Serve(context.WithoutCancel(ctx),
		bus.ServeConfig{Name: bus.UserAdmission, Description: "workload admission", Metrics: s.metrics, Logger: s.log},
		bus.AdmissionSubmit.Endpoint(RequestTimeout, s.submit),
		bus.AdmissionUpdate.Endpoint(RequestTimeout, s.update),
		bus.AdmissionDelete.Endpoint(RequestTimeout, s.delete),
		bus.AdmissionOperate.Endpoint(RequestTimeout, s.operate),
		// The autoscaler's own endpoint: it may only scale Apps (see
		// autoscale), and quota applies to its changes as to anyone's.
		bus.AdmissionAutoscale.Endpoint(RequestTimeout, s.autoscale),
		// Projects as a resource (projects.go).
		bus.ProjectCreate.Endpoint(RequestTimeout, s.projectCreate),
		bus.ProjectDelete.Endpoint(RequestTimeout, s.projectDelete),
		bus.MemberSet.Endpoint(RequestTimeout, s.memberSet),
		bus.MemberRemove.Endpoint(RequestTimeout, s.memberRemove),
		// Project tokens (tokens.go).
		bus.TokenCreate.Endpoint(RequestTimeout, s.tokenCreate),
		bus.TokenRevoke.Endpoint(RequestTimeout, s.tokenRevoke),
		bus.TokenUsed.Endpoint(RequestTimeout, s.tokenUsed),
		// The propagator's own endpoint: a Secret's data key rewrapped
		// for a new KEK (rewrap.go).
		bus.AdmissionRewrap.Endpoint(RequestTimeout, s.rewrap),
	)
	if err != nil {
		return err
	}
	return nil
}

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) {
	s.metrics = a.Metrics()
	s.quota.Breakers().Instrument(s.metrics)
}

// Ready reports whether the replica serves: the workloads bucket open, the
// endpoints registered and the repair lease's state known.
func (s *Service) Ready(ctx context.Context) error {
	return admin.LeaseKnown(s.bus, RepairLease)(ctx)
}

// Stop unregisters the endpoints (requests in flight are cancelled:
// their callers retry on another replica) and ends the repair loop,
// giving up its lease.
func (s *Service) Stop() error {
	var err error
	if s.endpoints != nil {
		err = s.endpoints.Stop()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.repairing.Wait()
	s.sidecars.Stop()
	return err
}

// LoadConfig reads the platform configuration from a YAML file; an empty
// path means DefaultConfig.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	b, err := os.ReadFile(path) //nolint:gosec // G304: the configuration file the operator named with a flag
	if err != nil {
		return nil, fmt.Errorf("admission config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("admission config %s: %w", path, err)
	}
	for i, sc := range c.Sidecars {
		if !api.IsDNSLabel(sc.Name) || sc.Image == "" {
			return nil, fmt.Errorf("admission config %s: sidecar %d needs a DNS-label name and an image", path, i)
		}
	}
	return &c, nil
}
