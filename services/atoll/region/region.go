// Package region runs a whole Atoll region in one process: an embedded
// NATS JetStream server, local member clusters, and every service as its
// own fx application, so that each can be stopped and restarted alone.
// `atoll dev` and the end-to-end tests use it; production runs each
// service as its own process with the same fx modules.
package region

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/admission"
	"atoll.dev/services/aggregator"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
	"atoll.dev/services/propagator"
	"atoll.dev/services/quota"
	"atoll.dev/services/scheduler"
)

// Services are the region's services by name, in start order.
var Services = []struct {
	Name   string
	Module fx.Option
}{
	{"quota", quota.Module},
	{"admission", admission.Module},
	{"aggregator", aggregator.Module},
	{"scheduler", scheduler.Module},
	{"propagator", propagator.Module},
	{"gateway", gateway.Module},
}

// Options configures a region.
type Options struct {
	// Dir holds the JetStream store and the clusters file.
	Dir string
	// Zones get one member cluster each (default a, b, c).
	Zones []string
	// Nodes is the default fleet per zone: nodes of 16 CPU and 64 GiB
	// (0 means 10; negative means none).
	Nodes int
	// GPUZones get a pool of 2 GPU nodes (8 x a100 each).
	GPUZones []string
	// Listen exposes the embedded NATS on a loopback TCP port.
	Listen bool
	// Port is that port (0: random).
	Port int
	// Logger receives everything; slog.Default() when nil.
	Logger *slog.Logger
	// OwnSignals says the caller stops the region on SIGINT and SIGTERM.
	OwnSignals bool
	// ClusterNice lowers the member clusters' CPU priority (see testenv.Options.Nice).
	ClusterNice int
	// ClusterBackgroundNice lowers further the clusters' controllers,
	// schedulers and simulated kubelets (see testenv.Options.BackgroundNice).
	ClusterBackgroundNice int
	// GatewayListen is the gateway's address (default 127.0.0.1:0, a free port).
	GatewayListen string
}

// Region is a running region.
type Region struct {
	// Bus is the region's NATS connection.
	Bus *bus.Bus
	// Env holds the member clusters.
	Env *testenv.Env
	// Members describes the member clusters to the services.
	Members clusters.Members
	// ClustersFile lists Members, for services run as separate processes.
	ClustersFile string
	// PodLogFile is the log every container of every Pod serves (KWOK's
	// simulated kubelet, in CRI format); testenv.AppendLog adds lines.
	// Exec commands run on this machine in the region's exec directory.
	PodLogFile string
	// GatewayURL is the Compute API's address; it stays the same across gateway restarts.
	GatewayURL string
	// AdminToken is a platform admin's API token.
	AdminToken string
	// Auth holds the gateway's credentials; Token adds to it.
	Auth *auth.Authenticator

	gatewayCfg *gateway.Config

	log     *slog.Logger
	fleet   bool // whether clusters have nodes
	mu      sync.Mutex
	running map[string]running // mu must be held
}

