package cli

import (
	"fmt"
	"io"
	"strings"

	"atoll.dev/libs/computeapi"
)

// What `get app NAME` and `describe app NAME` show of an App that serves:
// its ports and region-wide address and its endpoints per zone (from
// GET .../endpoints, as `atoll endpoints app NAME` lists them one by
// one), and its external exposure (spec.expose and the Ingresses'
// addresses in its status).

// describeServing writes an App's Serving section; eps is its endpoints,
// err why they could not be read.
func describeServing(out io.Writer, w computeapi.Workload, eps *computeapi.Endpoints, err error) {
	fmt.Fprintf(out, "\nServing:\n")
	tw := newTable(out)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s:\t%s\n", k, v) }
	switch {
	case err != nil:
		row("Address", "unknown: "+err.Error())
	case eps.Address == "":
		row("Address", "none (no named container port)")
	default:
		row("Address", eps.Address)
		row("Ports", portsLine(eps.Ports))
		row("Endpoints", zoneEndpoints(eps.Endpoints))
	}
	if e := w.Status.Expose; e.Host != "" {
		row("Expose", fmt.Sprintf("%s%s (%d Ingresses)", e.Host, e.Path, e.Ingresses))
		row("Expose addresses", exposeAddresses(e.Addresses))
	}
	_ = tw.Flush()
}

// portsLine is "http 8080/TCP (http), ...".
func portsLine(ports []computeapi.ServicePort) string {
	var out []string
	for _, p := range ports {
		s := fmt.Sprintf("%s %d/%s", p.Name, p.Port, p.Protocol)
		if p.AppProtocol != "" {
			s += " (" + p.AppProtocol + ")"
		}
		out = append(out, s)
	}
	return orDash(strings.Join(out, ", "))
}

// zoneEndpoints is the ready endpoints over all, per zone: "a 2/2, b 1/2".
func zoneEndpoints(eps []computeapi.Endpoint) string {
	type count struct{ ready, all int }
	byZone := map[string]count{}
	for _, e := range eps {
		c := byZone[e.Zone]
		c.all++
		if e.Ready {
			c.ready++
		}
		byZone[e.Zone] = c
	}
	var out []string
	for _, z := range sortedKeys(byZone) {
		out = append(out, fmt.Sprintf("%s %d/%d ready", z, byZone[z].ready, byZone[z].all))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// exposeAddresses is "192.0.2.1 (zone-a), lb.example.net (zone-b)", or
// what is missing.
func exposeAddresses(as []computeapi.IngressAddress) string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%s (%s)", orDash(a.Ip+a.Hostname), a.Cluster))
	}
	if len(out) == 0 {
		return "none yet (no ingress controller has reported one)"
	}
	return strings.Join(out, ", ")
}
