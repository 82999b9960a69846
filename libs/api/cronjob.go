package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// KindCronJob is a scheduled run-to-finish job. It is placed in exactly
// ONE member cluster, whose CronJob controller fires it, so it fires once
// per schedule time in the whole region (Karmada's copy to every cluster
// fires it N times). The scheduler keeps it where it is (placements are
// sticky, across generations too) and moves it only when that cluster is
// lost.
//
// No schedule time fires twice across a move: a time fence inside every
// member cluster. A lost cluster cannot be stopped from outside: when its
// API server comes back, its kube-controller-manager may fire a missed
// time before the propagator removes the stale CronJob. So each cluster
// is told, in the CronJob itself, which schedule times it may fire, and
// its own API server enforces it. The CronJob controller copies
// spec.jobTemplate.metadata.annotations onto every Job it makes, with the
// schedule time (batch.kubernetes.io/cronjob-scheduled-timestamp); a
// ValidatingAdmissionPolicy the propagator installs in every member
// cluster (CEL has no "now", but it can compare two annotations of the
// Job being created) refuses a Job whose schedule time is before
// AnnoFireFrom or after AnnoFireUntil.
//
//   - AnnoFireUntil is a lease: while the placement keeps the CronJob in a
//     cluster, the propagator rewrites it to now + CronFenceLease every
//     CronFenceRenew. A cluster that is cut off gets no renewal, so it can
//     never fire a time later than its last renewal + CronFenceLease, even
//     when it comes back.
//   - AnnoFireFrom is set when the scheduler moves the CronJob out of
//     another cluster (Shard.FireFrom, stored with the placement so every
//     propagator replica renders the same): CronFireFrom(move time), past
//     any lease the old cluster can hold. A first placement has none.
//
// The price: on a move, the schedule times between the loss and FireFrom
// are skipped (at most the detection time + CronFenceLease +
// CronFenceMargin), never fired twice. The new cluster's CronJob fires
// only times after its own creationTimestamp (Kubernetes' rule while
// status.lastScheduleTime is unset, which the propagator never sets), and
// the fence skips up to FireFrom; missed times are not caught up.
const KindCronJob = "CronJob"

// Concurrency policies of CronJobSpec.ConcurrencyPolicy (Kubernetes').
const (
	ConcurrencyAllow   = "Allow"
	ConcurrencyForbid  = "Forbid"
	ConcurrencyReplace = "Replace"
)

// The time fence of a CronJob (see KindCronJob).
const (
	// AnnoFireFrom and AnnoFireUntil, in a CronJob's Job template (so on
	// every Job it makes), bound the schedule times its cluster may fire
	// (RFC 3339, inclusive).
	AnnoFireFrom  = "atoll.dev/fire-from"
	AnnoFireUntil = "atoll.dev/fire-until"
	// CronFenceLease (V) is how long past its last renewal a cluster may
	// still fire: AnnoFireUntil = renewal time + V.
	CronFenceLease = 90 * time.Second
	// CronFenceRenew is how often the propagator renews AnnoFireUntil:
	// V/3, so that two renewals may fail before a healthy cluster's lease
	// runs out. One small write per CronJob per CronFenceRenew.
	CronFenceRenew = CronFenceLease / 3
	// CronFenceMargin covers, past V, what separates the scheduler's move
	// from the last renewal the old cluster may get: the propagator seeing
	// the new placement (a renewal it had started goes on with a value
	// computed before) and the clocks of the scheduler's and the
	// propagator's hosts.
	CronFenceMargin = 15 * time.Second
)

// CronFence is the time fence's periods: the lease V (how long past its
// last renewal a cluster may still fire), how often it is renewed, and
// the margin past V of a move's fire-from. The scheduler (fire-from) and
// the propagator (fire-until, renewals) must use the same one:
// CronFenceFromEnv gives both the region's. Production runs
// DefaultCronFence; a test region shortens the lease (EnvCronFenceLease)
// so that a move's skipped schedule times take seconds, not minutes. The
// zero CronFence is DefaultCronFence.
type CronFence struct {
	Lease, Renew, Margin time.Duration
}

