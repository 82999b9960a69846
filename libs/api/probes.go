package api

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// The container model of a real service: probes that say when a
// container is started, alive and ready; hooks that run after it starts
// and before it stops; the grace period a pod has to drain; and the
// working directory. They are Kubernetes' own, passed to the pods as they
// are, so a reader of the Kubernetes documentation knows what they do.

// Probe is a check of a container: exactly one handler (httpGet,
// tcpSocket, grpc or exec) and how often it runs.
type Probe struct {
	// HTTPGet succeeds on a status from 200 to 399.
	HTTPGet *HTTPGetAction `json:"httpGet,omitempty"`
	// TCPSocket succeeds when the port accepts a connection.
	TCPSocket *TCPSocketAction `json:"tcpSocket,omitempty"`
	// GRPC succeeds when the gRPC health service says SERVING.
	GRPC *GRPCAction `json:"grpc,omitempty"`
	// Exec succeeds when the command exits 0.
	Exec *ExecAction `json:"exec,omitempty"`
	// InitialDelaySeconds after the start before the first check.
	InitialDelaySeconds int32 `json:"initialDelaySeconds,omitempty"`
	// PeriodSeconds between checks (Kubernetes' default 10).
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// TimeoutSeconds of one check (Kubernetes' default 1).
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// SuccessThreshold is the successes in a row after a failure that
	// count as success (1 for liveness and startup probes).
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// FailureThreshold is the failures in a row that count as failure
	// (Kubernetes' default 3).
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// HTTPGetAction is an HTTP GET of a path on a port of the pod.
type HTTPGetAction struct {
	// Path starts with "/" (default "/").
	Path string `json:"path,omitempty"`
	// Port is a number or the name of one of the container's ports.
	Port intstr.IntOrString `json:"port"`
	// Scheme is HTTP (default) or HTTPS.
	Scheme string `json:"scheme,omitempty"`
}

// TCPSocketAction opens a TCP connection to a port of the pod.
type TCPSocketAction struct {
	// Port is a number or the name of one of the container's ports.
	Port intstr.IntOrString `json:"port"`
}

// GRPCAction calls the gRPC health checking protocol on a port.
type GRPCAction struct {
	// Port is a number (gRPC probes take no port names).
	Port int32 `json:"port"`
	// Service is the name passed to the health service ("" for the server).
	Service string `json:"service,omitempty"`
}

// ExecAction runs a command in the container.
type ExecAction struct {
	// Command is the program and its arguments; no shell unless it names one.
	Command []string `json:"command"`
}

// Lifecycle holds a container's hooks.
type Lifecycle struct {
	// PostStart runs right after the container is created; the container
	// is not started (and no probe runs) until it returns.
	PostStart *LifecycleHandler `json:"postStart,omitempty"`
	// PreStop runs before the container is sent SIGTERM when its pod
	// stops (a delete, a scale down, a rollout, a drain); it counts
	// against the pod's terminationGracePeriodSeconds.
	PreStop *LifecycleHandler `json:"preStop,omitempty"`
}

// LifecycleHandler is one hook: exactly one of exec, httpGet or sleep.
type LifecycleHandler struct {
	Exec    *ExecAction    `json:"exec,omitempty"`
	HTTPGet *HTTPGetAction `json:"httpGet,omitempty"`
	// Sleep waits, typically in preStop, so that the endpoints are
	// withdrawn everywhere before the process is told to stop.
	Sleep *SleepAction `json:"sleep,omitempty"`
}

// SleepAction sleeps for a number of seconds.
type SleepAction struct {
	Seconds int64 `json:"seconds"`
}

// Grace periods of a pod's stop, in seconds.
const (
	// DefaultTerminationGracePeriodSeconds is a pod's grace period when
	// its template sets none: short, so that pods that do not drain stop
	// fast; a service that drains its connections sets its own.
	DefaultTerminationGracePeriodSeconds = 5
	// DefaultMaxTerminationGracePeriodSeconds is the platform's maximum
	// grace period unless its operators set another (Limits; admission's
	// --max-termination-grace-period-seconds): a node drain or a cluster
	// rotation waits at most this long for a pod.
	DefaultMaxTerminationGracePeriodSeconds = 300
)

// Limits are the bounds on a workload that the platform's operators set
// (admission's flags), checked by ValidateWith with the field named.
type Limits struct {
	// MaxTerminationGracePeriodSeconds bounds a pod template's
	// terminationGracePeriodSeconds and its hooks' sleeps.
	MaxTerminationGracePeriodSeconds int64
}

// DefaultLimits are the limits of a platform whose operators set none.
func DefaultLimits() Limits {
	return Limits{MaxTerminationGracePeriodSeconds: DefaultMaxTerminationGracePeriodSeconds}
}

// Keeping returns l raised to what t already asks: an operation (scale,
// pause, restart) on a workload admitted under a higher maximum than
// today's does not change its template, so it is not refused for it;
// an update of the spec is checked against l itself.
func (l Limits) Keeping(t *PodTemplate) Limits {
	if t == nil {
		return l
	}
	if g := t.TerminationGracePeriodSeconds; g != nil {
		l.MaxTerminationGracePeriodSeconds = max(l.MaxTerminationGracePeriodSeconds, *g)
	}
	for _, c := range t.Containers {
		if c.Lifecycle == nil {
			continue
		}
		for _, h := range []*LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil && h.Sleep != nil {
				l.MaxTerminationGracePeriodSeconds = max(l.MaxTerminationGracePeriodSeconds, h.Sleep.Seconds)
			}
		}
	}
	return l
}

