package testenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is one running member cluster.
type Cluster struct {
	// Name is the cluster's name within its environment (zone-a, ...).
	Name string
	// Zone is the cluster's failure domain.
	Zone string
	// Kubeconfig is the path of the cluster's own kubeconfig file.
	Kubeconfig string
	// Config is a client configuration without rate limits.
	Config *rest.Config
	// Client is a clientset on Config.
	Client kubernetes.Interface

	index  int    // position in the environment, for its pod CIDR
	kwokID string // unique kwokctl cluster name
	spec   ClusterSpec
	env    *Env
}

// PodCIDR is the pod network of an environment's i-th cluster: a /12 of
// 10.0.0.0/8 each (a million pods), so that two clusters never give a pod
// the same IP (KWOK's default is one 10.0.0.0/24 for every cluster).
func PodCIDR(i int) string { return fmt.Sprintf("10.%d.0.0/12", 16*(i%15+1)) }

// Dir is the cluster's kwokctl directory (pki, logs, pids, etcd data).
func (c *Cluster) Dir() string {
	return filepath.Join(c.env.opts.WorkDir, "clusters", c.kwokID)
}

// KwokName is the unique name kwokctl knows the cluster by.
func (c *Cluster) KwokName() string { return c.kwokID }

func (c *Cluster) create(ctx context.Context) error {
	o := &c.env.opts
	log := c.env.log.With("cluster", c.Name)
	start := time.Now()
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(o.WorkDir, c.kwokID+".kubeconfig")
	args := []string{
		"create", "cluster", "--name", c.kwokID,
		"--runtime", "binary",
		"--kubeconfig", c.Kubeconfig,
		"--kube-apiserver-binary", filepath.Join(o.BinDir, "kube-apiserver"),
		"--kube-controller-manager-binary", filepath.Join(o.BinDir, "kube-controller-manager"),
		"--kube-scheduler-binary", filepath.Join(o.BinDir, "kube-scheduler"),
		"--etcd-binary", filepath.Join(o.BinDir, "etcd"),
		"--kwok-controller-binary", filepath.Join(o.BinDir, "kwok"),
		"--wait", "2m",
		// One instance each: without leader election a component survives its
		// API server being frozen for longer than a lease (it would exit).
		"--extra-args", "kube-controller-manager=leader-elect=false",
		"--extra-args", "kube-scheduler=leader-elect=false",
		// Pod IPs distinct across the environment's clusters, as a region's
		// flat network has them: an App's region-wide endpoints carry them.
		"--extra-args", "kwok-controller=cidr=" + PodCIDR(c.index),
	}
	if !o.KeepQPSLimits {
		args = append(args, "--disable-qps-limits")
	}
	if len(o.ControllersOff) > 0 {
		args = append(args, "--extra-args", "kube-controller-manager=controllers="+controllersFlag(o.ControllersOff))
	}
	var err error
	if o.MetricsServer {
		// Its configuration includes the tuning: kwokctl reads one.
		ms, err := o.metricsServerArgs()
		if err != nil {
			return err
		}
		args = append(args, ms...)
	} else {
		tuning, err := o.tuningFile()
		if err != nil {
			return err
		}
		args = append(args, "--config", tuning)
	}
	if c.env.debugFile != "" {
		// Exec as a resource: the pod simulation writes one per Pod.
		args = append(args, "--config", c.env.debugFile, "--enable-crds", "Exec")
	}
	if o.ServiceAccess {
		audit, err := o.auditPolicyFile()
		if err != nil {
			return err
		}
		args = append(args, "--kube-audit-policy", audit)
	}
	for _, f := range c.spec.ConfigFiles {
		args = append(args, "--config", f)
	}
	log.Info("creating member cluster", "kwok", c.kwokID)
	// Ports are picked free by kwokctl; a parallel run can grab one between
	// pick and bind, so a failed create is retried once from scratch.
	for attempt := 1; attempt <= 2; attempt++ {
		if _, err = o.createLocked(ctx, args...); err == nil {
			break
		}
		log.Warn("create member cluster", "attempt", attempt, "err", err)
		_, _ = o.kwokctl(context.Background(), "delete", "cluster", "--name", c.kwokID)
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create cluster %s: %w", c.Name, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("cluster %s kubeconfig: %w", c.Name, err)
	}
	if err := inlineCerts(cfg); err != nil {
		return fmt.Errorf("cluster %s kubeconfig: %w", c.Name, err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	cfg.Timeout = 30 * time.Second
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("cluster %s client: %w", c.Name, err)
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	if o.ServiceAccess {
		if err := c.joinServices(ctx); err != nil {
			return err
		}
	}
	if o.Nice > 0 || o.BackgroundNice > 0 {
		for _, pid := range c.Processes() {
			nice := o.Nice
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); !apiPath[strings.TrimSpace(string(comm))] {
				nice = max(nice, o.BackgroundNice)
			}
			if err := renice(pid, nice); err != nil {
				log.Warn("renice member cluster process", "pid", pid, "err", err)
			}
		}
	}
	log.Info("member cluster ready", "elapsed", time.Since(start).Round(time.Millisecond), "kubeconfig", c.Kubeconfig)
	return nil
}

// waitReady waits until the default service account exists: from then on
// Pods can be created in the default namespace.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) && ctx.Err() != nil {
			return fmt.Errorf("cluster %s not ready: %w", c.Name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s not ready: %w", c.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) delete(ctx context.Context) error {
	dir := c.Dir()
	_, err := c.env.opts.kwokctl(ctx, "delete", "cluster", "--name", c.kwokID)
	// Whatever kwokctl missed is killed; then wait for the processes to go.
	deadline := time.Now().Add(20 * time.Second)
	for len(Processes(dir)) > 0 && time.Now().Before(deadline) {
		killUnder(dir)
		time.Sleep(100 * time.Millisecond)
	}
	if left := Processes(dir); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("cluster %s: processes %v still running", c.Name, left))
	}
	_ = os.RemoveAll(dir)
	_ = os.Remove(c.Kubeconfig)
	return err
}

