package aggregator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	utilexec "k8s.io/utils/exec"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/debugstream"
)

// DebugOpenTimeout bounds how long a member cluster may take to start a
// log stream or an exec session.
const DebugOpenTimeout = 10 * time.Second

// DebugQPS and DebugBurst limit, per member cluster and replica, the
// requests that debug sessions (log streams, exec) send its API server.
const (
	DebugQPS   = 50
	DebugBurst = 100
)

// debugBackend serves the logs and exec sessions of libs/debugstream from
// the member clusters: it finds a workload's Pods by the platform's labels
// and streams from the clusters' API servers. Every replica serves every
// cluster (the sessions come through a queue group): a cluster this
// replica observes is read from its synced informer caches, another by a
// live list against its API server.
type debugBackend struct {
	s        *Service
	clusters map[string]*debugCluster
}

var _ debugstream.Backend = (*debugBackend)(nil)

// debugCluster is how one member cluster is reached for streams: a client
// without the overall request timeout, as streams last as long as their
// session; their context bounds them.
type debugCluster struct {
	name string
	zone string
	cfg  *rest.Config
	cs   kubernetes.Interface
	c    *cluster
}

// newDebugBackend returns the backend of the replica's debug sessions.
func newDebugBackend(s *Service) (*debugBackend, error) {
	b := &debugBackend{s: s, clusters: map[string]*debugCluster{}}
	for _, m := range s.members {
		cfg, err := m.RESTConfig()
		if err != nil {
			return nil, err
		}
		cfg.Timeout = 0
		// Tenants start these streams: a client-side limit per cluster
		// keeps any burst of them off the member's API server.
		cfg.QPS, cfg.Burst = DebugQPS, DebugBurst
		// The cluster's transport (its connections closed on Stop), no timeout.
		cs, err := kubernetes.NewForConfigAndClient(cfg, &http.Client{Transport: s.clusters[m.Name].conn.HTTP.Transport})
		if err != nil {
			return nil, fmt.Errorf("cluster %s stream client: %w", m.Name, err)
		}
		b.clusters[m.Name] = &debugCluster{name: m.Name, zone: m.Zone, cfg: cfg, cs: cs, c: s.clusters[m.Name]}
	}
	return b, nil
}

// startDebug serves debug sessions for the member clusters.
func (s *Service) startDebug() error {
	b, err := newDebugBackend(s)
	if err != nil {
		return err
	}
	srv := debugstream.NewServer(s.bus.NC, b, debugstream.ServerOptions{
		QueueGroup: "aggregator-debug", Logger: s.log,
		// Sessions are opened for users the gateway has authorised.
		Wrap: func(h micro.HandlerFunc) micro.HandlerFunc { return s.bus.OnlyFrom(h, bus.UserGateway) },
	})
	if err := srv.Start(); err != nil {
		return err
	}
	s.debug = srv
	return nil
}

// stopDebug ends the debug sessions.
func (s *Service) stopDebug() {
	if s.debug != nil {
		s.debug.Stop()
		s.debug = nil
	}
}

// unreachable says whether this replica knows the cluster to be unhealthy:
// only the replica observing it probes it.
func (c *debugCluster) unreachable() bool {
	if c.c == nil {
		return false
	}
	t := c.c.synced()
	return t != nil && !t.isHealthy()
}

// clusterPod is one of a workload's Pods.
type clusterPod struct {
	cluster *debugCluster
	pod     *podView
}