// check adds a field error for each bound of l that the template at path
// exceeds.
func (l Limits) check(t *PodTemplate, path string, fe *FieldErrors) {
	if t == nil {
		return
	}
	maxGrace := l.MaxTerminationGracePeriodSeconds
	if g := t.TerminationGracePeriodSeconds; g != nil && *g > maxGrace {
		fe.add(path+".terminationGracePeriodSeconds", CodeTooLarge, "%d exceeds the platform's maximum of %d seconds", *g, maxGrace)
	}
	for i, c := range t.Containers {
		if c.Lifecycle == nil {
			continue
		}
		for _, h := range []struct {
			name string
			h    *LifecycleHandler
		}{{"postStart", c.Lifecycle.PostStart}, {"preStop", c.Lifecycle.PreStop}} {
			if h.h != nil && h.h.Sleep != nil && h.h.Sleep.Seconds > maxGrace {
				fe.add(fmt.Sprintf("%s.containers[%d].lifecycle.%s.sleep.seconds", path, i, h.name), CodeTooLarge,
					"%d exceeds the platform's maximum grace period of %d seconds", h.h.Sleep.Seconds, maxGrace)
			}
		}
	}
}

// Bounds of a probe's timings.
const (
	maxProbeSeconds  = 3600
	maxProbeAttempts = 1000
	maxPortNameLen   = 15
)

var (
	// portName is an IANA service name (RFC 6335): lower-case letters,
	// digits and non-adjacent '-', at least one letter.
	portName  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	hasLetter = regexp.MustCompile(`[a-z]`)
)

// IsPortName reports whether s is an IANA service name of at most 15
// characters, as Kubernetes wants a port's name.
func IsPortName(s string) bool {
	return len(s) <= maxPortNameLen && portName.MatchString(s) && hasLetter.MatchString(s) && !strings.Contains(s, "--")
}

