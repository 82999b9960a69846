package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
)

// attempts records what a test server saw, one entry per request.
type attempts struct {
	mu   sync.Mutex
	at   []time.Time
	keys []string
	body []string
}

func (a *attempts) add(r *http.Request) int {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, time.Now())
	a.keys = append(a.keys, r.Header.Get("Idempotency-Key"))
	a.body = append(a.body, string(b))
	return len(a.at)
}

func (a *attempts) n() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, computeapi.Error{Code: code, Message: msg})
}

var testWorkload = computeapi.Workload{ApiVersion: "atoll.dev/v1", Kind: "App",
	Metadata: computeapi.Metadata{Project: "demo", Name: "web", Generation: 1, Uid: "u1"},
	Spec:     json.RawMessage(`{"replicas":3}`)}

// newTestClient serves h and returns a client of it with fast retries.
func newTestClient(t *testing.T, h http.HandlerFunc, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, append([]Option{WithToken("tok"), WithRetry(3, time.Millisecond, 5*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRetryAfterOn429(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if a.add(r) == 1 {
			w.Header().Set("Retry-After", "1")
			apiError(w, http.StatusTooManyRequests, "RateLimited", "slow down")
			return
		}
		writeJSON(w, http.StatusOK, testWorkload)
	})
	w, err := c.Get(context.Background(), "demo", "App", "web")
	if err != nil {
		t.Fatal(err)
	}
	if w.Metadata.Name != "web" || a.n() != 2 {
		t.Fatalf("got %s after %d attempts, want web after 2", w.Metadata.Name, a.n())
	}
	// The backoff alone is at most 5ms: the gap is the server's Retry-After.
	if gap := a.at[1].Sub(a.at[0]); gap < 950*time.Millisecond || gap > 3*time.Second {
		t.Errorf("gap between attempts %v, want about 1s (Retry-After: 1)", gap)
	}
}

func TestRetry429EvenForUnsafePost(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if a.add(r) == 1 {
			w.Header().Set("Retry-After", "0")
			apiError(w, http.StatusTooManyRequests, "RateLimited", "slow down")
			return
		}
		writeJSON(w, http.StatusOK, testWorkload)
	})
	if _, err := c.RestartContainer(context.Background(), "demo", "App", "web", "c"); err != nil {
		t.Fatal(err)
	}
	if a.n() != 2 {
		t.Errorf("%d attempts, want 2: a 429 was never processed, so it is retried", a.n())
	}
}

func TestRetry503ThenSuccess(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if a.add(r) == 1 {
			apiError(w, http.StatusServiceUnavailable, "Unavailable", "admission is restarting")
			return
		}
		writeJSON(w, http.StatusOK, computeapi.ClusterList{Items: []computeapi.Cluster{{Name: "zone-a", Zone: "a", Healthy: true}}})
	})
	cs, err := c.Clusters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Name != "zone-a" || a.n() != 2 {
		t.Fatalf("got %v after %d attempts", cs, a.n())
	}
}

func TestRetryTransportError(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if a.add(r) == 1 {
			// Close the connection without an answer.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close()
			return
		}
		writeJSON(w, http.StatusOK, testWorkload)
	})
	if _, err := c.Get(context.Background(), "demo", "App", "web"); err != nil {
		t.Fatal(err)
	}
	if a.n() != 2 {
		t.Errorf("%d attempts, want 2", a.n())
	}
}

func TestNoRetryOfUnsafePostOn500(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		a.add(r)
		apiError(w, http.StatusInternalServerError, "Internal", "boom")
	})
	_, err := c.Operate(context.Background(), "demo", "App", "web", Restart)
	var e *Error
	if !errors.As(err, &e) || e.Status != 500 || e.Body.Code != "Internal" {
		t.Fatalf("err = %v, want *Error 500 Internal", err)
	}
	if a.n() != 1 {
		t.Errorf("%d attempts, want 1: a POST without Idempotency-Key may have been processed", a.n())
	}
	if a.keys[0] != "" {
		t.Errorf("restart sent Idempotency-Key %q", a.keys[0])
	}
}

