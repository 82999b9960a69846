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
// sticky) and moves it only when that cluster is lost.
//
// No schedule time fires twice across a move. The rule: a CronJob that a
// member cluster creates fires only schedule times after its own
// creationTimestamp (Kubernetes' rule while status.lastScheduleTime is
// unset, which the propagator never sets), and a lost cluster (its API
// server unreachable) can create no Job; so the new cluster fires exactly
// the times after the move, and a time the old cluster fired before it
// was lost is never fired again. The times between the loss and the move
// are skipped, not caught up: a catch-up could repeat a time the old
// cluster fired after its last observation.
//
// The limit: a lost cluster cannot be fenced from outside. When it comes
// back, the propagator removes its stale CronJob, but its own CronJob
// controller may get there first and fire the latest missed time, if that
// time is less than startingDeadlineSeconds old (StartingDeadlineSeconds,
// default DefaultCronStartingDeadlineSeconds), a time the new cluster
// already fired. Seen in the end-to-end test: a cluster that came back 4 s
// after a minute fired that minute again. The stale CronJob may also fire
// its next time if it outlives it: the propagator's retries of a cluster
// it could not reach back off up to 30 s.
const KindCronJob = "CronJob"

func init() {
	Register(Kind{Name: KindCronJob, New: func() Spec { return &CronJobSpec{} }})
}

// Concurrency policies of CronJobSpec.ConcurrencyPolicy (Kubernetes').
const (
	ConcurrencyAllow   = "Allow"
	ConcurrencyForbid  = "Forbid"
	ConcurrencyReplace = "Replace"
)

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
		b := a
		if isRange {
			if b, err = cronValue(hi, spec.min, spec.max, spec.names); err != nil {
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
