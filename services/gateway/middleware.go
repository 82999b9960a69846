package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"golang.org/x/time/rate"

	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway/auth"
)

type ctxKey int

const identityKey ctxKey = 1

// identity returns the authenticated caller of r.
func identity(r *http.Request) *auth.Identity {
	id, _ := r.Context().Value(identityKey).(*auth.Identity)
	return id
}

// bodyLimit caps request bodies; a larger body fails its decode with 413.
func (s *Service) bodyLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.cfg.MaxBodyBytes {
			writeError(w, r, http.StatusRequestEntityTooLarge, "TooLarge", "request body exceeds "+strconv.FormatInt(s.cfg.MaxBodyBytes, 10)+" bytes")
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate resolves the bearer credentials; 401 when there are none or they are invalid.
func (s *Service) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authz := r.Header.Get("Authorization")
		if authz == "" {
			authz = websocketBearer(r) // the console's exec WebSocket
		}
		// A project token acts in its project with its role only (tokens.go).
		id, projectToken, err := s.authenticateProjectToken(r.Context(), authz)
		if !projectToken {
			id, err = s.auth.Authenticate(authz)
		}
		if err != nil {
			// Failed attempts are limited per client address, before they are audited.
			if !s.allowRate(w, r, "anonymous@"+s.clientHost(r)) {
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="atoll"`)
			s.auditRecord(r, nil, http.StatusUnauthorized)
			// The reason only: the detail may name a parser's internals.
			s.log.Debug("unauthenticated", "err", err, "request_id", middleware.GetReqID(r.Context()))
			writeError(w, r, http.StatusUnauthorized, "Unauthenticated", auth.Reason(err))
			return
		}
		// The roles the projects' members give the caller (projects.go).
		if !projectToken {
			id = s.members.withRoles(id)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey, id)))
	})
}

// limiter holds one token bucket per identity.
type limiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*bucket // mu must be held
}

type bucket struct {
	lim  *rate.Limiter
	used time.Time
}

func newLimiter(perSecond float64, burst int) *limiter {
	return &limiter{rate: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}}
}

// take spends one token of who's bucket; when none is left it returns how
// long until one is.
func (l *limiter) take(who string) (ok bool, retryAfter time.Duration) {
	now := time.Now()
	l.mu.Lock()
	b, found := l.buckets[who]
	if !found {
		b = &bucket{lim: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[who] = b
	}
	b.used = now
	l.mu.Unlock()
	res := b.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sweep forgets buckets idle for ten minutes, until ctx ends.
func (l *limiter) sweep(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			l.mu.Lock()
			for k, b := range l.buckets {
				if now.Sub(b.used) > 10*time.Minute {
					delete(l.buckets, k)
				}
			}
			l.mu.Unlock()
		}
	}
}

// rateLimit answers 429 with Retry-After when the caller's bucket is empty.
func (s *Service) rateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.allowRate(w, r, identity(r).Subject) {
			next.ServeHTTP(w, r)
		}
	})
}

// allowRate spends one token of who's bucket, or answers 429.
func (s *Service) allowRate(w http.ResponseWriter, r *http.Request, who string) bool {
	ok, wait := s.limits.take(who)
	if ok {
		return true
	}
	secs := max(int(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, r, http.StatusTooManyRequests, "RateLimited", "rate limit of "+strconv.FormatFloat(float64(s.limits.rate), 'f', -1, 64)+" requests per second exceeded; retry after "+strconv.Itoa(secs)+"s")
	return false
}

// remoteHost is the caller's address without its port.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// parseProxies parses the trusted proxies' CIDRs (a bare address is one host).
func parseProxies(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: not an address or CIDR", c)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an address or CIDR", c)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// trusted says whether host is the address of a trusted proxy.
func trusted(proxies []netip.Prefix, host string) bool {
	a, err := netip.ParseAddr(strings.TrimSpace(host))
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientHost is the caller's address: the peer's, unless the peer is a
// trusted proxy, in which case it is the last address of X-Forwarded-For
// that is not a trusted proxy (the addresses before it were written by
// the client and prove nothing).
func (s *Service) clientHost(r *http.Request) string {
	host := remoteHost(r)
	if !trusted(s.proxies, host) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		if hop == "" {
			continue
		}
		if !trusted(s.proxies, hop) {
			if _, err := netip.ParseAddr(hop); err != nil {
				return host // not an address: the proxy is the best we know
			}
			return hop
		}
		host = hop
	}
	return host
}

// requestIDs makes a gateway's request IDs: a random prefix of its own
// and a sequence.
type requestIDs struct {
	prefix string
	seq    atomic.Uint64
}

func newRequestIDs() *requestIDs {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &requestIDs{prefix: hex.EncodeToString(b)}
}

// middleware gives every request an ID of the gateway's own making (a
// client's X-Request-Id is not trusted into audit records) and returns it
// in X-Request-Id.
func (ids *requestIDs) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := fmt.Sprintf("%s-%06d", ids.prefix, ids.seq.Add(1))
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

// AuditRecord is one audited call, published on atoll.audit.<project>.<verb>.
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Subject string    `json:"subject"`
	Project string    `json:"project"`
	Verb    string    `json:"verb"`
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	Status  int       `json:"status"`
	Outcome string    `json:"outcome"`
	// Detail says more where the verb alone does not (exec: what runs where).
	Detail    string `json:"detail,omitempty"`
	RequestID string `json:"requestId"`
	Remote    string `json:"remote"`
}

// auditMutations records every mutating call after it is answered (exec
// when it starts: see auditExec).
func (s *Service) auditMutations(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, verb := auditTarget(r); verb == "" || verb == "exec" {
			next.ServeHTTP(w, r)
			return
		}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		s.auditRecord(r, identity(r), status)
	})
}

// auditExec records an exec session as it starts, with what runs where,
// so that a session is on record even if it never ends.
func (s *Service) auditExec(r *http.Request, project, detail string) {
	s.publishAudit(r, AuditRecord{Project: project, Verb: "exec", Status: http.StatusSwitchingProtocols, Outcome: "started", Detail: detail}, identity(r))
}

// auditRecord publishes the audit record of r, if r is audited. The
// record is stored in the audit stream before the call returns.
func (s *Service) auditRecord(r *http.Request, id *auth.Identity, status int) {
	project, verb := auditTarget(r)
	if verb == "" || (verb == "exec" && id != nil) {
		return
	}
	s.publishAudit(r, AuditRecord{Project: project, Verb: verb, Status: status}, id)
}

func (s *Service) publishAudit(r *http.Request, rec AuditRecord, id *auth.Identity) {
	project, verb, status := rec.Project, rec.Verb, rec.Status
	rec.Time, rec.Method, rec.Path = time.Now().UTC(), r.Method, r.URL.Path
	rec.RequestID, rec.Remote = middleware.GetReqID(r.Context()), r.RemoteAddr
	if id != nil {
		rec.Subject = id.Subject
	}
	switch {
	case rec.Outcome != "":
	case status < 400:
		rec.Outcome = "success"
	case status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusNotFound:
		rec.Outcome = "denied"
	default:
		rec.Outcome = "failure"
	}
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Second)
	defer cancel()
	// The request ID deduplicates a retried publish.
	var err error
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		if _, err = s.bus.Publish(ctx, bus.AuditSubject(project, verb), rec.RequestID+"/"+rec.Outcome, b, nil); err == nil {
			break
		}
	}
	if err != nil {
		s.log.Error("audit record not stored", "err", err, "project", project, "verb", verb, "subject", rec.Subject, "status", status)
	}
}

// PlatformProject is the audit project of region-wide calls (clusters,
// remediation).
const PlatformProject = "platform"

// auditVerbs maps the routes that change something (and exec) to their
// audit verbs; a route with a "{...}" verb takes it from that parameter,
// which must be one of the listed values.
var auditVerbs = map[string]struct {
	verb   string
	param  string
	values []string
}{
	"POST /v1/projects/{project}/workloads":                                              {verb: "create"},
	"PUT /v1/projects/{project}/workloads/{kind}/{name}":                                 {verb: "update"},
	"DELETE /v1/projects/{project}/workloads/{kind}/{name}":                              {verb: "delete"},
	"POST /v1/projects/{project}/workloads/{kind}/{name}/{operation}":                    {param: "operation", values: []string{"pause", "resume", "stop", "start", "restart"}},
	"POST /v1/projects/{project}/workloads/{kind}/{name}/scale":                          {verb: "scale"},
	"POST /v1/projects/{project}/workloads/{kind}/{name}/containers/{container}/restart": {verb: "restart-container"},
	"GET /v1/projects/{project}/workloads/{kind}/{name}/exec":                            {verb: "exec"},
	"POST /v1/projects/{project}/apps/{app}/rollout/{action}":                            {verb: "rollout"},
	"PUT /v1/projects/{project}/quota/{tier}":                                            {verb: "set-quota"},
	"POST /v1/projects/{project}/quota/requests":                                         {verb: "request-quota"},
	"POST /v1/projects/{project}/quota/requests/{request}/{decision}":                    {param: "decision", values: []string{"approve", "reject"}},
	"POST /v1/projects":                              {verb: "create-project"},
	"DELETE /v1/projects/{project}":                  {verb: "delete-project"},
	"PUT /v1/projects/{project}/members/{member}":    {verb: "set-member"},
	"DELETE /v1/projects/{project}/members/{member}": {verb: "remove-member"},
	"POST /v1/projects/{project}/tokens":             {verb: "create-token"},
	"DELETE /v1/projects/{project}/tokens/{token}":   {verb: "revoke-token"},
	"POST /v1/clusters/{cluster}/{action}":           {param: "action", values: []string{"cordon", "uncordon"}},
	"PATCH /v1/clusters/{cluster}/labels":            {verb: "label"},
	"POST /v1/remediation/pause":                     {verb: "pause-remediation"},
	"POST /v1/remediation/resume":                    {verb: "resume-remediation"},
	"PUT /v1/upgrades/{name}":                        {verb: "set-upgrade"},
	"POST /v1/upgrades/{name}/pause":                 {verb: "pause-upgrade"},
	"POST /v1/upgrades/{name}/resume":                {verb: "resume-upgrade"},
	"POST /v1/upgrades/{name}/abort":                 {verb: "abort-upgrade"},
	"PUT /v1/admin/sidecars":                         {verb: "set-sidecars"},
	"POST /v1/admin/sidecars/pause":                  {verb: "pause-sidecars"},
	"POST /v1/admin/sidecars/resume":                 {verb: "resume-sidecars"},
	"POST /v1/admin/sidecars/abort":                  {verb: "abort-sidecars"},
}

// auditTarget names the project and verb of an audited request, from the
// route chi matched; verb is "" for requests that are not audited (reads)
// and for paths no route of the API matches.
func auditTarget(r *http.Request) (project, verb string) {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return "", ""
	}
	a, ok := auditVerbs[r.Method+" "+rc.RoutePattern()]
	if !ok {
		return "", ""
	}
	verb = a.verb
	if a.param != "" {
		v := chi.URLParam(r, a.param)
		if !slices.Contains(a.values, v) {
			return "", ""
		}
		verb = v
	}
	if rc.RoutePattern() == "/v1/projects" || strings.HasPrefix(rc.RoutePattern(), "/v1/clusters/") || strings.HasPrefix(rc.RoutePattern(), "/v1/remediation/") ||
		strings.HasPrefix(rc.RoutePattern(), "/v1/upgrades/") || strings.HasPrefix(rc.RoutePattern(), "/v1/admin/") {
		return PlatformProject, verb
	}
	project = chi.URLParam(r, "project")
	if !validToken(project) {
		return "", ""
	}
	return project, verb
}

// validToken says whether s can be one token of a subject.
func validToken(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isTooLarge says whether err came from a body over the cap.
func isTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

// Streams (event watches, log streams, exec sessions) each hold a
// consumer or a session until they end; these caps keep one identity, or
// all of them, from holding too many.
const (
	maxStreamsPerIdentity = 20
	maxStreams            = 2000
)

type streamCounter struct {
	mu    sync.Mutex
	by    map[string]int // mu must be held
	total int            // mu must be held
}

// streamSlot takes one of the caller's stream slots, or answers 429.
func (s *Service) streamSlot(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	who := identity(r).Subject
	c := &s.streams
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]int{}
	}
	if c.by[who] >= maxStreamsPerIdentity || c.total >= maxStreams {
		c.mu.Unlock()
		w.Header().Set("Retry-After", "5")
		writeError(w, r, http.StatusTooManyRequests, "TooManyStreams", fmt.Sprintf("at most %d open watches, log streams and exec sessions per caller", maxStreamsPerIdentity))
		return nil, false
	}
	c.by[who]++
	c.total++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.total--
		if c.by[who]--; c.by[who] == 0 {
			delete(c.by, who)
		}
	}, true
}