// OrDefault is f, or DefaultCronFence when f is the zero fence.
func (f CronFence) OrDefault() CronFence {
	if f == (CronFence{}) {
		return DefaultCronFence
	}
	return f
}

// DefaultCronFence is the fence of CronFenceLease, CronFenceRenew and
// CronFenceMargin.
var DefaultCronFence = CronFence{Lease: CronFenceLease, Renew: CronFenceRenew, Margin: CronFenceMargin}

// EnvCronFenceLease is the environment variable that, set to a positive
// duration for the scheduler and the propagator, replaces CronFenceLease;
// the renewal is then a third of it, the margin CronFenceMargin.
const EnvCronFenceLease = "ATOLL_CRON_FENCE_LEASE"

// CronFenceWithLease is the fence of lease V: renewed every V/3 (two
// renewals may fail before a healthy cluster's lease runs out), with
// CronFenceMargin.
func CronFenceWithLease(lease time.Duration) CronFence {
	return CronFence{Lease: lease, Renew: lease / 3, Margin: CronFenceMargin}
}

// CronFenceFromEnv is DefaultCronFence, or the fence of the lease
// EnvCronFenceLease holds in getenv; a value that is not a positive
// duration is an error (and the default is returned with it).
func CronFenceFromEnv(getenv func(string) string) (CronFence, error) {
	v := getenv(EnvCronFenceLease)
	if v == "" {
		return DefaultCronFence, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return DefaultCronFence, fmt.Errorf("%s=%q: want a positive duration", EnvCronFenceLease, v)
	}
	return CronFenceWithLease(d), nil
}

