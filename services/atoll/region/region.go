// Package region runs a whole Atoll region in one process: an embedded
// NATS JetStream server, local member clusters, and every service as its
// own fx application, so that each can be stopped and restarted alone.
// atoll-dev and the end-to-end tests use it; production runs each
// service as its own process with the same fx modules. Options.Exec runs
// each replica as that process instead (process.go): the services'
// binaries, configured as a container is, over loopback TCP; the scale
// benchmark measures such a region, where no service shares another's
// heap or its collections.
//
// Options.Replicas runs N replicas of every service, each its own fx
// application on its own bus connection, named atoll-<service>-<replica>,
// as N processes would be. A replica can be stopped cleanly (its stop
// hooks run and it releases its leases) or killed: Kill closes its NATS
// connection abruptly first, so it can neither renew nor release a lease,
// then stops its application within a bounded time, the in-process
// equivalent of kill -9. LeaseHolder maps the holder written in a lease
// record (bus.BucketLeases) back to the replica that wrote it.
//
// With Options.RestartableBus every connection, the region's own
// included, reaches the embedded server over loopback TCP, so StopBus and
// StartBus can take the NATS server away and bring it back on the same
// port and store while the services keep running and reconnect.
//
// Permissions are on, as in production: the embedded server accepts only
// the NATS users of libs/bus (their credentials made in <Dir>/nats by
// bus.CreateAuth), each service's replicas connect as the service's own
// user, allowed only its own subjects, and the region's own connection
// (Region.Bus) is the admin, which creates the streams and buckets as the
// bootstrap job does in production. A replica is handed its connection
// (fx.Supply of a *bus.Bus), so it never ensures the topology itself.
// Tests and tools reach the region as the admin (Region.Bus) or, to call
// the endpoints that answer only the gateway, as the gateway's user
// (ConnectAs). PermissionViolations lists what the server refused any
// connection, so a test can check that every service kept to its grant.
package region

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sigs.k8s.io/yaml"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/admission"
	"atoll.dev/services/aggregator"
	"atoll.dev/services/autoscaler"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
	"atoll.dev/services/propagator"
	"atoll.dev/services/quota"
	"atoll.dev/services/remediation"
	"atoll.dev/services/scheduler"
	"atoll.dev/services/upgrade"
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
	{"autoscaler", autoscaler.Module},
	{"remediation", remediation.Module},
	{"upgrade", upgrade.Module},
}

// Options configures a region.
type Options struct {
	// Dir holds the JetStream store and the clusters file.
	Dir string
	// Zones get one member cluster each (default a, b, c).
	Zones []string
	// ZoneConfigs are extra kwokctl configuration files per zone (e.g.
	// KWOK Stages: given any, they replace all default stages there).
	ZoneConfigs map[string][]string
	// Nodes is the default fleet per zone: nodes of 16 CPU and 64 GiB
	// (0 means 10; negative means none).
	Nodes int
	// GPUZones get a pool of 2 GPU nodes (8 x a100 each).
	GPUZones []string
	// NodeProgress, when set, receives progress lines while the fleets
	// are created (testenv.NodePool.Progress): thousands of nodes take
	// minutes.
	NodeProgress io.Writer
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
	// ClusterControllersOff names controllers the clusters' controller
	// managers do not run (see testenv.Options.ControllersOff).
	ClusterControllersOff []string
	// GatewayListen is the address of the gateway's replica 0 (default
	// 127.0.0.1:0, a free port); other replicas take free ports.
	GatewayListen string
	// Replicas is the number of replicas of every service (default 1).
	Replicas int
	// MetricsServer runs metrics-server in every member cluster, pod usage
	// driven by pod annotations (testenv.Options.MetricsServer): the
	// autoscaler's cpu and memory samples.
	MetricsServer bool
	// RestartableBus makes every connection reach the embedded server over
	// loopback TCP (at Port, or a free port) so that StopBus and StartBus
	// can restart it; otherwise the services connect in process.
	RestartableBus bool
	// Exec runs every replica as its own process of its service's binary
	// in this directory (BuildServices makes them), as production does,
	// instead of as an fx application in this process (see process.go).
	// The embedded NATS server then listens on loopback TCP.
	Exec string
	// NATSExec, with Exec, runs the region's NATS server as a process of
	// this nats-server binary (BuildNATSServer makes it) instead of in
	// this process, as production does: the caller's own allocations then
	// never make the server collect. Not with RestartableBus.
	NATSExec string
	// ExecLogLevel is the processes' log level (default warn).
	ExecLogLevel string
	// Quota is the quota service's policy (nil: quota.Ample(), caps no
	// test reaches, so that every project may run what the tests ask).
	Quota *quota.Config
	// MemberQPS and MemberBurst are the cluster-facing services' client-side
	// rate limit per member cluster (clusters.Member QPS and Burst; default
	// 500 and 1000: a test region makes workloads faster than a real one).
	MemberQPS   float32
	MemberBurst int
	// ExecEnv adds to the environment of every process the region starts
	// (the replicas with Exec, the NATS server with NATSExec), such as
	// GODEBUG=gctrace=1 to log each collection to the process's log.
	ExecEnv []string
	// TLS makes the gateway serve HTTPS with a certificate signed by a CA
	// of the region's own, made in <Dir>/tls (tls.go): GatewayURL is then
	// https, CAFile and CAPool are that CA, HTTPClient trusts it.
	TLS bool
	// SelfServiceProjects lets any signed-in user create projects, at
	// most MaxProjectsPerUser each (0: the gateway's default), as the
	// gateway's flags of those names do.
	SelfServiceProjects bool
	MaxProjectsPerUser  int
}