func TestCreateRetriesWithOneIdempotencyKey(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if a.add(r) == 1 {
			apiError(w, http.StatusInternalServerError, "Internal", "lost the answer")
			return
		}
		writeJSON(w, http.StatusCreated, testWorkload)
	})
	doc := computeapi.WorkloadDocument{Kind: computeapi.App, Metadata: computeapi.DocumentMetadata{Name: "web"}, Spec: json.RawMessage(`{"replicas":3}`)}
	if _, err := c.CreateWorkload(context.Background(), "demo", doc, ""); err != nil {
		t.Fatal(err)
	}
	if a.n() != 2 {
		t.Fatalf("%d attempts, want 2", a.n())
	}
	if a.keys[0] == "" || a.keys[0] != a.keys[1] {
		t.Errorf("idempotency keys %q, want one non-empty key on both attempts", a.keys)
	}
	if a.body[0] == "" || a.body[0] != a.body[1] {
		t.Errorf("bodies %q, want the same body replayed", a.body)
	}
	// Another call gets another key.
	if _, err := c.CreateWorkload(context.Background(), "demo", doc, ""); err != nil {
		t.Fatal(err)
	}
	if a.keys[2] == a.keys[0] {
		t.Errorf("two creates shared the key %q", a.keys[0])
	}
	if _, err := c.CreateWorkload(context.Background(), "demo", doc, "mine"); err != nil {
		t.Fatal(err)
	}
	if a.keys[3] != "mine" {
		t.Errorf("key %q, want the caller's", a.keys[3])
	}
}

func TestRetryStopsAtMaxAttempts(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		a.add(r)
		apiError(w, http.StatusBadGateway, "Unavailable", "no")
	})
	_, err := c.Get(context.Background(), "demo", "App", "web")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusBadGateway {
		t.Fatalf("err = %v, want the last answer, 502", err)
	}
	if a.n() != 3 {
		t.Errorf("%d attempts, want 3 (WithRetry max)", a.n())
	}
}

func TestRetryStopsOnCancel(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		a.add(r)
		w.Header().Set("Retry-After", "30")
		apiError(w, http.StatusServiceUnavailable, "Unavailable", "later")
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Get(ctx, "demo", "App", "web")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned %v after the call, want right after the cancel", d)
	}
	if a.n() != 1 {
		t.Errorf("%d attempts, want 1", a.n())
	}
}

func TestRetryAfterBeyondDeadlineReturnsAnswer(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		a.add(r)
		w.Header().Set("Retry-After", "20")
		apiError(w, http.StatusTooManyRequests, "RateLimited", "later")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Get(ctx, "demo", "App", "web")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.Body.Code != "RateLimited" {
		t.Fatalf("err = %v, want the 429 at once", err)
	}
	if a.n() != 1 {
		t.Errorf("%d attempts, want 1", a.n())
	}
}

func TestHooksPerAttempt(t *testing.T) {
	var a attempts
	type seen struct {
		Method  string
		Status  int
		Attempt int
	}
	var (
		mu   sync.Mutex
		reqs int
		got  []seen
	)
	hooks := Hooks{
		OnRequest: func(r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			reqs++
			if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("User-Agent") != "test/1" {
				t.Errorf("request headers %v", r.Header)
			}
		},
		OnResponse: func(r *http.Request, resp *http.Response, err error, elapsed time.Duration, attempt int) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil || elapsed <= 0 {
				t.Errorf("attempt %d: err %v, elapsed %v", attempt, err, elapsed)
				return
			}
			got = append(got, seen{r.Method, resp.StatusCode, attempt})
		},
	}
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if a.add(r) < 3 {
			apiError(w, http.StatusServiceUnavailable, "Unavailable", "later")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}, WithHooks(hooks), WithUserAgent("test/1"))
	if err := c.Delete(context.Background(), "demo", "App", "web"); err != nil {
		t.Fatal(err)
	}
	want := []seen{{"DELETE", 503, 1}, {"DELETE", 503, 2}, {"DELETE", 204, 3}}
	if diff := cmp.Diff(want, got); diff != "" || reqs != 3 {
		t.Errorf("OnRequest %d times; OnResponse (-want +got):\n%s", reqs, diff)
	}
}

