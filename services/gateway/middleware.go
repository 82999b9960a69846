package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"golang.org/x/time/rate"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

type ctxKey int

const identityKey ctxKey = 1

// identity returns the authenticated caller of r.
func identity(r *http.Request) *auth.Identity {
	id, _ := r.Context().Value(identityKey).(*auth.Identity)
	return id
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRawJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeErrorBody(w, r, status, computeapi.Error{Code: code, Message: msg})
}

func writeErrorBody(w http.ResponseWriter, r *http.Request, status int, e computeapi.Error) {
	e.RequestId = middleware.GetReqID(r.Context())
	writeJSON(w, status, e)
}

// paramError answers a request whose path or query parameters do not parse.
func (s *Service) paramError(w http.ResponseWriter, r *http.Request, err error) {
	writeErrorBody(w, r, http.StatusBadRequest, computeapi.Error{Code: "Invalid", Message: err.Error()})
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
		id, err := s.auth.Authenticate(r.Header.Get("Authorization"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="atoll"`)
			s.auditRecord(r, nil, http.StatusUnauthorized)
			writeError(w, r, http.StatusUnauthorized, "Unauthenticated", err.Error())
			return
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
		id := identity(r)
		if ok, wait := s.limits.take(id.Subject); !ok {
			secs := int(math.Ceil(wait.Seconds()))
			if secs < 1 {
				secs = 1
			}
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeError(w, r, http.StatusTooManyRequests, "RateLimited", "rate limit of "+strconv.FormatFloat(float64(s.limits.rate), 'f', -1, 64)+" requests per second exceeded; retry after "+strconv.Itoa(secs)+"s")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// AuditRecord is one audited call, published on atoll.audit.<project>.<verb>.
type AuditRecord struct {
	Time      time.Time `json:"time"`
	Subject   string    `json:"subject"`
	Project   string    `json:"project"`
	Verb      string    `json:"verb"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Status    int       `json:"status"`
	Outcome   string    `json:"outcome"`
	RequestID string    `json:"requestId"`
	Remote    string    `json:"remote"`
}

// auditMutations records every mutating call (and exec) after it is answered.
func (s *Service) auditMutations(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, verb := auditTarget(r); verb == "" {
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

// auditRecord publishes the audit record of r, if r is audited. The
// record is stored in the audit stream before the call returns.
func (s *Service) auditRecord(r *http.Request, id *auth.Identity, status int) {
	project, verb := auditTarget(r)
	if verb == "" {
		return
	}
	rec := AuditRecord{Time: time.Now().UTC(), Project: project, Verb: verb, Method: r.Method, Path: r.URL.Path,
		Status: status, RequestID: middleware.GetReqID(r.Context()), Remote: r.RemoteAddr}
	if id != nil {
		rec.Subject = id.Subject
	}
	switch {
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
	if _, err := s.bus.Publish(ctx, bus.AuditSubject(project, verb), "", b, nil); err != nil {
		s.log.Error("audit record not stored", "err", err, "project", project, "verb", verb, "subject", rec.Subject, "status", status)
	}
}

// PlatformProject is the audit project of region-wide calls (clusters).
const PlatformProject = "platform"

// auditTarget names the project and verb of an audited request; verb is
// "" for requests that are not audited (reads).
func auditTarget(r *http.Request) (project, verb string) {
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(p) < 2 || p[0] != "v1" {
		return "", ""
	}
	switch {
	case p[1] == "clusters" && len(p) == 4 && r.Method == http.MethodPost && validToken(p[3]):
		return PlatformProject, p[3] // cordon, uncordon
	case p[1] == "clusters" && len(p) == 4 && r.Method == http.MethodPatch:
		return PlatformProject, "label"
	case p[1] != "projects" || len(p) < 4 || !validToken(p[2]):
		return "", ""
	}
	project = p[2]
	switch {
	case p[3] == "quota" && r.Method == http.MethodPut:
		return project, "set-quota"
	case p[3] != "workloads":
		return "", ""
	case len(p) == 4 && r.Method == http.MethodPost:
		return project, "create"
	case len(p) == 6 && r.Method == http.MethodPut:
		return project, "update"
	case len(p) == 6 && r.Method == http.MethodDelete:
		return project, "delete"
	case len(p) == 7 && p[6] == "exec":
		return project, "exec"
	case len(p) == 7 && r.Method == http.MethodPost && validToken(p[6]):
		return project, p[6] // pause, resume, stop, start, restart, scale
	case len(p) == 9 && p[6] == "containers" && r.Method == http.MethodPost:
		return project, "restart-container"
	}
	return "", ""
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