// pods returns the workload's Pods by cluster name, then Pod name; a
// workload the region does not know is a 404.
func (b *debugBackend) pods(ctx context.Context, project, kind, name string) ([]clusterPod, error) {
	if !api.IsDNSLabel(project) || !api.IsDNSLabel(name) {
		return nil, debugstream.Errorf(http.StatusBadRequest, "project %q and name %q must be DNS labels", project, name)
	}
	_, kind, _, err := api.ParseKey(api.Key(project, kind, name))
	if err != nil {
		return nil, debugstream.Errorf(http.StatusBadRequest, "unknown kind; one of %s", strings.Join(api.KindNames(), ", "))
	}
	key := api.Key(project, kind, name)
	if _, err := b.s.workloadKV.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, debugstream.Errorf(http.StatusNotFound, "no %s %s in project %s", kind, name, project)
	} else if err != nil {
		return nil, debugstream.Errorf(http.StatusServiceUnavailable, "look up %s %s: %v", kind, name, err)
	}
	var (
		out         []clusterPod
		unreachable []string
	)
	for _, n := range slices.Sorted(maps.Keys(b.clusters)) {
		c := b.clusters[n]
		pods, err := c.workloadPods(ctx, project, key)
		if err != nil {
			b.s.log.Warn("list pods for a debug session", "cluster", n, "key", key, "err", err)
			unreachable = append(unreachable, n)
			continue
		}
		slices.SortFunc(pods, func(x, y *podView) int { return strings.Compare(x.Name, y.Name) })
		for _, p := range pods {
			out = append(out, clusterPod{cluster: c, pod: p})
		}
	}
	if len(out) == 0 && len(unreachable) > 0 {
		return nil, debugstream.Errorf(http.StatusServiceUnavailable, "cannot list the Pods of %s %s in %s", kind, name, strings.Join(unreachable, ", "))
	}
	return out, nil
}

