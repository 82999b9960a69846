// Command subscriber follows a project's events with the NATS credentials
// `atoll events credentials` issues, printing one line per event, and
// resumes where it stopped after a restart: it subscribes to the subject
// where the credentials' durable consumer on the ATOLL_EVENTS stream
// pushes the project's events (ATOLL_EVENTS_DELIVER). The consumer keeps
// its place while nobody subscribes there, so what happened while the
// subscriber was down comes first when it is back (the stream keeps
// events for 7 days). The credentials may publish nothing, so the
// consumer takes no acks: an event in flight when the connection drops is
// lost.
//
//	eval "$(atoll events credentials -p web --name billing --env)"
//	go run ./deploy/examples/subscriber
//
// Each event is a CloudEvent in the NATS binding's binary mode: its
// attributes are the ce-* headers (ce-id, ce-source, ce-type,
// ce-subject, ce-time) and its data the JSON body. ce-id is stable (the
// event's idempotency key): a consumer deduplicates on it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
)

func main() {
	if err := run(); err != nil {
		slog.Error("subscriber", "err", err)
		os.Exit(1)
	}
}

func run() error {
	count := flag.Int("count", 0, "exit after this many events (0: run until interrupted)")
	flag.Parse()
	env := func(name string) (string, error) {
		v := os.Getenv(name)
		if v == "" {
			return "", fmt.Errorf("%s is not set (eval \"$(atoll events credentials -p PROJECT --env)\")", name)
		}
		return v, nil
	}
	var url, user, pass, inbox, deliver string
	for _, v := range []struct {
		p    *string
		name string
	}{{&url, "NATS_URL"}, {&user, "NATS_USER"}, {&pass, "NATS_PASSWORD"}, {&inbox, "NATS_INBOX_PREFIX"}, {&deliver, "ATOLL_EVENTS_DELIVER"}} {
		var err error
		if *v.p, err = env(v.name); err != nil {
			return err
		}
	}
	opts := []nats.Option{nats.UserInfo(user, pass), nats.CustomInboxPrefix(inbox), nats.Name("atoll-events-subscriber"), nats.MaxReconnects(-1)}
	if ca := os.Getenv("NATS_CA"); ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	events := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(deliver, events)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", deliver, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	seen := 0
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return nil
		case m = <-events:
		}
		h := m.Header
		fmt.Printf("%s %s %s %s %s %s\n", h.Get("ce-time"), h.Get("ce-type"), h.Get("ce-source"), h.Get("ce-subject"), h.Get("ce-id"), m.Data)
		if seen++; *count > 0 && seen >= *count {
			return nil
		}
	}
}