// HolderTag is the fx name tag of the lease holder id the region supplies
// to each replica ("<service>-<replica>"). A service that takes it, e.g.
// with fx.ParamTags(`name:"leaseHolder" optional:"true"`), lets
// LeaseHolder name the replica holding a lease directly.
const HolderTag = `name:"` + holderName + `"`

const holderName = "leaseHolder"

// Name is the name of the region this package starts, the members'
// clusters.Member.Region.
const Name = "local"

// KillTimeout bounds how long Kill waits for a killed replica's
// application to stop; its stop hooks cannot reach the bus any more.
const KillTimeout = 5 * time.Second

// Region is a running region.
type Region struct {
	// Bus is the region's NATS connection.
	Bus *bus.Bus
	// Env holds the member clusters.
	Env *testenv.Env
	// Members describes the member clusters to tests and tools, with each
	// cluster's admin kubeconfig; each cluster-facing service is given its
	// own (ServiceMembers).
	Members clusters.Members
	// ClustersFile lists Members.
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
	// NATSAuth holds the NATS users' credentials (in <Dir>/nats): Bus is
	// the admin, each service's replicas connect as its user.
	NATSAuth *bus.Auth
	// CAFile and CAPool are the CA the gateway's certificate is signed by
	// (Options.TLS; "" and nil without).
	CAFile string
	CAPool *x509.CertPool
	// KEKDir holds the private key-encryption keys, the propagator's
	// --kek-dir (kek.go); KEKPublicFile is the public key Secrets are
	// sealed for, admission's --kek-public. No other service has either.
	KEKDir        string
	KEKPublicFile string

	gatewayCfg *gateway.Config
	quotaCfg   *quota.Config // Options.Quota

	log          *slog.Logger
	violations   *violations // the permission violations logged
	fleet        bool        // whether clusters have nodes
	replicas     int         // replicas per service
	dir          string      // Options.Dir
	exec         string      // Options.Exec
	nats         *exec.Cmd   // the NATS server's process (Options.NATSExec), nil in process
	natsProf     string      // the base URL of that process's profiling port (/debug/pprof/)
	execLogLevel string
	execEnv      []string // Options.ExecEnv
	memberQPS    float32  // Options.MemberQPS, defaulted
	memberBurst  int      // Options.MemberBurst, defaulted
	forbidden    []string // the member clusters' 403s to services, read as they stop

	// srvOpts and srv are the embedded server of a RestartableBus (srv
	// nil while stopped); busMu guards srv.
	srvOpts bus.ServerOptions
	busMu   sync.Mutex
	srv     *server.Server

	mu      sync.Mutex
	running map[Replica]running // mu must be held
	listen  map[int]string      // each gateway replica's address once bound; mu must be held
	holders map[string]Replica  // every lease holder id a replica reported, kept after it stops; mu must be held
	tokens  []auth.TokenEntry   // every token minted, for a gateway run as a process; mu must be held
}

// Replica names one replica of one service.
type Replica struct {
	// Service is the service's name, as in Services.
	Service string
	// Index is the replica's number, from 0.
	Index int
}

