// Command subscriber follows a project's events with the NATS credentials
// `atoll events credentials` issues, printing one line per event, and
// resumes where it stopped after a restart: it reads the credentials'
// durable consumer on the ATOLL_EVENTS stream, which keeps its place
// while the subscriber is down (the stream keeps events for 7 days), and
// acknowledges each event once printed.
//
//	eval "$(atoll events credentials -p web --name billing --env)"
//	go run ./deploy/examples/subscriber
//
// Each event is a CloudEvent in the NATS binding's binary mode: its
// attributes are the ce-* headers (ce-id, ce-source, ce-type,
// ce-subject, ce-time) and its data the JSON body. ce-id is stable: a
// consumer that also reads the gateway's stream deduplicates on it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	if err := run(); err != nil {
		slog.Error("subscriber", "err", err)
		os.Exit(1)
	}
}

func run() error {
	count := flag.Int("count", 0, "exit after this many events (0: run until interrupted)")
	stream := flag.String("stream", "ATOLL_EVENTS", "the events stream")
	flag.Parse()
	env := func(name string) (string, error) {
		v := os.Getenv(name)
		if v == "" {
			return "", fmt.Errorf("%s is not set (eval \"$(atoll events credentials -p PROJECT --env)\")", name)
		}
		return v, nil
	}
	var url, user, pass, inbox, consumer string
	for _, v := range []struct {
		p    *string
		name string
	}{{&url, "NATS_URL"}, {&user, "NATS_USER"}, {&pass, "NATS_PASSWORD"}, {&inbox, "NATS_INBOX_PREFIX"}, {&consumer, "ATOLL_EVENTS_CONSUMER"}} {
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
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	c, err := js.Consumer(ctx, *stream, consumer)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", consumer, err)
	}
	seen := 0
	for {
		m, err := c.Next(jetstream.FetchContext(ctx))
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("next event: %w", err)
		}
		h := m.Headers()
		fmt.Printf("%s %s %s %s %s %s\n", h.Get("ce-time"), h.Get("ce-type"), h.Get("ce-source"), h.Get("ce-subject"), h.Get("ce-id"), m.Data())
		if err := m.DoubleAck(ctx); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		if seen++; *count > 0 && seen >= *count {
			return nil
		}
	}
}
