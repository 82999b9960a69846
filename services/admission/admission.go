// Package admission is the admission service, the only writer of the
// workloads bucket. A submitted workload is decoded strictly, defaulted,
// validated (every problem at once), checked against tenant policy, given
// the platform's managed sidecars, reserved against its project's quota
// and written with compare-and-set; then its event is published.
// Operations (pause, resume, stop, start, restart, restart-container,
// scale) change a stored workload's Control or size through the same
// steps: validated, quota adjusted, compare-and-set, event.
package admission

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/fx"
	"sigs.k8s.io/yaml"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Module is the admission service for fx. It needs a Config; DefaultConfig
// is used when none is supplied.
var Module = fx.Module("admission",
	fx.Provide(fx.Annotate(New, fx.ParamTags(``, ``, `optional:"true"`))),
	fx.Invoke(func(lc fx.Lifecycle, s *Service) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }),
)

// Endpoint verbs, at bus.RequestSubject("admission", verb).
const (
	VerbSubmit = "submit"
	VerbUpdate = "update"
	VerbDelete = "delete"
	// VerbOperate takes an api.Operation (pause, resume, stop, start,
	// restart, restart-container, scale) and replies with the workload.
	VerbOperate = "operate"
)

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
	bus   *bus.Bus
	log   *slog.Logger
	cfg   *Config
	quota *bus.Requester

	workloads jetstream.KeyValue
	svc       micro.Service
}

// New returns an admission service; cfg nil means DefaultConfig.
func New(b *bus.Bus, log *slog.Logger, cfg *Config) *Service {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	return &Service{
		bus:   b,
		log:   log.With("component", "admission"),
		cfg:   cfg,
		quota: bus.NewRequester(b.NC, bus.RequestPolicy{Breaker: bus.BreakerPolicy{Logger: log}}),
	}
}

// Start opens the workloads bucket and registers the endpoints.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.workloads, err = s.bus.KV(ctx, bus.BucketWorkloads); err != nil {
		return err
	}
	s.svc, err = micro.AddService(s.bus.NC, micro.Config{Name: "atoll-admission", Version: "0.1.0", Description: "workload admission"})
	if err != nil {
		return fmt.Errorf("register admission service: %w", err)
	}
	for verb, h := range map[string]micro.HandlerFunc{VerbSubmit: s.handleSubmit, VerbUpdate: s.handleUpdate, VerbDelete: s.handleDelete, VerbOperate: s.handleOperate} {
		if err := s.svc.AddEndpoint(verb, bus.Concurrent(64, h), micro.WithEndpointSubject(bus.RequestSubject("admission", verb))); err != nil {
			return fmt.Errorf("register admission %s: %w", verb, err)
		}
	}
	return nil
}

// Stop unregisters the endpoints; requests in flight finish.
func (s *Service) Stop() error {
	if s.svc != nil {
		return s.svc.Stop()
	}
	return nil
}

// LoadConfig reads the platform configuration from a YAML file; an empty
// path means DefaultConfig.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	b, err := os.ReadFile(path)
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
