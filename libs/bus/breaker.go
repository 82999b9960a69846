package bus

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerPolicy configures the circuit breakers of a BreakerSet.
type BreakerPolicy struct {
	// ConsecutiveFailures opens a breaker (default 5).
	ConsecutiveFailures uint32
	// OpenFor is how long an open breaker rejects calls before it lets
	// HalfOpenProbes through (default 1s): a target back from a short
	// outage is found within about a second.
	OpenFor time.Duration
	// HalfOpenProbes is how many calls a half-open breaker lets through;
	// that many successes close it (default 1).
	HalfOpenProbes uint32
	// Interval clears the failure counts of a closed breaker (default 60s).
	Interval time.Duration
	// IsFailure decides which errors count against the target; nil counts
	// every error.
	IsFailure func(error) bool
	// IsExcluded names errors that count neither way: the caller gave up,
	// or the bus itself was down (see IsBusOutage).
	IsExcluded func(error) bool
	// Logger receives state changes; slog.Default() when nil.
	Logger *slog.Logger
}

// BreakerSet holds one gobreaker circuit breaker per target (a service, a
// member cluster), so one sick target never trips calls to the others.
type BreakerSet[T any] struct {
	policy BreakerPolicy

	mu       sync.Mutex
	breakers map[string]*gobreaker.CircuitBreaker[T] // mu must be held
}

// NewBreakerSet returns an empty set with the given policy.
func NewBreakerSet[T any](p BreakerPolicy) *BreakerSet[T] {
	if p.ConsecutiveFailures == 0 {
		p.ConsecutiveFailures = 5
	}
	if p.OpenFor == 0 {
		p.OpenFor = time.Second
	}
	if p.HalfOpenProbes == 0 {
		p.HalfOpenProbes = 1
	}
	if p.Interval == 0 {
		p.Interval = time.Minute
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	return &BreakerSet[T]{policy: p, breakers: map[string]*gobreaker.CircuitBreaker[T]{}}
}

// For returns the breaker of target, creating it on first use.
func (s *BreakerSet[T]) For(target string) *gobreaker.CircuitBreaker[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cb, ok := s.breakers[target]; ok {
		return cb
	}
	p := s.policy
	st := gobreaker.Settings{
		Name:        target,
		MaxRequests: p.HalfOpenProbes,
		Interval:    p.Interval,
		Timeout:     p.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= p.ConsecutiveFailures },
		OnStateChange: func(name string, from, to gobreaker.State) {
			p.Logger.Warn("circuit breaker state change", "target", name, "from", from.String(), "to", to.String())
		},
	}
	if p.IsFailure != nil {
		st.IsSuccessful = func(err error) bool { return err == nil || !p.IsFailure(err) }
	}
	st.IsExcluded = p.IsExcluded
	cb := gobreaker.NewCircuitBreaker[T](st)
	s.breakers[target] = cb
	return cb
}

// Instrument reports the state of every breaker of the set, now and
// later, as atoll_breaker_state{target} on m (nil: nothing).
func (s *BreakerSet[T]) Instrument(m *Metrics) {
	if m != nil {
		m.live.addBreakers(s)
	}
}

// states calls yield with each target's state, in target order.
func (s *BreakerSet[T]) states(yield func(target string, st gobreaker.State)) {
	s.mu.Lock()
	bs := maps.Clone(s.breakers)
	s.mu.Unlock()
	for _, target := range slices.Sorted(maps.Keys(bs)) {
		yield(target, bs[target].State())
	}
}

// State reports the state of target's breaker (closed if never used).
func (s *BreakerSet[T]) State(target string) gobreaker.State { return s.For(target).State() }

// Execute runs fn through target's breaker.
func (s *BreakerSet[T]) Execute(target string, fn func() (T, error)) (T, error) {
	return s.For(target).Execute(fn)
}

// IsOpen reports whether err is a breaker refusing the call.
func IsOpen(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}