func (r Replica) String() string { return r.Service + "-" + strconv.Itoa(r.Index) }

// Start brings up the bus, the member clusters with their fleets, and every service.
func Start(ctx context.Context, o Options) (*Region, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	seen := &violations{}
	o.Logger = slog.New(&violationHandler{Handler: o.Logger.Handler(), seen: seen})
	if len(o.Zones) == 0 {
		o.Zones = []string{"a", "b", "c"}
	}
	if o.Dir == "" {
		return nil, errors.New("region needs a directory")
	}
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.Quota == nil {
		o.Quota = quota.Ample()
	}
	if o.Exec == "" && o.Replicas > 1 && os.Getenv(lease.InstanceEnv) != "" {
		// Replicas in this process would share the one instance name and
		// take each other's leases as their own previous run's.
		return nil, fmt.Errorf("region: %s is set; replicas in one process need it unset", lease.InstanceEnv)
	}
	if o.Exec != "" {
		o.Listen = true
		if o.ExecLogLevel == "" {
			o.ExecLogLevel = "warn"
		}
	}
	r := &Region{log: o.Logger, violations: seen, replicas: o.Replicas, dir: o.Dir, exec: o.Exec, execLogLevel: o.ExecLogLevel, execEnv: o.ExecEnv, quotaCfg: o.Quota,
		running: map[Replica]running{}, listen: map[int]string{}, holders: map[string]Replica{}}
	if err := r.prepareGateway(o); err != nil {
		return nil, err
	}
	if err := r.prepareKEK(); err != nil {
		return nil, err
	}
	start := time.Now()
	b, err := r.openBus(ctx, o)
	if err != nil {
		return nil, err
	}
	r.Bus = b
	// The gateway answers the auth callout for events credentials.
	r.gatewayCfg.EventsIssuerFile, r.gatewayCfg.EventsNATSURL = r.NATSAuth.EventsIssuer(), b.ClientURL()
	if r.gatewayCfg.EventsIssuerFile != "" {
		r.gatewayCfg.EventsIssuerFile = r.NATSAuth.EventsIssuerFile()
	}
	r.log.Info("bus ready", "url", b.ClientURL(), "elapsed", time.Since(start).Round(time.Millisecond))
	r.PodLogFile = filepath.Join(o.Dir, "pods.log")
	if err := testenv.AppendLog(r.PodLogFile, "atoll: simulated container log; append lines to "+r.PodLogFile); err != nil {
		r.closeBus()
		return nil, err
	}
	debug := &testenv.DebugSim{LogsFile: r.PodLogFile, ExecWorkDir: filepath.Join(o.Dir, "exec")}
	specs := testenv.Zones(o.Zones...)
	for i := range specs {
		specs[i].ConfigFiles = o.ZoneConfigs[specs[i].Zone]
	}
	// The clusters are joined as Atoll joins a member cluster: each
	// cluster-facing service with its own credential and rights there,
	// its requests audited (MemberForbidden).
	env, err := testenv.Start(ctx, testenv.Options{Logger: o.Logger, OwnSignals: o.OwnSignals, Nice: o.ClusterNice, BackgroundNice: o.ClusterBackgroundNice, ControllersOff: o.ClusterControllersOff, Debug: debug, MetricsServer: o.MetricsServer,
		ServiceAccess: true}, specs...)
	if err != nil {
		r.closeBus()
		return nil, err
	}
	r.Env = env
	if err := r.addFleet(ctx, o); err != nil {
		_ = r.Stop(context.Background())
		return nil, err
	}
	for _, c := range env.Clusters {
		r.Members = append(r.Members, clusters.Member{Name: c.Name, Zone: c.Zone, Region: Name, Kubeconfig: c.Kubeconfig})
	}
	r.memberQPS, r.memberBurst = o.MemberQPS, o.MemberBurst
	if r.memberQPS <= 0 {
		r.memberQPS, r.memberBurst = 500, 1000
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
			if _, err := c.AddNodes(ctx, testenv.NodePool{Name: "general", Count: nodes, CPU: "16", Memory: "64Gi", InstanceType: "m6i.4xlarge", Progress: o.NodeProgress}); err != nil {
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
	if err := writeMembers(r.ClustersFile, r.Members); err != nil {
		return err
	}
	for _, s := range clusters.Services {
		if err := writeMembers(r.ServiceClustersFile(s), r.ServiceMembers(s)); err != nil {
			return err
		}
	}
	return nil
}

func writeMembers(path string, ms clusters.Members) error {
	out, err := yaml.Marshal(ms)
	if err != nil {
		return fmt.Errorf("clusters file: %w", err)
	}
	return os.WriteFile(path, out, 0o600)
}

// ServiceMembers are the member clusters as a service is given them: a
// cluster-facing service (clusters.Services) with its own kubeconfig in
// each, the region's client-side rate limit; any other service none.
func (r *Region) ServiceMembers(service string) clusters.Members {
	if !slices.Contains(clusters.Services, service) {
		return nil
	}
	out := make(clusters.Members, 0, len(r.Members))
	for _, m := range r.Members {
		m.Kubeconfig = r.Env.Cluster(m.Name).ServiceKubeconfig(service)
		m.QPS, m.Burst = r.memberQPS, r.memberBurst
		out = append(out, m)
	}
	return out
}

// ServiceClustersFile lists ServiceMembers(service), for a service run as
// a process ("" for a service that is not cluster-facing).
func (r *Region) ServiceClustersFile(service string) string {
	if !slices.Contains(clusters.Services, service) {
		return ""
	}
	return filepath.Join(r.dir, "clusters-"+service+".yaml")
}

// openBus opens the region's bus as the admin user, which creates the
// streams and buckets: an embedded server with the region's NATS users,
// reached in process or, with RestartableBus, over loopback TCP.
func (r *Region) openBus(ctx context.Context, o Options) (*bus.Bus, error) {
	natsAuth, err := bus.CreateAuth(filepath.Join(o.Dir, "nats"))
	if err != nil {
		return nil, err
	}
	r.NATSAuth = natsAuth
	store := filepath.Join(o.Dir, "jetstream")
	if o.NATSExec != "" && o.Exec != "" && !o.RestartableBus {
		return r.startNATSProcess(ctx, o, natsAuth, store)
	}
	if !o.RestartableBus {
		return bus.Open(ctx, bus.Config{StoreDir: store, Listen: o.Listen, Port: o.Port, Name: "atoll-region", Auth: natsAuth, Logger: o.Logger})
	}
	r.srvOpts = bus.ServerOptions{StoreDir: store, Listen: true, Port: o.Port, Auth: natsAuth}
	srv, err := bus.StartServer(r.srvOpts)
	if err != nil {
		return nil, err
	}
	// A restart comes back on the port the first start took.
	r.srvOpts.Port = srv.Addr().(*net.TCPAddr).Port
	r.srv = srv
	b, err := bus.Open(ctx, bus.Config{URL: srv.ClientURL(), Name: "atoll-region", NKeyFile: natsAuth.CredentialsFile(bus.UserAdmin), Logger: o.Logger})
	if err != nil {
		r.closeBus()
		return nil, err
	}
	return b, nil
}

// closeBus closes the region's connection and its embedded server.
func (r *Region) closeBus() {
	if r.Bus != nil {
		r.Bus.Close()
	}
	r.stopNATSProcess()
	r.busMu.Lock()
	defer r.busMu.Unlock()
	if r.srv != nil {
		r.srv.Shutdown()
		r.srv.WaitForShutdown()
		r.srv = nil
	}
}

// StopBus shuts the embedded NATS server down, as an outage would; every
// connection keeps trying to reconnect. It needs Options.RestartableBus.
func (r *Region) StopBus() error {
	r.busMu.Lock()
	defer r.busMu.Unlock()
	if r.srvOpts.StoreDir == "" {
		return errors.New("stop bus: the region's bus is not restartable (Options.RestartableBus)")
	}
	if r.srv == nil {
		return nil
	}
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	r.srv = nil
	return nil
}

// StartBus starts the embedded NATS server again on the same port and
// store after StopBus.
func (r *Region) StartBus() error {
	r.busMu.Lock()
	defer r.busMu.Unlock()
	if r.srvOpts.StoreDir == "" {
		return errors.New("start bus: the region's bus is not restartable (Options.RestartableBus)")
	}
	if r.srv != nil {
		return nil
	}
	srv, err := bus.StartServer(r.srvOpts)
	if err != nil {
		return fmt.Errorf("restart bus: %w", err)
	}
	r.srv = srv
	return nil
}

// Replicas is the number of replicas of every service.
func (r *Region) Replicas() int { return r.replicas }

// running is a started replica: its fx application and its own
// connection, or its process (Options.Exec).
type running struct {
	app   *fx.App
	conn  *bus.Bus
	admin *admin.Server // its admin port: /metrics, /healthz, /readyz
	proc  *process
}

func module(name string) fx.Option {
	for _, s := range Services {
		if s.Name == name {
			return s.Module
		}
	}
	return nil
}

// StartService starts every replica of a service that is not running.
func (r *Region) StartService(ctx context.Context, name string) error {
	if module(name) == nil {
		return fmt.Errorf("no service %q", name)
	}
	for i := range r.replicas {
		if err := r.StartReplica(ctx, name, i); err != nil {
			return err
		}
	}
	return nil
}

// StartReplica starts replica i of a service as its own fx application on
// its own bus connection; it does nothing when that replica runs already.
func (r *Region) StartReplica(ctx context.Context, name string, i int) error {
	mod := module(name)
	if mod == nil {
		return fmt.Errorf("no service %q", name)
	}
	if i < 0 || i >= r.replicas {
		return fmt.Errorf("%s has replicas 0 to %d, not %d", name, r.replicas-1, i)
	}
	id := Replica{Service: name, Index: i}
	r.mu.Lock()
	_, up := r.running[id]
	r.mu.Unlock()
	if up {
		return nil
	}
	if r.exec != "" {
		p, err := r.startProcess(ctx, id)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.running[id] = running{proc: p}
		r.mu.Unlock()
		return nil
	}
	// Each replica talks over its own connection, as its service's user,
	// as in production.
	conn, err := r.ConnectAs(connName(id), name)
	if err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	gwCfg := r.gatewayConfig(i)
	kek, err := r.kekOptions(name)
	if err != nil {
		conn.Close()
		return fmt.Errorf("start %s: %w", id, err)
	}
	var (
		gw      *gateway.Service
		adm     *admin.Server
		holders []string
	)
	opts := []fx.Option{
		fx.Supply(conn, r.log, r.ServiceMembers(name), gwCfg, r.quotaCfg, fx.Annotated{Name: holderName, Target: id.String()},
			admin.Config{Service: name, Listen: "127.0.0.1:0"}),
		kek,
		admin.Module,
		// The fill of the streams the service uses, as daemon.NewBus
		// exports it in production.
		fx.Invoke(func(a *admin.Server) error {
			return a.Registerer().Register(conn.StreamFill(bus.OwnStreams(name)...))
		}),
		mod,
		// Electors a service shares through fx tell their holder ids.
		fx.Invoke(fx.Annotate(func(e *lease.Elector) {
			if e != nil {
				holders = append(holders, e.Holder())
			}
		}, fx.ParamTags(`optional:"true"`))),
		holderHooks[name](&holders),
		admin.Started, // a root option, after mod: ready once its start hooks have run
		fx.Populate(&adm),
		fx.NopLogger,
	}
	if name == "gateway" {
		opts = append(opts, fx.Populate(&gw))
	}
	app := fx.New(opts...)
	if err := app.Start(ctx); err != nil {
		conn.Close()
		return fmt.Errorf("start %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range holders {
		r.holders[h] = id
	}
	if gw != nil {
		// A restart listens where the first start did.
		r.listen[i] = hostPort(gw.URL())
		if i == 0 {
			r.GatewayURL = gw.URL()
		}
	}
	r.running[id] = running{app: app, conn: conn, admin: adm}
	return nil
}

// ConnectAs opens a connection named name to the region's bus as a NATS
// user (bus.Users: a service's, or bus.UserAdmin); the caller closes it.
// Tests call the endpoints that answer only the gateway (admission,
// quota's get and set, the aggregator's cluster operations and debug
// sessions) over a connection as bus.UserGateway.
func (r *Region) ConnectAs(name, user string) (*bus.Bus, error) {
	if !slices.Contains(bus.Users(), user) {
		return nil, fmt.Errorf("connect %s: no NATS user %q (libs/bus Users and Grants)", name, user)
	}
	return r.Bus.ConnectAs(name, r.NATSAuth.CredentialsFile(user))
}

// AdminURL is the base URL of the admin port (/metrics, /healthz,
// /readyz) of replica i of a service, "" when it does not run.
func (r *Region) AdminURL(name string, i int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if svc, ok := r.running[Replica{Service: name, Index: i}]; ok {
		if svc.proc != nil {
			return svc.proc.adminURL
		}
		return svc.admin.URL()
	}
	return ""
}

// holderHooks record the lease holder id a service's *Service reports
// through a Holder() string method, when it has one.
var holderHooks = map[string]func(*[]string) fx.Option{
	"quota":       holderOf[*quota.Service],
	"admission":   holderOf[*admission.Service],
	"aggregator":  holderOf[*aggregator.Service],
	"scheduler":   holderOf[*scheduler.Service],
	"propagator":  holderOf[*propagator.Service],
	"gateway":     holderOf[*gateway.Service],
	"autoscaler":  holderOf[*autoscaler.Service],
	"remediation": holderOf[*remediation.Service],
	"upgrade":     holderOf[*upgrade.Service],
}

func holderOf[T any](dst *[]string) fx.Option {
	return fx.Invoke(func(s T) {
		if h, ok := any(s).(interface{ Holder() string }); ok && h.Holder() != "" {
			*dst = append(*dst, h.Holder())
		}
	})
}

func connName(id Replica) string { return "atoll-" + id.String() }

// gatewayConfig is the configuration of gateway replica i: replica 0
// listens at Options.GatewayListen, the others on free ports, and each
// keeps its address across restarts.
func (r *Region) gatewayConfig(i int) *gateway.Config {
	c := *r.gatewayCfg
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.listen[i]; ok {
		c.Listen = l
	} else if i > 0 {
		c.Listen = "127.0.0.1:0"
	}
	return &c
}

// GatewayURLs are the addresses of the gateway's replicas that have
// started, by replica.
func (r *Region) GatewayURLs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, r.replicas)
	for i := range out {
		if l, ok := r.listen[i]; ok {
			out[i] = r.scheme() + l
		}
	}
	return out
}

// StopService stops every replica of a service cleanly.
func (r *Region) StopService(ctx context.Context, name string) error {
	var errs []error
	for i := r.replicas - 1; i >= 0; i-- {
		errs = append(errs, r.StopReplica(ctx, name, i))
	}
	return errors.Join(errs...)
}

// StopReplica stops one replica cleanly: its stop hooks run while its
// connection is up, so it releases its leases.
func (r *Region) StopReplica(ctx context.Context, name string, i int) error {
	svc, ok := r.take(Replica{Service: name, Index: i})
	if !ok {
		return nil
	}
	if svc.proc != nil {
		if err := svc.proc.stop(ctx); err != nil {
			return fmt.Errorf("stop %s-%d: %w", name, i, err)
		}
		return nil
	}
	err := svc.app.Stop(ctx)
	svc.conn.Close()
	if err != nil {
		return fmt.Errorf("stop %s-%d: %w", name, i, err)
	}
	return nil
}

// Kill stops replica i of a service the way kill -9 stops a process: its
// NATS connection closes abruptly first, so it can neither renew nor
// release its leases, then its application stops within KillTimeout (its
// stop hooks fail to reach the bus; their errors are ignored).
func (r *Region) Kill(name string, i int) error {
	id := Replica{Service: name, Index: i}
	svc, ok := r.take(id)
	if !ok {
		return fmt.Errorf("kill %s: not running", id)
	}
	if svc.proc != nil {
		svc.proc.kill() // SIGKILL
		return nil
	}
	svc.conn.NC.Close()
	ctx, cancel := context.WithTimeout(context.Background(), KillTimeout)
	defer cancel()
	if err := svc.app.Stop(ctx); err != nil {
		r.log.Debug("killed replica stopped with errors", "replica", id.String(), "err", err)
	}
	return nil
}

func (r *Region) take(id Replica) (running, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	svc, ok := r.running[id]
	delete(r.running, id)
	return svc, ok
}

// Running reports whether replica i of a service runs.
func (r *Region) Running(name string, i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.running[Replica{Service: name, Index: i}]
	return ok
}

// Restart stops a service's replicas and starts them again.
func (r *Region) Restart(ctx context.Context, name string) error {
	if err := r.StopService(ctx, name); err != nil {
		return err
	}
	return r.StartService(ctx, name)
}

// ErrNoHolder is returned by LeaseHolder when nobody holds the lease.
var ErrNoHolder = errors.New("lease not held")

// Leases lists the names of the leases in bus.BucketLeases.
func (r *Region) Leases(ctx context.Context) ([]string, error) {
	kv, err := r.Bus.KV(ctx, bus.BucketLeases)
	if err != nil {
		return nil, err
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	keys = slices.DeleteFunc(keys, lease.IsPresenceKey)
	slices.Sort(keys)
	return keys, nil
}

// LeaseHolder returns the replica (of the service that owns the lease)
// whose holder id the lease record names.
func (r *Region) LeaseHolder(ctx context.Context, name string) (int, error) {
	id, _, err := r.Holder(ctx, name)
	return id.Index, err
}

// Holder returns the replica named by lease name's record and the record
// itself; ErrNoHolder when the lease is free. A record names a replica by
// the holder id its service reports (a Holder() string method on its
// *Service, or an *lease.Elector it shares through fx), the id the region
// supplies (HolderTag), or its connection name followed by "-"
// (lease.NewHolderID(conn.NC.Opts.Name)). Replicas that have stopped, or
// were killed and still hold a lease until it expires, are named too.
func (r *Region) Holder(ctx context.Context, name string) (Replica, lease.Record, error) {
	kv, err := r.Bus.KV(ctx, bus.BucketLeases)
	if err != nil {
		return Replica{}, lease.Record{}, err
	}
	rec, _, err := lease.Current(ctx, kv, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Replica{}, rec, fmt.Errorf("%s: %w", name, ErrNoHolder)
	}
	if err != nil {
		return Replica{}, rec, fmt.Errorf("lease %s: %w", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.holders[rec.Holder]; ok {
		return id, rec, nil
	}
	for _, s := range Services {
		for i := range r.replicas {
			id := Replica{Service: s.Name, Index: i}
			if holderIs(rec.Holder, id.String()) || holderIs(rec.Holder, connName(id)) {
				return id, rec, nil
			}
		}
	}
	return Replica{}, rec, fmt.Errorf("lease %s: holder %q is none of the region's replicas", name, rec.Holder)
}

// holderIs reports whether holder is id or starts with id and a dash.
func holderIs(holder, id string) bool {
	return holder == id || strings.HasPrefix(holder, id+"-")
}

// StopAndAudit stops the region (within two minutes) and reports, on
// stderr, a stop failure and any NATS permission violation seen during the
// run; it returns false when a service stepped outside its grant.
func (r *Region) StopAndAudit() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "stop region:", err)
	}
	ok := true
	if v := r.PermissionViolations(); len(v) > 0 {
		fmt.Fprintf(os.Stderr, "%d NATS permission violations, first: %s\n", len(v), v[0])
		ok = false
	}
	if f := r.MemberForbidden(); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "%d member-cluster requests of services refused (403), first: %s\n", len(f), f[0])
		ok = false
	}
	return ok
}

