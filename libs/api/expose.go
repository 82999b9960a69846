package api

import (
	"fmt"
	"strings"
)

// An App's optional external exposure: spec.expose names a host, a path
// and one of the App's named container ports; the propagator renders an
// Ingress (networking.k8s.io/v1) per member cluster that runs the App,
// pointing at the App's Service, with the region's ingress class. A host
// is the App's alone in the region: admission keeps a claim per host (the
// hosts bucket, HostClaim), so a second App asking for it is refused
// (422, naming the owner).

// Expose is an App's external exposure.
type Expose struct {
	// Host is the DNS name clients use (an RFC 1123 subdomain, no wildcard),
	// unique in the region.
	Host string `json:"host"`
	// Path is the URL path prefix routed to the App (default "/").
	Path string `json:"path,omitempty"`
	// Port is the name of one of the App's named TCP container ports.
	Port string `json:"port"`
}

// DefaultExposePath is an Expose's path when none is given.
const DefaultExposePath = "/"

// maxExposePath bounds an Expose's path.
const maxExposePath = 1024

func (e *Expose) defaults() {
	if e != nil && e.Path == "" {
		e.Path = DefaultExposePath
	}
}

// validate checks an exposure against the App's template t: a valid host,
// a clean absolute path, and a port naming a TCP port of a main container
// (only those become the Service's ports).
func (e *Expose) validate(p string, t *PodTemplate, fe *FieldErrors) {
	if e == nil {
		return
	}
	switch {
	case e.Host == "":
		fe.add(p+".host", CodeRequired, "a host is required")
	case strings.HasPrefix(e.Host, "*"):
		fe.add(p+".host", CodeInvalid, "%q: wildcard hosts are not allowed", e.Host)
	case !IsDNSSubdomain(e.Host):
		fe.add(p+".host", CodeInvalid, "%q is not a DNS name (lower-case dot-separated labels, at most 253 characters)", e.Host)
	}
	if reason := badPath(e.Path); reason != "" {
		fe.add(p+".path", CodeInvalid, "%q %s", e.Path, reason)
	}
	if e.Port == "" {
		fe.add(p+".port", CodeRequired, "the name of one of the App's container ports is required")
		return
	}
	for _, c := range t.Containers {
		for _, port := range c.Ports {
			if port.Name != e.Port {
				continue
			}
			if port.Protocol != "" && port.Protocol != "TCP" {
				fe.add(p+".port", CodeInvalid, "port %q is %s: an Ingress routes HTTP, over TCP", e.Port, port.Protocol)
			}
			return
		}
	}
	fe.add(p+".port", CodeInvalid, "%q names no port of the App's containers", e.Port)
}

// badPath says what is wrong with an Ingress Prefix path, "" when nothing:
// Kubernetes refuses the same.
func badPath(path string) string {
	switch {
	case !strings.HasPrefix(path, "/"):
		return "does not start with /"
	case len(path) > maxExposePath:
		return fmt.Sprintf("is longer than %d characters", maxExposePath)
	case strings.ContainsAny(path, " \t\r\n{}|\\^`\"<>"):
		return "contains a character a URL path cannot"
	}
	for _, bad := range []string{"//", "/./", "/../", "%2f", "%2F"} {
		if strings.Contains(path, bad) {
			return "contains " + bad
		}
	}
	if strings.HasSuffix(path, "/..") || strings.HasSuffix(path, "/.") {
		return "ends in a dot segment"
	}
	return ""
}

// ExposeStatus is an exposed App's external address as the member
// clusters' ingress controllers report it.
type ExposeStatus struct {
	// Host and Path are the App's spec.expose.
	Host string `json:"host"`
	Path string `json:"path"`
	// Ingresses counts the member clusters holding the App's Ingress.
	Ingresses int `json:"ingresses"`
	// Addresses are the load balancers' addresses an ingress controller
	// filled in, per cluster; empty until one does.
	Addresses []IngressAddress `json:"addresses,omitempty"`
}

// IngressAddress is one load-balancer address of an App's Ingress.
type IngressAddress struct {
	// Cluster and Zone are the member cluster's whose Ingress it is.
	Cluster string `json:"cluster"`
	Zone    string `json:"zone"`
	// IP or Hostname is the address.
	IP       string `json:"ip,omitempty"`
	Hostname string `json:"hostname,omitempty"`
}

// HostClaim is the value of a host's key in the hosts bucket: the App
// that exposes it. Admission writes the claim before the App (so two Apps
// cannot both take a host) and deletes it when the App is deleted or
// changes host; a claim whose owner does not hold the host any more (a
// crash between the claim and the App's write, or between the App's
// change and the release) is stale, and is taken over once it is older
// than a grace (services/admission hosts.go).
type HostClaim struct {
	// Project and Name are the owner App's.
	Project string `json:"project"`
	Name    string `json:"name"`
}

// Owner names the claiming App as project/name.
func (c HostClaim) Owner() string { return c.Project + "/" + c.Name }

// HostOf is w's exposed host, "" when w is not an exposed App.
func HostOf(w *Workload) string {
	if s, ok := w.Spec.(*AppSpec); ok && s.Expose != nil {
		return s.Expose.Host
	}
	return ""
}