// FireFrom is the AnnoFireFrom of a CronJob moved at movedAt: after any
// AnnoFireUntil its old cluster can hold (Lease + Margin), rounded up to
// the second.
func (f CronFence) FireFrom(movedAt time.Time) time.Time {
	f = f.OrDefault()
	t := movedAt.Add(f.Lease + f.Margin).UTC()
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// FireUntil is the AnnoFireUntil a renewal at now writes, rounded down to
// the second.
func (f CronFence) FireUntil(now time.Time) time.Time {
	f = f.OrDefault()
	return now.Add(f.Lease).UTC().Truncate(time.Second)
}

// CronFireFrom is DefaultCronFence.FireFrom.
func CronFireFrom(movedAt time.Time) time.Time { return DefaultCronFence.FireFrom(movedAt) }

// CronFireUntil is DefaultCronFence.FireUntil.
func CronFireUntil(now time.Time) time.Time { return DefaultCronFence.FireUntil(now) }

// Defaults of a CronJob.
const (
	// DefaultCronStartingDeadlineSeconds bounds how late a missed time
	// may still fire (see KindCronJob).
	DefaultCronStartingDeadlineSeconds = 30
	DefaultSuccessfulJobsHistoryLimit  = 3
	DefaultFailedJobsHistoryLimit      = 1
)

// CronJobSpec is a CronJob: a Job (of Parallelism pods, to Completions)
// made at each time Schedule fires.
type CronJobSpec struct {
	Common
	// Schedule is a five-field cron expression (minute hour day-of-month
	// month day-of-week), read in TimeZone.
	Schedule string `json:"schedule"`
	// TimeZone is an IANA time zone (default: the member cluster's, UTC).
	TimeZone string `json:"timeZone,omitempty"`
	// ConcurrencyPolicy is Allow, Forbid or Replace (default Allow).
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty"`
	// StartingDeadlineSeconds is how late a run may still start (default
	// DefaultCronStartingDeadlineSeconds).
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`
	// SuccessfulJobsHistoryLimit and FailedJobsHistoryLimit are how many
	// finished Jobs are kept (defaults 3 and 1).
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`
	FailedJobsHistoryLimit     *int32 `json:"failedJobsHistoryLimit,omitempty"`
	// Suspend stops new runs; running ones finish.
	Suspend bool `json:"suspend,omitempty"`
	// Parallelism and Completions are each run's (default 1 and 1).
	Parallelism int32 `json:"parallelism,omitempty"`
	Completions int32 `json:"completions,omitempty"`
	// BackoffLimit is each run's retries (default 6).
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`
}

// Default implements Spec.
func (s *CronJobSpec) Default() {
	s.defaults()
	if s.ConcurrencyPolicy == "" {
		s.ConcurrencyPolicy = ConcurrencyAllow
	}
	if s.StartingDeadlineSeconds == nil {
		d := int64(DefaultCronStartingDeadlineSeconds)
		s.StartingDeadlineSeconds = &d
	}
	if s.SuccessfulJobsHistoryLimit == nil {
		n := int32(DefaultSuccessfulJobsHistoryLimit)
		s.SuccessfulJobsHistoryLimit = &n
	}
	if s.FailedJobsHistoryLimit == nil {
		n := int32(DefaultFailedJobsHistoryLimit)
		s.FailedJobsHistoryLimit = &n
	}
	if s.Completions == 0 {
		s.Completions = 1
	}
	if s.Parallelism == 0 {
		s.Parallelism = 1
	}
	if s.BackoffLimit == nil {
		six := int32(6)
		s.BackoffLimit = &six
	}
}

// Validate implements Spec.
func (s *CronJobSpec) Validate() FieldErrors {
	var fe FieldErrors
	s.validate(&fe)
	if s.Schedule == "" {
		fe.add("spec.schedule", CodeRequired, "schedule is required")
	} else if err := ParseCron(s.Schedule); err != nil {
		fe.add("spec.schedule", CodeInvalid, "%q: %v", s.Schedule, err)
	}
	if s.TimeZone != "" {
		if _, err := time.LoadLocation(s.TimeZone); err != nil || strings.EqualFold(s.TimeZone, "local") {
			fe.add("spec.timeZone", CodeInvalid, "%q is not an IANA time zone", s.TimeZone)
		}
	}
	switch s.ConcurrencyPolicy {
	case "", ConcurrencyAllow, ConcurrencyForbid, ConcurrencyReplace:
	default:
		fe.add("spec.concurrencyPolicy", CodeUnsupported, "%q: one of Allow, Forbid, Replace", s.ConcurrencyPolicy)
	}
	if d := s.StartingDeadlineSeconds; d != nil && (*d < 1 || *d > 86400*7) {
		fe.add("spec.startingDeadlineSeconds", CodeInvalid, "%d is not between 1 and %d", *d, 86400*7)
	}
	for _, h := range []struct {
		path string
		n    *int32
	}{{"spec.successfulJobsHistoryLimit", s.SuccessfulJobsHistoryLimit}, {"spec.failedJobsHistoryLimit", s.FailedJobsHistoryLimit}} {
		if h.n != nil && (*h.n < 0 || *h.n > 100) {
			fe.add(h.path, CodeInvalid, "%d is not between 0 and 100", *h.n)
		}
	}
	if s.Completions < 0 || s.Completions > MaxCompletions {
		fe.add("spec.completions", CodeInvalid, "%d is not between 1 and %d", s.Completions, MaxCompletions)
	}
	if s.Parallelism < 0 || s.Parallelism > MaxReplicas {
		fe.add("spec.parallelism", CodeInvalid, "%d is not between 1 and %d", s.Parallelism, MaxReplicas)
	}
	if s.BackoffLimit != nil && *s.BackoffLimit < 0 {
		fe.add("spec.backoffLimit", CodeInvalid, "%d is negative", *s.BackoffLimit)
	}
	return fe
}

// Pods implements Spec: one run's pods at once.
func (s *CronJobSpec) Pods() int32 { return max(s.Parallelism, 1) }

// cronFields are the bounds and names of the five fields.
var cronFields = []struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i
}{
	{"minute", 0, 59, nil},
	{"hour", 0, 23, nil},
	{"day-of-month", 1, 31, nil},
	{"month", 1, 12, []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{"day-of-week", 0, 7, []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

// ParseCron checks a five-field cron expression as Kubernetes' CronJob
// controller reads it: lists of *, ?, values, ranges a-b and steps /n,
// month and weekday names, and the macros @yearly, @monthly, @weekly,
// @daily, @hourly. Every value must be in its field's range.
func ParseCron(expr string) error {
	switch strings.ToLower(strings.TrimSpace(expr)) {
	case "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly":
		return nil
	}
	if strings.HasPrefix(strings.TrimSpace(expr), "TZ=") || strings.HasPrefix(strings.TrimSpace(expr), "CRON_TZ=") {
		return fmt.Errorf("a time zone goes in timeZone, not in the schedule")
	}
	f := strings.Fields(expr)
	if len(f) != 5 {
		return fmt.Errorf("want five fields (minute hour day-of-month month day-of-week), got %d", len(f))
	}
	for i, field := range f {
		if err := cronFieldCheck(field, i); err != nil {
			return fmt.Errorf("%s field %q: %w", cronFields[i].name, field, err)
		}
	}
	return nil
}

func cronFieldCheck(field string, i int) error {
	spec := cronFields[i]
	for part := range strings.SplitSeq(field, ",") {
		rng, step, hasStep := strings.Cut(part, "/")
		if hasStep {
			n, err := strconv.Atoi(step)
			if err != nil || n < 1 || n > spec.max-spec.min+1 {
				return fmt.Errorf("step %q is not between 1 and %d", step, spec.max-spec.min+1)
			}
		}
		if rng == "*" || rng == "?" {
			continue
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		a, err := cronValue(lo, spec.min, spec.max, spec.names)
		if err != nil {
			return err
		}
		if isRange {
			b, err := cronValue(hi, spec.min, spec.max, spec.names)
			if err != nil {
				return err
			}
			if b < a {
				return fmt.Errorf("range %q ends before it starts", rng)
			}
		}
	}
	return nil
}

func cronValue(s string, lo, hi int, names []string) (int, error) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return lo + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d is not between %d and %d", v, lo, hi)
	}
	return v, nil
}

// CronJobStatus is what the aggregator folds of a CronJob: its
// Kubernetes CronJob's status and the Jobs it made, in the cluster that
// holds it.
type CronJobStatus struct {
	// Cluster holds the CronJob now.
	Cluster string `json:"cluster,omitempty"`
	// LastScheduleTime is the last time a run was scheduled.
	LastScheduleTime *time.Time `json:"lastScheduleTime,omitempty"`
	// LastSuccessfulTime is when the last run succeeded.
	LastSuccessfulTime *time.Time `json:"lastSuccessfulTime,omitempty"`
	// Suspended says no new runs start.
	Suspended bool `json:"suspended,omitempty"`
	// Active counts the runs in progress.
	Active int32 `json:"active"`
	// Runs are the Jobs the CronJob made that its cluster still keeps
	// (history limits), oldest first.
	Runs []CronJobRun `json:"runs,omitempty"`
}

// Outcomes of a CronJobRun.
const (
	RunActive    = "Active"
	RunSucceeded = "Succeeded"
	RunFailed    = "Failed"
)

// CronJobRun is one Job a CronJob made.
type CronJobRun struct {
	// Name is the Job's name.
	Name string `json:"name"`
	// Cluster ran it.
	Cluster string `json:"cluster"`
	// ScheduledTime is the schedule time it was made for.
	ScheduledTime *time.Time `json:"scheduledTime,omitempty"`
	// Outcome is Active, Succeeded or Failed.
	Outcome string `json:"outcome"`
	// Succeeded and Failed count its pods.
	Succeeded int32 `json:"succeeded,omitempty"`
	Failed    int32 `json:"failed,omitempty"`
}