// validateServing checks what concerns the pod as a whole: the grace
// period, no probes or hooks on init containers (they run to completion),
// and port names unique in the pod (they become the Service's ports).
func (t *PodTemplate) validateServing(path string, fe *FieldErrors) {
	if g := t.TerminationGracePeriodSeconds; g != nil {
		switch {
		case *g < 0:
			fe.add(path+".terminationGracePeriodSeconds", CodeInvalid, "%d is negative", *g)
		}
		// The maximum is the platform's: Limits.check.
	}
	for i, c := range t.InitContainers {
		p := fmt.Sprintf("%s.initContainers[%d]", path, i)
		for _, pr := range []struct {
			name string
			set  bool
		}{{"readinessProbe", c.ReadinessProbe != nil}, {"livenessProbe", c.LivenessProbe != nil}, {"startupProbe", c.StartupProbe != nil}, {"lifecycle", c.Lifecycle != nil}} {
			if pr.set {
				fe.add(p+"."+pr.name, CodeInvalid, "init containers run to completion: no probes or hooks")
			}
		}
	}
	seen := map[string]string{}
	for _, list := range []struct {
		name string
		cs   []Container
	}{{"containers", t.Containers}, {"sidecars", t.Sidecars}} {
		for i, c := range list.cs {
			for j, port := range c.Ports {
				if port.Name == "" {
					continue
				}
				p := fmt.Sprintf("%s.%s[%d].ports[%d].name", path, list.name, i, j)
				if first, ok := seen[port.Name]; ok {
					fe.add(p, CodeDuplicate, "port name %q is already used by %s", port.Name, first)
					continue
				}
				seen[port.Name] = p
			}
		}
	}
}

// validateServing checks a container's ports' names, probes, hooks and
// working directory, and its environment against the platform's identity
// variables (identity.go).
func (c *Container) validateServing(p string, fe *FieldErrors) {
	named := map[string]bool{}
	for i, port := range c.Ports {
		pp := fmt.Sprintf("%s.ports[%d]", p, i)
		if port.Name != "" {
			switch {
			case len(port.Name) > maxPortNameLen:
				fe.add(pp+".name", CodeInvalid, "%q is longer than %d characters", port.Name, maxPortNameLen)
			case !IsPortName(port.Name):
				fe.add(pp+".name", CodeInvalid, "%q is not an IANA service name (lower-case letters, digits and single '-', at least one letter)", port.Name)
			}
			named[port.Name] = true
		}
		if port.AppProtocol != "" && (len(port.AppProtocol) > 253 || !labelKeyRe.MatchString(port.AppProtocol)) {
			fe.add(pp+".appProtocol", CodeInvalid, "%q is not a protocol name (http, h2c, grpc, or a domain-prefixed name)", port.AppProtocol)
		}
	}
	c.ReadinessProbe.validate(p+".readinessProbe", false, named, fe)
	c.LivenessProbe.validate(p+".livenessProbe", true, named, fe)
	c.StartupProbe.validate(p+".startupProbe", true, named, fe)
	if l := c.Lifecycle; l != nil {
		l.PostStart.validate(p+".lifecycle.postStart", named, fe)
		l.PreStop.validate(p+".lifecycle.preStop", named, fe)
	}
	if c.WorkingDir != "" && (!strings.HasPrefix(c.WorkingDir, "/") || len(c.WorkingDir) > 4096) {
		fe.add(p+".workingDir", CodeInvalid, "%q is not an absolute path", c.WorkingDir)
	}
	for i, e := range c.Env {
		if IsIdentityEnv(e.Name) {
			fe.add(fmt.Sprintf("%s.env[%d].name", p, i), CodeInvalid, "%s is reserved: the platform sets it in every pod", e.Name)
		}
	}
}