// Start brings up the bus, the member clusters with their fleets, and every service.
func Start(ctx context.Context, o Options) (*Region, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.Zones) == 0 {
		o.Zones = []string{"a", "b", "c"}
	}
	if o.Dir == "" {
		return nil, errors.New("region needs a directory")
	}
	r := &Region{log: o.Logger, running: map[string]running{}}
	if err := r.prepareGateway(o); err != nil {
		return nil, err
	}
	start := time.Now()
	b, err := bus.Open(ctx, bus.Config{StoreDir: filepath.Join(o.Dir, "jetstream"), Listen: o.Listen, Port: o.Port, Name: "atoll-region", Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	r.Bus = b
	r.log.Info("bus ready", "url", b.ClientURL(), "elapsed", time.Since(start).Round(time.Millisecond))
	r.PodLogFile = filepath.Join(o.Dir, "pods.log")
	if err := testenv.AppendLog(r.PodLogFile, "atoll: simulated container log; append lines to "+r.PodLogFile); err != nil {
		b.Close()
		return nil, err
	}
	debug := &testenv.DebugSim{LogsFile: r.PodLogFile, ExecWorkDir: filepath.Join(o.Dir, "exec")}
	env, err := testenv.Start(ctx, testenv.Options{Logger: o.Logger, OwnSignals: o.OwnSignals, Nice: o.ClusterNice, BackgroundNice: o.ClusterBackgroundNice, Debug: debug}, testenv.Zones(o.Zones...)...)
	if err != nil {
		b.Close()
		return nil, err
	}
	r.Env = env
	if err := r.addFleet(ctx, o); err != nil {
		_ = r.Stop(context.Background())
		return nil, err
	}
	for _, c := range env.Clusters {
		r.Members = append(r.Members, clusters.Member{Name: c.Name, Zone: c.Zone, Kubeconfig: c.Kubeconfig})
	}
	if err := r.writeClustersFile(o.Dir); err != nil {
		_ = r.Stop(context.Background())
		return nil, err
	}
	for _, s := range Services {
		if err := r.StartService(ctx, s.Name); err != nil {
			_ = r.Stop(context.Background())
			return nil, err
		}
	}
	if err := r.waitInventory(ctx); err != nil {
		_ = r.Stop(context.Background())
		return nil, err
	}
	r.log.Info("region ready", "clusters", len(r.Members), "elapsed", time.Since(start).Round(time.Millisecond))
	return r, nil
}

func (r *Region) addFleet(ctx context.Context, o Options) error {
	nodes := o.Nodes
	if nodes == 0 {
		nodes = 10
	}
	r.fleet = nodes > 0 || len(o.GPUZones) > 0
	for _, c := range r.Env.Clusters {
		if nodes > 0 {
			if _, err := c.AddNodes(ctx, testenv.NodePool{Name: "general", Count: nodes, CPU: "16", Memory: "64Gi", InstanceType: "m6i.4xlarge"}); err != nil {
				return err
			}
		}
		for _, z := range o.GPUZones {
			if z == c.Zone {
				if _, err := c.AddNodes(ctx, GPUPool()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// GPUPool is the pool of GPU nodes GPUZones get.
func GPUPool() testenv.NodePool {
	return testenv.NodePool{Name: "gpu", Count: 2, CPU: "64", Memory: "512Gi", GPUs: 8, GPUType: "a100", InstanceType: "p4d.24xlarge"}
}

func (r *Region) writeClustersFile(dir string) error {
	r.ClustersFile = filepath.Join(dir, "clusters.yaml")
	var out string
	for _, m := range r.Members {
		out += fmt.Sprintf("- name: %s\n  zone: %s\n  kubeconfig: %s\n", m.Name, m.Zone, m.Kubeconfig)
	}
	return os.WriteFile(r.ClustersFile, []byte(out), 0o644)
}

// running is a started service: its fx application and its own connection.
type running struct {
	app  *fx.App
	conn *bus.Bus
}

// StartService starts one service as its own fx application.
func (r *Region) StartService(ctx context.Context, name string) error {
	var mod fx.Option
	for _, s := range Services {
		if s.Name == name {
			mod = s.Module
		}
	}
	if mod == nil {
		return fmt.Errorf("no service %q", name)
	}
	// Each service talks over its own connection, as in production.
	conn, err := r.Bus.Connect("atoll-" + name)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	var gw *gateway.Service
	opts := []fx.Option{fx.Supply(conn, r.log, r.Members, r.gatewayCfg), mod, fx.NopLogger}
	if name == "gateway" {
		opts = append(opts, fx.Populate(&gw))
	}
	app := fx.New(opts...)
	if err := app.Start(ctx); err != nil {
		conn.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	if gw != nil {
		r.GatewayURL = gw.URL()
		// A restart listens where the first start did.
		r.gatewayCfg.Listen = strings.TrimPrefix(r.GatewayURL, "http://")
	}
	r.mu.Lock()
	r.running[name] = running{app: app, conn: conn}
	r.mu.Unlock()
	return nil
}

// StopService stops one service.
func (r *Region) StopService(ctx context.Context, name string) error {
	r.mu.Lock()
	svc, ok := r.running[name]
	delete(r.running, name)
	r.mu.Unlock()
	if !ok {
		return nil
	}
	err := svc.app.Stop(ctx)
	svc.conn.Close()
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// Restart stops a service and starts it again.
func (r *Region) Restart(ctx context.Context, name string) error {
	if err := r.StopService(ctx, name); err != nil {
		return err
	}
	return r.StartService(ctx, name)
}

// Stop stops every service, the member clusters and the bus.
func (r *Region) Stop(ctx context.Context) error {
	var errs []error
	for i := len(Services) - 1; i >= 0; i-- {
		errs = append(errs, r.StopService(ctx, Services[i].Name))
	}
	if r.Env != nil {
		errs = append(errs, r.Env.Stop(ctx))
	}
	if r.Bus != nil {
		r.Bus.Close()
	}
	return errors.Join(errs...)
}

// prepareGateway makes the gateway's credentials: a platform admin token,
// written to the region's tokens file as a digest only.
func (r *Region) prepareGateway(o Options) error {
	a, err := auth.New(auth.Config{})
	if err != nil {
		return err
	}
	r.Auth = a
	listen := o.GatewayListen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	r.gatewayCfg = &gateway.Config{Listen: listen, Authenticator: a}
	r.AdminToken = r.Token("admin", true, nil)
	return nil
}

// Token mints an API token for subject with the given roles per project
// (viewer, developer or admin).
func (r *Region) Token(subject string, platformAdmin bool, roles map[string]string) string {
	id := auth.Identity{Subject: subject, PlatformAdmin: platformAdmin, Roles: map[string]auth.Role{}}
	for p, role := range roles {
		id.Roles[p] = auth.Role(role)
	}
	tok, _ := r.Auth.Mint(id)
	return tok
}

// waitInventory waits until the aggregator has reported every member
// cluster healthy, so the first workloads see the whole fleet.
func (r *Region) waitInventory(ctx context.Context) error {
	kv, err := r.Bus.KV(ctx, bus.BucketClusters)
	if err != nil {
		return err
	}
	for {
		healthy := 0
		for _, m := range r.Members {
			var ci api.ClusterInfo
			if e, err := kv.Get(ctx, m.Name); err == nil && json.Unmarshal(e.Value(), &ci) == nil && ci.Healthy && (len(ci.Pools) > 0 || !r.fleet) {
				healthy++
			}
		}
		if healthy == len(r.Members) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("member clusters not in the inventory: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
