// Command atoll-member runs one member cluster in a container: a real
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler) and KWOK's simulated nodes, started by kwokctl's binary
// runtime through libs/testenv, exactly as atoll-dev and the tests start
// theirs. It is the entrypoint of the atoll/member image (make images),
// which holds those binaries in its root directory.
//
// The cluster is joined as Atoll joins a member cluster (libs/clusters):
// the cluster-facing services' ClusterRoles and bindings applied, and a
// client certificate per service. When the cluster and its nodes are ready
// it writes each cluster-facing service its own kubeconfig, to
// <kubeconfig-dir>/<service>/<name>.kubeconfig, its server
// https://<name>:<port> (the container's name on the compose network; the
// API server's certificate names it), and stays until SIGTERM or SIGINT,
// when it deletes the cluster. No kubeconfig of the cluster's admin leaves
// the container. `atoll-member -check` (the container's health check)
// succeeds once those files exist.
//
// Every container's log is one line naming the cluster (a KWOK ClusterLogs;
// KWOK runs no container), so that `atoll logs`, and the canary's logs step,
// read something from each cluster. There is no exec simulation: that would
// run users' commands in this container.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
)

func main() {
	fs := flag.NewFlagSet("atoll-member", flag.ExitOnError)
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	name := fs.String("name", env("ATOLL_MEMBER_NAME", "zone-a"), "the cluster's name and its host name on the network (ATOLL_MEMBER_NAME)")
	zone := fs.String("zone", env("ATOLL_MEMBER_ZONE", "a"), "the cluster's zone (ATOLL_MEMBER_ZONE)")
	port := fs.Int("port", atoi(env("ATOLL_MEMBER_PORT", "6443")), "the API server's port (ATOLL_MEMBER_PORT)")
	nodes := fs.Int("nodes", atoi(env("ATOLL_MEMBER_NODES", "10")), "KWOK nodes of 16 CPUs and 64Gi (ATOLL_MEMBER_NODES)")
	dir := fs.String("kubeconfig-dir", env("ATOLL_MEMBER_KUBECONFIG_DIR", "/kubeconfigs"), "where to write <service>/<name>.kubeconfig (ATOLL_MEMBER_KUBECONFIG_DIR)")
	bin := fs.String("bin", env("ATOLL_MEMBER_BIN", "/"), "the directory of kwokctl, kwok, etcd, kube-* and kubectl (ATOLL_MEMBER_BIN)")
	check := fs.Bool("check", false, "exit 0 when the cluster's kubeconfig has been written (a health check)")
	_ = fs.Parse(os.Args[1:])
	out := map[string]string{}
	for _, s := range clusters.Services {
		out[s] = filepath.Join(*dir, s, *name+".kubeconfig")
	}
	if *check {
		for _, p := range out {
			if _, err := os.Stat(p); err != nil {
				os.Exit(1)
			}
		}
		return
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log, *name, *zone, *port, *nodes, *bin, out); err != nil {
		log.Error("member cluster", "name", *name, "err", err)
		os.Exit(1)
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

func run(log *slog.Logger, name, zone string, port, nodes int, bin string, out map[string]string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	for _, p := range out {
		_ = os.Remove(p) // not healthy until this run's cluster is ready
	}
	work, err := os.MkdirTemp("", "kwok-")
	if err != nil {
		return err
	}
	// A fixed port and the host name in the API server's certificate: the
	// services reach it as https://<name>:<port>.
	conf := filepath.Join(work, "member.yaml")
	doc := fmt.Sprintf("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\noptions:\n  kubeApiserverPort: %d\n  kubeApiserverCertSANs: [%q]\n", port, name)
	logs := filepath.Join(work, "container.log")
	if err := testenv.AppendLog(logs, "atoll member cluster "+name+": a simulated container's log"); err != nil {
		return err
	}
	doc += fmt.Sprintf("---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\nmetadata:\n  name: atoll-logs\nspec:\n  logs:\n  - logsFile: %q\n", logs)
	if err := os.WriteFile(conf, []byte(doc), 0o600); err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	e, err := testenv.Start(startCtx, testenv.Options{BinDir: bin, WorkDir: filepath.Join(work, "kwok"), OwnSignals: true, Logger: log, ServiceAccess: true},
		testenv.ClusterSpec{Zone: zone, Name: name, ConfigFiles: []string{conf}})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			log.Error("delete member cluster", "err", err)
		}
	}()
	c := e.Clusters[0]
	if nodes > 0 {
		if _, err := c.AddNodes(startCtx, testenv.NodePool{Name: "general", Count: nodes, CPU: "16", Memory: "64Gi", InstanceType: "m6i.4xlarge"}); err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
	}
	for _, s := range clusters.Services {
		if err := writeKubeconfig(c.ServiceKubeconfig(s), name, port, out[s]); err != nil {
			return fmt.Errorf("%s's kubeconfig: %w", s, err)
		}
	}
	log.Info("member cluster ready", "name", name, "zone", zone, "nodes", nodes, "kubeconfigs", out)
	<-ctx.Done()
	for _, p := range out {
		_ = os.Remove(p)
	}
	log.Info("deleting member cluster", "name", name)
	return nil
}

// writeKubeconfig writes a service's kubeconfig for the cluster (from
// testenv, its credential inlined) with the server at its network name,
// atomically.
func writeKubeconfig(from, name string, port int, out string) error {
	kc, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return err
	}
	if len(kc.Clusters) != 1 {
		return errors.New("a service's kubeconfig names one cluster")
	}
	for _, cl := range kc.Clusters {
		cl.Server = fmt.Sprintf("https://%s:%d", name, port)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o750); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := clientcmd.WriteToFile(*kc, tmp); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return os.Rename(tmp, out)
}