// MemberForbidden returns the requests of the cluster-facing services
// that a member cluster's API server refused with 403 so far (from their
// audit logs; after Stop, those read as the clusters stopped): none when
// every service keeps to its rights there (libs/clusters Roles). Requests
// of clients whose user agent starts with testenv.ForbiddenAgentPrefix,
// refused on purpose, are left out.
func (r *Region) MemberForbidden() []string {
	r.mu.Lock()
	stopped := slices.Clone(r.forbidden)
	r.mu.Unlock()
	if r.Env == nil || stopped != nil {
		return stopped
	}
	f, err := r.Env.Forbidden()
	if err != nil {
		f = append(f, "audit: "+err.Error())
	}
	return f
}

// Stop stops every service, the member clusters and the bus.
func (r *Region) Stop(ctx context.Context) error {
	var errs []error
	for i := len(Services) - 1; i >= 0; i-- {
		errs = append(errs, r.StopService(ctx, Services[i].Name))
	}
	if r.Env != nil {
		// The audit logs go with the clusters: read them first.
		f, err := r.Env.Forbidden()
		if err != nil {
			f = append(f, "audit: "+err.Error())
		}
		r.mu.Lock()
		if r.forbidden == nil { // a second Stop finds no log left
			r.forbidden = append(make([]string, 0, len(f)), f...)
		}
		r.mu.Unlock()
		errs = append(errs, r.Env.Stop(ctx))
	}
	r.closeBus()
	return errors.Join(errs...)
}

