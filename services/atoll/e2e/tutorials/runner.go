package tutorials

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Block is one command block of a tutorial.
type Block struct {
	// Line is the file line of the block's first command (the line after
	// its ```sh fence), from 1.
	Line int
	// Text is the block's commands, ending with a newline.
	Text string
}

// Tutorial is a tutorial's command blocks, in file order.
type Tutorial struct {
	// Path is the file the tutorial was read from.
	Path string
	// Blocks are its ```sh blocks.
	Blocks []Block
}

// Parse reads the command blocks of a tutorial's Markdown: the fenced
// blocks whose info string is sh. Other fenced blocks (text, console,
// yaml, ...) are shown, not run. An unclosed fence is an error.
func Parse(path string, src []byte) (*Tutorial, error) {
	t := &Tutorial{Path: path}
	var (
		open    bool // inside a fenced block
		run     bool // that block is a command block
		fence   int  // its opening line
		current strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !open && strings.HasPrefix(trimmed, "```"):
			open, fence = true, n
			info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
			run = len(info) > 0 && info[0] == "sh"
			current.Reset()
		case open && trimmed == "```":
			open = false
			if run {
				t.Blocks = append(t.Blocks, Block{Line: fence + 1, Text: current.String()})
			}
		case open && run:
			current.WriteString(line)
			current.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if open {
		return nil, fmt.Errorf("%s:%d: fenced block never closed", path, fence)
	}
	return t, nil
}

// natsCommand finds a `nats` command in a block.
var natsCommand = regexp.MustCompile(`(?m)(^|[\s;&|(]|\$\()nats(\s|$)`)

// NeedsNATS reports whether a command block runs the NATS CLI.
func (t *Tutorial) NeedsNATS() bool {
	for _, b := range t.Blocks {
		if natsCommand.MatchString(b.Text) {
			return true
		}
	}
	return false
}

// Failure is a command block that failed: the test's message.
type Failure struct {
	// Path and Line are the tutorial and the line of the failing command
	// (the block's first line when bash did not say which).
	Path string
	Line int
	// Block is the failing block, from 1; BlockLine its first line.
	Block, BlockLine int
	// Command is the failing command's line, as the file has it.
	Command string
	// Output is what the block wrote (standard output and error).
	Output string
	// Err is how the session ended.
	Err error
}

func (f *Failure) Error() string {
	return fmt.Sprintf("%s:%d: command failed (%v): %s\n--- output of the block at line %d ---\n%s--- end of output ---",
		f.Path, f.Line, f.Err, f.Command, f.BlockLine, f.Output)
}

// Markers the session writes between the blocks' output; they begin with
// an ASCII record separator, which no command writes.
const (
	markBlock = "\x1etutorial-block "
	markError = "\x1etutorial-error "
	markDone  = "\x1etutorial-done"
)

// Run runs t's command blocks in one bash session in dir, with env as
// its whole environment, and returns the session's output, each block's
// headed by its file and line, and a *Failure when a command fails or
// the session does not finish before ctx ends. When it returns, every
// process the session started (its process group) is gone.
func Run(ctx context.Context, t *Tutorial, dir string, env []string) (string, error) {
	if len(t.Blocks) == 0 {
		return "", fmt.Errorf("%s: no ```sh blocks", t.Path)
	}
	blocks, err := os.MkdirTemp("", "tutorial-blocks-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(blocks)
	var script strings.Builder
	script.WriteString("set -Eeuo pipefail\n")
	// LINENO is the line in the sourced block file.
	fmt.Fprintf(&script, "trap 'printf \"\\n%s%%s\\n\" \"$LINENO\"' ERR\n", markError)
	for i, b := range t.Blocks {
		file := filepath.Join(blocks, fmt.Sprintf("block-%d.sh", i+1))
		if err := os.WriteFile(file, []byte(b.Text), 0o600); err != nil {
			return "", err
		}
		fmt.Fprintf(&script, "printf '%s%d\\n'\nsource %s\n", markBlock, i+1, file)
	}
	fmt.Fprintf(&script, "printf '\\n%s\\n'\n", markDone)

	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", script.String())
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The session's own process group: background commands a tutorial
	// starts end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Start()
	if err != nil {
		return "", fmt.Errorf("start bash: %w", err)
	}
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	transcript := t.transcript(out.String())
	done := strings.Contains(out.String(), markDone)
	if err == nil && done {
		return transcript, nil
	}
	if err == nil {
		err = errors.New("the session ended before its last block")
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return transcript, t.failure(out.String(), blocks, err)
}

// lines splits the session's output into lines, a marker always on a
// line of its own (a block's output need not end with a newline).
func lines(out string) []string {
	var ls []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if i := strings.Index(l, "\x1etutorial-"); i > 0 {
			ls = append(ls, l[:i]+"\n", l[i:])
			continue
		}
		ls = append(ls, l)
	}
	return ls
}

// transcript is the session's output with its markers made headings:
// "--- docs/tutorials/x.md:12 ---" before each block's output.
func (t *Tutorial) transcript(out string) string {
	var b strings.Builder
	for _, l := range lines(out) {
		switch {
		case strings.HasPrefix(l, markBlock):
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, markBlock)))
			if n >= 1 && n <= len(t.Blocks) {
				fmt.Fprintf(&b, "--- %s:%d ---\n", t.Path, t.Blocks[n-1].Line)
			}
		case strings.HasPrefix(l, markError), strings.HasPrefix(l, markDone):
		default:
			b.WriteString(l)
		}
	}
	return b.String()
}

// failure reads which block failed, and where, from the session's output.
func (t *Tutorial) failure(out, blocks string, err error) *Failure {
	f := &Failure{Path: t.Path, Err: err}
	var text strings.Builder
	errLine := 0
	for _, l := range lines(out) {
		switch {
		case strings.HasPrefix(l, markBlock):
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, markBlock)))
			f.Block, errLine = n, 0
			text.Reset()
		case strings.HasPrefix(l, markError):
			// A failure inside a subshell says so again in its parent: keep the first.
			if errLine == 0 {
				errLine, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, markError)))
			}
		default:
			text.WriteString(l)
		}
	}
	// bash names the block's file and line where the trap cannot run (an
	// unset variable): say the tutorial's instead.
	where := regexp.MustCompile(regexp.QuoteMeta(blocks) + `/block-(\d+)\.sh: line (\d+)`)
	output := where.ReplaceAllStringFunc(text.String(), func(m string) string {
		sub := where.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[1])
		k, _ := strconv.Atoi(sub[2])
		if n < 1 || n > len(t.Blocks) {
			return m
		}
		if n == f.Block && errLine == 0 {
			errLine = k
		}
		return fmt.Sprintf("%s:%d", t.Path, t.Blocks[n-1].Line+k-1)
	})
	if f.Block < 1 || f.Block > len(t.Blocks) {
		f.Block, f.Output = 0, output
		return f
	}
	b := t.Blocks[f.Block-1]
	f.BlockLine, f.Line = b.Line, b.Line
	lines := strings.Split(b.Text, "\n")
	if errLine >= 1 && errLine <= len(lines) {
		f.Line = b.Line + errLine - 1
		f.Command = strings.TrimSpace(lines[errLine-1])
	}
	// The trap's newline before its marker is not the block's.
	if o := strings.TrimRight(output, "\n"); o != "" {
		f.Output = o + "\n"
	}
	return f
}