func TestAttemptTimeout(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if a.add(r) == 1 || strings.HasSuffix(r.URL.Path, "/restart") {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		writeJSON(w, http.StatusOK, testWorkload)
	}, WithTimeout(200*time.Millisecond))
	start := time.Now()
	if _, err := c.Get(context.Background(), "demo", "App", "web"); err != nil {
		t.Fatal(err)
	}
	if a.n() != 2 || time.Since(start) > 3*time.Second {
		t.Errorf("%d attempts in %v, want the slow first one cut at 200ms", a.n(), time.Since(start))
	}
	// An unsafe request times out without a retry.
	_, err := c.Operate(context.Background(), "demo", "App", "web", Restart)
	if !errors.Is(err, ErrAttemptTimeout) {
		t.Fatalf("restart: err = %v, want ErrAttemptTimeout", err)
	}
	if a.n() != 3 {
		t.Errorf("%d attempts in all, want 3: the restart is not retried", a.n())
	}
}

func TestRetryableTable(t *testing.T) {
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	tests := []struct {
		name string
		resp *http.Response
		err  error
		safe bool
		want bool
	}{
		{"429 unsafe", resp(429), nil, false, true},
		{"500 safe", resp(500), nil, true, true},
		{"500 unsafe", resp(500), nil, false, false},
		{"502 safe", resp(502), nil, true, true},
		{"503 unsafe", resp(503), nil, false, false},
		{"504 safe", resp(504), nil, true, true},
		{"501 safe", resp(501), nil, true, false},
		{"404 safe", resp(404), nil, true, false},
		{"409 safe", resp(409), nil, true, false},
		{"transport safe", nil, io.ErrUnexpectedEOF, true, true},
		{"transport unsafe", nil, io.ErrUnexpectedEOF, false, false},
		{"dial unsafe", nil, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryable(tc.resp, tc.err, tc.safe); got != tc.want {
				t.Errorf("retryable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"3", 3 * time.Second, true},
		{"0", 0, true},
		{"-1", 0, false},
		{now.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"soon", 0, false},
	}
	for _, tc := range tests {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, Base: 100 * time.Millisecond, Cap: time.Second}
	for attempt, ceil := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 9: time.Second} {
		var top time.Duration
		for range 2000 {
			d := backoff(p, attempt)
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: backoff %v outside [0, %v]", attempt, d, ceil)
			}
			top = max(top, d)
		}
		// Full jitter spreads over the whole range.
		if top < ceil/2 {
			t.Errorf("attempt %d: largest of 2000 backoffs %v, want near %v", attempt, top, ceil)
		}
	}
}

func TestRetryAfterBeyondMaxIsReturnedInSeconds(t *testing.T) {
	var a attempts
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		a.add(r)
		// An HTTP date two hours ahead: beyond MaxRetryAfter.
		w.Header().Set("Retry-After", time.Now().Add(2*time.Hour).UTC().Format(http.TimeFormat))
		apiError(w, http.StatusServiceUnavailable, "Unavailable", "maintenance")
	})
	// A cancel, not a deadline: the deadline rule would hide a missing cap.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(5*time.Second, cancel).Stop()
	r, err := c.API.GetWorkloadWithResponse(ctx, "demo", "App", "web")
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode() != http.StatusServiceUnavailable || a.n() != 1 {
		t.Fatalf("status %d after %d attempts, want the 503 at once", r.StatusCode(), a.n())
	}
	// The contract declares Retry-After in seconds.
	secs, err := strconv.Atoi(r.HTTPResponse.Header.Get("Retry-After"))
	if err != nil || secs < 7190 || secs > 7201 {
		t.Errorf("Retry-After %q, want about 7200 seconds", r.HTTPResponse.Header.Get("Retry-After"))
	}
}

func TestNoRetryOfPermanentTransportError(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, testWorkload)
	}))
	t.Cleanup(srv.Close)
	var (
		mu    sync.Mutex
		tries int
	)
	hooks := Hooks{OnResponse: func(*http.Request, *http.Response, error, time.Duration, int) {
		mu.Lock()
		defer mu.Unlock()
		tries++
	}}
	// The client does not trust the test server's certificate.
	c, err := New(srv.URL, WithRetry(3, time.Millisecond, 5*time.Millisecond), WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "demo", "App", "web"); err == nil {
		t.Fatal("Get succeeded against an untrusted certificate")
	}
	if tries != 1 {
		t.Errorf("%d attempts, want 1: another attempt cannot cure a bad certificate", tries)
	}
}
