package admin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/pki"
)

// bootstrapTLSCmd makes a region's certificates offline: a CA, one
// certificate for the NATS servers (their client port and their routes)
// and one for the gateway.
func bootstrapTLSCmd() *cobra.Command {
	var (
		dir                string
		natsHosts, gwHosts string
		validity           time.Duration
		renew              bool
	)
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Make the region's CA and the NATS servers' and gateway's certificates",
		Long: `TLS writes into --dir, with Go's crypto and nothing online:

  ca.crt, ca.key            the region's CA (kept when it exists); ca.crt is
                            what clients trust: the services' $ATOLL_NATS_CA,
                            'atoll login --ca'
  nats.crt, nats.key        the NATS servers' certificate (--nats-hosts as its
                            names), for clients and, as server and client, for
                            the routes: a route must present a certificate
                            this CA signed (nats.conf: cluster.tls.verify)
  gateway.crt, gateway.key  the gateway's certificate (--gateway-hosts), for
                            server use only, so it cannot pass as a route

Keys are ECDSA P-256, mode 0600. Certificates that exist are kept unless
--renew; the gateway and the NATS servers read renewed files without a
restart (nats-server: on SIGHUP, 'nats-server --signal reload').`,
		Example: `  atoll-admin bootstrap tls --dir deploy/compose/secrets/tls \
    --nats-hosts nats-1,nats-2,nats-3,localhost,127.0.0.1 --gateway-hosts gateway,localhost,127.0.0.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := pki.LoadOrCreateCA(dir, "Atoll region CA")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "ca:      %s\n", filepath.Join(dir, pki.CACertFile))
			for _, c := range []struct {
				name  string
				hosts string
				req   pki.Request
			}{
				{"nats", natsHosts, pki.Request{CommonName: "atoll-nats", Server: true, Client: true}},
				{"gateway", gwHosts, pki.Request{CommonName: "atoll-gateway", Server: true}},
			} {
				certFile := filepath.Join(dir, c.name+".crt")
				if _, err := os.Stat(certFile); err == nil && !renew {
					fmt.Fprintf(out, "%-8s %s (kept)\n", c.name+":", certFile)
					continue
				} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				c.req.Hosts, c.req.Validity = split(c.hosts), validity
				issued, err := ca.Issue(c.req)
				if err != nil {
					return err
				}
				if _, _, err := issued.Write(dir, c.name); err != nil {
					return err
				}
				fmt.Fprintf(out, "%-8s %s (%s)\n", c.name+":", certFile, strings.Join(c.req.Hosts, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory of the CA and the certificates (created with mode 0700)")
	f.StringVar(&natsHosts, "nats-hosts", "nats,localhost,127.0.0.1", "DNS names and IP addresses of the NATS servers, comma-separated")
	f.StringVar(&gwHosts, "gateway-hosts", "gateway,localhost,127.0.0.1", "DNS names and IP addresses of the gateway, comma-separated")
	f.DurationVar(&validity, "validity", pki.DefaultCertValidity, "how long the certificates are valid")
	f.BoolVar(&renew, "renew", false, "issue the certificates again even when they exist (the CA is kept)")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