// prepareGateway makes the gateway's credentials: a platform admin token,
// written to the region's tokens file as a digest only. Every gateway
// replica reads that file and reads it again when it changes, as in
// production: RevokeToken removes a token from it.
func (r *Region) prepareGateway(o Options) error {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return fmt.Errorf("region directory: %w", err)
	}
	path, err := r.writeTokensFile()
	if err != nil {
		return err
	}
	a, err := auth.New(auth.Config{TokensFile: path, Logger: r.log.With("service", "gateway")})
	if err != nil {
		return err
	}
	r.Auth = a
	listen := o.GatewayListen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	r.gatewayCfg = &gateway.Config{Listen: listen, Authenticator: a, SelfServiceProjects: o.SelfServiceProjects, MaxProjectsPerUser: o.MaxProjectsPerUser}
	if o.TLS {
		if err := r.prepareTLS(o, r.gatewayCfg); err != nil {
			return err
		}
	}
	r.AdminToken = r.Token("admin", true, nil)
	return nil
}

// Token mints an API token for subject with the given roles per project
// (viewer, developer or admin), valid for auth.DefaultTokenLifetime.
func (r *Region) Token(subject string, platformAdmin bool, roles map[string]string) string {
	return r.TokenUntil(subject, platformAdmin, roles, time.Now().Add(auth.DefaultTokenLifetime))
}

