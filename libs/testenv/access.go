package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"atoll.dev/libs/clusters"
)

// joinServices joins the cluster as Atoll joins a member cluster: the
// cluster-facing services' ClusterRoles, bindings and namespace policy
// (clusters.Apply), and a kubeconfig per service with a client
// certificate of its own, signed by the cluster's CA (kwokctl's pki).
func (c *Cluster) joinServices(ctx context.Context) error {
	if err := clusters.Apply(ctx, c.Client); err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	pki := filepath.Join(c.Dir(), "pki")
	caCert, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return fmt.Errorf("cluster %s CA: %w", c.Name, err)
	}
	caKey, err := os.ReadFile(filepath.Join(pki, "ca.key"))
	if err != nil {
		return fmt.Errorf("cluster %s CA: %w", c.Name, err)
	}
	for _, s := range clusters.Services {
		cred, err := clusters.IssueCredential(caCert, caKey, s, time.Now())
		if err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		if err := clusters.WriteKubeconfig(c.ServiceKubeconfig(s), c.Name, c.Config.Host, caCert, s, cred); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	return nil
}

// ServiceKubeconfig is the path of a cluster-facing service's own
// kubeconfig for the cluster (clusters.Services), written when the
// environment runs with Options.ServiceAccess.
func (c *Cluster) ServiceKubeconfig(service string) string {
	return filepath.Join(c.Dir(), "atoll", service+".kubeconfig")
}

// auditPolicy logs, at Metadata level, the requests of the cluster-facing
// services' users and nothing else: what Forbidden reads.
func auditPolicy() string {
	var users []string
	for _, s := range clusters.Services {
		users = append(users, clusters.User(s))
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [` + strings.Join(users, ", ") + `]
- level: None
`
}

func (o *Options) auditPolicyFile() (string, error) {
	return o.sharedFile("audit-policy.yaml", auditPolicy())
}

// ForbiddenAgentPrefix starts the user agent of a client that is refused
// on purpose (a test of the services' rights): Forbidden leaves its
// requests out.
const ForbiddenAgentPrefix = "atoll-expect-forbidden"

// Forbidden lists the requests of the cluster-facing services the
// cluster's API server refused with 403 so far ("<user> <verb> <uri>:
// <reason>"), from its audit log (Options.ServiceAccess), leaving out
// those of clients whose user agent starts with ForbiddenAgentPrefix.
func (c *Cluster) Forbidden() ([]string, error) {
	f, err := os.Open(filepath.Join(c.Dir(), "logs", "audit.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %s audit log: %w", c.Name, err)
	}
	defer f.Close()
	var users []string
	for _, s := range clusters.Services {
		users = append(users, clusters.User(s))
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"code":403`) {
			continue
		}
		var ev struct {
			User           struct{ Username string } `json:"user"`
			UserAgent      string                    `json:"userAgent"`
			Verb           string                    `json:"verb"`
			RequestURI     string                    `json:"requestURI"`
			ResponseStatus struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"responseStatus"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ResponseStatus.Code != 403 ||
			!slices.Contains(users, ev.User.Username) || strings.HasPrefix(ev.UserAgent, ForbiddenAgentPrefix) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s %s %s: %s", c.Name, ev.User.Username, ev.Verb, ev.RequestURI, ev.ResponseStatus.Message))
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("cluster %s audit log: %w", c.Name, err)
	}
	return out, nil
}

// Forbidden lists the 403s of every cluster (Cluster.Forbidden).
func (e *Env) Forbidden() ([]string, error) {
	var out []string
	var errs []error
	for _, c := range e.Clusters {
		f, err := c.Forbidden()
		out = append(out, f...)
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}