// workloadPods lists the workload's Pods in the cluster: from the informer
// caches when this replica observes it, else from its API server.
func (c *debugCluster) workloadPods(ctx context.Context, project, key string) ([]*podView, error) {
	if c.c == nil {
		return nil, nil
	}
	if t := c.c.synced(); t != nil {
		objs, err := t.pods.ByIndex(byWorkload, key)
		if err != nil {
			return nil, err
		}
		return podsOf(objs), nil
	}
	_, kind, name, _ := api.ParseKey(key)
	sel := labels.SelectorFromSet(labels.Set{
		api.LabelManaged: "true", api.LabelProject: project, api.LabelKind: api.KindLabel(kind), api.LabelWorkload: name,
	})
	lctx, cancel := context.WithTimeout(ctx, DebugOpenTimeout)
	defer cancel()
	list, err := c.c.cs.CoreV1().Pods(api.Namespace(project)).List(lctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	out := make([]*podView, len(list.Items))
	for i := range list.Items {
		out[i] = viewOf(&list.Items[i])
	}
	return out, nil
}

// DefaultMaxLogContainers is how many containers one log session may
// stream at most, unless configured (Config.MaxLogContainers): each is a
// goroutine here and a stream from a member cluster's API server.
const DefaultMaxLogContainers = 50

// Logs implements debugstream.Backend: one source per container of each
// Pod that has started, in the request's zone and Pod when it names them;
// more than the session limit is a 422 that says how to narrow it.
func (b *debugBackend) Logs(ctx context.Context, req debugstream.LogRequest) ([]debugstream.LogSource, error) {
	if req.File != "" {
		return b.fileLogs(ctx, req)
	}
	pods, err := b.logPods(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []debugstream.LogSource
	for _, cp := range pods {
		if cp.pod.Node.String() == "" || cp.pod.phase() == corev1.PodPending || cp.pod.phase() == corev1.PodUnknown {
			continue // no container has run yet
		}
		var containers []string
		if req.Container == "" {
			for _, c := range cp.pod.mains() {
				containers = append(containers, c.Name.String())
			}
		} else if hasContainer(cp.pod, req.Container) {
			containers = []string{req.Container}
		}
		for _, c := range containers {
			out = append(out, debugstream.LogSource{
				Cluster: cp.cluster.name, Pod: cp.pod.Name, Container: c,
				Open: cp.cluster.openLog(cp.pod.Namespace.String(), cp.pod.Name, c, req),
			})
		}
	}
	if len(out) == 0 {
		if req.Container != "" {
			return nil, debugstream.Errorf(http.StatusNotFound, "no started Pod of %s %s has a container %q", req.Kind, req.Name, req.Container)
		}
		return nil, debugstream.Errorf(http.StatusNotFound, "%s %s has no started Pods", req.Kind, req.Name)
	}
	return out, b.capLogs(req, out)
}

// logPods returns the workload's Pods a log session reads: those in
// req.Zone and named req.Pod when set.
func (b *debugBackend) logPods(ctx context.Context, req debugstream.LogRequest) ([]clusterPod, error) {
	pods, err := b.pods(ctx, req.Project, req.Kind, req.Name)
	if err != nil {
		return nil, err
	}
	out := pods[:0]
	for _, cp := range pods {
		if (req.Zone == "" || cp.cluster.zone == req.Zone) && (req.Pod == "" || cp.pod.Name == req.Pod) {
			out = append(out, cp)
		}
	}
	return out, nil
}

// capLogs refuses a session of more containers than a session may
// stream, saying how to narrow it.
func (b *debugBackend) capLogs(req debugstream.LogRequest, sources []debugstream.LogSource) error {
	most := b.s.maxLogContainers
	if most <= 0 {
		most = DefaultMaxLogContainers
	}
	if len(sources) <= most {
		return nil
	}
	zones := map[string]bool{}
	for _, c := range b.clusters {
		zones[c.zone] = true
	}
	return debugstream.Errorf(http.StatusUnprocessableEntity,
		"this log session would stream %d containers, more than the %d a session may: narrow it with container (one container's name), zone (one of %s) or pod (one pod's name)",
		len(sources), most, strings.Join(slices.Sorted(maps.Keys(zones)), ", "))
}

// hasContainer says whether the Pod has a container of that name: a main
// container, an init container or a platform sidecar (logs may read any).
func hasContainer(p *podView, name string) bool {
	return slices.ContainsFunc(p.Containers, func(c containerView) bool { return c.Name.String() == name })
}

// execContainer refuses a command in anything but one of the workload's
// own main containers: never an init container nor one of the platform's
// sidecars (native sidecars, init containers too), whose credentials and
// files are the platform's.
func execContainer(p *podView, name string) error {
	var own []string
	for _, c := range p.mains() {
		if c.Name.String() == name {
			return nil
		}
		own = append(own, c.Name.String())
	}
	for _, c := range p.Containers[:len(p.Containers)-len(p.mains())] {
		if c.Name.String() == name {
			return debugstream.Errorf(http.StatusForbidden, "container %q of pod %s is an init container or the platform's sidecar: exec only into the workload's own containers (%s)", name, p.Name, strings.Join(own, ", "))
		}
	}
	return debugstream.Errorf(http.StatusNotFound, "pod %s has no container %q", p.Name, name)
}

// openLog returns a function that opens one container's log.
func (c *debugCluster) openLog(ns, pod, container string, req debugstream.LogRequest) func(context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		if c.unreachable() {
			return nil, debugstream.Errorf(http.StatusServiceUnavailable, "cluster %s is unreachable", c.name)
		}
		opts := &corev1.PodLogOptions{Container: container, Follow: req.Follow, Timestamps: true}
		if req.SinceSeconds > 0 {
			opts.SinceSeconds = &req.SinceSeconds
		}
		if req.Tail > 0 {
			opts.TailLines = &req.Tail
		}
		sctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(DebugOpenTimeout, cancel)
		rc, err := c.cs.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(sctx)
		if !timer.Stop() {
			if err == nil {
				rc.Close()
			}
			cancel()
			return nil, debugstream.Errorf(http.StatusServiceUnavailable, "cluster %s: no log stream within %v", c.name, DebugOpenTimeout)
		}
		if err != nil {
			cancel()
			return nil, c.refusal(fmt.Sprintf("logs of %s/%s", pod, container), err)
		}
		return &cancelOnClose{ReadCloser: rc, cancel: cancel}, nil
	}
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Exec implements debugstream.Backend: the named or first Running Pod,
// and the named or first main container.
func (b *debugBackend) Exec(ctx context.Context, req debugstream.ExecRequest) (debugstream.ExecTarget, error) {
	pods, err := b.pods(ctx, req.Project, req.Kind, req.Name)
	if err != nil {
		return debugstream.ExecTarget{}, err
	}
	var target *clusterPod
	for i, cp := range pods {
		running := cp.pod.running()
		if req.Pod != "" && cp.pod.Name == req.Pod {
			if !running {
				return debugstream.ExecTarget{}, debugstream.Errorf(http.StatusBadRequest, "pod %s of %s %s is %s, not Running", req.Pod, req.Kind, req.Name, cp.pod.phase())
			}
			target = &pods[i]
			break
		}
		if req.Pod == "" && running {
			target = &pods[i]
			break
		}
	}
	if target == nil {
		if req.Pod != "" {
			return debugstream.ExecTarget{}, debugstream.Errorf(http.StatusNotFound, "%s %s has no Pod %s", req.Kind, req.Name, req.Pod)
		}
		return debugstream.ExecTarget{}, debugstream.Errorf(http.StatusNotFound, "%s %s has no Running Pod", req.Kind, req.Name)
	}
	container := req.Container
	if mains := target.pod.mains(); container == "" && len(mains) > 0 {
		container = mains[0].Name.String()
	}
	if err := execContainer(target.pod, container); err != nil {
		return debugstream.ExecTarget{}, err
	}
	c := target.cluster
	if c.unreachable() {
		return debugstream.ExecTarget{}, debugstream.Errorf(http.StatusServiceUnavailable, "cluster %s is unreachable", c.name)
	}
	ns, pod := target.pod.Namespace.String(), target.pod.Name
	return debugstream.ExecTarget{
		Cluster: c.name, Pod: pod, Container: container,
		Run: func(ctx context.Context, eio debugstream.ExecIO) (int, error) {
			return c.exec(ctx, ns, pod, container, req, eio)
		},
	}, nil
}

// exec runs the command over the API server's exec subresource: WebSocket,
// or SPDY where the server does not upgrade to WebSocket.
func (c *debugCluster) exec(ctx context.Context, ns, pod, container string, req debugstream.ExecRequest, eio debugstream.ExecIO) (int, error) {
	u := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: req.Command,
			Stdin: eio.Stdin != nil, Stdout: true, Stderr: !req.TTY, TTY: req.TTY,
		}, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(c.cfg, http.MethodPost, u.String())
	if err != nil {
		return -1, fmt.Errorf("exec in %s/%s: %w", c.name, pod, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.cfg, http.MethodPost, u)
	if err != nil {
		return -1, fmt.Errorf("exec in %s/%s: %w", c.name, pod, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("exec in %s/%s: %w", c.name, pod, err)
	}
	opts := remotecommand.StreamOptions{Stdin: eio.Stdin, Stdout: eio.Stdout, Tty: req.TTY}
	if !req.TTY {
		opts.Stderr = eio.Stderr
	}
	if eio.Resize != nil {
		opts.TerminalSizeQueue = &sizeQueue{ctx: ctx, ch: eio.Resize}
	}
	err = ex.StreamWithContext(ctx, opts)
	if err == nil {
		return 0, nil
	}
	if code, ok := exitCode(err); ok {
		return code, nil
	}
	if ctx.Err() != nil {
		return -1, context.Cause(ctx)
	}
	return -1, c.refusal(fmt.Sprintf("exec in %s/%s", pod, container), err)
}

// kwokExit matches how KWOK's simulated kubelet reports a non-zero exit: as
// an internal error ending in the command's "exit status N", where a real
// kubelet sends the code as a NonZeroExitCode status.
var kwokExit = regexp.MustCompile(`: exit status (\d+)\s*$`)

// exitCode returns the command's exit code carried by an exec error.
func exitCode(err error) (int, bool) {
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), true
	}
	if m := kwokExit.FindStringSubmatch(err.Error()); m != nil {
		if n, perr := strconv.Atoi(m[1]); perr == nil {
			return n, true
		}
	}
	return 0, false
}

// refusal turns a member cluster's error into a debugstream refusal: its
// status code when it answered, 503 when it could not be reached.
func (c *debugCluster) refusal(what string, err error) error {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := int(st.Status().Code)
		if code == 0 || code >= 500 {
			code = http.StatusServiceUnavailable
		}
		return debugstream.Errorf(code, "cluster %s: %s: %s", c.name, what, st.Status().Message)
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return debugstream.Errorf(http.StatusServiceUnavailable, "cluster %s unreachable: %s: %v", c.name, what, err)
	}
	return fmt.Errorf("cluster %s: %s: %w", c.name, what, err)
}

// sizeQueue hands the client's terminal sizes to remotecommand.
type sizeQueue struct {
	ctx context.Context
	ch  <-chan debugstream.TerminalSize
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case <-q.ctx.Done():
		return nil
	case s := <-q.ch:
		return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
	}
}