// Component names accepted by StopComponent and ResumeComponent.
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Etcd                  = "etcd"
	KwokController        = "kwok-controller"
)

// PausedComponent is a member-cluster component frozen with SIGSTOP, as a
// cluster that is unreachable (its sockets accept nothing and answer nothing).
type PausedComponent struct {
	pid int
}

// PauseComponent freezes one component of the cluster (SIGSTOP).
func (c *Cluster) PauseComponent(name string) (*PausedComponent, error) {
	pid, err := c.componentPID(name)
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("pause %s of %s: %w", name, c.Name, err)
	}
	return &PausedComponent{pid: pid}, nil
}

// Resume lets a paused component run again (SIGCONT).
func (p *PausedComponent) Resume() error { return syscall.Kill(p.pid, syscall.SIGCONT) }

func (c *Cluster) componentPID(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir(), "pids", name+".pid"))
	if err != nil {
		return 0, fmt.Errorf("component %s of %s: %w", name, c.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("component %s of %s: pid file: %w", name, c.Name, err)
	}
	return pid, nil
}

// Processes returns the pids of the cluster's running components.
func (c *Cluster) Processes() []int { return Processes(c.Dir()) }

// inlineCerts reads the client certificate files into the configuration, so
// clients keep no watch on files that teardown removes.
func inlineCerts(cfg *rest.Config) error {
	for _, f := range []struct {
		file *string
		data *[]byte
	}{{&cfg.CertFile, &cfg.CertData}, {&cfg.KeyFile, &cfg.KeyData}, {&cfg.CAFile, &cfg.CAData}} {
		if *f.file == "" {
			continue
		}
		b, err := os.ReadFile(*f.file)
		if err != nil {
			return err
		}
		*f.data, *f.file = b, ""
	}
	return nil
}

// createLocked runs `kwokctl create cluster` holding a machine-wide lock:
// kwokctl picks free ports by probing, so two creates at once, even from
// different test processes, can pick the same port.
func (o *Options) createLocked(ctx context.Context, args ...string) ([]byte, error) {
	f, err := os.OpenFile(filepath.Join(o.WorkDir, ".create.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	// Closing f releases the lock too: the unlock's error changes nothing.
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	return o.kwokctl(ctx, args...)
}

// tuning trades the member clusters' durability for speed, as fits
// throwaway test clusters on a small machine: etcd does not fsync, and the
// Go components collect garbage less often.
const tuning = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:

- name: etcd
  extraArgs:
  - key: unsafe-no-fsync
    value: "true"
  extraEnvs:
  - name: GOGC
    value: "400"
- name: kube-apiserver
  extraEnvs:
  - name: GOGC
    value: "400"
`

func (o *Options) tuningFile() (string, error) { return o.sharedFile("tuning.yaml", tuning) }

// sharedFile writes content to name in the work directory, shared by
// every cluster, unless it holds that already.
func (o *Options) sharedFile(name, content string) (string, error) {
	p := filepath.Join(o.WorkDir, name)
	if b, err := os.ReadFile(p); err == nil && string(b) == content {
		return p, nil
	}
	// Clusters start in parallel: each writes its own temporary file and
	// renames it into place, so none sees a half-written one.
	f, err := os.CreateTemp(o.WorkDir, strings.TrimSuffix(name, ".yaml")+"-*.yaml")
	if err != nil {
		return "", err
	}
	_, werr := f.WriteString(content)
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return p, os.Rename(f.Name(), p)
}

// apiPath names the processes that serve API requests; the others
// (controller-manager, scheduler, KWOK's simulated kubelets) work behind them.
var apiPath = map[string]bool{"etcd": true, "kube-apiserver": true}

// renice lowers a process's CPU priority. kwokctl starts each component in
// a session of its own, and with the kernel's autogroup scheduling every
// session is a group that gets an equal share of the CPU whatever its
// processes' nice values: the group's own nice must be lowered too, or
// fifteen cluster processes leave the caller a sixteenth of the machine.
func renice(pid, nice int) error {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, pid, nice); err != nil {
		return fmt.Errorf("setpriority: %w", err)
	}
	// A process in the caller's own session shares the caller's group:
	// lowering that group would lower the caller too.
	group := fmt.Sprintf("/proc/%d/autogroup", pid)
	if own, theirs := autogroupOf("/proc/self/autogroup"), autogroupOf(group); theirs == "" || theirs == own {
		return nil
	}
	if err := os.WriteFile(group, []byte(strconv.Itoa(nice)), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("autogroup: %w", err)
	}
	return nil
}

// autogroupOf returns the name of the scheduling group an autogroup file
// names ("/autogroup-42 nice 0" -> "/autogroup-42"), or "" without one.
func autogroupOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	name, _, _ := strings.Cut(string(b), " ")
	return name
}

// controllersFlag is kube-controller-manager's --controllers value that
// runs every default controller but those named.
func controllersFlag(off []string) string {
	parts := []string{"*"}
	for _, c := range off {
		parts = append(parts, "-"+c)
	}
	return strings.Join(parts, ",")
}