// validate checks a probe: exactly one handler, and its timings. A
// liveness or startup probe's successThreshold must be 1.
func (pr *Probe) validate(p string, oneSuccess bool, named map[string]bool, fe *FieldErrors) {
	if pr == nil {
		return
	}
	var set []string
	if pr.HTTPGet != nil {
		set = append(set, "httpGet")
		pr.HTTPGet.validate(p+".httpGet", named, fe)
	}
	if pr.TCPSocket != nil {
		set = append(set, "tcpSocket")
		validatePortRef(p+".tcpSocket.port", pr.TCPSocket.Port, named, fe)
	}
	if pr.GRPC != nil {
		set = append(set, "grpc")
		if pr.GRPC.Port < 1 || pr.GRPC.Port > 65535 {
			fe.add(p+".grpc.port", CodeInvalid, "%d is not between 1 and 65535", pr.GRPC.Port)
		}
	}
	if pr.Exec != nil {
		set = append(set, "exec")
		pr.Exec.validate(p+".exec", fe)
	}
	switch len(set) {
	case 0:
		fe.add(p, CodeRequired, "a probe needs one handler: httpGet, tcpSocket, grpc or exec")
	case 1:
	default:
		fe.add(p, CodeInvalid, "a probe has one handler, not %s", strings.Join(set, " and "))
	}
	for _, f := range []struct {
		name string
		v    int32
		most int32
	}{
		{"initialDelaySeconds", pr.InitialDelaySeconds, maxProbeSeconds},
		{"periodSeconds", pr.PeriodSeconds, maxProbeSeconds},
		{"timeoutSeconds", pr.TimeoutSeconds, maxProbeSeconds},
		{"successThreshold", pr.SuccessThreshold, maxProbeAttempts},
		{"failureThreshold", pr.FailureThreshold, maxProbeAttempts},
	} {
		if f.v < 0 || f.v > f.most {
			fe.add(p+"."+f.name, CodeInvalid, "%d is not between 0 and %d", f.v, f.most)
		}
	}
	if oneSuccess && pr.SuccessThreshold > 1 {
		fe.add(p+".successThreshold", CodeInvalid, "must be 1 for liveness and startup probes")
	}
}

func (h *LifecycleHandler) validate(p string, named map[string]bool, fe *FieldErrors) {
	if h == nil {
		return
	}
	var set []string
	if h.Exec != nil {
		set = append(set, "exec")
		h.Exec.validate(p+".exec", fe)
	}
	if h.HTTPGet != nil {
		set = append(set, "httpGet")
		h.HTTPGet.validate(p+".httpGet", named, fe)
	}
	if h.Sleep != nil {
		set = append(set, "sleep")
		if h.Sleep.Seconds < 1 {
			fe.add(p+".sleep.seconds", CodeInvalid, "%d is less than 1", h.Sleep.Seconds)
		}
	}
	switch len(set) {
	case 0:
		fe.add(p, CodeRequired, "a hook needs one handler: exec, httpGet or sleep")
	case 1:
	default:
		fe.add(p, CodeInvalid, "a hook has one handler, not %s", strings.Join(set, " and "))
	}
}

func (a *HTTPGetAction) validate(p string, named map[string]bool, fe *FieldErrors) {
	validatePortRef(p+".port", a.Port, named, fe)
	if a.Path != "" && !strings.HasPrefix(a.Path, "/") {
		fe.add(p+".path", CodeInvalid, "%q does not start with /", a.Path)
	}
	switch a.Scheme {
	case "", "HTTP", "HTTPS":
	default:
		fe.add(p+".scheme", CodeUnsupported, "%q: one of HTTP, HTTPS", a.Scheme)
	}
}

func (a *ExecAction) validate(p string, fe *FieldErrors) {
	if len(a.Command) == 0 || a.Command[0] == "" {
		fe.add(p+".command", CodeRequired, "a command is required")
	}
}

// validatePortRef checks a probe's port: a number in range, or the name
// of one of the container's ports.
func validatePortRef(p string, port intstr.IntOrString, named map[string]bool, fe *FieldErrors) {
	if port.Type == intstr.String {
		if !named[port.StrVal] {
			fe.add(p, CodeInvalid, "the container has no port named %q", port.StrVal)
		}
		return
	}
	if port.IntVal < 1 || port.IntVal > 65535 {
		fe.add(p, CodeInvalid, "%d is not between 1 and 65535", port.IntVal)
	}
}