// TokenUntil mints an API token that expires at expires (in the past for
// an expired one), adds it to the tokens file, and has the in-process
// gateways read the file at once (processes read it within seconds).
func (r *Region) TokenUntil(subject string, platformAdmin bool, roles map[string]string, expires time.Time) string {
	id := auth.Identity{Subject: subject, PlatformAdmin: platformAdmin, Roles: map[string]auth.Role{}}
	for p, role := range roles {
		id.Roles[p] = auth.Role(role)
	}
	tok, entry := auth.Entry(id, expires)
	r.mu.Lock()
	r.tokens = append(r.tokens, entry)
	r.mu.Unlock()
	if _, err := r.writeTokensFile(); err != nil {
		r.log.Error("gateway tokens file not written", "err", err)
	}
	if r.Auth != nil {
		if err := r.Auth.Reload(); err != nil {
			r.log.Error("gateway tokens file not read", "err", err)
		}
	}
	return tok
}

// RevokeToken removes tok from the tokens file. Nothing else is told:
// every gateway replica notices the change by itself, within
// auth.DefaultReloadInterval.
func (r *Region) RevokeToken(tok string) error {
	digest := auth.Digest(tok)
	r.mu.Lock()
	n := len(r.tokens)
	r.tokens = slices.DeleteFunc(r.tokens, func(e auth.TokenEntry) bool { return e.SHA256 == digest })
	removed := len(r.tokens) < n
	r.mu.Unlock()
	if !removed {
		return errors.New("revoke: no such token")
	}
	_, err := r.writeTokensFile()
	return err
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

// PermissionViolations returns the permission violations the NATS server
// has reported to any of the region's connections so far ("<connection>:
// <error>"): none when every service keeps to its grant (libs/bus Grants).
func (r *Region) PermissionViolations() []string {
	r.violations.mu.Lock()
	defer r.violations.mu.Unlock()
	return slices.Clone(r.violations.got)
}

// violations are the permission violations logged through a
// violationHandler.
type violations struct {
	mu  sync.Mutex
	got []string // mu must be held
}

// violationHandler passes records on to Handler and keeps those that
// report a permission violation: the bus logs what the server reports to
// a connection as an async error, with the connection's name.
type violationHandler struct {
	slog.Handler
	seen  *violations
	attrs []slog.Attr // attributes added by WithAttrs
}

func (h *violationHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.Handler.Enabled(ctx, l)
}

func (h *violationHandler) Handle(ctx context.Context, rec slog.Record) error {
	var conn, msg string
	note := func(a slog.Attr) bool {
		switch a.Key {
		case "connection":
			conn = a.Value.String()
		case "err":
			msg = a.Value.String()
		}
		return true
	}
	for _, a := range h.attrs {
		note(a)
	}
	rec.Attrs(note)
	if strings.Contains(strings.ToLower(msg), "permissions violation") {
		h.seen.mu.Lock()
		h.seen.got = append(h.seen.got, conn+": "+msg)
		h.seen.mu.Unlock()
	}
	if !h.Handler.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, rec)
}

func (h *violationHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &violationHandler{Handler: h.Handler.WithAttrs(attrs), seen: h.seen, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h *violationHandler) WithGroup(name string) slog.Handler {
	return &violationHandler{Handler: h.Handler.WithGroup(name), seen: h.seen, attrs: h.attrs}
}
