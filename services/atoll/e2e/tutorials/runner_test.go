package tutorials

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const sample = "# A tutorial\n" + // 1
	"\n" + // 2
	"```sh\n" + // 3
	"echo one\n" + // 4
	"echo two\n" + // 5
	"```\n" + // 6
	"Shown, not run:\n" + // 7
	"```console\n" + // 8
	"$ false\n" + // 9
	"```\n" + // 10
	"```text\n" + // 11
	"false\n" + // 12
	"```\n" + // 13
	"  ```sh\n" + // 14
	"  nats sub 'atoll.evt.web.>'\n" + // 15
	"  ```\n" // 16

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		want      []Block
		wantNATS  bool
		wantError string
	}{
		{name: "sh blocks only, with their lines", src: sample, wantNATS: true,
			want: []Block{{Line: 4, Text: "echo one\necho two\n"}, {Line: 15, Text: "  nats sub 'atoll.evt.web.>'\n"}}},
		{name: "no nats command", src: "```sh\natoll get apps # natsless\necho nats-server\n```\n",
			want: []Block{{Line: 2, Text: "atoll get apps # natsless\necho nats-server\n"}}},
		{name: "nats after a pipe", src: "```sh\necho x | nats pub a.b\n```\n", wantNATS: true,
			want: []Block{{Line: 2, Text: "echo x | nats pub a.b\n"}}},
		{name: "unclosed fence", src: "text\n```sh\necho x\n", wantError: "t.md:2: fenced block never closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("t.md", []byte(tc.src))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.wantError {
				t.Fatalf("error %q, want %q", gotErr, tc.wantError)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got.Blocks); diff != "" {
				t.Errorf("blocks (-want +got):\n%s", diff)
			}
			if got.NeedsNATS() != tc.wantNATS {
				t.Errorf("NeedsNATS() = %v, want %v", got.NeedsNATS(), tc.wantNATS)
			}
		})
	}
}

// TestRunnerCatchesDrift runs the real atoll binary: a tutorial whose
// command has the right flag passes, the same tutorial with a flag the
// CLI does not have fails, naming the file, the command's line and its
// output; the session is one (a variable set in one block is seen in the
// next), and set -euo pipefail holds (an unset variable, a failing pipe
// stage). --help keeps the commands off the network: cobra still parses
// every flag first.
func TestRunnerCatchesDrift(t *testing.T) {
	atoll := buildAtoll(t)
	bin := pathDir(t, atoll, "")
	env := sessionEnv(bin, t.TempDir(), map[string]string{"ATOLL_SERVER": "http://127.0.0.1:1", "ATOLL_TOKEN": "none"})
	head := "# Scaling\n\nSet the size:\n\n```sh\nexport N=3\n```\n\nThen:\n\n```sh\necho scaling to $N\n"
	tests := []struct {
		name        string
		src         string
		wantLine    int    // 0: the tutorial passes
		wantCommand string // the failing line
		wantOutput  string // the failing block's output
	}{
		{name: "right flag", src: head + "atoll scale app web --replicas $N --help >/dev/null\necho done\n```\n"},
		{name: "output without a newline", src: head + "printf partial\n```\n\n```sh\nprintf more; false\n```\n",
			wantLine: 17, wantCommand: "printf more; false", wantOutput: "more\n"},
		{name: "wrong flag", src: head + "atoll scale app web --replica $N --help\necho done\n```\n",
			wantLine: 13, wantCommand: "atoll scale app web --replica $N --help", wantOutput: "scaling to 3\nerror: unknown flag: --replica\n"},
		{name: "unset variable", src: head + "echo $NOT_SET\n```\n",
			wantLine: 13, wantCommand: "echo $NOT_SET", wantOutput: "scaling to 3\ndrift.md:13: NOT_SET: unbound variable\n"},
		{name: "failing pipe stage", src: head + "atoll scale app web --replica 2 --help | cat\n```\n",
			wantLine: 13, wantCommand: "atoll scale app web --replica 2 --help | cat", wantOutput: "scaling to 3\nerror: unknown flag: --replica\n"},
		{name: "wrong command in a later block", src: head + "```\n\n```sh\natoll scale app web --replicas 3 --help >/dev/null\natoll scael app web\n```\n",
			wantLine: 17, wantCommand: "atoll scael app web", wantOutput: "error: unknown command \"scael\" for \"atoll\"\n\nDid you mean this?\n\tscale\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tut, err := Parse("drift.md", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := Run(ctx, tut, t.TempDir(), env)
			t.Logf("runner said: %v\ntranscript:\n%s", err, out)
			var f *Failure
			got := Failure{}
			if errors.As(err, &f) {
				got = Failure{Line: f.Line, Command: f.Command, Output: f.Output, Path: f.Path}
			} else if err != nil {
				t.Fatal(err)
			}
			want := Failure{Line: tc.wantLine, Command: tc.wantCommand, Output: tc.wantOutput}
			if tc.wantLine != 0 {
				want.Path = "drift.md"
			}
			if diff := cmp.Diff(want, got, cmpFailure); diff != "" {
				t.Errorf("failure (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpFailure compares what a test of the runner asserts of a Failure.
var cmpFailure = cmp.Comparer(func(a, b Failure) bool {
	return a.Path == b.Path && a.Line == b.Line && a.Command == b.Command && a.Output == b.Output
})
