package admin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"atoll.dev/libs/clusters"
)

// bootstrapMemberCmd joins a member cluster: it applies the
// cluster-facing services' access there and writes each its own
// credential and clusters file.
func bootstrapMemberCmd() *cobra.Command {
	var (
		m                    clusters.Member
		admin, caCert, caKey string
		server, out, mount   string
		wait                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Join a member cluster: each cluster-facing service's rights and own credential there",
		Long: `Member joins a member cluster to the region, as the cluster's admin
(--kubeconfig, used for this command only, never handed to a service):

  - it applies, by server-side apply, the ClusterRole and ClusterRoleBinding
    of each cluster-facing service (propagator, aggregator, remediation,
    upgrade; libs/clusters Roles), the aggregator's debug role (bound by the
    propagator in each project namespace) and the policy that confines the
    propagator's writes to project namespaces (atoll-*);
  - it signs, with the cluster's CA (--ca-cert, --ca-key: kubeadm's and
    kwokctl's pki/ca.crt and ca.key), a client certificate per service,
    common name atoll-<service>, and writes that service's kubeconfig to
    <out>/<service>/<name>.kubeconfig (mode 0600);
  - it adds or replaces the cluster in <out>/<service>/clusters.yaml, its
    kubeconfig at <mount>/<name>.kubeconfig (where the service's Secret
    atoll-clusters-<service> is mounted).

It is idempotent: run it again to rotate the certificates (valid a year)
or after an upgrade that changes the roles.`,
		Example: `  atoll-admin bootstrap member --name zone-a --zone a --kubeconfig zone-a-admin.kubeconfig \
    --ca-cert pki/ca.crt --ca-key pki/ca.key --out deploy/k8s/secrets/clusters`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			cfg, err := clientcmd.BuildConfigFromFlags("", admin)
			if err != nil {
				return fmt.Errorf("admin kubeconfig: %w", err)
			}
			if server == "" {
				server = cfg.Host
			}
			ca := cfg.CAData
			if len(ca) == 0 && cfg.CAFile != "" {
				if ca, err = os.ReadFile(cfg.CAFile); err != nil {
					return fmt.Errorf("the cluster's CA: %w", err)
				}
			}
			if len(ca) == 0 {
				if ca, err = os.ReadFile(caCert); err != nil { //nolint:gosec // G304: the operator's --ca-cert
					return fmt.Errorf("the cluster's CA: %w", err)
				}
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			return joinMember(ctx, cmd, cs, m, server, ca, caCert, caKey, out, mount)
		},
	}
	f := cmd.Flags()
	f.StringVar(&m.Name, "name", "", "the cluster's name in the region (a DNS label)")
	f.StringVar(&m.Zone, "zone", "", "the cluster's zone")
	f.StringToStringVar(&m.Labels, "labels", nil, "the cluster's labels, matched by workloads' cluster selectors")
	f.Float32Var(&m.QPS, "qps", 0, "the services' client-side rate limit to this cluster (0: the default, 100)")
	f.IntVar(&m.Burst, "burst", 0, "their burst (0: the default, 200)")
	f.StringVar(&admin, "kubeconfig", "", "the cluster admin's kubeconfig, for this command only")
	f.StringVar(&caCert, "ca-cert", "", "the cluster's CA certificate (PEM), which signs the services' client certificates")
	f.StringVar(&caKey, "ca-key", "", "the cluster's CA key (PEM)")
	f.StringVar(&server, "server", "", "the API server's URL as the services reach it (default: the admin kubeconfig's)")
	f.StringVar(&out, "out", "", "the directory of the services' credentials (<out>/<service>/)")
	f.StringVar(&mount, "mount", "/etc/atoll/clusters", "where the services find their credentials (the Secret's mount path)")
	f.DurationVar(&wait, "wait", time.Minute, "how long to wait for the API server")
	for _, req := range []string{"name", "zone", "kubeconfig", "ca-cert", "ca-key", "out"} {
		_ = cmd.MarkFlagRequired(req)
	}
	return cmd
}

// joinMember applies the services' access to the cluster and writes each
// cluster-facing service its credential and clusters file.
func joinMember(ctx context.Context, cmd *cobra.Command, cs kubernetes.Interface, m clusters.Member, server string, ca []byte, caCert, caKey, out, mount string) error {
	if err := clusters.Apply(ctx, cs); err != nil {
		return err
	}
	certPEM, err := os.ReadFile(caCert) //nolint:gosec // G304: the operator's --ca-cert
	if err != nil {
		return fmt.Errorf("CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(caKey) //nolint:gosec // G304: the operator's --ca-key
	if err != nil {
		return fmt.Errorf("CA key: %w", err)
	}
	for _, s := range clusters.Services {
		cred, err := clusters.IssueCredential(certPEM, keyPEM, s, time.Now())
		if err != nil {
			return err
		}
		dir := filepath.Join(out, s)
		if err := clusters.WriteKubeconfig(filepath.Join(dir, m.Name+".kubeconfig"), m.Name, server, ca, s, cred); err != nil {
			return err
		}
		entry := m
		entry.Kubeconfig = filepath.Join(mount, m.Name+".kubeconfig")
		if err := upsertMember(filepath.Join(dir, "clusters.yaml"), entry); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%-11s %s  %s\n", s, clusters.User(s), filepath.Join(dir, m.Name+".kubeconfig"))
	}
	return nil
}

// upsertMember adds m to the clusters file at path, or replaces the entry
// of the same name.
func upsertMember(path string, m clusters.Member) error {
	var ms clusters.Members
	b, err := os.ReadFile(path) //nolint:gosec // G304: under the operator's --out
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := yaml.UnmarshalStrict(b, &ms); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	replaced := false
	for i := range ms {
		if ms[i].Name == m.Name {
			ms[i], replaced = m, true
		}
	}
	if !replaced {
		ms = append(ms, m)
	}
	b, err = yaml.Marshal(ms)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
